"""What the bridges to service actor systems share (Thespian: :mod:`kafka_actors.thespian`;
pykka: :mod:`kafka_actors.pykka`).

Owns: the protocol's messages (:mod:`kafka_actors.bridges.messages`), the demand stream state
machine (:mod:`kafka_actors.bridges.stream`) and the bridges' typed errors
(:mod:`kafka_actors.bridges.errors`). Imports no actor runtime, so each bridge needs only its
own extra.

May touch: nothing beyond its own modules.
"""
