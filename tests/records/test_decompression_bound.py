"""Bounded decompression (issue 10, bug 3): a small compressed batch that expands past
``max_decompressed_size`` raises DecompressedBatchTooLargeError (a CorruptRecordError naming
topic, partition and base offset) without allocating past the bound; legitimate batches,
however compressible, decode as before."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import cramjam
import pytest
from crc32c import crc32c

from kafka_actors.errors import CorruptRecordError, DecompressedBatchTooLargeError
from kafka_actors.protocol.records import decode as records
from kafka_actors.protocol.records.build import RecordSpec, build_batch, compress
from kafka_actors.protocol.records.decode import (
    DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
    CompressionType,
    decode_records,
)

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
COMPRESSED = [c for c in CompressionType if c != CompressionType.NONE]


def with_payload(codec: int, payload: bytes, *, base_offset: int = 40) -> bytes:
    """A one-record batch whose records section is ``payload`` (already compressed)."""
    batch = bytearray(build_batch([RecordSpec(value=b"")], base_offset=base_offset)[:61])
    struct.pack_into(">h", batch, 21, codec)
    batch += payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def repetitive_text(size: int) -> bytes:
    line = b'{"user": 1234, "event": "page_view", "path": "/index.html", "ok": true}\n'
    return (line * (size // len(line) + 1))[:size]


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_highly_compressible_batch_decodes_under_the_default_bound(codec: CompressionType) -> None:
    value = repetitive_text(24 * MiB)
    batch = build_batch([RecordSpec(key=b"k", value=value)], base_offset=7, compression=codec)
    assert len(batch) < 2 * MiB  # a small batch that expands a lot, legitimately
    decoded = decode_records(batch, "t", 0)
    assert decoded.values == [value] and decoded.offsets == [7]


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_batch_over_the_bound_is_a_typed_error_naming_the_batch(codec: CompressionType) -> None:
    value = repetitive_text(3 * MiB)
    batch = build_batch([RecordSpec(value=value)], base_offset=40, compression=codec)
    assert decode_records(batch, "t", 3, max_decompressed_size=4 * MiB).values == [value]
    with pytest.raises(DecompressedBatchTooLargeError) as caught:
        decode_records(batch, "t", 3, max_decompressed_size=2 * MiB)
    error = caught.value
    assert isinstance(error, CorruptRecordError)
    assert (error.topic, error.partition, error.offset) == ("t", 3, 40)
    assert "max.decompressed.batch.bytes" in str(error)


def test_records_before_the_oversized_batch_are_kept_with_partial_on_error() -> None:
    good = build_batch([RecordSpec(value=b"a")], base_offset=0, compression=CompressionType.ZSTD)
    big = build_batch(
        [RecordSpec(value=repetitive_text(2 * MiB))],
        base_offset=1,
        compression=CompressionType.ZSTD,
    )
    decoded = decode_records(good + big, "t", 0, max_decompressed_size=MiB, partial_on_error=True)
    assert decoded.values == [b"a"]
    assert isinstance(decoded.error, DecompressedBatchTooLargeError)
    assert decoded.next_fetch_offset == 1


@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.ZSTD], ids=lambda c: c.name)
def test_headers_above_the_bound_but_output_within_it_decode(codec: CompressionType) -> None:
    """LZ4/zstd block headers give only an upper bound; a batch whose bound passes the limit
    but whose output fits is decoded through the bounded buffer, unchanged."""
    value = repetitive_text(1_000_000)
    batch = build_batch([RecordSpec(value=value)], compression=codec)
    decoded = decode_records(batch, "t", 0, max_decompressed_size=1_000_200)
    assert decoded.values == [value]


def test_snappy_declared_size_over_the_bound_is_refused_before_decompressing() -> None:
    # raw snappy: a varint preamble of 2**32-1 bytes, then almost nothing
    payload = b"\xff\xff\xff\xff\x0f" + b"\x00" * 8
    with pytest.raises(DecompressedBatchTooLargeError, match="declares 4294967295 bytes"):
        decode_records(with_payload(CompressionType.SNAPPY, payload), "t", 0)


def test_truncated_and_garbage_compressed_payloads_stay_corrupt_record_errors() -> None:
    for codec in COMPRESSED:
        payload = compress(codec, repetitive_text(100_000))
        for bad in (payload[: len(payload) // 2], b"\x00garbage" * 4):
            with pytest.raises(CorruptRecordError) as caught:
                decode_records(with_payload(codec, bad), "t", 0)
            assert not isinstance(caught.value, DecompressedBatchTooLargeError), codec


def _bombs(tmp_path: Path) -> Path:
    """Batches of ~1 GiB of zeros each, compressed to a few MB at most."""
    zeros = bytes(32 * MiB)
    frames = 32
    gzip = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = gzip.compress(zeros) + gzip.flush()
    payloads = {
        "GZIP": member * frames,
        "ZSTD": bytes(cramjam.zstd.compress(zeros)) * frames,
        "LZ4": bytes(cramjam.lz4.compress(zeros)) * frames,
        "SNAPPY": b"\xff\xff\xff\xff\x0f" + bytes(cramjam.snappy.compress_raw(zeros[:MiB])),
        "SNAPPY_XERIAL": compress(CompressionType.SNAPPY, bytes(64 * MiB), xerial=True),
    }
    del zeros
    path = tmp_path / "bombs.json"
    batches = {}
    for name, payload in payloads.items():
        codec = CompressionType[name.split("_")[0]]
        batches[name] = with_payload(codec, payload).hex()
    path.write_text(json.dumps(batches))
    return path


@pytest.mark.parametrize("implementation", ["native", "python"])
def test_decompression_bombs_raise_without_large_allocations_in_a_child(
    tmp_path: Path, implementation: str
) -> None:
    """Each bomb expands to >= 64 MiB (1 GiB for gzip/zstd/lz4, 4 GiB declared for snappy);
    with a 16 MiB bound the child's peak RSS grows by less than 100 MB over all of them, on
    both record paths (the native one hands decompression to the same bounded function)."""
    if implementation == "native" and records.IMPLEMENTATION != "native":
        pytest.skip(f"no native record path: {records.NATIVE_UNAVAILABLE_REASON}")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if implementation == "python":
        env[records.PURE_ENV] = "1"
    path = _bombs(tmp_path)
    code = f"""
        import json, resource
        from kafka_actors.errors import DecompressedBatchTooLargeError
        from kafka_actors.protocol.records import decode as records
        batches = {{k: bytes.fromhex(v) for k, v in json.load(open({str(path)!r})).items()}}
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = {{"implementation": records.IMPLEMENTATION}}
        for name, batch in batches.items():
            try:
                records.decode_records(batch, "bombs", 2, max_decompressed_size=16 * 2**20)
            except DecompressedBatchTooLargeError as exc:
                result[name] = [exc.topic, exc.partition, exc.offset]
            else:
                result[name] = "decoded"
        result["growth_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(json.dumps(result))
    """
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["implementation"] == implementation, result
    for name in ("GZIP", "ZSTD", "LZ4", "SNAPPY", "SNAPPY_XERIAL"):
        assert result[name] == ["bombs", 2, 40], (name, result)
    assert result["growth_kb"] < 100 * 1024, result


def test_default_bound_is_documented_value() -> None:
    assert DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES == 256 * MiB
