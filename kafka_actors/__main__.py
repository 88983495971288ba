"""Command line of kafka-actors: ``python -m kafka_actors <command>``.

Owns: argument parsing and the lifetime of what a command starts. May touch: the testkit (to
start the embedded cluster), the protocol layer, confluent-kafka (only to produce demo data).

Commands:

* ``probe [--bootstrap-servers B] [--topic T] [--records N]``: the interim main job. Without
  ``--bootstrap-servers`` it starts the embedded default (librdkafka's in-process mock
  cluster), produces N demo records, then, through kafka-actors' own protocol layer, prints
  the negotiated ApiVersions, the cluster's metadata, the partitions' offsets, and the demo
  records fetched and decoded by our record decoder.
* ``consume --bootstrap-servers B --group G --topic T [--topic T2 ...] [--from-beginning]
  [--max-records N] [--format jsonl|text] [--group-protocol consumer|classic] [--timeout S]``:
  a KafkaConsumer in group G prints the records of the topics one per line (jsonl: topic,
  partition, offset, timestamp, key, value, headers; keys, values and header values as
  base64), commits what it printed as it goes (async after each poll, sync at the end), and
  exits after N records or after S seconds without a record (default 10). Without
  ``--bootstrap-servers`` it starts the embedded mock cluster, produces ``--records`` demo
  records and consumes them from the beginning (KIP-848 group, subscribed by a regex matching
  the topics: what librdkafka's mock serves).
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from kafka_actors.protocol import requests as rq
from kafka_actors.protocol.apis import ApiKey, api_name
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records import decode_records


def _produce_demo(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(
            topic,
            key=f"order-{i % 7}".encode(),
            value=f'{{"order": {i}, "product": "p{i % 5}", "amount": {i * 3 % 101}}}'.encode(),
            headers=[("source", b"kafka-actors-probe")],
        )
    left = producer.flush(30)
    if left:
        raise SystemExit(f"{left} demo records were not delivered")


def _probe(bootstrap: str, topic: str, out: Any) -> int:
    from kafka_actors.testing.client import BlockingKafkaConnection

    with BlockingKafkaConnection.bootstrap(bootstrap, client_id="kafka-actors-probe") as conn:
        print(f"== connected to {conn.node}", file=out)
        print("== ApiVersions (negotiated: ours within the broker's)", file=out)
        for api in ApiKey:
            try:
                version = conn.versions.version_for(api)
            except Exception as exc:  # an API the broker lacks is reported, not fatal
                print(f"  {api_name(api):<24} unsupported ({type(exc).__name__})", file=out)
                continue
            print(f"  {api_name(api):<24} v{version}", file=out)

        metadata = conn.request(ApiKey.METADATA, topics=None)
        print(f"== Metadata v{conn.versions.version_for(ApiKey.METADATA)}", file=out)
        print(f"  cluster_id={metadata.cluster_id} controller={metadata.controller_id}", file=out)
        for broker in metadata.brokers:
            print(f"  broker {broker.node_id} at {broker.host}:{broker.port}", file=out)
        partitions: list[tuple[TopicPartition, int]] = []
        for t in sorted(metadata.topics, key=lambda t: t.name or ""):
            print(f"  topic {t.name} ({len(t.partitions)} partitions)", file=out)
            for p in sorted(t.partitions, key=lambda p: p.partition_index):
                print(f"    partition {p.partition_index} leader={p.leader_id}", file=out)
                if t.name == topic:
                    partitions.append((TopicPartition(topic, p.partition_index), p.leader_id))

        hosts = {b.node_id: (b.host, b.port) for b in metadata.brokers}
        topic_ids = {t.name: t.topic_id for t in metadata.topics if t.name == topic}
        total = 0
        expected = 0
        print(f"== records of {topic}, fetched and decoded by kafka-actors", file=out)
        for tp, leader in partitions:
            host, port = hosts[leader]
            with BlockingKafkaConnection(host, port, client_id="kafka-actors-probe") as lc:
                offsets = lc.request(
                    ApiKey.LIST_OFFSETS, timestamps={tp: rq.EARLIEST_TIMESTAMP}
                )
                start = offsets.topics[0].partitions[0].offset
                fetch = lc.request(
                    ApiKey.FETCH,
                    partitions=[rq.FetchPartition(tp.topic, tp.partition, start, 1 << 20)],
                    max_wait_ms=100,
                    min_bytes=1,
                    max_bytes=4 << 20,
                    topic_ids=topic_ids,
                )
                data = fetch.responses[0].partitions[0]
                decoded = decode_records(
                    data.records or b"", tp.topic, tp.partition, fetch_offset=start
                )
                print(
                    f"  {tp}: log start {start}, high watermark {data.high_watermark}, "
                    f"{len(decoded)} records",
                    file=out,
                )
                for rec in list(decoded)[:3]:
                    print(
                        f"    offset={rec.offset} ts={rec.timestamp} key={rec.key!r} "
                        f"value={rec.value!r} headers={list(rec.headers)}",
                        file=out,
                    )
                total += len(decoded)
                expected += data.high_watermark - start
        print(f"== {total} records decoded", file=out)
    if total != expected:
        print(f"!! expected {expected} records between log start and high watermark", file=out)
        return 1
    return 0


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _format_record(record: Any, fmt: str) -> str:
    if fmt == "jsonl":
        return json.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": _b64(record.key),
                "value": _b64(record.value),
                "headers": [[k, _b64(v)] for k, v in record.headers],
            },
            separators=(",", ":"),
        )
    key = "" if record.key is None else record.key.decode("utf-8", "replace")
    value = "" if record.value is None else record.value.decode("utf-8", "replace")
    return f"{record.topic}-{record.partition}@{record.offset}\t{key}\t{value}"


def _consume(args: argparse.Namespace, out: Any) -> int:
    from kafka_actors import KafkaConsumer, OffsetAndMetadata, TopicPartition

    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "group.protocol": args.group_protocol,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": False,
    }
    printed = 0
    limit = args.max_records
    positions: dict[TopicPartition, OffsetAndMetadata] = {}
    with KafkaConsumer(config) as consumer:
        pattern = getattr(args, "pattern", None)
        if pattern is not None:
            consumer.subscribe(pattern=pattern)
        else:
            consumer.subscribe(list(args.topic))
        idle_since = time.monotonic()
        while limit is None or printed < limit:
            batch = consumer.poll(0.5)
            if not batch:
                if time.monotonic() - idle_since >= args.timeout:
                    break
                continue
            idle_since = time.monotonic()
            for record in batch:
                if limit is not None and printed >= limit:
                    break
                print(_format_record(record, args.format), file=out)
                printed += 1
                tp = TopicPartition(record.topic, record.partition)
                positions[tp] = OffsetAndMetadata(record.offset + 1, "", record.leader_epoch)
            out.flush()
            if positions:
                consumer.commit_async(dict(positions))
        if positions:
            consumer.commit_sync(dict(positions))
    print(f"consumed {printed} records", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_actors")
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser("probe", help="print ApiVersions, metadata and records of a cluster")
    probe.add_argument("--bootstrap-servers", default=None)
    probe.add_argument("--topic", default="kafka-actors-demo")
    probe.add_argument("--records", type=int, default=100)
    consume = sub.add_parser("consume", help="consume topics in a group, one record per line")
    consume.add_argument("--bootstrap-servers", default=None)
    consume.add_argument("--group", default="kafka-actors-demo")
    consume.add_argument("--topic", action="append", default=None)
    consume.add_argument(
        "--records", type=int, default=100, help="demo records (embedded cluster only)"
    )
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-records", type=int, default=None)
    consume.add_argument("--format", choices=("jsonl", "text"), default="text")
    consume.add_argument(
        "--group-protocol", choices=("consumer", "classic"), default="consumer"
    )
    consume.add_argument(
        "--timeout", type=float, default=10.0, help="exit after this many idle seconds"
    )
    args = parser.parse_args(argv)

    if args.command == "consume":
        from kafka_actors.log import configure

        configure(level="WARNING", stream=sys.stderr)  # stdout carries the records only
        if args.topic is None:
            args.topic = ["kafka-actors-demo"]
        if args.bootstrap_servers:
            return _consume(args, sys.stdout)
        from kafka_actors.testing.mock import MockCluster

        with MockCluster(num_brokers=3) as cluster:
            print(f"== embedded mock cluster at {cluster.bootstrap_servers}", file=sys.stderr)
            for topic in args.topic:
                cluster.create_topic(topic, partitions=4)
                _produce_demo(cluster.bootstrap_servers, topic, args.records)
            args.bootstrap_servers = cluster.bootstrap_servers
            args.from_beginning = True
            # librdkafka's mock serves KIP-848 groups subscribed by regex (it aborts on a
            # heartbeat naming topics without a regex field, and drops the connection on our
            # classic JoinGroup): subscribe to a pattern matching exactly the topics.
            args.group_protocol = "consumer"
            args.pattern = "^(" + "|".join(re.escape(t) for t in args.topic) + ")$"
            return _consume(args, sys.stdout)

    if args.command == "probe":
        if args.bootstrap_servers:
            if args.records:
                _produce_demo(args.bootstrap_servers, args.topic, args.records)
            return _probe(args.bootstrap_servers, args.topic, sys.stdout)
        from kafka_actors.testing.mock import MockCluster

        started = time.monotonic()
        with MockCluster(num_brokers=3) as cluster:
            print(
                f"== embedded mock cluster at {cluster.bootstrap_servers} "
                f"(started in {time.monotonic() - started:.2f}s)"
            )
            cluster.create_topic(args.topic, partitions=4)
            _produce_demo(cluster.bootstrap_servers, args.topic, args.records)
            return _probe(cluster.bootstrap_servers, args.topic, sys.stdout)
    return 2


if __name__ == "__main__":
    sys.exit(main())
