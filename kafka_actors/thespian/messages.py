"""The Thespian bridge's protocol: every message between a bridge, its subscriber and its users.

Owns: :class:`Configure` (creating the bridge's consumer). The other message kinds are shared
with the pykka bridge and live in :mod:`kafka_actors.bridges.messages`; they are re-exported
here under their old names. All of them pickle (records are
:class:`~kafka_actors.protocol.records.decode.ConsumerRecord` named tuples, partitions
:class:`~kafka_actors.protocol.messages.TopicPartition` dataclasses, errors travel as
:class:`ErrorInfo` values, never as exception objects), so they cross process boundaries under
``multiprocTCPBase``. Actor addresses are Thespian's own ``ActorAddress`` values.

The stream follows Reactive Streams: the bridge sends :class:`Subscribed` (onSubscribe), the
subscriber signals demand with :class:`Request` (a number of *records*), the bridge sends
:class:`RecordBatch` messages whose sizes never exceed the outstanding demand.

Flow control: besides the demand, the bridge keeps at most ``Configure.max_in_flight_batches``
record batches in flight to its subscriber, i.e. sent and not yet acknowledged by the
subscriber's ``Request.handled`` or :class:`Handled` (cumulative: the ``seq`` of the last batch
the subscriber handled). Thespian's TCP transport (``asyncTransportBase``) runs 20 transmits of
an actor process at once and queues the rest; from 950 queued the sending actor blocks inside
``send`` until the queue drains (it handles no message meanwhile), beyond 1050 new sends fail,
and a transmit not done within the transmit period (five minutes) fails: all without
telling the sending actor. The window keeps the bridge far below those whatever the demand.
The default (16) is also below the 20 transmits that run at once, so batches go straight to
sockets, none waits in that queue, and the subscriber's transport takes them all in between
two messages it handles: a batch waits about one batch's processing time, far from the
transmit period. A subscriber that never acknowledges receives at most that many batches.
:meth:`Commit(offsets=None) <Commit>` commits acknowledged positions.

Redelivery: Thespian's TCP transport can drop a message without telling the sender (two
actors sending to each other at once can close the socket under a large transmit, which then
ends as a dead letter; see :mod:`kafka_actors.thespian.bridge`). The subscriber acknowledges
every stream message it handles, not only record batches (``Handled`` / ``Request.handled``
are cumulative ``seq``), and the bridge sends what stays unacknowledged for
``Configure.redeliver_after_ms`` again, with the same ``seq``: a subscriber handles each
``seq`` once and drops a copy (:class:`~kafka_actors.thespian.subscriber.StreamSubscriber`
does).

Failures: a subscriber that raises on a :class:`RecordBatch` (Thespian tries it again, then
returns it to the bridge as ``PoisonMessage``) does not lose its records: the bridge treats
that batch and every later unacknowledged one as not delivered, seeks back to their first
offsets, sets the demand to zero and sends :class:`BatchRejected`. A request the bridge raises
on is answered with a typed error (:class:`CommitFailed` for a Commit, else
:class:`StreamError`), never with silence.

Ordering: Thespian does not promise that two messages from one actor to another arrive in the
order sent (``multiprocTCPBase`` keeps up to 20 transmits in flight at once, each on its own
connection, and was seen delivering a later batch first). Every message of the stream
to the subscriber (Subscribed, RecordBatch, Partitions*, StreamError) therefore carries
``seq``, 1, 2, ... per subscriber, and the subscriber handles them in that order
(:class:`~kafka_actors.thespian.subscriber.StreamSubscriber` does). ``seq`` 0 means outside
the stream (the copy of Subscribed sent to the requester).

May touch: nothing (plain values).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The shared protocol, re-exported (tests/types/test_exports.py keeps the list whole); type
# checkers read ``__all__ +=`` of another module's list.
from kafka_actors.bridges import messages as _shared
from kafka_actors.bridges.messages import *  # noqa: F403

__all__ = ["Configure"]
__all__ += _shared.__all__


@dataclass(frozen=True, slots=True)
class Configure:
    """Create the bridge's consumer from Kafka configuration keys (``bootstrap.servers``...).

    ``poll_timeout_ms``: how long one ``poll()`` may block the bridge's message loop while the
    subscriber has demand (default 0: never); ``idle_interval_ms``: how often the bridge polls
    when records do not flow (no demand, or the last poll was empty). Replied with
    :class:`Configured` or :class:`StreamError`. ``max_batch_records``: the most records in
    one :class:`RecordBatch` (a tick polls several times, up to the demand, to fill one: under
    ``multiprocTCPBase`` each message costs a transmit). ``max_in_flight_batches``: the most
    batches sent to the subscriber and not yet acknowledged (see the module docstring: Flow
    control; 1 .. 512, far below Thespian's queued-transmit limits; above 20 batches queue in
    Thespian's transport, and the window times a batch's processing time must stay well
    under its transmit period, five minutes). ``redeliver_after_ms``: stream messages not
    acknowledged for that long are sent again (same ``seq``), then after twice as long, up to
    a minute, while nothing is acknowledged: Thespian can drop a message without telling the
    sender (see the module docstring: Redelivery)."""

    config: Mapping[str, object]
    poll_timeout_ms: int = 0
    idle_interval_ms: int = 20
    max_batch_records: int = 2000
    commit_timeout_ms: int | None = None  # default: default.api.timeout.ms
    max_in_flight_batches: int = 16
    redeliver_after_ms: int = 5000
    #: A :class:`~kafka_actors.supervisors.FaultInjector` for tests, passed to the consumer as
    #: ``faults=``. In-process system bases only (``simpleSystemBase``): an injector holds a
    #: lock and predicates, so it cannot travel to another process.
    faults: Any = None
