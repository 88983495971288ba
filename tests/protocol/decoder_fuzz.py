"""Child process of tests/protocol/test_bounds.py: fuzz every response decoder the consumer uses.

Run as ``python -m tests.protocol.decoder_fuzz [EXAMPLES]`` from the repository root (in a child
process: a decoder that aborts, as kio's native reader did on a huge count, kills this process,
and the parent sees the signal as a failure instead of losing pytest with it).

For every API in ``apis.CLIENT_VERSIONS`` and every version of its range, hypothesis generates
valid responses (``EXAMPLES`` per class, default 2; more with ``KAFKA_ACTORS_FUZZ_EXAMPLES``) and
for each:

- the valid frame decodes to exactly what kio's reader alone decodes, and the bounds walk ends
  where kio ends;
- structured mutations: at every byte offset, the 4/5 bytes there are overwritten with (and, in
  a second pass, the pattern inserted before them) each maximal length or count: int32
  2**31-1, -1, -2, -2**31, uvarint 2**31-1, 2**32-1 and 2**35-1 (5-byte varints);
- every truncation, one bit flip per bit of the first 64 bytes and of a random sample beyond;
- random garbage frames.

Each mutated frame must decode or raise a ProtocolError subclass. Prints one JSON line
(cases tried, classes, failures) and exits 1 on any other exception.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import time
import traceback
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from kio.static.primitive import Records

from kafka_actors.errors import ProtocolError
from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, response_type
from kafka_actors.protocol.wire.bounds import check_entity
from kafka_actors.protocol.wire.framing import (
    decode_response,
    decode_response_with_header,
    encode_response,
    response_header_type,
)

st.register_type_strategy(Records, st.binary(max_size=48))  # type: ignore[type-abstract]

CORRELATION_ID = 7

#: Maximal lengths and counts: int32 2**31-1, -1, -2, -2**31; uvarint 2**31-1, 2**32-1,
#: 2**35-1 (the 18-byte frame of issue 10) and a 5-byte varint with the continuation bit set.
PATTERNS: tuple[bytes, ...] = (
    struct.pack(">i", 2**31 - 1),
    struct.pack(">i", -1),
    struct.pack(">i", -2),
    struct.pack(">i", -(2**31)),
    b"\xff\xff\xff\xff\x07",
    b"\xff\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\x7f",
    b"\xff\xff\xff\xff\xff",
)
#: Patterns also inserted (shifting what follows) in the short run; all of them in a longer one.
INSERTED: tuple[bytes, ...] = (struct.pack(">i", 2**31 - 1), b"\xff\xff\xff\xff\x7f")


class Tally:
    def __init__(self) -> None:
        self.cases = 0
        self.decoded = 0
        self.rejected = 0
        self.failures: list[str] = []

    def mutated(self, frame: bytes, cls: type, what: str) -> None:
        self.cases += 1
        try:
            # as the consumer's connections decode (Fetch v12+: wire.fetch_response's reader)
            decode_response(frame, cls, correlation_id=CORRELATION_ID, record_views=True)
        except ProtocolError:
            self.rejected += 1
        except Exception:
            if len(self.failures) < 20:
                self.failures.append(
                    f"{cls.__name__} v{cls.__version__} {what}: frame {frame.hex()}\n"  # type: ignore[attr-defined]
                    + traceback.format_exc()
                )
        else:
            self.decoded += 1


def valid(tally: Tally, cls: type, entity: Any, rng: random.Random, thorough: bool) -> None:
    frame = encode_response(entity, correlation_id=CORRELATION_ID)[4:]
    header_type = response_header_type(cls)  # type: ignore[arg-type]
    _header, used = entity_reader(header_type)(frame, 0)
    expected, size = entity_reader(cls)(frame, used)
    assert used + size == len(frame)
    assert check_entity(frame, used, cls) == len(frame)
    header, got = decode_response_with_header(
        frame, cls, correlation_id=CORRELATION_ID, strict=True
    )
    assert header.correlation_id == CORRELATION_ID
    assert got == expected, (got, expected)
    _header, viewed = decode_response_with_header(
        memoryview(frame), cls, correlation_id=CORRELATION_ID, strict=True, record_views=True
    )
    assert viewed == expected, (viewed, expected)  # views compare equal to the bytes
    tally.cases += 1

    offsets = list(range(len(frame)))
    if not thorough and len(frame) > 96:  # the short run: the head, and a sample of the rest
        offsets = offsets[:64] + rng.sample(offsets[64:], 32)
    for at in offsets:
        for pattern in PATTERNS:
            tally.mutated(frame[:at] + pattern + frame[at + len(pattern) :], cls, f"set@{at}")
        for pattern in PATTERNS if thorough else INSERTED:
            tally.mutated(frame[:at] + pattern + frame[at:], cls, f"insert@{at}")
    for cut in offsets:
        tally.mutated(frame[:cut], cls, f"cut@{cut}")
    flips = 64 if thorough else 16
    bits = list(range(min(len(frame), flips) * 8))
    bits += rng.sample(range(len(frame) * 8), min(len(frame) * 8, flips))
    for bit in bits:
        flipped = bytearray(frame)
        flipped[bit // 8] ^= 1 << (bit % 8)
        tally.mutated(bytes(flipped), cls, f"flip@{bit}")
    for _ in range(16 if thorough else 4):
        tally.mutated(rng.randbytes(rng.randrange(64)), cls, "garbage")
        garbage = frame[:8] + rng.randbytes(rng.randrange(len(frame) + 8))
        tally.mutated(garbage, cls, "garbage after header")


def run_for(cls: type, examples: int, tally: Tally, rng: random.Random) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=examples <= 5,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.from_type(cls))
    def run(entity: Any) -> None:
        valid(tally, cls, entity, rng, thorough=examples > 2)

    run()


def main(examples: int) -> int:
    tally = Tally()
    classes = 0
    started = time.monotonic()
    rng = random.Random(10)
    for api, versions in CLIENT_VERSIONS.items():
        for version in range(versions.min, versions.max + 1):
            run_for(response_type(int(api), version), examples, tally, rng)
            classes += 1
    print(
        json.dumps(
            {
                "classes": classes,
                "cases": tally.cases,
                "decoded": tally.decoded,
                "rejected": tally.rejected,
                "failures": len(tally.failures),
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )
    for failure in tally.failures:
        print(failure, file=sys.stderr)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    default = int(os.environ.get("KAFKA_ACTORS_FUZZ_EXAMPLES", "2"))
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else default))
