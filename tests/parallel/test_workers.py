"""The handler threads of ParallelConsumer (HandlerPool) and the record's fields in the
structlog context; and ParallelConsumer over a stand-in consumer (no broker): records end and
the next start on the pool's threads, in order, each handled once, a failure retried."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterable
from typing import Any

import pytest
import structlog

import kafka_actors.parallel.consumer as consumer_module
from kafka_actors.errors import WakeupError
from kafka_actors.parallel.consumer import ParallelConsumer
from kafka_actors.parallel.messages import Task
from kafka_actors.parallel.workers import (
    FAST_SAMPLE,
    SLOW_SCORE_FAST,
    SLOW_SCORE_MAX,
    HandlerPool,
)
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType
from kafka_actors.structs import ConsumerRecords

TP = TopicPartition("orders", 0)


def rec(offset: int, key: bytes | None = None, tp: TopicPartition = TP) -> ConsumerRecord:
    return ConsumerRecord(
        tp.topic, tp.partition, offset, 0, TimestampType.CREATE_TIME, key, b"v", [], None
    )


def task(offset: int) -> Task:
    return Task(offset + 1, rec(offset), 1)


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def run_until(pc: ParallelConsumer, *conditions: Any) -> None:
    """Subscribe ``pc`` to "orders", run its loop on a thread until each of ``conditions``
    holds in turn, then close it (10 s) and join the loop."""
    pc.subscribe(["orders"])
    runner = threading.Thread(target=pc.run, daemon=True)
    runner.start()
    for condition in conditions:
        wait_for(condition)
    pc.close(10)
    runner.join(10)


def test_every_task_runs_once_and_an_empty_queue_asks_for_more() -> None:
    ran: list[int] = []
    lock = threading.Lock()
    more = [[task(i) for i in range(100, 150)], [task(i) for i in range(150, 160)]]
    refills: list[str] = []

    def run(t: Task) -> None:
        with lock:
            ran.append(t.record.offset)

    def refill() -> list[Task]:
        # the owner's refill logs about other records: the last one's fields are not bound
        assert "offset" not in structlog.contextvars.get_contextvars()
        with lock:
            refills.append(threading.current_thread().name)
            return more.pop(0) if more else []

    pool = HandlerPool(4, run, refill, name="pool-test")
    assert pool.push([task(i) for i in range(100)])
    wait_for(lambda: len(ran) == 160)
    time.sleep(0.05)
    assert sorted(ran) == list(range(160))
    assert 1 <= pool.threads <= 4
    assert refills and all(name.startswith("pool-test-") for name in refills)
    pool.shutdown()
    assert not pool.push([task(999)])


def test_slow_handlers_spread_over_all_the_threads() -> None:
    # Eight handlers that only return once eight run at the same time.
    barrier = threading.Barrier(8, timeout=10)
    done: list[int] = []

    def run(t: Task) -> None:
        barrier.wait()
        done.append(t.record.offset)

    pool = HandlerPool(8, run, list)
    pool.push([task(i) for i in range(8)])
    wait_for(lambda: len(done) == 8)
    assert pool.threads == 8
    pool.shutdown()


def test_fast_handlers_run_on_few_threads_instead_of_waking_every_one() -> None:
    # A clock that moves only in the handlers below: most are fast. The first task wakes one
    # (the handlers' speed is unknown until a few ended); after that no thread wakes another.
    # One in ten looks slow (a GIL switch inside it): that must not wake threads.
    ran: list[int] = []
    lock = threading.Lock()
    now = [0.0]

    def run(t: Task) -> None:
        with lock:
            ran.append(t.record.offset)
            if t.record.offset % 10 == 5:
                now[0] += 1.0

    pool = HandlerPool(64, run, list, clock=lambda: now[0])
    for round_ in range(20):
        pool.push([task(i) for i in range(round_ * 100, round_ * 100 + 100)])
        wanted = (round_ + 1) * 100
        wait_for(lambda: len(ran) == wanted)  # noqa: B023 (read before the next round)
    assert sorted(ran) == list(range(2000))
    assert pool.fast
    # Old pool: a thread taking a task while more wait always woke one (up to 64 threads).
    # Until the score says fast (SLOW_SCORE_MAX - SLOW_SCORE_FAST + 1 handlers ended), a
    # thread taking a task may wake one; after that a push wakes one only when none is awake.
    assert pool.threads <= 2 + SLOW_SCORE_MAX
    pool.shutdown()


def test_handlers_that_turn_slow_spread_again_and_nudge_frees_a_held_queue() -> None:
    # Fast handlers first (one thread awake); then a handler that blocks holds that thread:
    # the tasks behind it wait until the owner's nudge sees no task taken since its last one.
    now = [0.0]
    release = threading.Event()
    blocked = threading.Event()
    done: list[int] = []

    def run(t: Task) -> None:
        if t.record.offset == 1000:
            blocked.set()
            release.wait(10)
        done.append(t.record.offset)

    pool = HandlerPool(8, run, list, clock=lambda: now[0])
    pool.push([task(i) for i in range(50)])
    wait_for(lambda: len(done) == 50)
    assert pool.fast
    # Every thread asleep (a thread woken while the speed was unknown may still be looking
    # for work a moment after the last task ended; ciA: it took tasks 2000.. at once): the
    # push below wakes exactly one, which takes task 1000 first and is held by it.
    wait_for(lambda: pool.awake == 0)
    pool.push([task(1000)] + [task(i) for i in range(2000, 2010)])
    blocked.wait(10)
    pool.nudge(1_000)
    pool.nudge(1_019)  # held for less than stall_ms (20): nothing yet
    assert len(done) == 50
    deadline = time.monotonic() + 10
    now_ms = 1_020
    while len(done) < 60:
        assert time.monotonic() < deadline, "the tasks behind a held thread never ran"
        pool.nudge(now_ms)
        now_ms += 20
        time.sleep(0.01)
    assert sorted(done[50:]) == list(range(2000, 2010))
    release.set()
    wait_for(lambda: 1000 in done)
    pool.shutdown()


def test_while_fast_only_some_handlers_are_timed_and_a_turn_to_slow_is_still_seen() -> None:
    # Once the score is 0, one handler in FAST_SAMPLE is timed; handlers that turn slow (each
    # moves the clock 1 s) make the pool slow again within a sample and the score's margin.
    now = [0.0]
    readings = [0]
    seen_fast: list[bool] = []
    slow = threading.Event()

    def clock() -> float:
        readings[0] += 1
        return now[0]

    def run(t: Task) -> None:
        if slow.is_set():
            seen_fast.append(pool.fast)
            now[0] += 1.0

    pool = HandlerPool(1, run, list, clock=clock)
    pool.push([task(i) for i in range(400)])
    wait_for(lambda: pool.queued == 0 and pool.awake == 0)
    assert pool.fast
    assert readings[0] < 2 * 400 // 2  # not two readings per handler
    slow.set()
    pool.push([task(i) for i in range(1000, 1040)])
    wait_for(lambda: len(seen_fast) == 40)
    assert not seen_fast[-1]
    assert seen_fast.index(False) <= FAST_SAMPLE + SLOW_SCORE_FAST
    pool.shutdown()


def test_slow_handlers_make_the_threads_wake_each_other_again() -> None:
    # A clock that moves 1 s per reading: every handler is slow (enough of them set the
    # pool slow; one alone could be a GIL switch inside a fast handler).
    ticks = [0.0]
    lock = threading.Lock()

    def clock() -> float:
        with lock:
            ticks[0] += 1.0
            return ticks[0]

    barrier = threading.Barrier(4, timeout=10)
    done: list[int] = []

    def run(t: Task) -> None:
        if t.record.offset >= 100:
            barrier.wait()  # only returns once four run at the same time
        done.append(t.record.offset)

    pool = HandlerPool(4, run, list, clock=clock)
    pool.push([task(i) for i in range(10)])
    wait_for(lambda: len(done) == 10)
    assert not pool.fast
    pool.push([task(i) for i in range(100, 104)])
    wait_for(lambda: len(done) == 14)
    assert pool.threads == 4
    pool.shutdown()


def test_shutdown_drops_the_queued_tasks_and_ends_the_threads() -> None:
    release = threading.Event()
    started = threading.Event()

    def run(t: Task) -> None:
        started.set()
        release.wait(10)

    pool = HandlerPool(1, run, list, name="pool-shutdown")
    pool.push([task(i) for i in range(5)])
    started.wait(10)
    dropped = pool.shutdown()
    assert [t.record.offset for t in dropped] == [1, 2, 3, 4]
    release.set()
    wait_for(lambda: not any(t.name.startswith("pool-shutdown") for t in threading.enumerate()))


def test_a_task_returned_by_run_runs_next_on_the_same_thread_with_its_fields() -> None:
    # What the owner does for partition ordering: the success of one record starts the next
    # of its partition for the same thread, which runs it without a hand-off.
    ran: list[tuple[int, str, object]] = []

    def run(t: Task) -> Task | None:
        offset = t.record.offset
        ran.append(
            (
                offset,
                threading.current_thread().name,
                structlog.contextvars.get_contextvars().get("offset"),
            )
        )
        return task(offset + 1) if offset < 9 else None

    refills: list[int] = []

    def refill() -> list[Task]:
        refills.append(1)
        return []

    pool = HandlerPool(4, run, refill)
    pool.push([task(0)])
    wait_for(lambda: len(ran) == 10 and refills)
    assert [offset for offset, _, _ in ran] == list(range(10))
    assert len({name for _, name, _ in ran}) == 1
    assert [bound for _, _, bound in ran] == list(range(10))
    pool.shutdown()


def test_the_handler_sees_its_record_in_the_structlog_context() -> None:
    seen: list[dict[str, Any]] = []

    def run(t: Task) -> None:
        seen.append(dict(structlog.contextvars.get_contextvars()))

    pool = HandlerPool(2, run, list)
    pool.push([Task(1, rec(7, b"k"), 1), Task(2, rec(8), 3)])
    wait_for(lambda: len(seen) == 2)
    by_offset = {s["offset"]: s for s in seen}
    assert by_offset[7] == {
        "topic": "orders",
        "partition": 0,
        "offset": 7,
        "key": b"k",
        "attempt": 1,
    }
    assert by_offset[8]["attempt"] == 3 and by_offset[8]["key"] is None
    pool.shutdown()


def test_a_handler_that_clears_the_context_does_not_lose_the_next_records_fields() -> None:
    # The pool sets only what changed between two records; a handler clearing the structlog
    # context must not leave the next record of the same partition without its topic.
    seen: list[dict[str, Any]] = []

    def run(t: Task) -> None:
        seen.append(dict(structlog.contextvars.get_contextvars()))
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(attempt=99)

    pool = HandlerPool(1, run, list)
    pool.push([Task(i + 1, rec(i, b"k"), 1) for i in range(3)])
    wait_for(lambda: len(seen) == 3)
    assert seen == [
        {"topic": "orders", "partition": 0, "offset": i, "key": b"k", "attempt": 1}
        for i in range(3)
    ]
    pool.shutdown()


# -- ParallelConsumer over a stand-in consumer ------------------------------------------------


class _StandIn:
    """What ParallelConsumer uses of a KafkaConsumer: one partition of ``records``, handed
    out ``batch`` at a time, pauses honoured, wakeup, commits recorded."""

    records: list[ConsumerRecord] = []
    instances: list[_StandIn] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.position = 0
        self.paused: set[TopicPartition] = set()
        self.woken = threading.Event()
        self.listener: Any = None
        self.commits: list[dict[TopicPartition, OffsetAndMetadata]] = []
        self.wakeups = 0
        self.polls = 0
        _StandIn.instances.append(self)

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        self.listener = listener

    def poll(self, timeout: float = 0.0) -> ConsumerRecords:
        self.polls += 1
        if self.listener is not None:
            listener, self.listener = self.listener, None
            listener.on_partitions_assigned({TP})
        if TP not in self.paused and self.position < len(self.records):
            batch = self.records[self.position : self.position + 100]
            self.position += len(batch)
            return ConsumerRecords({TP: batch})
        if self.woken.wait(timeout):
            self.woken.clear()
            raise WakeupError("woken")
        return ConsumerRecords({})

    def wakeup(self) -> None:
        self.wakeups += 1
        self.woken.set()

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        self.paused.update(tps)

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        self.paused.difference_update(tps)

    def committed(self, tps: Iterable[TopicPartition], timeout: float | None = None) -> Any:
        return dict.fromkeys(tps)

    def commit_async(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> Any:
        self.commits.append(offsets)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(offsets)
        return future

    def commit_sync(self, offsets: dict[TopicPartition, OffsetAndMetadata], **kw: Any) -> None:
        self.commits.append(offsets)

    def close(self, timeout: float | None = None) -> None:
        pass


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> type[_StandIn]:
    monkeypatch.setattr(consumer_module, "KafkaConsumer", _StandIn)
    _StandIn.instances = []
    return _StandIn


@pytest.mark.parametrize("ordering", ["partition", "key", "unordered"])
def test_records_end_and_start_on_the_pool_in_order_each_once(
    stand_in: type[_StandIn], ordering: str
) -> None:
    n = 3000
    stand_in.records = [rec(i, b"k%d" % (i % 7)) for i in range(n)]
    handled: list[int] = []
    running = [0]
    most = [0]
    lock = threading.Lock()

    def handle(record: ConsumerRecord) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if record.offset % 500 == 0:
            time.sleep(0.002)
        with lock:
            running[0] -= 1
            handled.append(record.offset)

    pc = ParallelConsumer(
        {"bootstrap.servers": "localhost:9", "group.id": "g", "auto.commit.interval.ms": 50},
        handler=handle,
        ordering=ordering,
        max_concurrency=8,
        offset_metadata_max_bytes=4096,
    )
    run_until(pc, lambda: len(handled) >= n)
    assert sorted(handled) == list(range(n))  # each once
    assert most[0] <= 8
    if ordering == "partition":
        assert handled == list(range(n))
    if ordering == "key":
        for k in range(7):
            mine = [o for o in handled if o % 7 == k]
            assert mine == sorted(mine)
    consumer = stand_in.instances[0]
    assert consumer.commits[-1][TP].offset == n
    # the loop is not woken once per record: a record's end starts the next on the pool
    assert consumer.wakeups < n // 10


def test_a_failing_record_is_retried_and_the_commit_waits_for_it(
    stand_in: type[_StandIn],
) -> None:
    stand_in.records = [rec(i, b"k%d" % (i % 3)) for i in range(300)]
    attempts: dict[int, int] = {}
    lock = threading.Lock()

    def handle(record: ConsumerRecord) -> None:
        with lock:
            attempts[record.offset] = attempts.get(record.offset, 0) + 1
            if record.offset == 100 and attempts[record.offset] < 3:
                raise RuntimeError("not yet")

    pc = ParallelConsumer(
        {"bootstrap.servers": "localhost:9", "group.id": "g"},
        handler=handle,
        max_concurrency=4,
        retry_backoff_ms=20,
        retry_backoff_max_ms=40,
        offset_metadata_max_bytes=4096,
    )
    run_until(
        pc,
        lambda: len(attempts) == 300 and attempts[100] == 3,
        lambda: pc.metrics()["records-completed-total"] == 300,
    )
    assert attempts[100] == 3
    assert all(count == 1 for offset, count in attempts.items() if offset != 100)
    assert stand_in.instances[0].commits[-1][TP].offset == 300


def test_a_failure_among_fast_handlers_retries_only_it_and_keeps_its_keys_order(
    stand_in: type[_StandIn],
) -> None:
    # No-op handlers: outcomes come back in batches between two refills, with a failure in
    # the middle of one. Only that record runs again, its key's later records wait for it.
    n = 2000
    stand_in.records = [rec(i, b"k%d" % (i % 16)) for i in range(n)]
    handled: list[int] = []
    attempts: dict[int, int] = {}
    lock = threading.Lock()

    def handle(record: ConsumerRecord) -> None:
        with lock:
            attempts[record.offset] = attempts.get(record.offset, 0) + 1
            if record.offset in (500, 1001) and attempts[record.offset] == 1:
                raise RuntimeError("once")
            handled.append(record.offset)

    pc = ParallelConsumer(
        {"bootstrap.servers": "localhost:9", "group.id": "g", "auto.commit.interval.ms": 50},
        handler=handle,
        max_concurrency=256,
        retry_backoff_ms=5,
        retry_backoff_max_ms=10,
        offset_metadata_max_bytes=4096,
    )
    run_until(pc, lambda: len(handled) >= n)
    assert sorted(handled) == list(range(n))
    assert {o: c for o, c in attempts.items() if c != 1} == {500: 2, 1001: 2}
    for k in range(16):
        mine = [o for o in handled if o % 16 == k]
        assert mine == sorted(mine)
    assert pc._pool.threads <= 256
    assert stand_in.instances[0].commits[-1][TP].offset == n


def test_a_wake_up_between_two_polls_is_not_lost(stand_in: type[_StandIn]) -> None:
    # A pool thread asks the loop to resume a partition while the loop is between two polls
    # (it has decided its timeout already): the next poll must not wait its idle timeout.
    stand_in.records = []
    timeouts: list[float] = []
    pc = ParallelConsumer(
        {"bootstrap.servers": "localhost:9", "group.id": "g"},
        handler=lambda record: None,
        offset_metadata_max_bytes=4096,
    )
    pc.subscribe(["orders"])
    consumer = stand_in.instances[0]
    poll = consumer.poll

    def recording_poll(timeout: float = 0.0) -> ConsumerRecords:
        timeouts.append(timeout)
        return poll(0.0)

    consumer.poll = recording_poll  # type: ignore[method-assign]
    pc._turn(poll=True)  # assigned
    pc._turn(poll=True)
    assert timeouts[-1] > 0  # idle: waits
    pc._wake()  # not in a poll now
    pc._turn(poll=True)
    assert timeouts[-1] == 0.0
    pc._turn(poll=True)
    assert timeouts[-1] > 0  # once
    pc.close(5)


def _count_runs(pc: ParallelConsumer) -> list[int]:
    """Wrap the scheduler's succeeded_next to record the lengths of the runs it starts."""
    lengths: list[int] = []
    scheduler = pc._scheduler
    original = scheduler.succeeded_next

    def wrapper(work_id: int, now_ms: int, run_max: int = 1) -> tuple[Task | None, bool]:
        task, resumable = original(work_id, now_ms, run_max)
        n, t = 0, task
        while t is not None:
            n += 1
            t = t.run_next
        if n > 1:
            lengths.append(n)
        return task, resumable

    scheduler.succeeded_next = wrapper  # type: ignore[method-assign]
    return lengths


def test_runs_of_fast_handlers_keep_the_order_and_retry_a_failure_inside_one(
    stand_in: type[_StandIn],
) -> None:
    # Partition ordering, no-op handlers: a worker runs records in runs (Task.run_next). A
    # record failing inside a run ends it there: the ones after it go back and run after
    # its retry, in order; nothing is handled twice but the failed attempt.
    n = 4000
    stand_in.records = [rec(i, b"k%d" % (i % 5)) for i in range(n)]
    handled: list[int] = []
    failed: list[int] = []

    def handle(record: ConsumerRecord) -> None:
        if record.offset == 2222 and not failed:
            failed.append(record.offset)
            raise RuntimeError("once")
        handled.append(record.offset)

    pc = ParallelConsumer(
        {"bootstrap.servers": "localhost:9", "group.id": "g", "auto.commit.interval.ms": 50},
        handler=handle,
        ordering="partition",
        max_concurrency=8,
        retry_backoff_ms=5,
        retry_backoff_max_ms=10,
        offset_metadata_max_bytes=4096,
    )
    runs = _count_runs(pc)
    run_until(pc, lambda: len(handled) >= n)
    assert handled == list(range(n))
    assert failed == [2222]
    assert runs and max(runs) > 1  # runs were used
    assert stand_in.instances[0].commits[-1][TP].offset == n


def test_close_inside_a_run_commits_exactly_what_was_handled(
    stand_in: type[_StandIn],
) -> None:
    # close() while workers are inside runs: each stops at its next record; the records of a
    # run that had not begun go back, so the commit is exactly the handled prefix.
    n = 20_000
    stand_in.records = [rec(i, b"k") for i in range(n)]
    handled: list[int] = []
    halfway = threading.Event()

    def handle(record: ConsumerRecord) -> None:
        handled.append(record.offset)
        if record.offset == 3000:
            halfway.set()

    pc = ParallelConsumer(
        {"bootstrap.servers": "localhost:9", "group.id": "g"},
        handler=handle,
        ordering="partition",
        max_concurrency=4,
        offset_metadata_max_bytes=4096,
    )
    runs = _count_runs(pc)
    run_until(pc, halfway.is_set)
    done = len(handled)
    assert 3000 < done < n
    assert handled == list(range(done))
    assert runs and max(runs) > 1
    assert stand_in.instances[0].commits[-1][TP].offset == done
