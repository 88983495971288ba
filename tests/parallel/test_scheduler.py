"""The pure core of parallel processing: ordering, bounds, retries, dead letters, policies,
back-pressure on the offset map, assignment from a map, and revocation."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_actors.errors import ConfigError
from kafka_actors.parallel import offset_map as om
from kafka_actors.parallel import scheduler as scheduler_module
from kafka_actors.parallel.messages import (
    DeadLetter,
    DeadLetterDue,
    PartitionStopped,
    PauseReason,
    RecordSkipped,
    RetryScheduled,
    Task,
)
from kafka_actors.parallel.scheduler import CHAIN_MAX, WorkConfig, WorkScheduler, _Work
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType

TP = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)


def rec(offset: int, key: bytes | None, tp: TopicPartition = TP) -> ConsumerRecord:
    return ConsumerRecord(
        tp.topic, tp.partition, offset, 0, TimestampType.CREATE_TIME, key, b"v", [], None
    )


def half() -> float:
    return 0.5  # no jitter: backoff(n) = initial * 2**n


def tasks(items: list[Task | DeadLetter]) -> list[Task]:
    return [t for t in items if isinstance(t, Task)]


def scheduler(**options: object) -> WorkScheduler:
    s = WorkScheduler(WorkConfig(**options), half)  # type: ignore[arg-type]
    s.assign(TP, OffsetAndMetadata(0))
    return s


def two_partitions(keys: list[bytes | None], concurrency: int, ordering: str) -> WorkScheduler:
    """A scheduler (up to 1,000 attempts a record) with TP and TP1 assigned, each offered a
    record per key of ``keys`` from offset 0."""
    s = scheduler(max_concurrency=concurrency, max_attempts=1000, ordering=ordering)
    s.assign(TP1, OffsetAndMetadata(0))
    s.offer(TP, [rec(i, k) for i, k in enumerate(keys)])
    s.offer(TP1, [rec(i, k, TP1) for i, k in enumerate(keys)])
    return s


@given(
    keys=st.lists(st.sampled_from([b"a", b"b", b"c", b"d", None]), min_size=1, max_size=120),
    seed=st.integers(0, 2**32),
    concurrency=st.integers(1, 16),
)
@settings(max_examples=150, deadline=None)
def test_key_order_one_record_per_key_in_flight_in_offset_order(
    keys: list[bytes | None], seed: int, concurrency: int
) -> None:
    rnd = random.Random(seed)
    s = scheduler(max_concurrency=concurrency, max_attempts=1000)
    s.offer(TP, [rec(i, k) for i, k in enumerate(keys)])
    running: dict[int, ConsumerRecord] = {}
    handled: dict[object, list[int]] = defaultdict(list)
    now = 0
    while sum(map(len, handled.values())) < len(keys):
        for task in tasks(s.take_ready(now)):
            running[task.work_id] = task.record
        assert 0 < len(running) <= concurrency
        in_flight_keys = [r.key for r in running.values() if r.key is not None]
        assert len(in_flight_keys) == len(set(in_flight_keys))  # one per key
        work_id = rnd.choice(sorted(running))
        record = running.pop(work_id)
        if rnd.random() < 0.2 and record.key is not None:
            assert isinstance(s.failed(work_id, ValueError("x"), now), RetryScheduled)
            now += 10_000  # past any backoff
            continue
        assert s.succeeded(work_id)
        handled[record.key if record.key is not None else ("null", record.offset)].append(
            record.offset
        )
    for offsets in handled.values():
        assert offsets == sorted(offsets)
    assert s.commit_offsets() == {TP: OffsetAndMetadata(len(keys), "")}


@given(
    keys=st.lists(st.sampled_from([b"a", b"b", b"c", b"d", None]), min_size=1, max_size=150),
    seed=st.integers(0, 2**32),
    concurrency=st.integers(1, 32),
)
@settings(max_examples=150, deadline=None)
def test_batched_outcomes_keep_key_order_and_retry_only_the_failed(
    keys: list[bytes | None], seed: int, concurrency: int
) -> None:
    # Outcomes come back in batches (what a pool thread reports between two refills):
    # successes applied with succeeded_all, a failure in the middle of a batch on its own,
    # in the batch's order. Only the failed records run again; keys keep offset order; no
    # two records of a key are in flight; the commit reaches the end.
    rnd = random.Random(seed)
    s = scheduler(max_concurrency=concurrency, max_attempts=1000)
    s.offer(TP, [rec(i, k) for i, k in enumerate(keys)])
    running: dict[int, ConsumerRecord] = {}
    runs: dict[int, int] = defaultdict(int)
    failures: dict[int, int] = defaultdict(int)
    handled: dict[object, list[int]] = defaultdict(list)
    now = 0
    while sum(map(len, handled.values())) < len(keys):
        for task in tasks(s.take_ready(now)):
            running[task.work_id] = task.record
            runs[task.record.offset] += 1
        assert 0 < len(running) <= concurrency
        in_flight_keys = [r.key for r in running.values() if r.key is not None]
        assert len(in_flight_keys) == len(set(in_flight_keys))  # one per key
        batch = rnd.sample(sorted(running), rnd.randint(1, len(running)))
        successes: list[int] = []
        for work_id in batch:
            record = running.pop(work_id)
            if rnd.random() < 0.15:
                assert s.succeeded_all(successes) == len(successes)
                successes = []
                assert isinstance(s.failed(work_id, ValueError("x"), now), RetryScheduled)
                failures[record.offset] += 1
                continue
            successes.append(work_id)
            handled[record.key if record.key is not None else ("null", record.offset)].append(
                record.offset
            )
        assert s.succeeded_all(successes) == len(successes)
        now += 10_000  # past any backoff
    for offsets in handled.values():
        assert offsets == sorted(offsets)
    assert all(runs[offset] == 1 + failures[offset] for offset in range(len(keys)))
    assert s.running() == 0
    assert s.counters.succeeded == len(keys)
    assert s.commit_offsets() == {TP: OffsetAndMetadata(len(keys), "")}


@given(
    keys=st.lists(st.sampled_from([b"a", b"b", b"c", None]), min_size=1, max_size=150),
    seed=st.integers(0, 2**32),
    concurrency=st.integers(1, 16),
    ordering=st.sampled_from(["key", "partition", "unordered"]),
)
@settings(max_examples=150, deadline=None)
def test_chained_starts_keep_the_order_and_the_bounds(
    keys: list[bytes | None], seed: int, concurrency: int, ordering: str
) -> None:
    # A worker that finished a followed record asks succeeded_next for its next one (what a
    # pool thread does when its queue is empty); the others go through take_ready. Orders,
    # bounds and the commit are those of one start at a time.
    rnd = random.Random(seed)
    s = two_partitions(keys, concurrency, ordering)
    running: dict[int, Task] = {}
    handled: dict[object, list[int]] = defaultdict(list)
    now = 0

    def check() -> None:
        assert 0 < len(running) <= concurrency
        if ordering == "key":
            in_flight = [(t.record.partition, t.record.key) for t in running.values()]
            in_flight = [k for k in in_flight if k[1] is not None]
            assert len(in_flight) == len(set(in_flight))
        elif ordering == "partition":
            places = [t.record.partition for t in running.values()]
            assert len(places) == len(set(places))

    def done(task: Task) -> None:
        record = task.record
        key = (record.partition, record.key if ordering == "key" else None)
        if ordering == "unordered" or (ordering == "key" and record.key is None):
            key = (record.partition, "own", record.offset)
        handled[key].append(record.offset)

    while sum(map(len, handled.values())) < 2 * len(keys):
        for task in tasks(s.take_ready(now)):
            running[task.work_id] = task
        check()
        task = running.pop(rnd.choice(sorted(running)))
        if rnd.random() < 0.1:
            s.failed(task.work_id, ValueError("x"), now)
            now += 10_000
            continue
        done(task)
        if task.followed and rnd.random() < 0.8:
            following, _ = s.succeeded_next(task.work_id, now)
            if following is not None:
                assert following.record.partition == task.record.partition
                running[following.work_id] = following
                check()
        else:
            assert s.succeeded(task.work_id)
    for offsets in handled.values():
        assert offsets == sorted(offsets)
    assert s.running() == 0
    assert s.commit_offsets() == {
        TP: OffsetAndMetadata(len(keys), ""),
        TP1: OffsetAndMetadata(len(keys), ""),
    }


@given(
    keys=st.lists(st.sampled_from([b"a", b"b", b"c", None]), min_size=1, max_size=150),
    seed=st.integers(0, 2**32),
    concurrency=st.integers(1, 16),
    ordering=st.sampled_from(["key", "partition"]),
)
@settings(max_examples=150, deadline=None)
def test_runs_keep_the_order_and_settle_on_any_outcome(
    keys: list[bytes | None], seed: int, concurrency: int, ordering: str
) -> None:
    # Workers that start runs (succeeded_next with run_max > 1) and run each run's records in
    # turn without reporting them; a run ends at its last record, at a failure, or where its
    # worker stops it (an interruption): that outcome settles the run. Every record succeeds
    # once, in its key's order, never beside another of its key, and the commit covers all.
    rnd = random.Random(seed)
    s = two_partitions(keys, concurrency, ordering)
    current: dict[int, Task] = {}  # what each worker runs now (by the work id)
    handled: dict[object, list[int]] = defaultdict(list)
    now = 0

    def key_of(task: Task) -> object:
        record = task.record
        if ordering == "partition":
            return record.partition
        if record.key is None:
            return (record.partition, "own", record.offset)
        return (record.partition, record.key)

    def check() -> None:
        assert 0 < s.running() <= concurrency
        assert len(current) <= s.running()
        running_keys = [key_of(t) for t in current.values()]
        assert len(running_keys) == len(set(running_keys))

    while sum(map(len, handled.values())) < 2 * len(keys):
        for task in tasks(s.take_ready(now)):
            current[task.work_id] = task
        check()
        task = current.pop(rnd.choice(sorted(current)))
        roll = rnd.random()
        if roll < 0.1:
            assert s.failed(task.work_id, ValueError("x"), now) is not None
            now += 10_000
            continue
        handled[key_of(task)].append(task.record.offset)
        following = task.run_next
        if following is not None and roll < 0.9:
            assert key_of(following) == key_of(task)
            current[following.work_id] = following  # this success is not reported
        elif following is not None or not task.followed or roll < 0.95:
            assert s.succeeded(task.work_id)  # the run, if any, ends here
        else:
            nxt, _ = s.succeeded_next(task.work_id, now, rnd.randint(1, 6))
            if nxt is not None:
                assert nxt.record.partition == task.record.partition
                current[nxt.work_id] = nxt
        if current:
            check()
    for offsets in handled.values():
        assert offsets == sorted(set(offsets))
    assert s.running() == 0
    assert s.pending() == 0
    assert s.commit_offsets() == {
        TP: OffsetAndMetadata(len(keys), ""),
        TP1: OffsetAndMetadata(len(keys), ""),
    }


def test_a_run_starts_the_waiting_records_of_one_key_as_linked_tasks() -> None:
    s = scheduler(ordering="partition", max_buffered_per_partition=100)
    s.offer(TP, [rec(i, b"k") for i in range(10)])
    (first,) = tasks(s.take_ready(0))
    assert first.followed
    run, resumable = s.succeeded_next(first.work_id, 0, run_max=4)
    assert run is not None and not resumable
    members = [run]
    while members[-1].run_next is not None:
        members.append(members[-1].run_next)  # type: ignore[arg-type]
    assert [t.record.offset for t in members] == [1, 2, 3, 4]
    assert all(t.followed for t in members)  # the last one: records 5.. wait behind it
    assert {t.interruptions for t in members} == {s.interruptions}
    assert s.running() == 4 and s.pending() == 9
    # The last one's outcome settles the run: all four succeeded.
    nxt, _ = s.succeeded_next(members[-1].work_id, 0, run_max=100)
    assert s.counters.succeeded == 5
    assert s.commit_offsets()[TP].offset == 5
    assert nxt is not None and nxt.record.offset == 5
    # A run is no longer than what waits, and its last record is not followed then.
    last = nxt
    while last.run_next is not None:
        last = last.run_next
    assert last.record.offset == 9 and not last.followed


def test_a_failure_or_a_stop_inside_a_run_puts_the_rest_back_in_order() -> None:
    s = scheduler(ordering="partition", max_attempts=3, retry_backoff_ms=100)
    s.assign(TP1, OffsetAndMetadata(0))
    s.offer(TP, [rec(i, b"k") for i in range(8)])
    (first,) = tasks(s.take_ready(0))
    run, _ = s.succeeded_next(first.work_id, 0, run_max=5)  # offsets 1..5
    assert run is not None and run.run_next is not None
    second = run.run_next
    # 1 succeeded (not reported), 2 fails: 1 completes, 3..5 go back, unstarted.
    assert isinstance(s.failed(second.work_id, ValueError("x"), 0), RetryScheduled)
    assert s.commit_offsets()[TP].offset == 2
    assert s.running() == 0 and s.pending() == 6  # 2 (waiting for its retry), 3..7
    assert tasks(s.take_ready(50)) == []  # the retry holds the partition
    (retry,) = tasks(s.take_ready(100))
    assert retry.record.offset == 2 and retry.attempt == 2
    run, _ = s.succeeded_next(retry.work_id, 100, run_max=2)
    assert run is not None and run.record.offset == 3
    # The worker stops the run after 3 (an interruption): 4 goes back and starts next.
    s.begin_revoke([TP1])  # any revocation interrupts runs
    assert run.run_next is not None and run.run_next.interruptions != s.interruptions
    assert s.succeeded(run.work_id)
    assert s.commit_offsets()[TP].offset == 4
    assert [t.record.offset for t in tasks(s.take_ready(100))] == [4]


def test_a_run_of_a_removed_partition_is_abandoned() -> None:
    s = scheduler(ordering="partition")
    s.offer(TP, [rec(i, b"k") for i in range(6)])
    (first,) = tasks(s.take_ready(0))
    run, _ = s.succeeded_next(first.work_id, 0, run_max=3)
    assert run is not None and run.run_next is not None
    before = s.interruptions
    assert s.remove([TP]) == 3
    assert s.interruptions > before
    assert not s.succeeded(run.work_id) and s.running() == 0


def test_a_record_knows_whether_one_of_its_key_waits_behind_it() -> None:
    s = scheduler()
    s.offer(TP, [rec(0, b"a"), rec(1, b"b"), rec(2, b"a"), rec(3, None), rec(4, None)])
    started = {t.record.offset: t.followed for t in tasks(s.take_ready(0))}
    assert started == {0: True, 1: False, 3: False, 4: False}
    p = scheduler(ordering="partition")
    p.offer(TP, [rec(0, b"a"), rec(1, b"b")])
    (first,) = tasks(p.take_ready(0))
    assert first.followed
    following, _ = p.succeeded_next(first.work_id, 0)
    assert following is not None and following.record.offset == 1 and not following.followed


def test_a_chain_of_starts_ends_at_its_cap_a_revocation_or_a_due_retry() -> None:
    s = scheduler(ordering="partition")
    s.offer(TP, [rec(i, b"k") for i in range(CHAIN_MAX + 5)])
    (task,) = tasks(s.take_ready(0))
    chained = 0
    while True:
        following, _ = s.succeeded_next(task.work_id, 0)
        if following is None:
            break
        chained += 1
        task = following
    assert chained == CHAIN_MAX  # then take_ready serves the partitions in turn
    (task,) = tasks(s.take_ready(0))
    assert task.record.offset == CHAIN_MAX + 1
    s.begin_revoke([TP])
    assert s.succeeded_next(task.work_id, 0) == (None, False)
    assert s.take_ready(0) == []

    r = scheduler(ordering="key", max_attempts=3, retry_backoff_ms=100)
    r.offer(TP, [rec(0, b"a"), rec(1, b"a"), rec(2, b"b")])
    a, b = tasks(r.take_ready(0))
    assert isinstance(r.failed(b.work_id, ValueError("x"), 0), RetryScheduled)
    following, _ = r.succeeded_next(a.work_id, 1_000)  # b's retry is due: take_ready first
    assert following is None
    assert [t.record.offset for t in tasks(r.take_ready(1_000))] == [2, 1]


def test_a_chained_start_says_when_the_partition_may_resume_fetching() -> None:
    # A pause for a full buffer (4) lasts until the buffer is down to half of it (2).
    s = scheduler(ordering="partition", max_buffered_per_partition=4)
    s.offer(TP, [rec(i, b"k") for i in range(5)])
    assert s.fetch_pauses() == {TP: PauseReason.BUFFER_FULL}
    (task,) = tasks(s.take_ready(0))
    assert s.fetch_pauses() == {TP: PauseReason.BUFFER_FULL}  # 4 still buffered
    following, resumable = s.succeeded_next(task.work_id, 0)
    assert following is not None and not resumable  # 3 buffered: still paused
    assert s.fetch_pauses() == {TP: PauseReason.BUFFER_FULL}
    following, resumable = s.succeeded_next(following.work_id, 0)
    assert following is not None and resumable  # 2 buffered now
    assert s.fetch_pauses() == {}
    following, resumable = s.succeeded_next(following.work_id, 0)
    assert following is not None and not resumable  # it was not paused
    s.offer(TP, [rec(i, b"k") for i in range(5, 7)])
    assert s.fetch_pauses() == {}  # 3 buffered: below the bound, fetching goes on


def test_chains_leave_no_partition_waiting_behind_others() -> None:
    # Partition ordering, more partitions than slots, workers that chain whenever they may:
    # a chain gives its slot back after CHAIN_MAX starts, so every partition with records
    # starts one within a bounded number of handled records (without the cap two partitions
    # would hold both slots until they ran dry).
    parts = [TopicPartition("orders", p) for p in range(4)]
    s = WorkScheduler(WorkConfig(ordering="partition", max_concurrency=2), half)
    for tp in parts:
        s.assign(tp, OffsetAndMetadata(0))
        s.offer(tp, [rec(i, b"k", tp) for i in range(400)])
    workers: list[Task] = tasks(s.take_ready(0))
    assert len(workers) == 2
    last_start = dict.fromkeys(range(4), 0)
    longest_wait = 0
    step = 0
    while workers:
        step += 1
        task = workers.pop(0)
        following, _ = s.succeeded_next(task.work_id, 0)
        started = [following] if following is not None else tasks(s.take_ready(0))
        for t in started:
            last_start[t.record.partition] = step
        workers.extend(started)
        waiting = [
            p
            for p in range(4)
            if s.pending([parts[p]]) and p not in {t.record.partition for t in workers}
        ]
        for p in waiting:
            longest_wait = max(longest_wait, step - last_start[p])
    assert s.counters.succeeded == 1600
    assert longest_wait <= 3 * CHAIN_MAX  # uncapped chains: about 800


def test_succeeded_all_ignores_abandoned_and_not_running_records() -> None:
    s = scheduler(max_attempts=3)
    s.assign(TP1, OffsetAndMetadata(0))
    s.offer(TP, [rec(0, b"a"), rec(1, b"b")])
    s.offer(TP1, [rec(0, b"a", TP1)])
    started = tasks(s.take_ready(0))
    by_place = {(t.record.partition, t.record.offset): t.work_id for t in started}
    s.failed(by_place[(0, 1)], RuntimeError(), 0)  # waiting for a retry: not running
    s.remove([TP1])  # its record is abandoned
    counted = s.succeeded_all([by_place[(0, 0)], by_place[(0, 1)], by_place[(1, 0)], 999])
    assert counted == 1
    assert s.running() == 0 and s.counters.succeeded == 1
    assert s.commit_offsets()[TP].offset == 1  # offset 1 still incomplete


def test_null_keys_are_each_their_own_key() -> None:
    s = scheduler()
    s.offer(TP, [rec(0, None), rec(1, None), rec(2, b"k"), rec(3, b"k")])
    assert [t.record.offset for t in tasks(s.take_ready(0))] == [0, 1, 2]


def test_a_key_queue_that_emptied_serves_the_next_key_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An emptied key queue is kept for the next key whose record waits (fewer objects for
    the garbage collector), at most SPARE_QUEUES of them, and holds nothing of its last key."""
    monkeypatch.setattr(scheduler_module, "SPARE_QUEUES", 1)
    s = scheduler()
    s.offer(TP, [rec(0, b"a"), rec(1, b"a"), rec(2, b"c"), rec(3, b"c")])
    first = tasks(s.take_ready(0))
    assert [t.record.offset for t in first] == [0, 2]
    s.succeeded_all([t.work_id for t in first])  # 1 and 3 leave their queues: both empty
    second = tasks(s.take_ready(0))
    assert [t.record.offset for t in second] == [1, 3]
    s.succeeded_all([t.work_id for t in second])  # both queues emptied and are let go
    assert len(s._spare_queues) == 1  # the bound
    s.offer(TP, [rec(4, b"b"), rec(5, b"b"), rec(6, b"a"), rec(7, b"b"), rec(8, b"a")])
    started: list[int] = []
    while len(started) < 5:
        batch = tasks(s.take_ready(0))
        assert batch
        started += [t.record.offset for t in batch]
        s.succeeded_all([t.work_id for t in batch])
    assert started == [4, 6, 5, 8, 7]
    assert len(s._spare_queues) == 1


def test_partition_order_runs_one_record_per_partition() -> None:
    s = scheduler(ordering="partition")
    s.assign(TP1, OffsetAndMetadata(0))
    s.offer(TP, [rec(0, b"a"), rec(1, b"b")])
    s.offer(TP1, [rec(0, b"a", TP1), rec(1, b"b", TP1)])
    started = tasks(s.take_ready(0))
    assert sorted((t.record.partition, t.record.offset) for t in started) == [(0, 0), (1, 0)]
    assert s.take_ready(0) == []
    s.succeeded(started[0].work_id)
    (nxt,) = tasks(s.take_ready(0))
    assert (nxt.record.partition, nxt.record.offset) == (started[0].record.partition, 1)


def test_unordered_runs_up_to_the_bounds() -> None:
    s = scheduler(ordering="unordered", max_concurrency=8, max_in_flight_per_partition=3)
    s.assign(TP1, OffsetAndMetadata(0))
    s.offer(TP, [rec(i, b"same") for i in range(10)])
    s.offer(TP1, [rec(i, b"same", TP1) for i in range(10)])
    started = tasks(s.take_ready(0))
    per_partition = defaultdict(int)
    for t in started:
        per_partition[t.record.partition] += 1
    assert per_partition == {0: 3, 1: 3}
    s = scheduler(ordering="unordered", max_concurrency=4)
    s.offer(TP, [rec(i, None) for i in range(10)])
    assert len(s.take_ready(0)) == 4 and s.running() == 4


def test_out_of_order_completion_commits_the_lowest_incomplete_with_the_map() -> None:
    s = scheduler()
    s.offer(TP, [rec(i, bytes([i])) for i in range(6)])
    started = {t.record.offset: t.work_id for t in tasks(s.take_ready(0))}
    for offset in (1, 2, 4):
        s.succeeded(started[offset])
    offsets = s.commit_offsets()
    assert offsets[TP].offset == 0
    decoded = om.decode(offsets[TP].metadata, 0)
    assert decoded is not None and decoded.ranges == ((1, 3), (4, 5))
    s.committed(offsets)
    assert s.commit_offsets() == {}  # nothing changed since
    s.succeeded(started[0])
    assert s.commit_offsets()[TP].offset == 3


def test_retry_backoff_doubles_to_its_cap_and_only_the_key_waits() -> None:
    s = scheduler(max_attempts=6, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    s.offer(TP, [rec(0, b"poison"), rec(1, b"poison"), rec(2, b"other"), rec(3, b"other")])
    now = 0
    (poison, other) = tasks(s.take_ready(now))
    assert (poison.record.offset, other.record.offset) == (0, 2)
    backoffs = []
    for attempt in range(1, 6):
        decision = s.failed(poison.work_id, RuntimeError("boom"), now)
        assert isinstance(decision, RetryScheduled) and decision.attempt == attempt
        backoffs.append(decision.backoff_ms)
        # the other key goes on while the poison key waits
        if attempt == 1:
            s.succeeded(other.work_id)
            assert [t.record.offset for t in tasks(s.take_ready(now))] == [3]
        assert s.take_ready(decision.retry_at_ms - 1) == []  # not one millisecond early
        now = decision.retry_at_ms
        assert s.next_due_ms() == now
        (again,) = tasks(s.take_ready(now))
        assert (again.work_id, again.attempt) == (poison.work_id, attempt + 1)
    assert backoffs == [100, 200, 400, 800, 1000]


def test_jitter_stays_within_a_fifth() -> None:
    for value in (0.0, 0.999):
        s = WorkScheduler(WorkConfig(retry_backoff_ms=100), lambda v=value: v)
        s.assign(TP, OffsetAndMetadata(0))
        s.offer(TP, [rec(0, b"k")])
        (task,) = tasks(s.take_ready(0))
        decision = s.failed(task.work_id, RuntimeError(), 0)
        assert isinstance(decision, RetryScheduled)
        assert 80 <= decision.backoff_ms <= 120


def test_a_dead_letter_completes_the_record_only_when_acknowledged() -> None:
    s = scheduler(max_attempts=2, dead_letters=True)
    s.offer(TP, [rec(0, b"k"), rec(1, b"k")])
    (task,) = tasks(s.take_ready(0))
    s.failed(task.work_id, ValueError("bad"), 0)
    (retry,) = tasks(s.take_ready(1000))
    decision = s.failed(retry.work_id, ValueError("still bad"), 1000)
    assert isinstance(decision, DeadLetterDue)
    letter = decision.dead_letter
    assert (letter.attempts, letter.error_type, letter.error_message, letter.send) == (
        2,
        "ValueError",
        "still bad",
        1,
    )
    assert s.take_ready(1000) == []  # its key waits for the dead letter
    assert s.commit_offsets()[TP].offset == 0
    retry_at = s.dead_letter_failed(letter.work_id, 1000)
    assert retry_at == 1100
    assert s.take_ready(1099) == []
    (again,) = s.take_ready(1100)
    assert isinstance(again, DeadLetter) and again.send == 2
    assert s.dead_lettered(letter.work_id)
    (nxt,) = tasks(s.take_ready(1100))
    assert nxt.record.offset == 1
    assert s.commit_offsets()[TP].offset == 1
    assert s.counters.dead_lettered == 1


def test_without_dead_letters_stop_holds_the_partition_and_skip_moves_on() -> None:
    s = scheduler(max_attempts=1)
    s.assign(TP1, OffsetAndMetadata(0))
    s.offer(TP, [rec(0, b"k"), rec(1, b"j")])
    s.offer(TP1, [rec(0, b"k", TP1)])
    started = tasks(s.take_ready(0))
    first = next(t for t in started if t.record.partition == 0 and t.record.offset == 0)
    decision = s.failed(first.work_id, KeyError("x"), 0)
    assert isinstance(decision, PartitionStopped)
    assert decision.stopped.offset == 0 and decision.stopped.error_type == "KeyError"
    for t in started:
        if t is not first:
            s.succeeded(t.work_id)
    s.offer(TP, [rec(2, b"z")])
    assert s.take_ready(0) == []  # the stopped partition starts nothing
    assert s.commit_offsets()[TP].offset == 0  # nothing lost
    assert s.fetch_pauses()[TP] is PauseReason.STOPPED
    assert s.snapshot(0).stopped[0].partition == TP
    s = scheduler(max_attempts=1, on_failure="skip")
    s.offer(TP, [rec(0, b"k")])
    (task,) = tasks(s.take_ready(0))
    assert isinstance(s.failed(task.work_id, KeyError("x"), 0), RecordSkipped)
    assert s.commit_offsets()[TP].offset == 1 and s.counters.abandoned == 1


def test_back_pressure_when_the_map_could_outgrow_the_limit_never_drops_it() -> None:
    limit = 64
    s = scheduler(
        ordering="unordered",
        offset_metadata_max_bytes=limit,
        max_concurrency=4,
        max_in_flight_per_partition=2000,
    )
    s.offer(TP, [rec(i, None) for i in range(2000)])
    first = tasks(s.take_ready(0))
    stuck = first[0]
    assert stuck.record.offset == 0
    batch = first[1:]
    started = len(first)
    completed_alternate = 0
    # complete every other record after the stuck one (the others wait for a retry far
    # away): the map grows with each
    for _ in range(5000):
        for t in batch:
            if t.record.offset % 2 == 0:
                s.succeeded(t.work_id)
                completed_alternate += 1
            else:
                s.failed(t.work_id, RuntimeError(), 0)
        offsets = s.commit_offsets(force=True)
        assert TP in offsets and len(offsets[TP].metadata) <= limit
        batch = tasks(s.take_ready(0))
        started += len(batch)
        if not batch:
            break
    assert 0 < started < 2000
    assert [p.reason for p in s.snapshot(0).paused] == [PauseReason.OFFSET_MAP_FULL]
    assert s.counters.offset_map_full == 1  # began holding once, however often asked
    assert not tasks(s.take_ready(0)) and s.counters.offset_map_full == 1
    # the map that was committed lists every completed record
    decoded = om.decode(s.commit_offsets(force=True)[TP].metadata, 0)
    assert decoded is not None and decoded.completed_count == completed_alternate
    # once the stuck record completes, work goes on
    s.succeeded(stuck.work_id)
    assert tasks(s.take_ready(0))


def test_records_completed_in_the_committed_map_are_skipped() -> None:
    s = WorkScheduler(WorkConfig(), half)
    metadata = om.encode_ranges(10, [(11, 13), (14, 15)])
    result = s.assign(TP, OffsetAndMetadata(10, metadata))
    assert result.inherited_completed == 3 and result.map_error is None
    assert s.offer(TP, [rec(o, bytes([o])) for o in range(10, 16)]) == 3
    assert [t.record.offset for t in tasks(s.take_ready(0))] == [10, 13, 15]
    assert s.counters.skipped_completed == 3


def test_an_unreadable_map_is_reported_and_its_records_handled() -> None:
    s = WorkScheduler(WorkConfig(), half)
    result = s.assign(TP, OffsetAndMetadata(10, "KAP1R!!!!"))
    assert result.map_error is not None and result.map_error.partition == 0
    assert s.offer(TP, [rec(o, None) for o in range(10, 13)]) == 3


def test_revocation_stops_starts_waits_for_running_and_ignores_late_results() -> None:
    s = scheduler(max_attempts=3)
    s.assign(TP1, OffsetAndMetadata(0))
    s.offer(TP, [rec(0, b"a"), rec(1, b"b"), rec(2, b"c")])
    s.offer(TP1, [rec(0, b"a", TP1)])
    started = tasks(s.take_ready(0))
    on_tp = [t for t in started if t.record.partition == 0]
    s.failed(on_tp[0].work_id, RuntimeError(), 0)  # waiting for a retry
    s.begin_revoke([TP])
    s.offer(TP, [rec(3, b"d")])
    assert s.take_ready(10_000) == []  # nothing of TP starts, not even the retry
    assert s.revoke_pending([TP]) == 2  # the two running; the retrying one is not awaited
    s.succeeded(on_tp[1].work_id)
    assert s.revoke_pending([TP]) == 1
    offsets = s.commit_offsets([TP])
    assert offsets[TP].offset == 0  # the retrying record is handed over incomplete
    assert s.remove([TP]) == 2
    assert not s.succeeded(on_tp[2].work_id)  # a late result of a revoked record
    assert s.assignment() == {TP1}


def test_fetch_pauses_when_the_buffer_is_full() -> None:
    s = scheduler(max_buffered_per_partition=3, max_concurrency=1)
    s.offer(TP, [rec(i, b"k") for i in range(4)])
    assert s.fetch_pauses() == {TP: PauseReason.BUFFER_FULL}
    s.take_ready(0)
    assert s.fetch_pauses() == {TP: PauseReason.BUFFER_FULL}
    s = scheduler(max_uncommitted_per_partition=3, max_concurrency=8)
    s.offer(TP, [rec(i, None) for i in range(3)])
    for t in tasks(s.take_ready(0))[1:]:
        s.succeeded(t.work_id)
    assert s.fetch_pauses() == {TP: PauseReason.WINDOW_FULL}


def test_bad_options_name_themselves() -> None:
    with pytest.raises(ConfigError, match="ordering"):
        WorkConfig(ordering="random")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_attempts"):
        WorkConfig(max_attempts=0)
    with pytest.raises(ConfigError, match="offset_metadata_max_bytes"):
        WorkConfig(offset_metadata_max_bytes=10)


def _one_by_one(s: WorkScheduler, now_ms: int) -> list[tuple[TopicPartition, int]]:
    """What take_ready starts of new records, as it did before it started them in chunks:
    one record per partition in turn, checking the map's bound before each (the reference;
    no retries are due in the cases below). Returns (partition, offset) in start order."""
    out: list[tuple[TopicPartition, int]] = []
    config = s.config
    limit = config.max_concurrency
    if s._running >= limit or not s._partitions:
        return out
    parts = list(s._partitions.values())
    n = len(parts)
    s._turn = (s._turn + 1) % n
    progress = True
    while progress and s._running < limit:
        progress = False
        for k in range(n):
            part = parts[(s._turn + k) % n]
            if not part.ready or part.revoking or part.stopped is not None:
                continue
            if part.in_flight >= config.max_in_flight_per_partition:
                continue
            assert part.window is not None
            if part.window.size_bound(part.in_flight + 1) > config.offset_metadata_max_bytes:
                if not part.map_full:
                    part.map_full = True
                    s.counters.offset_map_full += 1
                # the record at the base starts anyway if it is ready (searched once per base, and
                # whenever nothing of the partition is in flight)
                base = part.window.base
                at_base = [r for r in part.ready if r.offset == base]
                if (part.base_searched == base and part.in_flight) or not at_base:
                    part.base_searched = base
                    continue
                part.base_searched = base
                record = at_base[0]
                part.ready.remove(record)
            else:
                part.map_full = False
                record = part.ready.popleft()
            work = _Work(next(s._ids), record, part, s._key_of(record))
            part.buffered -= 1
            part.in_flight += 1
            part.running += 1
            s._running += 1
            work.started_ms = now_ms
            s._works[work.id] = work
            s.counters.started += 1
            out.append((part.tp, work.record.offset))
            progress = True
            if s._running >= limit:
                break
    return out


@given(
    ordering=st.sampled_from(["key", "partition", "unordered"]),
    partitions=st.integers(1, 4),
    concurrency=st.integers(1, 40),
    per_partition=st.integers(0, 30),
    map_limit=st.sampled_from([40, 48, 64, 4096]),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=150, deadline=None)
def test_take_ready_starts_what_starting_one_by_one_in_turn_would(
    ordering: str,
    partitions: int,
    concurrency: int,
    per_partition: int,
    map_limit: int,
    seed: int,
) -> None:
    rng = random.Random(seed)
    tps = [TopicPartition("orders", p) for p in range(partitions)]
    chunked, reference = (
        WorkScheduler(
            WorkConfig(
                ordering=ordering,  # type: ignore[arg-type]
                max_concurrency=concurrency,
                max_in_flight_per_partition=per_partition,
                offset_metadata_max_bytes=map_limit,
            ),
            half,
        )
        for _ in range(2)
    )
    for s in (chunked, reference):
        for tp in tps:
            s.assign(tp, OffsetAndMetadata(0))
    offsets = dict.fromkeys(tps, 0)
    running: list[tuple[TopicPartition, int]] = []
    for _ in range(30):
        for tp in tps:
            n = rng.randint(0, 25)
            keys = [b"a", b"b", b"c", None]
            batch = [rec(offsets[tp] + i, rng.choice(keys), tp) for i in range(n)]
            offsets[tp] += n
            chunked.offer(tp, batch)
            reference.offer(tp, batch)
        started = tasks(chunked.take_ready(0))
        expected = _one_by_one(reference, 0)
        assert sorted((t.record.topic, t.record.partition, t.record.offset) for t in started) == (
            sorted((tp.topic, tp.partition, o) for tp, o in expected)
        )
        assert chunked.counters == reference.counters
        assert chunked.running() == reference.running()
        running += expected
        # complete a random part of what runs, in any order, in both
        rng.shuffle(running)
        cut = rng.randint(0, len(running))
        done, running = running[:cut], running[cut:]
        for tp, offset in done:
            for s in (chunked, reference):
                work = next(
                    w for w in s._works.values() if w.owner.tp == tp and w.record.offset == offset
                )
                assert s.succeeded(work.id)
    assert reference.counters.started > 0


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_partition_its_map_holds_back_still_starts_its_lowest_record(seed: int) -> None:
    """Key ordering, skewed keys: records complete out of order and the map reaches the
    limit while nothing of the partition is in flight, the record at the base at the end
    of the ready queue (released there by its key's last completion). It still starts, so
    the partition never waits for a completion nothing can bring; no commit outgrows the
    limit. (Under partition and unordered ordering the ready queue is in offset order: the
    base's record is at its head.)"""
    rnd = random.Random(seed)
    limit = 120
    s = scheduler(
        offset_metadata_max_bytes=limit,
        max_concurrency=64,
        max_buffered_per_partition=100_000,
    )
    n = 4000
    keys = [b"k%d" % min(rnd.randrange(400), rnd.randrange(400)) for _ in range(n)]
    offered = 0
    handled: list[int] = []
    for turn in range(20 * n):
        if offered < n and s.pending([TP]) < 400:
            s.offer(TP, [rec(i, keys[i]) for i in range(offered, offered + 200)])
            offered += 200
        started = tasks(s.take_ready(0))
        rnd.shuffle(started)  # handlers end in any order
        for task in started:
            assert s.succeeded(task.work_id)
            handled.append(task.record.offset)
        if turn % 3 == 0:
            offsets = s.commit_offsets()
            assert all(len(o.metadata) <= limit for o in offsets.values())
            s.committed(offsets)
        if len(handled) == n:
            break
    assert sorted(handled) == list(range(n))
    assert s.commit_offsets(force=True)[TP] == OffsetAndMetadata(n)
    assert s.counters.offset_map_full >= 1  # the limit was reached on the way


def _skewed_keys(rnd: random.Random, n: int, hot: int) -> list[bytes | None]:
    """``n`` keys of ``hot`` distinct ones, the low ones far more often (the smaller of two
    uniform draws), one in ten null."""
    return [
        None if rnd.random() < 0.1 else b"k%d" % min(rnd.randrange(hot), rnd.randrange(hot))
        for _ in range(n)
    ]


def _drive(
    s: WorkScheduler,
    rnd: random.Random,
    records: list[ConsumerRecord],
    steps: int,
    completed: Counter[int],
    *,
    fail_rate: float,
    run_max: int = 0,
    commit_every: int = 0,
    attempted: set[int] | None = None,
) -> list[Task]:
    """Offer ``records`` in random slices and run what starts, for ``steps`` steps or until
    nothing is pending; returns the tasks still running.

    Handlers end in any order. An attempt fails with ``fail_rate``; the scheduler's policy
    says what follows (a retry, a dead letter or a skip). With ``run_max``, half of the
    successes go through ``succeeded_next``: the run it starts is run in turn, as a worker
    does, and its last record reports later. Dead letters are produced in any order, three
    in ten failing and produced again. With ``commit_every``, a commit every that many
    steps. ``completed`` counts each record's completions (handled, dead-lettered or
    skipped); ``attempted`` gets the records whose handler ran."""
    offered = 0
    running: list[Task] = []
    letters: list[DeadLetter] = []
    now = 0

    def handled(record: ConsumerRecord) -> None:
        completed[record.offset] += 1
        if attempted is not None:
            attempted.add(record.offset)

    for step in range(steps):
        if offered < len(records) and rnd.random() < 0.5:
            size = rnd.randint(1, 40)
            s.offer(TP, records[offered : offered + size])
            offered += size
        for item in s.take_ready(now):
            if isinstance(item, Task):
                running.append(item)
            else:
                letters.append(item)
        rnd.shuffle(running)
        for _ in range(rnd.randint(0, len(running))):
            task = running.pop()
            if rnd.random() < fail_rate:
                if attempted is not None:
                    attempted.add(task.record.offset)
                decision = s.failed(task.work_id, RuntimeError("x"), now)
                assert decision is not None
                if isinstance(decision, DeadLetterDue):
                    letters.append(decision.dead_letter)
                elif isinstance(decision, RecordSkipped):
                    completed[task.record.offset] += 1
            elif run_max and rnd.random() < 0.5:
                handled(task.record)
                following, _ = s.succeeded_next(task.work_id, now, run_max)
                while following is not None and following.run_next is not None:
                    handled(following.record)  # settled by the outcome of a later one
                    following = following.run_next
                if following is not None:
                    running.append(following)  # the run's last: it reports later
            else:
                assert s.succeeded(task.work_id)
                handled(task.record)
        rnd.shuffle(letters)
        for _ in range(rnd.randint(0, len(letters))):
            letter = letters.pop()
            if rnd.random() < 0.3:
                assert s.dead_letter_failed(letter.work_id, now) is not None
            else:
                assert s.dead_lettered(letter.work_id)
                completed[letter.record.offset] += 1
        now += rnd.randint(0, 3)
        if commit_every and step % commit_every == 0:
            s.committed(s.commit_offsets())
        if offered >= len(records) and not running and not letters and not s.pending():
            break
    return running


@given(
    ordering=st.sampled_from(["key", "partition", "unordered"]),
    hot=st.integers(1, 60),
    n=st.integers(1, 600),
    concurrency=st.integers(1, 48),
    per_partition=st.integers(0, 40),
    map_limit=st.sampled_from([40, 64, 120, 4096]),
    fail_rate=st.sampled_from([0.0, 0.05, 0.3]),
    run_max=st.sampled_from([1, 8]),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=200, deadline=None)
def test_every_record_completes_whatever_the_order_failures_and_limits(
    ordering: str,
    hot: int,
    n: int,
    concurrency: int,
    per_partition: int,
    map_limit: int,
    fail_rate: float,
    run_max: int,
    seed: int,
) -> None:
    """Liveness: handlers that end in any order, some attempts failing (retried), runs of a
    key started by ``succeeded_next``, commits now and then, a tight map limit and skewed
    keys: every record completes once, in a bounded number of steps, and the last commit
    is the end offset."""
    rnd = random.Random(seed)
    s = scheduler(
        ordering=ordering,
        max_concurrency=concurrency,
        max_in_flight_per_partition=per_partition,
        offset_metadata_max_bytes=map_limit,
        max_attempts=1000,
        retry_backoff_ms=1,
        retry_backoff_max_ms=4,
        max_buffered_per_partition=100_000,
    )
    keys = _skewed_keys(rnd, n, hot)
    done: Counter[int] = Counter()
    left = _drive(
        s,
        rnd,
        [rec(i, keys[i]) for i in range(n)],
        50 * n + 1000,
        done,
        fail_rate=fail_rate,
        run_max=run_max,
        commit_every=7,
    )
    assert not left and s.counters.succeeded == n, (s.counters, s.snapshot(0))
    assert sorted(done) == list(range(n)) and set(done.values()) == {1}
    assert s.commit_offsets(force=True)[TP].offset == n


@given(
    ordering=st.sampled_from(["key", "partition", "unordered"]),
    hot=st.integers(1, 40),
    n=st.integers(1, 400),
    concurrency=st.integers(1, 32),
    map_limit=st.sampled_from([48, 120, 4096]),
    fail_rate=st.sampled_from([0.0, 0.2]),
    steps=st.integers(0, 60),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=200, deadline=None)
def test_a_clean_hand_over_hands_no_completed_record_to_the_next_owner(
    ordering: str,
    hot: int,
    n: int,
    concurrency: int,
    map_limit: int,
    fail_rate: float,
    steps: int,
    seed: int,
) -> None:
    """One owner works for a while, then the partition is revoked: no new starts, the
    running records end, the commit (offset and map) is taken and the partition removed; a
    new owner assigned from that commit reads from its offset and finishes. Every record is
    completed, and none the first owner completed is even tried by the second (records
    waiting for a retry at the revocation were not completed: the new owner handles them)."""
    rnd = random.Random(seed)
    options: dict[str, object] = dict(
        ordering=ordering,
        max_concurrency=concurrency,
        offset_metadata_max_bytes=map_limit,
        max_attempts=1000,
        retry_backoff_ms=1,
        retry_backoff_max_ms=4,
    )
    keys = _skewed_keys(rnd, n, hot)
    records = [rec(i, keys[i]) for i in range(n)]
    first = scheduler(**options)
    completed_first: Counter[int] = Counter()
    running = _drive(first, rnd, records, steps, completed_first, fail_rate=fail_rate)
    first.begin_revoke([TP])
    assert not tasks(first.take_ready(10**6))  # nothing starts once revoking
    rnd.shuffle(running)
    for task in running:  # the revocation waits for the running ones
        if rnd.random() < fail_rate:
            first.failed(task.work_id, RuntimeError("x"), 0)
        elif first.succeeded(task.work_id):
            completed_first[task.record.offset] += 1
    assert first.revoke_pending([TP]) == 0
    commit = first.commit_offsets([TP], force=True).get(TP, OffsetAndMetadata(0))
    assert len(commit.metadata) <= map_limit
    first.remove([TP])

    second = WorkScheduler(WorkConfig(**options), half)  # type: ignore[arg-type]
    second.assign(TP, commit)
    completed_second: Counter[int] = Counter()
    attempted_second: set[int] = set()
    left = _drive(
        second,
        rnd,
        records[commit.offset :],
        100 * n + 100,
        completed_second,
        fail_rate=fail_rate,
        attempted=attempted_second,
    )
    assert not left and second.pending() == 0
    assert not attempted_second & completed_first.keys()
    assert completed_first.keys() | completed_second.keys() == set(range(n))
    assert set(completed_first.values()) | set(completed_second.values()) <= {1}
    assert second.commit_offsets(force=True)[TP].offset == n


@given(
    ordering=st.sampled_from(["key", "partition", "unordered"]),
    policy=st.sampled_from(["dead_letter", "skip"]),
    hot=st.integers(1, 40),
    n=st.integers(1, 300),
    concurrency=st.integers(1, 32),
    map_limit=st.sampled_from([40, 120, 4096]),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=200, deadline=None)
def test_every_record_completes_once_through_dead_letters_or_skips(
    ordering: str, policy: str, hot: int, n: int, concurrency: int, map_limit: int, seed: int
) -> None:
    """Liveness with the failure policies: attempts fail often (two attempts a record),
    dead letters are produced or fail and are produced again, in any order, or failed
    records are skipped: every record completes exactly once (handled, dead-lettered or
    skipped), and the last commit is the end offset."""
    rnd = random.Random(seed)
    s = scheduler(
        ordering=ordering,
        max_concurrency=concurrency,
        offset_metadata_max_bytes=map_limit,
        max_attempts=2,
        retry_backoff_ms=1,
        retry_backoff_max_ms=4,
        dead_letters=policy == "dead_letter",
        on_failure="skip",
    )
    keys = _skewed_keys(rnd, n, hot)
    completed: Counter[int] = Counter()
    left = _drive(
        s,
        rnd,
        [rec(i, keys[i]) for i in range(n)],
        60 * n + 1000,
        completed,
        fail_rate=0.4,
        commit_every=5,
    )
    assert not left and sorted(completed) == list(range(n)), (s.counters, s.snapshot(0))
    assert set(completed.values()) == {1}
    assert s.commit_offsets(force=True)[TP].offset == n
