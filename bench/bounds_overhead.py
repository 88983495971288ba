"""Cost of protocol.bounds' frame check next to kio's decode (issue 10).

Run: python bench/bounds_overhead.py   (from the repository root)
Prints µs per call for the check alone and for the full decode_response (which includes the
check), on Fetch v17 responses (8 partitions x 1 MiB of records; 1,000 partitions x 1 KiB) and a
Metadata v13 response
(50 topics x 100 partitions = 5,000 partitions, 3 replicas each).
"""

from __future__ import annotations

import datetime
import timeit
import uuid

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from kafka_actors.protocol.wire.apis import response_type
from kafka_actors.protocol.wire.bounds import check_response
from kafka_actors.protocol.wire.framing import (
    decode_response,
    encode_response,
    response_header_type,
)


def fetch_frame(partitions: int = 8, record_bytes: int = 1 << 20) -> tuple[bytes, type]:
    cls = response_type(1, 17)
    mod = __import__(cls.__module__, fromlist=["x"])
    parts = tuple(
        mod.PartitionData(
            partition_index=i32(p),
            error_code=ErrorCode.none,
            high_watermark=i64(1000),
            last_stable_offset=i64(1000),
            log_start_offset=i64(0),
            aborted_transactions=(),
            preferred_read_replica=i32(-1),
            records=b"\x01" * record_bytes,
        )
        for p in range(partitions)
    )
    topic = mod.FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=parts)
    body = cls(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=i32(0),
        responses=(topic,),
    )
    return encode_response(body, correlation_id=1)[4:], cls


def metadata_frame() -> tuple[bytes, type]:
    cls = response_type(3, 13)
    mod = __import__(cls.__module__, fromlist=["x"])
    topics = tuple(
        mod.MetadataResponseTopic(
            error_code=ErrorCode.none,
            name=f"topic-{t}",
            topic_id=uuid.uuid4(),
            partitions=tuple(
                mod.MetadataResponsePartition(
                    error_code=ErrorCode.none,
                    partition_index=i32(p),
                    leader_id=i32(p % 3),
                    replica_nodes=(i32(0), i32(1), i32(2)),
                    isr_nodes=(i32(0), i32(1), i32(2)),
                )
                for p in range(100)
            ),
        )
        for t in range(50)
    )
    brokers = tuple(
        mod.MetadataResponseBroker(node_id=i32(b), host=f"broker-{b}", port=i32(9092))
        for b in range(3)
    )
    body = cls(
        throttle_time=datetime.timedelta(0),
        brokers=brokers,
        cluster_id="c",
        controller_id=i32(0),
        topics=topics,
        error_code=ErrorCode.none,
    )
    return encode_response(body, correlation_id=1)[4:], cls


def measure(name: str, frame: bytes, cls: type) -> None:
    header = response_header_type(cls)
    n = 300  # the fastest single call of many: robust on a loaded machine

    def check() -> None:
        check_response(frame, header, cls)

    def decode() -> None:
        decode_response(frame, cls)

    check_us = min(timeit.repeat(check, number=1, repeat=n)) * 1e6
    decode_us = min(timeit.repeat(decode, number=1, repeat=n)) * 1e6
    print(
        f"{name}: frame {len(frame):,} B; check {check_us:,.1f} µs; decode_response (with check) "
        f"{decode_us:,.1f} µs; check is {check_us / decode_us:.0%} of the decode "
        f"({check_us / (decode_us - check_us):.0%} of kio's part)"
    )


if __name__ == "__main__":
    measure("Fetch v17, 8 x 1 MiB", *fetch_frame())
    measure("Fetch v17, 1,000 partitions x 1 KiB", *fetch_frame(1000, 1024))
    measure("Metadata v13, 5,000 partitions", *metadata_frame())
