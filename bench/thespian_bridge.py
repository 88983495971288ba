"""Throughput through the Thespian bridge, beside the same consumer polled directly.

Owns: nothing but its own run. Starts ONE Kafka 4.x broker with the testkit, produces
``--records`` records (``--value-size``-byte values, 8 partitions) with confluent-kafka, then
consumes the topic from the beginning to the end, each in a new group (KIP-848):

* ``direct``: ``KafkaConsumer.subscribe`` + ``poll(0.5)`` loop in this process;
* ``bridge simpleSystemBase``: a ``KafkaBridge`` and a counting ``StreamSubscriber`` (demand
  window ``--window`` records) in this process;
* ``bridge multiprocTCPBase``: the same actors, each in its own process (records pickled
  across processes), admin on a free loopback port.

The clock runs from Subscribe (or subscribe()) until the subscriber has counted every record.
Prints records/s and the ratio to ``direct``.

    .venv/bin/python bench/thespian_bridge.py [--records 200000] [--value-size 100]
"""

from __future__ import annotations

import argparse
import socket
import time
from dataclasses import dataclass
from typing import Any

from kafka_actors import log as _log

_log.configure(level="WARNING")

from thespian.actors import ActorSystem  # noqa: E402

from kafka_actors import KafkaConsumer  # noqa: E402
from kafka_actors.protocol.records.decode import ConsumerRecord  # noqa: E402
from kafka_actors.testing.broker import KafkaBroker  # noqa: E402
from kafka_actors.thespian import (  # noqa: E402
    Close,
    Configure,
    KafkaBridge,
    StreamSubscriber,
    Subscribe,
)


@dataclass(frozen=True, slots=True)
class HowMany:
    pass


class Counter(StreamSubscriber):
    window = 5000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.count = 0
        self.touched = 0

    def process(self, records: tuple[ConsumerRecord, ...]) -> None:
        for r in records:
            self.touched += len(r.value or b"") + r.offset
        self.count += len(records)

    def on_other(self, message: Any, sender: Any) -> None:
        if isinstance(message, HowMany):
            self.send(sender, self.count)
        elif isinstance(message, int):
            self.window = message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _config(bootstrap: str, group: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }


def direct(bootstrap: str, topic: str, records: int) -> float:
    with KafkaConsumer(_config(bootstrap, f"direct-{time.monotonic_ns()}")) as consumer:
        start = time.monotonic()
        consumer.subscribe([topic])
        count = 0
        while count < records:
            for r in consumer.poll(0.5):
                count += 1
                _ = len(r.value or b"") + r.offset
        return time.monotonic() - start


def bridge(bootstrap: str, topic: str, records: int, base: str, window: int) -> float:
    caps: dict[str, object] = {}
    if base == "multiprocTCPBase":
        caps = {"Admin Port": _free_port(), "Process Startup Method": "fork"}
    asys = ActorSystem(base, caps, transientUnique=True)
    try:
        b = asys.createActor(KafkaBridge)
        asys.ask(b, Configure(_config(bootstrap, f"bridge-{time.monotonic_ns()}")), 60)
        counter = asys.createActor(Counter)
        asys.tell(counter, window)
        start = time.monotonic()
        asys.ask(b, Subscribe((topic,), counter), 60)
        while True:
            n = asys.ask(counter, HowMany(), 60)
            if isinstance(n, int) and n >= records:
                elapsed = time.monotonic() - start
                break
            asys.listen(0.05)
        asys.ask(b, Close(10.0), 30)
        return elapsed
    finally:
        asys.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--window", type=int, default=5000)
    args = parser.parse_args()
    from confluent_kafka import Producer

    with KafkaBroker() as broker:
        topic = "bench-thespian"
        broker.create_topic(topic, partitions=8)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
        value = b"v" * args.value_size
        for i in range(args.records):
            while True:
                try:
                    producer.produce(topic, key=i.to_bytes(8, "big"), value=value)
                    break
                except BufferError:  # librdkafka's queue is full: let it deliver
                    producer.poll(0.1)
        assert producer.flush(60) == 0
        base_s = direct(broker.bootstrap_servers, topic, args.records)
        rows = [("direct poll()", base_s)]
        for name in ("simpleSystemBase", "multiprocTCPBase"):
            seconds = bridge(broker.bootstrap_servers, topic, args.records, name, args.window)
            rows.append((f"bridge {name}", seconds))
        print(f"{args.records} records of {args.value_size} B, 8 partitions, window {args.window}")
        for name, seconds in rows:
            rate = args.records / seconds
            print(f"{name:28s} {seconds:7.2f} s {rate:12,.0f} records/s  {base_s / seconds:5.2f}x")


if __name__ == "__main__":
    main()
