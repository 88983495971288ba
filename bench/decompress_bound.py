"""Cost of the bounded decompression (issue 10) next to an unbounded cramjam call.

Run: python bench/decompress_bound.py   (from the repository root; KAFKA_ACTORS_PURE_PYTHON=1
for the pure-Python records module). Prints µs per batch records section for 16 KiB and
1 MiB of JSON-like text per codec: the old call (cramjam, no bound) and records._decompress.
"""

from __future__ import annotations

import timeit
from functools import partial

import cramjam

from kafka_actors.protocol.records import decode as records
from kafka_actors.protocol.records.build import compress
from kafka_actors.protocol.records.decode import CompressionType

OLD = {
    CompressionType.GZIP: lambda p: bytes(cramjam.gzip.decompress(p)),
    CompressionType.LZ4: lambda p: bytes(cramjam.lz4.decompress(p)),
    CompressionType.ZSTD: lambda p: bytes(cramjam.zstd.decompress(p)),
    CompressionType.SNAPPY: lambda p: bytes(cramjam.snappy.decompress_raw(p)),
}


def text(size: int) -> bytes:
    lines = b"".join(
        b'{"user": %d, "event": "click", "page": "/home/%d"}\n' % (i, i % 97)
        for i in range(size // 40)
    )
    return lines[:size]


def main() -> None:
    decompress = records._decompress  # type: ignore[attr-defined]
    print(f"records implementation: {records.IMPLEMENTATION}")
    for size in (16 << 10, 1 << 20):
        data = text(size)
        for codec, old in OLD.items():
            payload = compress(codec, data)
            assert decompress(codec, payload, 256 << 20) == old(payload) == data
            # the fastest single call of many: robust on a loaded machine
            n = 400 if size < 100_000 else 60
            t_old = min(timeit.repeat(partial(old, payload), number=1, repeat=n)) * 1e6
            bounded = partial(decompress, codec, payload, 256 << 20)
            t_new = min(timeit.repeat(bounded, number=1, repeat=n)) * 1e6
            print(
                f"{size >> 10:5d} KiB {codec.name:6s} ratio {len(data) / len(payload):5.1f}: "
                f"unbounded {t_old:8.1f} µs, bounded {t_new:8.1f} µs ({t_new / t_old:.2f}x)"
            )


if __name__ == "__main__":
    main()
