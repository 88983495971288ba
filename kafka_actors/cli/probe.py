"""``python -m kafka_actors probe``: what a cluster answers, through kafka-actors' own
protocol layer (ApiVersions, metadata, offsets, and the records of one topic, decoded).

Owns: the probe report and the demo records. May touch: the testkit's blocking connection,
the protocol layer, confluent-kafka (only to produce demo data, and only into the embedded
cluster or when asked with ``--produce-demo``).
"""

from __future__ import annotations

from typing import Any

from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import decode_records
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import ApiKey, api_name

__all__ = ["probe", "produce_demo"]


def produce_demo(bootstrap: str, topic: str, count: int) -> None:
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


def probe(bootstrap: str, topic: str, out: Any) -> int:
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
                offsets = lc.request(ApiKey.LIST_OFFSETS, timestamps={tp: rq.EARLIEST_TIMESTAMP})
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
