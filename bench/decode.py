"""Record batch decoding speed: kafka-actors beside aiokafka (C) and kafka-python (pure Python).

Owns: nothing but its own run. Builds the bytes once per codec (100k records with ~100-byte
values, in batches of 500 records, as a producer with linger would send them; encoded by
aiokafka's C batch builder, i.e. a real producer's encoder, then checked against ours), then
decodes the same bytes with each decoder, best of N, and prints records/s and ratios to ours.

Every decoder verifies CRCs and touches offset, timestamp, key, value and headers of each
record. Ours is measured four times on the native path: as Arrow columns (``columnar=True``,
buffers filled in C, wrapped in a ``pyarrow.RecordBatch`` by protocol/arrow.py: what
``poll_batches`` and the Spark reader use; every column's buffers are read, no Python object
per record; with ``--headers`` the batch includes the headers column), reading the list columns,
and ConsumerRecord tuples (``materialize=True``, as the consumer decodes: the native path
keeps spans and builds each record when read), iterated one by one, and taken in slices of
500 as the consumer's polls take them (``max.poll.records``' default); and twice on the
pure-Python path (the same module's Python code). ``--mypyc`` also compiles
kafka_actors/protocol/records/decode.py unchanged with mypyc (into a temporary directory; needs a C
compiler) and measures that build (the compiled step the native path replaced).

    .venv/bin/python bench/decode.py [--records 100000] [--repeat 9] [--headers] [--mypyc]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from kafka_actors.protocol.records import decode as records_module
from kafka_actors.protocol.records.build import RecordSpec, build_batch
from kafka_actors.protocol.records.decode import (
    CompressionType,
    DecodedRecords,
    decode_records,
    slice_records,
)

CODECS = {"none": CompressionType.NONE, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
BATCH_RECORDS = 500
POLL_RECORDS = 500  # max.poll.records' default


def make_records(n: int, with_headers: bool) -> list[RecordSpec]:
    rng = random.Random(42)
    words = [os.urandom(rng.randint(3, 9)).hex().encode() for _ in range(200)]
    base_ts = 1_760_000_000_000
    out = []
    for i in range(n):
        value = b" ".join(rng.choice(words) for _ in range(12))[:100].ljust(100, b".")
        headers = (("trace", b"%016x" % i), ("source", b"bench")) if with_headers else ()
        out.append(
            RecordSpec(
                key=b"key-%08d" % i, value=value, headers=headers, timestamp=base_ts + i // 7
            )
        )
    return out


def build_with_aiokafka(records: list[RecordSpec], codec: CompressionType) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    parts = []
    for start in range(0, len(records), BATCH_RECORDS):
        builder = DefaultRecordBatchBuilder(2, int(codec), 0, -1, -1, -1, 10**8)
        for i, r in enumerate(records[start : start + BATCH_RECORDS]):
            builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
        batch = bytearray(builder.build())
        batch[0:8] = start.to_bytes(8, "big")  # base offset as the broker assigns it
        parts.append(bytes(batch))
    return b"".join(parts)


def build_with_ours(records: list[RecordSpec], codec: CompressionType) -> bytes:
    return b"".join(
        build_batch(records[s : s + BATCH_RECORDS], base_offset=s, compression=codec)
        for s in range(0, len(records), BATCH_RECORDS)
    )


def ours_columns(data: bytes) -> int:
    d = decode_records(data, "bench", 0, fetch_offset=0)
    n = 0
    for _o, _t, _k, _v, _h in zip(
        d.offsets, d.timestamps, d.keys, d.values, d.headers, strict=True
    ):
        n += 1
    return n


def _arrow_reader(with_headers: bool) -> Callable[[bytes], int]:
    """Columnar decode as poll_batches does it: Arrow buffers filled in C, one RecordBatch
    (protocol/arrow.py); then every column is read from its buffers (no object per record):
    min/max of offsets and timestamps, the offsets of each binary column (its last offset is
    its data's size, checked against the data buffer), and the headers' list offsets."""
    import pyarrow.compute as pc

    from kafka_actors.protocol.records.arrow import record_batch

    def binary_size(arr: object) -> int:
        # offsets buffer's last int32 == data buffer's size (every value's bytes are in it)
        _valid, offs, data = arr.buffers()  # type: ignore[attr-defined]
        last = int.from_bytes(memoryview(offs)[4 * len(arr) : 4 * len(arr) + 4], "little")  # type: ignore[arg-type]
        if data is not None and last > data.size:
            raise RuntimeError("binary column offsets past its data")
        return last

    def decode(data: bytes) -> int:
        d = decode_records(data, "bench", 0, fetch_offset=0, columnar=True)
        batch = record_batch(d, 0, len(d), with_headers)
        n = batch.num_rows
        cols = batch.columns
        if pc.min_max(cols[4])["min"].as_py() < 0 or pc.min_max(cols[5]) is None:
            raise RuntimeError("offsets")
        binary_size(cols[0])
        binary_size(cols[1])
        if with_headers:
            h = cols[7]
            entries = h.values
            binary_size(entries.field(0))
            binary_size(entries.field(1))
            if len(entries) != h.offsets[n].as_py():
                raise RuntimeError("headers")
        return int(n)

    return decode


def compile_with_mypyc(workdir: Path) -> ModuleType:
    """Build records.py with mypyc as a top-level module ``records_mypyc`` in ``workdir``."""
    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "kafka_actors" / "protocol" / "records.py", workdir / "records_mypyc.py")
    mypyc = Path(sys.executable).with_name("mypyc")
    subprocess.run(
        [str(mypyc), "records_mypyc.py"],
        cwd=workdir,
        env={**os.environ, "MYPYPATH": str(root)},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    sys.path.insert(0, str(workdir))
    os.environ[records_module.PURE_ENV] = "1"  # the compiled Python code, not the C extension
    try:
        module = importlib.import_module("records_mypyc")
    finally:
        del os.environ[records_module.PURE_ENV]
    if not str(module.__file__).endswith(".so"):
        raise RuntimeError("mypyc build not picked up")
    return module


def columns_with(module: ModuleType) -> Callable[[bytes], int]:
    def decode(data: bytes) -> int:
        d = module.decode_records(data, "bench", 0, fetch_offset=0)
        n = 0
        for _o, _t, _k, _v, _h in zip(
            d.offsets, d.timestamps, d.keys, d.values, d.headers, strict=True
        ):
            n += 1
        return n

    return decode


def _pure(data: bytes) -> DecodedRecords:
    out = DecodedRecords("bench", 0, next_fetch_offset=0)
    records_module._decode_into(
        data, out, 0, True, False, None, records_module.DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES
    )
    return out


def pure_columns(data: bytes) -> int:
    d = _pure(data)
    n = 0
    for _o, _t, _k, _v, _h in zip(
        d.offsets, d.timestamps, d.keys, d.values, d.headers, strict=True
    ):
        n += 1
    return n


def pure_records(data: bytes) -> int:
    n = 0
    for r in records_module._slice_records_python(_pure(data), 0, args_records):
        r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018
        n += 1
    return n


args_records = 0


def ours_records(data: bytes) -> int:
    # As the consumer decodes (materialize), the records iterated one by one.
    n = 0
    for r in decode_records(data, "bench", 0, fetch_offset=0, materialize=True):
        r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018
        n += 1
    return n


def ours_polled(data: bytes) -> int:
    # As the consumer decodes (materialize) and hands records out: a list of 500 per poll.
    d = decode_records(data, "bench", 0, fetch_offset=0, materialize=True)
    n = 0
    for start in range(0, len(d), POLL_RECORDS):
        for r in slice_records(d, start, start + POLL_RECORDS):
            r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018
            n += 1
    return n


def aiokafka_c(data: bytes) -> int:
    from aiokafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    n = 0
    while True:
        batch = records.next_batch()
        if batch is None:
            return n
        if not batch.validate_crc():
            raise RuntimeError("crc")
        for r in batch:
            r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018
            n += 1


def kafka_python(data: bytes) -> int:
    from kafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    n = 0
    while True:
        batch = records.next_batch()
        if batch is None:
            return n
        if not batch.validate_crc():
            raise RuntimeError("crc")
        for r in batch:
            r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018
            n += 1


def _check_arrow(columns: DecodedRecords, native: DecodedRecords, with_headers: bool) -> None:
    """The Arrow row decodes what the list columns hold (checked once, outside the timing)."""
    import pyarrow as pa

    from kafka_actors.protocol.records.arrow import record_batch

    rb = record_batch(native, 0, len(native), with_headers)
    batch = rb.to_pydict()
    ts_ms = [us // 1000 for us in rb.column(5).cast(pa.int64()).to_pylist()]
    if (batch["key"], batch["value"], batch["offset"], ts_ms) != (
        columns.keys,
        columns.values,
        columns.offsets,
        columns.timestamps,
    ):
        raise RuntimeError("Arrow columns differ from the list columns")
    if (
        with_headers
        and [tuple((h["key"], h["value"]) for h in hs) for hs in batch["headers"]]
        != columns.headers
    ):
        raise RuntimeError("Arrow headers differ from the list columns")


def best_of(
    decoders: list[tuple[str, Callable[[bytes], int]]], data: bytes, expected: int, repeat: int
) -> dict[str, float]:
    """Best CPU time per decoder (process time: every decoder is single-threaded, and CPU
    time is steadier than wall time on a shared machine); the decoders take turns in each
    round, so that load from other processes spreads over all of them alike."""
    best = {label: float("inf") for label, _ in decoders}
    for _ in range(repeat):
        for label, fn in decoders:
            # Each decoder starts from a clean collector: a full collection owed to the
            # previous one's surviving objects would otherwise land in this one's time.
            gc.collect()
            t0 = time.process_time()
            n = fn(data)
            elapsed = time.process_time() - t0
            if n != expected:
                raise RuntimeError(f"{label} decoded {n} records, expected {expected}")
            best[label] = min(best[label], elapsed)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--headers", action="store_true", help="two headers per record")
    parser.add_argument("--mypyc", action="store_true", help="also measure a mypyc build of ours")
    global args_records
    args = parser.parse_args()
    args_records = args.records

    import aiokafka.record.memory_records as amr

    if "_crecords" not in type(amr.MemoryRecords(b"")).__module__:
        print("warning: aiokafka's C extension is not in use", file=sys.stderr)

    records = make_records(args.records, args.headers)
    impl = records_module.IMPLEMENTATION
    decoders: list[tuple[str, Callable[[bytes], int]]] = [
        ("aiokafka (C)", aiokafka_c),
        (f"kafka-actors {impl} (columns)", ours_columns),
        (f"kafka-actors {impl} (ConsumerRecord)", ours_records),
        (f"kafka-actors {impl} (ConsumerRecord, polls)", ours_polled),
        ("kafka-python", kafka_python),
    ]
    if impl != "python":
        decoders.insert(1, (f"kafka-actors {impl} (Arrow)", _arrow_reader(args.headers)))
        decoders[5:5] = [
            ("kafka-actors python (columns)", pure_columns),
            ("kafka-actors python (ConsumerRecord)", pure_records),
        ]
    if args.mypyc:
        workdir = Path(tempfile.mkdtemp(prefix="records-mypyc-"))
        decoders.insert(
            len(decoders) - 1,
            ("kafka-actors mypyc (columns)", columns_with(compile_with_mypyc(workdir))),
        )
    print(
        f"{args.records} records, ~100 B values, {BATCH_RECORDS}/batch, headers={args.headers}, "
        f"best of {args.repeat}, CRC checked"
    )
    native = records_module._native
    print(
        f"record path: {impl}"
        + (f" (CRC32C: {native.CRC32C_IMPLEMENTATION})" if native is not None else "")
        + (f" ({records_module.NATIVE_UNAVAILABLE_REASON})" if native is None else "")
    )
    print(f"{'codec':6} {'decoder':44} {'rec/s':>12} {'vs aiokafka (C)':>16}")
    for name, codec in CODECS.items():
        data = build_with_aiokafka(records, codec)
        ours = decode_records(data, "bench", 0)
        mine = decode_records(build_with_ours(records, codec), "bench", 0)
        if (ours.keys, ours.values, ours.offsets, ours.timestamps) != (
            mine.keys,
            mine.values,
            mine.offsets,
            mine.timestamps,
        ):
            raise RuntimeError("aiokafka-built and our own batches decode differently")
        if impl != "python":
            _check_arrow(ours, decode_records(data, "bench", 0, columnar=True), args.headers)
        best = best_of(decoders, data, args.records, args.repeat)
        base = args.records / best[decoders[0][0]]
        for label, _fn in decoders:
            rate = args.records / best[label]
            print(f"{name:6} {label:44} {rate:12,.0f} {rate / base:15.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
