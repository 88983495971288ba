"""kafka_actors.actors"""

# The protocol package loads kio before any actor module does (actors/network/requests.py
# imports kio directly): see kafka_actors/protocol/__init__.py for why the order matters.
import kafka_actors.protocol  # noqa: F401
