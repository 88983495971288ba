"""The offset map in the commit metadata: round trip, size, and hostile input."""

from __future__ import annotations

import base64
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_actors.errors import OffsetMapError
from kafka_actors.parallel import offset_map as om

completed_strings = st.lists(st.booleans(), max_size=3000).map(
    lambda bits: bytes(int(b) for b in bits)
)


@given(base=st.integers(0, 2**62), completed=completed_strings)
@settings(max_examples=300, deadline=None)
def test_every_map_decodes_to_what_was_encoded(base: int, completed: bytes) -> None:
    text = om.encode(base, completed)
    assert text.isascii() and text.startswith(om.PREFIX)
    decoded = om.decode(text, base)
    assert decoded is not None
    assert decoded.base == base
    assert decoded.completed() == completed[: completed.rfind(b"\x01") + 1]
    for i, flag in enumerate(completed):
        assert ((base + 1 + i) in decoded) is bool(flag)
    assert base not in decoded


@given(
    base=st.integers(0, 2**40),
    runs=st.lists(st.integers(1, 5000), max_size=60),
)
@settings(max_examples=200, deadline=None)
def test_the_size_bound_holds_for_any_map_of_its_span_and_transitions(
    base: int, runs: list[int]
) -> None:
    completed = bytearray()
    for i, run in enumerate(runs):
        completed += bytes([i % 2]) * run
    text = om.encode(base, bytes(completed))
    previous = (b"\x00" + bytes(completed[:-1])) if completed else b""
    transitions = sum(1 for a, b in zip(previous, completed, strict=True) if a != b)
    assert len(text) <= om.encoded_size_bound(base, len(completed), transitions)


def test_a_slow_record_with_everything_after_it_completed_costs_a_few_bytes() -> None:
    text = om.encode(10**9, b"\x01" * 1_000_000)
    assert len(text) < 24
    decoded = om.decode(text, 10**9)
    assert decoded is not None and decoded.ranges == ((10**9 + 1, 10**9 + 1_000_001),)


def test_the_worst_case_is_a_bitmap_near_one_bit_per_offset() -> None:
    rnd = random.Random(7)
    completed = bytes(rnd.random() < 0.5 for _ in range(25_000))
    text = om.encode(123_456, completed)
    # one bit per offset, base85: 25,000 / 8 * 5 / 4 = 3,907 characters and the header
    assert len(text) <= 25_000 // 8 * 5 // 4 + 20
    assert om.fits(text, 4096)
    assert not om.fits(text, 3000)
    # strict alternation is compressible
    assert len(om.encode(123_456, bytes(i % 2 for i in range(25_000)))) < 100


def test_metadata_of_other_applications_is_not_a_map() -> None:
    assert om.decode("") is None
    assert om.decode(None) is None
    assert om.decode("processed by app 1.2") is None
    assert om.decode('{"json": true}') is None


@pytest.mark.parametrize(
    "text",
    [
        "KAP2R0000",  # a version we do not know
        "KAP1",  # no kind
        "KAP1X0000",  # unknown kind
        "KAP1R" + "~~~~~",  # not base85
        "KAP1B" + base64.b85encode(b"\x05\x10\xff").decode(),  # bitmap shorter than nbits
        "KAP1R" + base64.b85encode(b"\x80\x80").decode(),  # truncated varint
        "KAP1R" + base64.b85encode(b"\xff" * 11).decode(),  # overlong varint
        "KAP1r" + base64.b85encode(b"not zlib").decode(),
        "KAP1R" + base64.b85encode(b"\x05\x00\x00").decode(),  # empty completed run
    ],
)
def test_garbage_with_our_prefix_is_a_typed_error(text: str) -> None:
    with pytest.raises(OffsetMapError):
        om.decode(text)


def test_a_map_is_only_applied_to_the_offset_it_was_written_for() -> None:
    text = om.encode(100, b"\x01\x01")
    assert om.decode(text, 100) is not None
    with pytest.raises(OffsetMapError, match="written for offset 100"):
        om.decode(text, 250)


def test_hostile_maps_cannot_make_the_decoder_allocate() -> None:
    # A run-length map claiming 2**60 completed offsets: refused by the span bound, nothing
    # is materialized.
    payload = bytearray()
    for value in (5, 0, 2**60):
        om._put_varint(payload, value)
    text = "KAP1R" + base64.b85encode(bytes(payload)).decode()
    with pytest.raises(OffsetMapError, match="wider than"):
        om.decode(text, max_span=1 << 20)
    # A bitmap claiming 2**50 bits.
    payload = bytearray()
    om._put_varint(payload, 5)
    om._put_varint(payload, 2**50)
    with pytest.raises(OffsetMapError, match="wider than"):
        om.decode("KAP1B" + base64.b85encode(bytes(payload)).decode())
    # A zlib bomb: 8 MiB of zeros in ~8 KiB; the inflater stops at the span's bound.
    bomb = zlib.compress(b"\x05" + b"\x00" * (8 << 20), 9)
    with pytest.raises(OffsetMapError, match="past its bound"):
        om.decode("KAP1b" + base64.b85encode(bomb).decode(), max_span=1 << 16)
    with pytest.raises(OffsetMapError, match="too long"):
        om.decode("KAP1R" + "0" * (om.MAX_METADATA_CHARS + 1))


def test_the_decoded_map_is_ranges_not_offsets() -> None:
    text = om.encode_ranges(0, [(1, 500_001), (600_000, 600_010)])
    decoded = om.decode(text, 0)
    assert decoded is not None
    assert decoded.ranges == ((1, 500_001), (600_000, 600_010))
    assert decoded.completed_count == 500_010
    assert 600_009 in decoded and 600_010 not in decoded and 500_001 not in decoded


@given(
    st.integers(min_value=40, max_value=20_000),
    st.integers(min_value=0, max_value=2**63 - 1),
    st.integers(min_value=0, max_value=10**7),
)
def test_a_window_within_the_always_fitting_span_fits_whatever_completes(
    max_bytes: int, base: int, transitions: int
) -> None:
    span = om.span_always_fitting(max_bytes)
    for s in (0, span // 2, span):
        if s >= 0:
            assert om.encoded_size_bound(base, s, transitions) <= max_bytes
    # and it is not far from the widest: at the largest base, the bitmap of a few more offsets
    # outgrows the limit
    wider = span + 64
    bitmap = om.varint_size(2**63 - 1) + om.varint_size(wider) + (wider + 7) // 8
    assert len(om.PREFIX) + 1 + (bitmap * 5 + 3) // 4 > max_bytes


def test_the_always_fitting_span_at_kafkas_default_limit() -> None:
    # 4096 characters of base85 carry 3,276 bytes: about 26,000 offsets of bitmap
    assert 25_000 < om.span_always_fitting(4096) < 26_300
