"""kafka-actors: an actor-based Apache Kafka consumer for Python.

One import root. Sub-packages: ``protocol`` (pure wire code), ``actors`` (pykka actors),
``supervisors`` (supervision trees and fault injection), ``testing`` (the testkit).
"""

__version__ = "0.1.0.dev0"
