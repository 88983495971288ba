"""The hand-out bookkeeping of one consumer: records from the fetch actor to the application.

Owns: collecting fetched records (on the caller's thread from the consumer's fetch buffer
through a :class:`~kafka_actors.actors.fetch_collector.FetchCollector`, or from the actor),
the last check that a record handed out belongs to a partition the consumer still owns and
may fetch (*keep*), moving a partition's position back to records that will not be returned
(*rewind*, compare-and-set: a seek since wins), deserialization of keys and values on the
caller's thread, a record a deserializer failed on (raised again while its partition's
position stays at it), and what rebalance-safe commits must wait for.

Both front ends use it: ``KafkaConsumer.poll`` hands a collect out in one go
(:meth:`HandOut.hand_out`), ``KafkaConsumer.poll_batches`` the same in Arrow batches
(:meth:`HandOut.poll_columns`); ``AsyncKafkaConsumer`` keeps a buffer of its own and uses
:meth:`HandOut.admit`, :meth:`HandOut.rewind`, :meth:`HandOut.deserialize` and
:meth:`HandOut.returned`.

May touch: the consumer's context (subscription state, fetch buffer, safe commits), the
fetch actor (collect), the serialization helpers.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping, Sequence
from typing import Any

from kafka_actors.actors.context import ConsumerContext, fail
from kafka_actors.actors.events import PositionsChangedEvent
from kafka_actors.actors.facade import Facade
from kafka_actors.actors.fetch_collector import FetchCollector
from kafka_actors.actors.managers import CollectEvent
from kafka_actors.errors import IllegalStateError, RecordDeserializationError
from kafka_actors.log import new_trace_id
from kafka_actors.protocol.fetch.buffer import ColumnSlice
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.arrow import concat_batches, record_batch, require_pyarrow
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.protocol.subscription import FetchPosition
from kafka_actors.serialization import Deserializer, deserialize_records
from kafka_actors.structs import ConsumerRecords
from kafka_actors.supervisors import ChildRestartingError, SupervisorFatalError

__all__ = ["HandOut"]


class HandOut:
    """Records collected from the fetch actor, kept or given back, deserialized, returned.

    Not thread-safe by itself: each front end calls it from its polling thread (the sync
    consumer under its poll lock, the asyncio consumer on its loop)."""

    def __init__(
        self,
        ctx: ConsumerContext,
        facade: Facade,
        key_deserializer: Deserializer | None,
        value_deserializer: Deserializer | None,
    ) -> None:
        self._ctx = ctx
        self._facade = facade
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        #: Collects from the consumer's fetch buffer on the calling thread.
        self.collector = FetchCollector(ctx)
        #: Per partition, a record a deserializer failed on, where its position stopped.
        self._undeserializable: dict[TopicPartition, ConsumerRecord] = {}

    @property
    def deserializes(self) -> bool:
        return self.key_deserializer is not None or self.value_deserializer is not None

    # -- collect -----------------------------------------------------------------------------

    def try_collect_here(self, max_records: int, *, columnar: bool = False) -> tuple[bool, Any]:
        """Collect on this thread when the fetch buffer's lock is free (never waited for):
        ``(ran, FetchResult | None)``; not ran (the lock taken, or no fetch actor fills the
        buffer): ask the actor (:meth:`collect`). ``columnar``: the records as column slices
        (``FetchResult.columns``)."""
        result = self.collector.collect(max_records, columnar=columnar, wait=False)
        return result is not None, result

    def collect(self, max_records: int, trace: str) -> concurrent.futures.Future[Any]:
        """Ask the fetch actor for up to ``max_records`` (a told event, never waited for):
        a future of its FetchResult (None before it started), or ChildRestartingError."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if not self._ctx.tell("fetch", CollectEvent(max_records, trace, future)):
            fail(future, ChildRestartingError(child="fetch"))
        return future

    def poll_records(self, max_records: int, trace: str) -> ConsumerRecords[Any, Any]:
        """``KafkaConsumer.poll``'s collect: on the caller's thread from the fetch buffer
        (:class:`FetchCollector`; it waits for the buffer's lock, held by the fetch actor only
        while it handles one message), else an ask to the actor bounded by 30 s (so that an
        actor crashing on it answers at once); then :meth:`hand_out`. Nothing when the actor
        is restarting."""
        if self._undeserializable:
            self._raise_undeserializable()
        result = self._collected(max_records, trace, columnar=False)
        if result is None:
            return ConsumerRecords({})
        if result.error is not None and not result.records:
            raise result.error
        return self.hand_out(result.records, result.positions)

    def _collected(self, max_records: int, trace: str, *, columnar: bool) -> Any:
        """A FetchResult collected as :meth:`poll_records` says, or None."""
        ctx = self._ctx
        try:
            # On this thread, no actor round trip (waits for the buffer's lock, held only
            # while the fetch actor handles one message).
            result = self.collector.collect(max_records, columnar=columnar)
            if result is None:
                event = CollectEvent(max_records, trace, columnar=columnar)
                result = ctx.ask("fetch", event, timeout=30.0)
        except (ChildRestartingError, KeyError):
            return None
        except SupervisorFatalError:
            self._facade.raise_if_fatal()
            raise
        return result

    # -- the columnar poll: Arrow batches handed out in one go -----------------------------------

    def columnar_limit(self, max_records: int | None, default: int, what: str) -> int:
        """The checks of a columnar call (``what``) before anything is collected: no key/value
        deserializers (``IllegalStateError``: the batches hold the raw bytes), pyarrow
        installed (``MissingDependencyError``), a positive ``max_records`` (else
        ``default``)."""
        if self.deserializes:
            raise IllegalStateError(
                f"{what}() hands out raw bytes: this consumer has key/value deserializers"
            )
        require_pyarrow()
        limit = default if max_records is None else int(max_records)
        if limit <= 0:
            raise ValueError("max_records must be positive")
        return limit

    def poll_columns(
        self, max_records: int, trace: str, include_headers: bool
    ) -> dict[TopicPartition, Any]:
        """``KafkaConsumer.poll_batches``'s collect: as :meth:`poll_records`, with the records
        as column slices (no Python object per record), handed out as one
        ``pyarrow.RecordBatch`` per partition (:mod:`kafka_actors.protocol.records.arrow`). The same
        bookkeeping as :meth:`hand_out` without deserializers: only partitions still owned and
        fetchable, their consumed positions moved as the batches are returned; when making
        the batches fails, every position moves back to its records (compare-and-set), so
        nothing is skipped."""
        result = self._collected(max_records, trace, columnar=True)
        if result is None:
            return {}
        if result.error is not None and not result.columns:
            raise result.error
        return self.hand_out_columns(result.columns, result.positions, include_headers)

    def hand_out_columns(
        self,
        columns: Mapping[TopicPartition, Sequence[ColumnSlice]],
        positions: Mapping[TopicPartition, FetchPosition],
        include_headers: bool,
    ) -> dict[TopicPartition, Any]:
        """See :meth:`poll_columns`."""
        subs = self._ctx.subscriptions
        try:
            batches = {
                tp: concat_batches(
                    [record_batch(s.decoded, s.start, s.end, include_headers) for s in slices]
                )
                for tp, slices in columns.items()
                if slices
            }
        except BaseException:
            for tp, slices in columns.items():
                end = positions.get(tp)
                if slices and end is not None:
                    subs.seek_back_if_at(tp, end.offset, slices[0].first_offset)
            self._facade.tell("fetch", PositionsChangedEvent(new_trace_id()))
            raise
        return {
            tp: batch
            for tp, batch in batches.items()
            if subs.keep_handed_out(
                tp, positions.get(tp), columns[tp][0].first_offset, consume=True
            )
        }

    def handed_out_batches(self, batches: Mapping[TopicPartition, Any]) -> None:
        """``batches`` were returned by a columnar poll: what rebalance-safe commits wait for."""
        safe = self._ctx.safe_commits
        if safe is not None:
            safe.handed_out_batch(
                {tp: batch.column("offset")[-1].as_py() for tp, batch in batches.items()}
            )

    # -- the sync consumer: a collect handed out in one go -------------------------------------

    def _raise_undeserializable(self) -> None:
        """Raise again for a record a deserializer failed on, while its partition's position
        is still at it and the deserializer still fails (tried again, as Java does: a
        deserializer may fail for a while, a schema registry being down, say). Forget it when
        the position moved (a seek past it, a reset) or the partition is no longer owned."""
        pending = self._undeserializable
        subs = self._ctx.subscriptions
        for tp, record in list(pending.items()):
            state = subs.partition_state(tp)
            if (
                state is None
                or state.position is None
                or not state.has_valid_position
                or state.position.offset != record.offset
            ):
                del pending[tp]
                continue
            if not state.is_fetchable:
                continue  # paused or being revoked: its records are not returned either
            _, error = deserialize_records(
                (record,), self.key_deserializer, self.value_deserializer
            )
            if error is not None:
                raise error
            del pending[tp]  # it deserializes now: the collect returns it

    def hand_out(
        self,
        records: Mapping[TopicPartition, tuple[ConsumerRecord, ...]],
        positions: Mapping[TopicPartition, FetchPosition],
    ) -> ConsumerRecords[Any, Any]:
        """Deserialize, and hand out only records of partitions still owned and fetchable;
        the position of a partition paused or being revoked since the fetch actor handed its
        records out is moved back (compare-and-set), so nothing is skipped. The consumed
        position of a partition moves past its records only here, as they are returned: an
        auto-commit or a commit before a revocation never covers records not returned.

        A record a deserializer fails on (Java's RecordDeserializationException, KIP-334): the
        records before it are returned, and its partition's position (and consumed position)
        moves back to it; the error is raised now when nothing is returned, else by the next
        poll, and by every poll after while the position stays there (see
        ``_raise_undeserializable``)."""
        kd, vd = self.key_deserializer, self.value_deserializer
        out: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = {}
        failed: RecordDeserializationError | None = None
        for tp, recs in records.items():
            if not recs:
                continue
            if kd is None and vd is None:
                if self._keep(tp, recs, positions, consume=True):
                    out[tp] = list(recs)
                continue
            if not self._keep(tp, recs, positions, consume=False):
                continue
            try:
                batch, error = deserialize_records(recs, kd, vd)
            except BaseException:  # not a deserializer error (KeyboardInterrupt ...)
                self._stop_at(tp, 0, recs, positions)  # fetched again, deserialized again
                raise
            if error is not None:
                if self._stop_at(tp, len(batch), recs, positions):
                    failed = failed or error
                if batch:
                    out[tp] = batch
                continue
            if self._keep(tp, recs, positions, consume=True):
                out[tp] = batch
        if failed is not None and not out:
            raise failed
        return ConsumerRecords(out)

    def _stop_at(
        self,
        tp: TopicPartition,
        index: int,
        recs: tuple[ConsumerRecord, ...],
        positions: Mapping[TopicPartition, FetchPosition],
    ) -> bool:
        """Move the position (and the consumed position) of ``tp`` back to ``recs[index]``, a
        record a deserializer failed on, when still where the fetch actor moved it for
        ``recs`` (compare-and-set: a seek since wins); remember that record, so that the next
        polls raise again for it. True when done."""
        bad = recs[index]
        before = recs[index - 1].leader_epoch if index > 0 else None
        if not self._ctx.subscriptions.seek_back_to_failed(
            tp, positions.get(tp), bad.offset, before, first=index == 0
        ):
            return False
        self._undeserializable[tp] = bad
        self._facade.tell("fetch", PositionsChangedEvent(new_trace_id()))
        return True

    def _keep(
        self,
        tp: TopicPartition,
        recs: tuple[ConsumerRecord, ...],
        positions: Mapping[TopicPartition, FetchPosition],
        *,
        consume: bool,
    ) -> bool:
        """True when ``tp`` is still owned and fetchable (then, with ``consume``, its consumed
        position moves to where the fetch actor moved its position); else its position moves
        back to the first of ``recs`` when still where the fetch actor left it."""
        return self._ctx.subscriptions.keep_handed_out(
            tp, positions.get(tp), recs[0].offset, consume=consume
        )

    def handed_out_batch(self, records: ConsumerRecords[Any, Any]) -> None:
        """``records`` were returned by a poll: what rebalance-safe commits wait for."""
        safe = self._ctx.safe_commits
        if safe is not None:
            safe.handed_out_batch({tp: rs[-1].offset for tp, rs in records._by_partition.items()})

    # -- the asyncio consumer: a buffer of its own -------------------------------------------

    def admit(self, tp: TopicPartition, end: FetchPosition | None, first_offset: int) -> bool:
        """Whether collected records of ``tp`` (from ``first_offset``, its position moved to
        ``end``) may go into a front end's buffer: owned and fetchable, or paused (kept until
        resumed); being revoked (or reset) since the fetch actor handed them out: no, and the
        position moves back to them (compare-and-set) so that nothing is skipped."""
        return self._ctx.subscriptions.keep_handed_out(
            tp, end, first_offset, consume=False, keep_paused=True
        )

    def rewind(self, tp: TopicPartition, end: FetchPosition, first_offset: int) -> None:
        """Give back records of ``tp`` from ``first_offset`` on that will not be returned:
        its position moves back to them while still at ``end`` (compare-and-set)."""
        self._ctx.subscriptions.seek_back_if_at(tp, end.offset, first_offset)

    def deserialize(
        self, records: Sequence[ConsumerRecord]
    ) -> tuple[list[ConsumerRecord[Any, Any]], RecordDeserializationError | None]:
        """``records`` deserialized up to the first a deserializer fails on (and its error)."""
        return deserialize_records(records, self.key_deserializer, self.value_deserializer)

    def returned(
        self, tp: TopicPartition, last: ConsumerRecord[Any, Any], end: FetchPosition | None
    ) -> None:
        """Records of ``tp`` up to ``last`` are returned to the application; ``end``: all it
        collected (the consumed position moves there), else None. What rebalance-safe commits
        wait for."""
        ctx = self._ctx
        if end is not None:
            ctx.subscriptions.advance_consumed(tp, end)
        safe = ctx.safe_commits
        if safe is not None:
            safe.handed_out(tp, last.offset + 1)
