"""AsyncParallelConsumer against a real broker: coroutine handlers on the event loop.

* key order under random latencies with 1,200 keys at max_concurrency 64: no key ever has
  two records in flight, every key's records in offset order, handlers did run concurrently
  and never more than max_concurrency at once, committed = end offsets after close;
* a record failing twice is retried (its key's next record waits for it, other keys go on),
  then completes; committed = end;
* a second member joining and leaving (both AsyncParallelConsumers on one loop, classic
  eager and KIP-848): every record handled once, none started twice, committed = end;
* close(timeout) with a handler still running commits the offset of that record with the
  map of the completed ones above it, and the next consumer handles only that record;
* stop() from another thread ends run().
"""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest

from kafka_actors import AsyncParallelConsumer
from kafka_actors.parallel import offset_map
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.testing import KafkaBroker
from tests.parallel.faults import committed, member_config, produce_keyed, random_keyed_items
from tests.parallel.test_show_broker import config, produce

pytestmark = pytest.mark.broker


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_key_order_under_random_latency_with_1200_keys(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=4)
    items = random_keyed_items(7)
    seq = Counter(key for key, _, _ in items)  # values per key
    produce(kafka_broker.bootstrap_servers, topic, items)
    in_flight: set[bytes] = set()
    overlaps: list[bytes] = []
    handled: dict[bytes, list[int]] = defaultdict(list)
    running = [0, 0]  # now, most

    async def handle(record: ConsumerRecord) -> None:
        key = record.key
        assert key is not None and record.value is not None
        if key in in_flight:
            overlaps.append(key)
        in_flight.add(key)
        running[0] += 1
        running[1] = max(running)
        await asyncio.sleep(random.random() * 0.004)
        running[0] -= 1
        in_flight.discard(key)
        handled[key].append(int(record.value))

    group = f"g-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with AsyncParallelConsumer(
            config(kafka_broker.bootstrap_servers, group), handler=handle, max_concurrency=64
        ) as pc:
            pc.subscribe([topic])
            runner = asyncio.create_task(pc.run())
            await wait_until(lambda: sum(map(len, handled.values())) >= 4000, 120, "4000")
            assert pc.health().oldest_in_flight is None
            pc.stop()
            await runner

    asyncio.run(main())
    assert overlaps == []
    assert 1 < running[1] <= 64
    assert sum(map(len, handled.values())) == 4000
    for key, values in handled.items():
        assert values == list(range(seq[key])), key
    ends: dict[int, int] = defaultdict(int)
    for _, _, partition in items:
        ends[partition] += 1
    got = committed(kafka_broker.bootstrap_servers, group, topic, range(4))
    assert got == {p: (end, "") for p, end in ends.items()}


def test_a_failing_record_is_retried_while_other_keys_go_on(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=1)
    items = [(b"flaky", b"bad", 0), (b"flaky", b"after", 0)]
    items += [(b"other-%d" % i, b"ok", 0) for i in range(30)]
    produce(kafka_broker.bootstrap_servers, topic, items)
    attempts: list[int] = []
    others_at_attempt: list[int] = []
    others: list[int] = []
    after: list[int] = []

    async def handle(record: ConsumerRecord) -> None:
        if record.value == b"bad":
            attempts.append(record.offset)
            others_at_attempt.append(len(others))
            if len(attempts) < 3:
                raise ValueError("not yet")
        elif record.value == b"after":
            after.append(len(attempts))
        else:
            await asyncio.sleep(0.02)
            others.append(record.offset)

    group = f"g-{uuid.uuid4().hex[:8]}"

    async def main() -> dict[str, float]:
        async with AsyncParallelConsumer(
            config(kafka_broker.bootstrap_servers, group),
            handler=handle,
            max_attempts=5,
            retry_backoff_ms=200,
            retry_backoff_max_ms=400,
            max_concurrency=4,
        ) as pc:
            pc.subscribe([topic])
            runner = asyncio.create_task(pc.run())
            await wait_until(lambda: bool(after) and len(others) == 30, 60, "every record")
            pc.stop()
            await runner
            return pc.metrics()

    metrics = asyncio.run(main())
    assert attempts == [0, 0, 0]
    assert after == [3]  # the key's next record after the third (successful) attempt
    assert others_at_attempt[2] > others_at_attempt[0]  # other keys went on meanwhile
    assert metrics["records-retried-total"] == 2
    assert metrics["records-failed-attempts-total"] == 2
    assert committed(kafka_broker.bootstrap_servers, group, topic, [0])[0] == (32, "")


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_member_joining_and_leaving_hands_over_without_handling_twice(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], protocol: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(kafka_broker, partitions=6)
    ends = produce_keyed(bootstrap, topic, 6, 3000, 300)
    group = f"g-{uuid.uuid4().hex[:8]}"
    started: dict[tuple[int, int], int] = defaultdict(int)
    done: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def handler(name: str) -> Callable[[ConsumerRecord], object]:
        async def handle(record: ConsumerRecord) -> None:
            place = (record.partition, record.offset)
            started[place] += 1
            await asyncio.sleep(0.02)
            done[name].append(place)

        return handle

    def member(name: str) -> AsyncParallelConsumer:
        pc = AsyncParallelConsumer(
            member_config(bootstrap, group, protocol), handler=handler(name), max_concurrency=8
        )
        pc.subscribe([topic])
        return pc

    def total() -> int:
        return len({p for places in done.values() for p in places})

    async def main() -> None:
        a = member("a")
        run_a = asyncio.create_task(a.run())
        try:
            await wait_until(lambda: len(done["a"]) >= 400, 120, "a's records")
            b = member("b")
            run_b = asyncio.create_task(b.run())
            await wait_until(lambda: len(done["b"]) >= 300, 120, "b's records")
            b.stop()
            await run_b
            await b.close()  # a clean leave: b's partitions go back to a
            await wait_until(lambda: total() == 3000, 180, "every record")
        finally:
            a.stop()
            await run_a
            await a.close()

    asyncio.run(main())
    b_partitions = {p for p, _ in done["b"]}
    assert b_partitions & {p for p, _ in done["a"][-200:]}  # b's partitions came back to a
    places = [p for name in ("a", "b") for p in done[name]]
    assert len(places) == len(set(places)) == 3000  # none completed twice
    assert max(started.values()) == 1  # the running ones were awaited at each revocation
    assert set(places) == {(p, o) for p, end in ends.items() for o in range(end)}
    got = committed(bootstrap, group, topic, range(6))
    assert got == {p: (end, "") for p, end in ends.items()}


def test_close_commits_the_running_record_with_the_map_above_it(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, [(b"k%d" % i, b"v", 0) for i in range(20)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    first: list[int] = []
    second: list[int] = []

    async def slow_five(record: ConsumerRecord) -> None:
        if record.offset == 5:
            await asyncio.sleep(3600)  # still running at close (cancelled then)
        first.append(record.offset)

    async def record_all(record: ConsumerRecord) -> None:
        second.append(record.offset)

    async def main() -> None:
        pc = AsyncParallelConsumer(config(kafka_broker.bootstrap_servers, group), handler=slow_five)
        pc.subscribe([topic])
        runner = asyncio.create_task(pc.run())
        await wait_until(lambda: len(first) == 19, 60, "19 records handled")
        pc.stop()
        await runner
        await pc.close(timeout=1.0)
        async with AsyncParallelConsumer(
            config(kafka_broker.bootstrap_servers, group), handler=record_all
        ) as again:
            again.subscribe([topic])
            runner = asyncio.create_task(again.run())
            await wait_until(
                lambda: again.metrics()["records-skipped-completed-total"] >= 14, 60, "skips"
            )
            await wait_until(lambda: second == [5], 30, "the incomplete record")
            again.stop()
            await runner

    asyncio.run(main())
    assert second == [5]
    assert committed(kafka_broker.bootstrap_servers, group, topic, [0])[0] == (20, "")


def test_the_map_committed_at_close(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, [(b"k%d" % i, b"v", 0) for i in range(20)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    first: list[int] = []

    async def slow_five(record: ConsumerRecord) -> None:
        if record.offset == 5:
            await asyncio.sleep(3600)
        first.append(record.offset)

    async def main() -> None:
        pc = AsyncParallelConsumer(config(kafka_broker.bootstrap_servers, group), handler=slow_five)
        pc.subscribe([topic])
        runner = asyncio.create_task(pc.run())
        await wait_until(lambda: len(first) == 19, 60, "19 records handled")
        stopper = threading.Thread(target=pc.stop)  # stop() from another thread
        stopper.start()
        await runner
        stopper.join()
        await pc.close(timeout=1.0)

    asyncio.run(main())
    offset, metadata = committed(kafka_broker.bootstrap_servers, group, topic, [0])[0]
    assert offset == 5
    decoded = offset_map.decode(metadata, 5)
    assert decoded is not None and decoded.ranges == ((6, 20),)
