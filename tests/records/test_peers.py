"""Cross-check with peers: batches built by aiokafka's (C) and kafka-python's batch builders
decode identically with our decoder and with the peers' own readers; and our builder's
batches are read identically by the peers' readers."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_actors.protocol.records.build import RecordSpec, build_batch
from kafka_actors.protocol.records.decode import CompressionType, TimestampType, decode_records

Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]

PEERS = {
    "aiokafka": ("aiokafka.record.default_records", "aiokafka.record.memory_records"),
    "kafka-python": ("kafka.record.default_records", "kafka.record.memory_records"),
}


def _builder(peer: str) -> Callable[..., Any]:
    return importlib.import_module(PEERS[peer][0]).DefaultRecordBatchBuilder  # type: ignore[no-any-return]


def _peer_read(peer: str, data: bytes, codec: int = 0) -> list[Row]:
    _require_codec(peer, codec)
    memory_records = importlib.import_module(PEERS[peer][1]).MemoryRecords(data)
    rows: list[Row] = []
    while (batch := memory_records.next_batch()) is not None:
        assert batch.validate_crc()
        for r in batch:
            rows.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
    return rows


def _ours(data: bytes) -> list[Row]:
    d = decode_records(data, "t", 0)
    return list(zip(d.offsets, d.timestamps, d.keys, d.values, d.headers, strict=True))


def _require_codec(peer: str, codec: int) -> None:
    """kafka-python needs optional packages for snappy/lz4/zstd (python-snappy, lz4,
    zstandard; pinned in the bench extra, so a missing one fails, it is not skipped);
    aiokafka uses cramjam, a dependency of ours."""
    if peer != "kafka-python" or codec in (CompressionType.NONE, CompressionType.GZIP):
        return
    import kafka.codec

    name = CompressionType(codec).name.lower()
    assert getattr(kafka.codec, f"has_{name}")(), (
        f"kafka-python has no {name} library: install the bench extra"
    )


def _peer_build(peer: str, codec: int, specs: list[RecordSpec], base_offset: int) -> bytes:
    _require_codec(peer, codec)
    builder = _builder(peer)(2, codec, 0, -1, -1, -1, 10**8)
    for i, s in enumerate(specs):
        builder.append(i, s.timestamp, s.key, s.value, list(s.headers))
    batch = bytearray(builder.build())
    batch[0:8] = base_offset.to_bytes(8, "big")  # the broker assigns base offsets
    return bytes(batch)


record = st.builds(
    RecordSpec,
    key=st.none() | st.binary(max_size=200),
    value=st.none() | st.binary(max_size=2000),
    headers=st.lists(
        st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=30)), max_size=3
    ).map(tuple),
    timestamp=st.integers(0, 2**45),
)


@pytest.mark.parametrize("peer", list(PEERS))
@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
@settings(max_examples=40, deadline=None)
@given(specs=st.lists(record, min_size=1, max_size=40), base=st.integers(0, 2**40))
def test_peer_built_batches_decode_identically(
    peer: str, codec: CompressionType, specs: list[RecordSpec], base: int
) -> None:
    data = _peer_build(peer, int(codec), specs, base) + _peer_build(
        peer, int(codec), specs[:3], base + len(specs)
    )
    ours = _ours(data)
    assert ours == _peer_read(peer, data)
    expected = specs + specs[:3]
    assert [r[2:] for r in ours] == [(s.key, s.value, s.headers) for s in expected]
    assert [r[1] for r in ours] == [s.timestamp for s in expected]
    assert [r[0] for r in ours] == list(range(base, base + len(expected)))


def test_kafka_python_snappy_is_xerial_framed() -> None:
    specs = [RecordSpec(key=b"k", value=b"v" * 5000, timestamp=1) for _ in range(20)]
    data = _peer_build("kafka-python", int(CompressionType.SNAPPY), specs, 0)
    assert data[61:69] == b"\x82SNAPPY\x00"
    assert _ours(data) == _peer_read("kafka-python", data)


@pytest.mark.parametrize("peer", list(PEERS))
@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
@pytest.mark.parametrize("xerial", [False, True])
def test_peers_read_our_batches(peer: str, codec: CompressionType, xerial: bool) -> None:
    specs = [
        RecordSpec(
            key=None if i % 3 == 0 else b"k%d" % i,
            value=None if i % 5 == 0 else b"value-%d" % i * 7,
            headers=(("a", b"1"), ("b", None)) if i % 2 else (),
            timestamp=1_700_000_000_000 + i * 13,
        )
        for i in range(100)
    ]
    data = build_batch(specs, base_offset=5, compression=codec, snappy_xerial=xerial)
    assert _peer_read(peer, data, codec) == _ours(data)


def test_peer_reads_log_append_time_like_us() -> None:
    specs = [RecordSpec(value=b"x", timestamp=10), RecordSpec(value=b"y", timestamp=20)]
    data = build_batch(
        specs, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=99_999_999
    )
    assert _peer_read("aiokafka", data) == _ours(data)
    assert [r[1] for r in _ours(data)] == [99_999_999, 99_999_999]
