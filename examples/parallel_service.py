"""An order service handling the records of each partition concurrently with kafka-actors'
``ParallelConsumer``: key-ordered, retried, dead-lettered.

Each "order event" takes ~10 ms to handle (as a call to a database or an HTTP service would),
so a plain poll loop would handle 100 records/s per partition. The service handles up to
``--concurrency`` records at once, one at a time per customer (the record key) and in offset
order for each customer, so a customer's events still apply in sequence. An event that
cannot be parsed fails: it is retried with backoff (only its customer waits), and after
``max_attempts`` it goes to the dead-letter topic with headers saying where it came from and
why. SIGINT/SIGTERM stop the service cleanly (records in flight finish, completed offsets
are committed with the map of completed records above them, the member leaves); it also stops
by itself once every demo record is handled, checks that each customer's events were handled
in order and none twice, and prints a summary with the consumer's health.

It needs a real cluster (the librdkafka mock has no ``offset.metadata.max.bytes`` to read
and no dead-letter acknowledgements worth showing)::

    python examples/parallel_service.py --bootstrap-servers host:9092 --produce-demo
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
import uuid
from collections import defaultdict
from types import FrameType

from kafka_actors import ParallelConsumer
from kafka_actors.protocol.records.decode import ConsumerRecord


def produce(bootstrap: str, topic: str, records: int, customers: int) -> int:
    """``records`` demo order events ``<customer>:<sequence>``, one of them unparsable (the
    poison); returns how many are good."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "log_level": 3})
    seq: dict[int, int] = defaultdict(int)
    for i in range(records):
        customer = i % customers
        if i == records // 2:
            producer.produce(topic, key=b"customer-%d" % customer, value=b"not an order")
            continue
        producer.produce(
            topic, key=b"customer-%d" % customer, value=b"%d:%d" % (customer, seq[customer])
        )
        seq[customer] += 1
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return records - 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster")
    parser.add_argument("--topic", default=f"orders-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--customers", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument(
        "--produce-demo",
        action="store_true",
        help="allow writing --records demo records into --topic",
    )
    args = parser.parse_args()
    if not args.bootstrap_servers:
        parser.error("this example needs a real cluster: pass --bootstrap-servers")
    if not args.produce_demo:
        parser.error(
            f"this example writes {args.records} demo records into {args.topic!r} "
            "of the cluster you named: pass --produce-demo to allow it"
        )
    good = produce(args.bootstrap_servers, args.topic, args.records, args.customers)
    dead_letter_topic = f"{args.topic}.dlq"

    lock = threading.Lock()
    handled: dict[int, list[int]] = defaultdict(list)
    count = [0]

    def handle(record: ConsumerRecord) -> None:
        assert record.value is not None
        customer, sequence = map(int, record.value.split(b":"))  # raises on a bad event
        time.sleep(0.01)  # the order's I/O
        with lock:
            handled[customer].append(sequence)
            count[0] += 1

    config = {
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": f"order-service-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest",
    }
    pc = ParallelConsumer(
        config,
        handler=handle,
        ordering="key",
        max_concurrency=args.concurrency,
        max_attempts=3,
        retry_backoff_ms=100,
        retry_backoff_max_ms=1000,
        dead_letter_topic=dead_letter_topic,
    )

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        pc.stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()

    def watch() -> None:  # stops the demo once every record is handled or dead-lettered
        while count[0] < good or pc.health().dead_letters_sent < 1:
            time.sleep(0.1)
            if time.monotonic() - started > 300:
                break
        pc.stop()

    with pc:
        pc.subscribe([args.topic])
        threading.Thread(target=watch, daemon=True).start()
        pc.run()
        health = pc.health()
        metrics = pc.metrics()
    elapsed = time.monotonic() - started
    in_order = all(seqs == sorted(seqs) for seqs in handled.values())
    twice = count[0] - len({(c, s) for c, seqs in handled.items() for s in seqs})
    print(
        f"{count[0]} of {good} order events handled in {elapsed:.1f} s "
        f"({count[0] / elapsed:.0f}/s with {args.concurrency} at once)"
    )
    print(f"  each customer's events in order: {in_order}")
    print(f"  events handled more than once: {twice}")
    print(
        f"  dead letters sent to {dead_letter_topic}: {health.dead_letters_sent} "
        f"(after {metrics['records-failed-attempts-total']:.0f} failed attempts)"
    )
    print(f"  health at the end: {health.state.value}, in flight {health.in_flight}")
    ok = count[0] == good and in_order and twice == 0 and health.dead_letters_sent == 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
