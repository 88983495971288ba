"""The share consumer core (KIP-932): one share consumer's actors and state, under
:class:`~kafka_actors.share_consumer.KafkaShareConsumer` and
:class:`~kafka_actors.aio_share.AsyncKafkaShareConsumer`.

Owns: the share consumer's configuration (:func:`build_share_config`: Kafka's names, the keys
that make no sense for a share consumer refused, ``group.id`` required), its supervision tree
(built by :class:`~kafka_actors.core.consumer_core.ActorCore`, as the consumer's: the facade,
and under the NetworkActor the metadata, coordinator, share membership and share fetch
actors, run under the consumer's names "membership" and "fetch" so the routing table
reaches them), the member id (client-generated, kept across restarts), the subscription, and the
hand-out bookkeeping of acknowledgements: the records of the last poll, which of them the
application acknowledged (explicit mode) or which are acknowledged ACCEPT at the next poll /
commit / close (implicit mode), the records a deserializer failed on (released, or as
``acknowledge_offset`` says, Java's ``acknowledge(topic, partition, offset, type)``), the
RENEW acknowledgements not answered yet (a refused one ends its record's delivery, as
Java's), records collected but not handed out yet (kept for the next poll, released at
close), the acknowledgement-commit callback (run on the application's
thread by the facade, from the per-partition results the share fetch actor reports), and the
close sequence both front ends run (:meth:`ShareCore.close_steps`: each waits for, or
awaits, the steps' futures).

Every call returns at once; a request to an actor returns a ``concurrent.futures.Future``
(the front ends wait on it or await it).

Thread safety: every method may be called from any thread; the hand-out state has a lock.

May touch: the actors (through the facade and the context), the supervisors, the config.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, cast

from kafka_actors.actors.context import ConsumerContext, complete
from kafka_actors.actors.events import LeaveGroupEvent, SubscriptionChangedEvent
from kafka_actors.actors.facade import AsyncCommitDone
from kafka_actors.actors.managers.coordinator import CoordinatorActor
from kafka_actors.actors.managers.metadata import MetadataActor
from kafka_actors.actors.managers.share_fetch import (
    CloseShareEvent,
    ShareAcknowledgeEvent,
    ShareCollectEvent,
    ShareCommitEvent,
    ShareFetchActor,
    ShareMetricsEvent,
)
from kafka_actors.actors.managers.share_membership import ShareAssignment, ShareMembershipActor
from kafka_actors.config import CONSUMER_ONLY_KEYS, ConsumerConfig
from kafka_actors.core.consumer_core import DEFAULT_CLOSE_TIMEOUT_S, ActorCore, _keys
from kafka_actors.core.health import health_of, read_facts
from kafka_actors.errors import (
    ConfigError,
    IllegalStateError,
    KafkaError,
    RecordDeserializationError,
    ShareGroupsNotSupportedError,
    UnsupportedVersionError,
)
from kafka_actors.health import ConsumerHealth
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records import decode as _records
from kafka_actors.protocol.share.acknowledgements import AcknowledgeType
from kafka_actors.protocol.share.fetch import AckResult, ShareCollectResult, ShareConsumerRecord
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.serialization import Deserializer, as_deserializer, deserialize_records
from kafka_actors.structs import ShareConsumerRecords
from kafka_actors.supervisors import ChildRestartingError, ChildSpec, FaultInjector

__all__ = [
    "AcknowledgementCommitCallback",
    "ShareCore",
    "build_share_config",
]

#: One step of a close: what it does (for the log and the timeout error) and how it starts (a
#: future to wait on or await, None when there is nothing to wait for).
CloseStep = tuple[str, Callable[[], concurrent.futures.Future[Any] | None]]

#: Java's AcknowledgementCommitCallback.onComplete(offsets, exception).
AcknowledgementCommitCallback = Callable[[dict[TopicPartition, set[int]], KafkaError | None], None]

_MODE_EXPLICIT: Final = "explicit"

#: A collect brings up to this many polls' worth of records (``max.poll.records`` each) from
#: the share fetch actor, so most polls are served from the kept records without a round
#: trip to the actor's thread (records already acquired either way; those never handed out
#: are released at close).
COLLECT_POLLS: Final = 4


def build_share_config(
    config: Mapping[str, object] | None, kwargs: Mapping[str, object]
) -> ConsumerConfig:
    """A share consumer's configuration: Kafka's keys in a dict, the same names with
    underscores as keywords. Keys that only a consumer understands are refused (ConfigError
    naming the key), as Java's KafkaShareConsumer; ``group.id`` is required."""
    if isinstance(config, ConsumerConfig):
        raise ConfigError("A share consumer takes a mapping of Kafka configuration keys")
    mapping: dict[str, object] = dict(config or {})
    mapping.update(_keys(kwargs))
    for key in mapping:
        if key in CONSUMER_ONLY_KEYS:
            raise ConfigError(
                f"{key} is not supported by a share consumer (KafkaShareConsumer): share groups "
                "have no offsets to reset or commit, no static members and no assignors of "
                "the client's choice",
                key=key,
            )
    group = mapping.get("group.id")
    if not isinstance(group, str) or not group.strip():
        raise ConfigError(
            "A share consumer needs a non-empty group.id (the share group to join)",
            key="group.id",
        )
    return ConsumerConfig.from_dict(mapping)


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted, distinct offsets as (first, last) runs of consecutive ones."""
    if not offsets:
        return []
    first = offsets[0]
    if offsets[-1] - first + 1 == len(offsets):
        return [(first, offsets[-1])]
    out: list[tuple[int, int]] = []
    start = prev = first
    for offset in offsets[1:]:
        if offset != prev + 1:
            out.append((start, prev))
            start = offset
        prev = offset
    out.append((start, prev))
    return out


def _kind_runs(items: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(offset, type) pairs of distinct offsets as (first, last, type) runs of consecutive
    offsets of one type."""
    out: list[tuple[int, int, int]] = []
    for offset, kind in sorted(items):
        if out and out[-1][2] == kind and out[-1][1] == offset - 1:
            out[-1] = (out[-1][0], offset, kind)
        else:
            out.append((offset, offset, kind))
    return out


def _new_member_id() -> str:
    import uuid

    return str(uuid.uuid4())


class ShareCore(ActorCore):
    """One share consumer's actors and hand-out state (see the module docstring)."""

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        faults: FaultInjector | None = None,
    ) -> None:
        self.assignment = ShareAssignment()

        def managers(ctx: ConsumerContext) -> list[ChildSpec]:
            ctx.member_id = _new_member_id()
            assignment, results = self.assignment, self._on_results
            return [
                ChildSpec("metadata", lambda c: MetadataActor.start(ctx, context=c)),
                ChildSpec("coordinator", lambda c: CoordinatorActor.start(ctx, context=c)),
                ChildSpec(
                    "membership",
                    lambda c: ShareMembershipActor.start(ctx, assignment, context=c),
                ),
                ChildSpec(
                    "fetch",
                    lambda c: ShareFetchActor.start(ctx, assignment, results, context=c),
                ),
            ]

        super().__init__(config, managers, faults=faults, kind="share-consumer")
        cfg = self.config
        self.key_deserializer = as_deserializer(key_deserializer or cfg.key_deserializer)
        self.value_deserializer = as_deserializer(value_deserializer or cfg.value_deserializer)
        self.explicit = cfg.share_acknowledgement_mode == _MODE_EXPLICIT
        self.callback: AcknowledgementCommitCallback | None = None
        self._lock = threading.Lock()
        #: The last poll's records not settled yet, by partition and offset.
        self._delivered: dict[TopicPartition, dict[int, ShareConsumerRecord]] = {}
        #: Records collected from the share fetch actor and not handed out yet, in runs of
        #: one partition's records (handed out by slicing, never record by record).
        self._kept: deque[list[ShareConsumerRecord]] = deque()
        self._kept_count = 0
        #: Explicit mode: the application's acknowledgements not given to the share fetch
        #: actor yet, (offset, type) per partition in call order; they go at the next poll,
        #: commit or close (as Java's), RENEW at once.
        self._acked: dict[TopicPartition, list[tuple[int, int]]] = {}
        #: Explicit mode: records a deserializer failed on, handed out as a
        #: RecordDeserializationError and not acknowledged to the broker yet: offset -> type
        #: per partition, RELEASE unless ``acknowledge_offset`` said otherwise (Java's
        #: exception offsets of its in-flight batch); sent with the acknowledgements at the
        #: next poll, commit or close.
        self._failed: dict[TopicPartition, dict[int, int]] = {}
        #: RENEW acknowledgements sent and not answered yet (offsets per partition): a refused
        #: one (INVALID_RECORD_STATE, e.g. a group with share.renew.acknowledge.enable=false)
        #: ends the record's delivery, as Java's (:meth:`_settle_renewals`).
        self._renewing: dict[TopicPartition, set[int]] = {}
        self._collecting: concurrent.futures.Future[Any] | None = None
        self._collect_errors: list[BaseException] = []
        self.log.info(
            "share_consumer_created",
            member_id=self.ctx.member_id,
            acknowledgement_mode=cfg.share_acknowledgement_mode,
            record_decoder=_records.IMPLEMENTATION,
        )

    # -- checks ------------------------------------------------------------------------------

    def check_supported(self) -> None:
        versions = self.ctx.versions
        if versions is not None and not versions.supports(ApiKey.SHARE_GROUP_HEARTBEAT):
            raise ShareGroupsNotSupportedError()

    def prepare_collect(self, trace: str) -> None:
        """Each poll turn before it collects (:class:`~kafka_actors.core.poll.PollStep`): the
        brokers must support share groups."""
        self.check_supported()

    def init_done(self) -> bool:
        """No positions lookup: a share group's broker holds the positions."""
        return False

    def subscription(self) -> set[str]:
        return set(self.ctx.subscriptions.subscription)

    # -- subscription -----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str], trace: str) -> bool:
        """Subscribe to topic names; False (nothing done) for none (the front end
        unsubscribes then)."""
        self.ensure_open()
        if isinstance(topics, str):
            topics = [topics]
        names = frozenset(topics)
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise ValueError("Topic names in a subscription must be non-empty")
        if not names:
            return False
        self.check_supported()
        self.ctx.subscriptions.subscribe(names)
        event = SubscriptionChangedEvent(names, None, trace)
        self.facade.tell("metadata", event)
        self.facade.tell("membership", event)
        self.log.info("subscribed", topics=sorted(names))
        return True

    def leave_group(self, deadline: float, trace: str) -> concurrent.futures.Future[Any] | None:
        """Leave the share group (heartbeat at epoch -1): a future of the leave, None when
        there is no membership actor to ask."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.ctx.track(future)
        event = LeaveGroupEvent(self.facade.deadline_ms(deadline), future, False, trace)
        if not self.ctx.tell("membership", event):
            return None
        return future

    def drop_subscription(self, trace: str) -> None:
        self.ctx.subscriptions.unsubscribe()
        self.facade.tell("metadata", SubscriptionChangedEvent(frozenset(), None, trace))

    def require_subscription(self) -> None:
        if not self.ctx.subscriptions.subscription:
            raise IllegalStateError("Consumer is not subscribed to any topics")

    # -- acknowledgements -------------------------------------------------------------------

    def begin_poll(self, trace: str) -> None:
        """What a poll does before it collects: implicit mode acknowledges the last poll's
        records ACCEPT; explicit mode refuses to poll while some are not acknowledged."""
        with self._lock:
            if self.explicit and self._delivered:
                missing = sum(len(d) for d in self._delivered.values())
                raise IllegalStateError(
                    f"All records from the previous poll must be acknowledged before the next "
                    f"poll in explicit acknowledgement mode ({missing} are not)"
                )
        self.flush_acknowledged(trace)
        self.acknowledge_delivered(AcknowledgeType.ACCEPT, trace)

    def acknowledge_delivered(self, kind: AcknowledgeType, trace: str | None = None) -> None:
        """Acknowledge every record of the last poll not acknowledged yet (implicit mode's
        ACCEPT; close releases them in explicit mode only when asked)."""
        with self._lock:
            delivered, self._delivered = self._delivered, {}
        if delivered:
            k = int(kind)
            self._send_acks(
                {tp: [(a, b, k) for a, b in _runs(sorted(d))] for tp, d in delivered.items()},
                trace,
            )

    def acknowledge(
        self, record: ShareConsumerRecord[Any, Any], kind: AcknowledgeType, trace: str
    ) -> None:
        self.ensure_open()
        if not self.explicit:
            raise IllegalStateError(
                "acknowledge() needs share.acknowledgement.mode=explicit (in implicit mode "
                "every record of a poll is acknowledged by the next poll or commit)"
            )
        kind = AcknowledgeType(kind)
        if kind is AcknowledgeType.RENEW:
            self._require_renew()
        tp, offset = TopicPartition(record.topic, record.partition), record.offset
        with self._lock:
            delivered = self._delivered.get(tp)
            if delivered is None or offset not in delivered:
                raise IllegalStateError(
                    f"The record at offset {offset} of {tp} is not one of the last "
                    "poll's records waiting for an acknowledgement"
                )
            if kind is not AcknowledgeType.RENEW:
                del delivered[offset]
                if not delivered:
                    del self._delivered[tp]
                self._acked.setdefault(tp, []).append((offset, int(kind)))
                return
            self._renewing.setdefault(tp, set()).add(offset)
        # RENEW goes at once (the record is slow), after what was acknowledged before it.
        self.flush_acknowledged(trace)
        self._send_acks({tp: [(offset, offset, int(kind))]}, trace)

    def acknowledge_offset(
        self, topic: str, partition: int, offset: int, kind: AcknowledgeType, trace: str
    ) -> None:
        """Acknowledge, by its topic, partition and offset, a record whose deserializer failed
        (Java's ``acknowledge(topic, partition, offset, type)``): explicit mode only, and only
        for an offset a poll raised RecordDeserializationError for and whose acknowledgement
        (RELEASE unless said otherwise) has not gone to the broker yet (at the next poll,
        commit or close); IllegalStateError otherwise. ACCEPT, RELEASE or REJECT: the record
        was never handed out, so there is no lock to RENEW."""
        self.ensure_open()
        if not self.explicit:
            raise IllegalStateError(
                "acknowledge_offset() needs share.acknowledgement.mode=explicit (in implicit "
                "mode a record whose deserializer failed is released)"
            )
        kind = AcknowledgeType(kind)
        tp = TopicPartition(topic, partition)
        if kind is AcknowledgeType.RENEW:
            raise IllegalStateError(
                f"The record at offset {offset} of {tp} failed to deserialize and was never "
                "handed out: acknowledge it ACCEPT, RELEASE or REJECT, not RENEW"
            )
        with self._lock:
            failed = self._failed.get(tp)
            if failed is None or offset not in failed:
                raise IllegalStateError(
                    f"The record at offset {offset} of {tp} cannot be acknowledged by its "
                    "offset: only a record whose deserializer failed (RecordDeserializationError "
                    "from poll) can, until the next poll, commit or close"
                )
            failed[offset] = int(kind)

    def flush_acknowledged(self, trace: str | None) -> None:
        """Give the share fetch actor the acknowledgements explicit mode kept (with those of
        the records whose deserializer failed)."""
        with self._lock:
            acked, self._acked = self._acked, {}
            failed, self._failed = self._failed, {}
        for tp, types in failed.items():
            acked.setdefault(tp, []).extend(types.items())
        if acked:
            self._send_acks({tp: _kind_runs(items) for tp, items in acked.items()}, trace)

    def _require_renew(self) -> None:
        versions = self.ctx.versions
        if versions is None:
            return
        for api in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE):
            rng = versions.range_for(api)
            if rng is None or rng.max < 2:
                raise UnsupportedVersionError(
                    "AcknowledgeType.RENEW needs ShareFetch and ShareAcknowledge v2 (KIP-1222, "
                    "Apache Kafka 4.2 or later)"
                )

    def _send_acks(
        self, ranges: Mapping[TopicPartition, list[tuple[int, int, int]]], trace: str | None
    ) -> None:
        """Acknowledge (first, last, type) offset ranges per partition."""
        event = ShareAcknowledgeEvent({tp: tuple(v) for tp, v in ranges.items() if v}, trace)
        if not self.ctx.tell("fetch", event):
            # The share fetch actor is restarting: its records come again after their
            # acquisition lock expires; nothing to acknowledge them with now.
            count = sum(b - a + 1 for v in ranges.values() for a, b, _ in v)
            self.log.info("acknowledgements_dropped_actor_restarting", records=count)

    def _on_results(self, results: tuple[AckResult, ...]) -> None:
        """From the share fetch actor's thread: queue the callback of each partition's result
        for the application's thread (the facade runs them in poll / commit_sync / close)."""
        ctx = self.ctx
        for result in results:
            offsets = {result.partition: set(result.offsets)}
            done: concurrent.futures.Future[Any] = concurrent.futures.Future()
            if result.error is None:
                done.set_result(offsets)
            else:
                done.set_exception(result.error)
            ctx.background.append(AsyncCommitDone(self._run_callback, done, offsets))
        ctx.signal.notify()

    def _run_callback(
        self, offsets: Mapping[TopicPartition, Any], error: BaseException | None
    ) -> None:
        self._settle_renewals(offsets, error)
        callback = self.callback
        if callback is not None:
            callback(
                {tp: set(v) for tp, v in offsets.items()},
                cast(KafkaError | None, error),
            )

    def _settle_renewals(
        self, offsets: Mapping[TopicPartition, Any], error: BaseException | None
    ) -> None:
        """On the application's thread, with a partition's acknowledgement result: its RENEW
        offsets are answered. A refused renewal (INVALID_RECORD_STATE: the group has
        ``share.renew.acknowledge.enable=false``, or the lock expired) ends the record's
        delivery, as Java's share consumer does: it is no longer one of the records to
        acknowledge (the next poll does not wait for it; its lock expires at the broker, which
        delivers it again); the error reaches the acknowledgement-commit callback and
        ``commit_sync``'s result, never fatal. A renewed record stays to be acknowledged."""
        ended: list[str] = []
        with self._lock:
            for tp, settled in offsets.items():
                renewing = self._renewing.get(tp)
                if not renewing:
                    continue
                answered = renewing.intersection(settled)
                renewing.difference_update(answered)
                if not renewing:
                    del self._renewing[tp]
                delivered = self._delivered.get(tp)
                if error is None or not answered or delivered is None:
                    continue
                for offset in sorted(answered):
                    if delivered.pop(offset, None) is not None:
                        ended.append(f"{tp.topic}-{tp.partition}@{offset}")
                if not delivered:
                    del self._delivered[tp]
        if ended:
            self.log.info("share_renew_refused", records=ended, error=str(error))

    # -- collect and hand out -------------------------------------------------------------

    def collect(self, trace: str) -> concurrent.futures.Future[Any]:
        """Ask the share fetch actor for records (one collect at a time: the one in flight
        is returned again). Whatever it brings is deposited in the kept records when it
        completes, on whichever thread, whether or not the caller still waits (a woken or
        cancelled poll loses nothing); its error is kept for :meth:`raise_collect_error`.
        The future completes after the deposit."""
        with self._lock:
            running = self._collecting
            if running is not None and not running.done():
                return running
            wanted = COLLECT_POLLS * self.config.max_poll_records - self._kept_count
        answer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._collecting = done
        if wanted <= 0:
            complete(done, None)
            return done

        def deposit(f: concurrent.futures.Future[Any]) -> None:
            try:
                if not f.cancelled():
                    self._keep(f.exception() or f.result())
            except BaseException as exc:
                with self._lock:
                    self._collect_errors.append(exc)
            complete(done, None)

        answer.add_done_callback(deposit)
        self.ctx.track(done)
        if not self.ctx.tell("fetch", ShareCollectEvent(wanted, answer, trace)):
            complete(answer, None)
        return done

    def raise_collect_error(self) -> None:
        """The first error a collect met (a partition error, corrupt data), once."""
        with self._lock:
            error = self._collect_errors.pop(0) if self._collect_errors else None
        if error is not None:
            raise error

    def _keep(self, result: Any) -> None:
        """Keep what a collect brought (records for this or the next poll); raise its
        error."""
        if result is None:
            return
        if isinstance(result, BaseException):
            if isinstance(result, ChildRestartingError):
                return
            raise result
        assert isinstance(result, ShareCollectResult)
        with self._lock:
            for tp in sorted(result.records):
                records = list(result.records[tp])
                if records:
                    self._kept.append(records)
                    self._kept_count += len(records)
        if result.error is not None:
            raise result.error

    def has_kept(self) -> bool:
        with self._lock:
            return self._kept_count > 0

    def hand_out(self, trace: str) -> ShareConsumerRecords[Any, Any]:
        """Up to ``max.poll.records`` kept records, deserialized, now the last poll's. A
        record a deserializer fails on raises RecordDeserializationError (its topic,
        partition, offset, raw key and value) and is released, as Java's share consumer does
        (delivered again, its delivery count growing, until the group's delivery-attempt
        limit): in implicit mode at once; in explicit mode with the next poll's, commit's or
        close's acknowledgements, unless :meth:`acknowledge_offset` says ACCEPT or REJECT
        first. The other records stay kept, in order."""
        with self._lock:
            count = min(self._kept_count, self.config.max_poll_records)
            taken: list[list[ShareConsumerRecord]] = []
            need = count
            while need > 0:
                run = self._kept[0]
                if len(run) <= need:
                    taken.append(self._kept.popleft())
                    need -= len(run)
                else:
                    taken.append(run[:need])
                    self._kept[0] = run[need:]
                    need = 0
            self._kept_count -= count
        if not taken:
            return ShareConsumerRecords({})
        kd, vd = self.key_deserializer, self.value_deserializer
        out = taken
        if kd is not None or vd is not None:
            out = []
            for i, run in enumerate(taken):
                records, error = deserialize_records(cast(Any, run), kd, vd)
                if error is not None:
                    bad = len(records)
                    # The records before the bad one come again at the next poll, the rest
                    # stay.
                    back = [*taken[:i], run[:bad] + run[bad + 1 :], *taken[i + 1 :]]
                    back = [r for r in back if r]
                    with self._lock:
                        self._kept.extendleft(reversed(back))
                        self._kept_count += sum(len(r) for r in back)
                    raise self._failed_record(run[bad], error, trace)
                out.append(cast(list[ShareConsumerRecord], records))
        by_tp: dict[TopicPartition, list[ShareConsumerRecord]] = {}
        with self._lock:
            for run in out:
                tp = TopicPartition(run[0].topic, run[0].partition)
                by_tp.setdefault(tp, []).extend(run)
                offsets = {r.offset: r for r in run}
                delivered = self._delivered.get(tp)
                if delivered is None:
                    self._delivered[tp] = offsets
                else:
                    delivered.update(offsets)
        size = sum(len(r.key or b"") + len(r.value or b"") for run in taken for r in run)
        self.ctx.metrics.consumed(count, size)
        return ShareConsumerRecords(by_tp)

    def _failed_record(
        self, record: ShareConsumerRecord, error: RecordDeserializationError, trace: str
    ) -> RecordDeserializationError:
        """A record a deserializer failed on: released (at once in implicit mode; in explicit
        mode with the next acknowledgements, unless ``acknowledge_offset`` changes it); the
        error to raise."""
        tp = TopicPartition(record.topic, record.partition)
        release = int(AcknowledgeType.RELEASE)
        if self.explicit:
            with self._lock:
                self._failed.setdefault(tp, {})[record.offset] = release
            then = (
                "it is released with the next poll, commit or close unless "
                f"acknowledge_offset({tp.topic!r}, {tp.partition}, {record.offset}, type) "
                "says ACCEPT or REJECT before"
            )
        else:
            self._send_acks({tp: [(record.offset, record.offset, release)]}, trace)
            then = "it has been released"
        failed = RecordDeserializationError(
            f"Error deserializing the {error.origin.value} of the record of {tp.topic}-"
            f"{tp.partition} at offset {record.offset}; {then}",
            topic=tp.topic,
            partition=tp.partition,
            offset=record.offset,
            origin=error.origin,
            key=error.key,
            value=error.value,
        )
        failed.__cause__ = error.__cause__
        return failed

    def release_kept(self, trace: str | None) -> None:
        """Records collected but never handed out (close, cancellation): released, so the
        broker delivers them again at once."""
        with self._lock:
            kept, self._kept, self._kept_count = list(self._kept), deque(), 0
        if kept:
            by_tp: dict[TopicPartition, set[int]] = {}
            for run in kept:
                tp = TopicPartition(run[0].topic, run[0].partition)
                by_tp.setdefault(tp, set()).update(r.offset for r in run)
            release = int(AcknowledgeType.RELEASE)
            self._send_acks(
                {tp: [(a, b, release) for a, b in _runs(sorted(o))] for tp, o in by_tp.items()},
                trace,
            )

    # -- commits and close --------------------------------------------------------------------

    def commit(self, deadline: float, trace: str) -> concurrent.futures.Future[Any]:
        """Send the pending acknowledgements now (implicit mode: the last poll's records
        ACCEPT first): a future of {partition: error or None}."""
        self.flush_acknowledged(trace)
        if not self.explicit:
            self.acknowledge_delivered(AcknowledgeType.ACCEPT, trace)
        return self.request(
            "fetch", lambda f, d: ShareCommitEvent(f, trace), deadline, "commit_sync"
        )

    def commit_async(self, trace: str) -> concurrent.futures.Future[Any]:
        self.flush_acknowledged(trace)
        if not self.explicit:
            self.acknowledge_delivered(AcknowledgeType.ACCEPT, trace)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.ctx.track(future)
        if not self.ctx.tell("fetch", ShareCommitEvent(future, trace)):
            future.set_exception(ChildRestartingError(child="fetch"))
        return future

    def close_sessions(self, trace: str) -> concurrent.futures.Future[Any] | None:
        """Send what is pending and close every share session (acquired records not
        acknowledged are released by the broker): a future, None when the actor is down."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.ctx.track(future)
        if not self.ctx.tell("fetch", CloseShareEvent(future, trace)):
            return None
        return future

    def prepare_close(self, trace: str) -> None:
        """The acknowledgements a close sends: implicit mode ACCEPTs the last poll's records;
        records collected and never handed out are released."""
        self.flush_acknowledged(trace)
        if not self.explicit:
            self.acknowledge_delivered(AcknowledgeType.ACCEPT, trace)
        self.release_kept(trace)

    # The close, shared by both front ends: ``start_close``, then each of ``close_steps``
    # (the front end waits for, or awaits, its future up to the deadline; a step that fails is
    # logged by ``close_step_failed`` and the close goes on), ``end_steps``, ``stop``.

    def start_close(self, timeout: float | None) -> float:
        """The deadline of a close taking at most ``timeout`` seconds (default 30)."""
        seconds = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else max(0.0, float(timeout))
        self.log.info("share_consumer_closing", timeout_s=seconds)
        return time.monotonic() + seconds

    def healthy(self) -> bool:
        """Whether the actors may still be asked (neither the tree nor the facade failed)."""
        return self.tree.fatal_error is None and self.facade.fatal_error is None

    def close_steps(self, deadline: float, trace: str) -> list[CloseStep]:
        """Queue the close's acknowledgements (:meth:`prepare_close`) and return the steps
        to wait for: close the share sessions (what is pending is sent, acquired records not
        acknowledged are released by the broker), leave the group, then the terminating
        telemetry push (KIP-714). None when the actors failed."""
        if not self.healthy():
            return []
        self.prepare_close(trace)
        return [
            ("close the share sessions", lambda: self.close_sessions(trace)),
            ("leave the share group", lambda: self.leave_group(deadline, trace)),
            ("the terminating telemetry push", lambda: self.close_telemetry(trace)),
        ]

    def close_step_failed(self, step: str, error: BaseException) -> None:
        self.log.warning("share_close_step_failed", step=step, error=str(error))

    def end_steps(self) -> None:
        """After the steps: run the acknowledgement-commit callbacks of the close's results
        (on the calling thread), then mark the consumer closed (a waiting poll, on any
        thread, ends; every call raises ConsumerClosedError)."""
        if self.healthy():
            try:
                self.facade.process_background()
            except Exception as exc:
                self.log.info("share_close_background_error", error=str(exc))
        self.facade.mark_closed()

    def stop(self, deadline: float) -> None:
        """Stop the actors (joined until ``deadline``, at least 0.1 s)."""
        result = self.stop_actors(max(0.1, deadline - time.monotonic()))
        self.log.info(
            "share_consumer_closed",
            completed=result.completed,
            not_stopped=list(result.not_stopped),
        )

    # -- metrics ------------------------------------------------------------------------------

    def health(self) -> ConsumerHealth:
        """``health()`` of the share front ends (:mod:`kafka_actors.core.health`): local
        state only; the share group has no poll timer and the broker holds the positions
        (no partitions' lag is reported)."""
        return health_of(
            read_facts(
                self.ctx,
                group_protocol="share",
                closed=self.facade.closed,
                error=self.tree.fatal_error,
                max_poll_interval_ms=None,
                assignment=self.assignment.partitions,
            )
        )

    def flat_metrics(self, timeout: float) -> dict[str, Any]:
        values: dict[str, Any] = dict(self.ctx.metrics.snapshot())
        values["assigned-partitions"] = float(len(self.assignment.partitions))
        values["record-decoder"] = _records.IMPLEMENTATION
        try:
            figures = self.ctx.ask("fetch", ShareMetricsEvent(), timeout=timeout)
        except Exception:
            figures = None
        if figures:
            values.update(figures)
        return values
