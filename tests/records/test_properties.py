"""Property tests: builder -> decoder round trips, and corrupt input yields only typed errors."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_actors.errors import KafkaError
from kafka_actors.protocol.records.build import RecordSpec, build_batch, build_control_batch
from kafka_actors.protocol.records.decode import (
    AbortedTransaction,
    CompressionType,
    IsolationLevel,
    decode_records,
)

maybe_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(
    st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=50)), max_size=4
).map(tuple)
timestamps = st.integers(min_value=0, max_value=2**50)
record = st.builds(
    RecordSpec, key=maybe_bytes, value=maybe_bytes, headers=headers, timestamp=timestamps
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[RecordSpec]], list[bytes], int]:
    """Several consecutive batches with random codecs; returns specs, bytes, base offset."""
    base = draw(st.integers(min_value=0, max_value=2**40))
    groups = draw(st.lists(st.lists(record, min_size=1, max_size=30), min_size=1, max_size=4))
    parts = []
    offset = base
    for specs in groups:
        codec = draw(st.sampled_from(list(CompressionType)))
        parts.append(
            build_batch(
                specs,
                base_offset=offset,
                compression=codec,
                snappy_xerial=draw(st.booleans()),
                partition_leader_epoch=draw(st.integers(-1, 100)),
            )
        )
        offset += len(specs)
    return groups, parts, base


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_round_trip(case: tuple[list[list[RecordSpec]], list[bytes], int]) -> None:
    groups, parts, base = case
    data = b"".join(parts)
    decoded = decode_records(data, "t", 0, fetch_offset=base)
    flat = [s for g in groups for s in g]
    assert decoded.offsets == list(range(base, base + len(flat)))
    assert decoded.keys == [s.key for s in flat]
    assert decoded.values == [s.value for s in flat]
    assert decoded.headers == [s.headers for s in flat]
    assert decoded.timestamps == [s.timestamp for s in flat]
    assert decoded.next_fetch_offset == base + len(flat)
    assert decoded.bytes_consumed == len(data)
    assert len(list(decoded)) == len(flat)


@settings(max_examples=150, deadline=None)
@given(batches(), st.data())
def test_truncation_keeps_complete_batches(
    case: tuple[list[list[RecordSpec]], list[bytes], int], data: st.DataObject
) -> None:
    groups, parts, base = case
    whole = b"".join(parts)
    cut = data.draw(st.integers(0, len(whole)))
    decoded = decode_records(whole[:cut], "t", 0, fetch_offset=base)
    complete = 0
    size = 0
    for part, g in zip(parts, groups, strict=True):
        if size + len(part) > cut:
            break
        size += len(part)
        complete += len(g)
    assert decoded.bytes_consumed == size
    assert decoded.offsets == list(range(base, base + complete))


def _decode_only_typed_errors(data: bytes, check_crcs: bool) -> None:
    for level in IsolationLevel:
        try:
            decoded = decode_records(
                data,
                "t",
                0,
                check_crcs=check_crcs,
                isolation_level=level,
                aborted_transactions=[AbortedTransaction(5, 0)],
            )
        except KafkaError as exc:
            assert exc.topic == "t" and exc.partition == 0
        else:
            n = len(decoded.offsets)
            assert len(decoded.keys) == len(decoded.values) == len(decoded.headers) == n
            assert len(decoded.timestamps) == n
            assert decoded.bytes_consumed <= len(data)
            list(decoded)


@settings(max_examples=400, deadline=None)
@given(batches(), st.data(), st.booleans())
def test_corruption_yields_only_typed_errors(
    case: tuple[list[list[RecordSpec]], list[bytes], int], data: st.DataObject, check_crcs: bool
) -> None:
    _groups, parts, _base = case
    buf = bytearray(b"".join(parts))
    kind = data.draw(st.sampled_from(["flip", "bytes", "truncate", "splice", "delete"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "bytes":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(buf) - 1))
            buf[i] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        del buf[data.draw(st.integers(0, len(buf))) :]
    elif kind == "splice":
        i = data.draw(st.integers(0, len(buf)))
        buf[i:i] = data.draw(st.binary(min_size=1, max_size=40))
    else:
        i = data.draw(st.integers(0, len(buf) - 1))
        del buf[i : i + data.draw(st.integers(1, 40))]
    _decode_only_typed_errors(bytes(buf), check_crcs)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=400), st.booleans())
def test_random_bytes_yield_only_typed_errors(blob: bytes, check_crcs: bool) -> None:
    _decode_only_typed_errors(blob, check_crcs)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 7), st.booleans())
def test_random_records_section_yields_only_typed_errors(
    section: bytes, codec: int, control: bool
) -> None:
    """A batch with a valid header and CRC but a random records section."""
    import struct

    from crc32c import crc32c

    attributes = codec | (0x30 if control else 0)
    after = struct.pack(">hiqqqhii", attributes, 3, 0, 0, 5, 0, 0, 4) + section
    data = struct.pack(">qiibI", 0, 9 + len(after), -1, 2, crc32c(after)) + after
    _decode_only_typed_errors(data, True)


@st.composite
def transactions(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int]], list[bytes]]:
    """Interleaved transactions of up to three producers, each committed or aborted, with
    non-transactional batches between them.

    Returns the bytes, the broker's aborted-transaction list (producer id, first offset)
    and all data values in offset order.
    """
    n_producers = draw(st.integers(1, 3))
    txns: list[tuple[int, int, bool]] = []  # producer, data batches, commit
    for pid in range(n_producers):
        for _ in range(draw(st.integers(1, 3))):
            txns.append((pid + 100, draw(st.integers(1, 3)), draw(st.booleans())))
    # Each producer's txns run in sequence; producers interleave randomly.
    queues: dict[int, list[tuple[int, bool]]] = {}
    for pid, size, commit in txns:
        queues.setdefault(pid, []).append((size, commit))
    open_txn: dict[int, tuple[int, bool, int]] = {}  # pid -> remaining, commit, first offset
    offset = 0
    parts: list[bytes] = []
    aborted: list[tuple[int, int]] = []
    everything: list[bytes] = []
    while queues or open_txn:
        pid = draw(st.sampled_from(sorted(set(queues) | set(open_txn))))
        if pid not in open_txn:
            size, commit = queues[pid].pop(0)
            if not queues[pid]:
                del queues[pid]
            open_txn[pid] = (size, commit, offset)
        remaining, commit, first = open_txn[pid]
        if remaining:
            value = b"%d@%d" % (pid, offset)
            if draw(st.booleans()):
                plain = b"plain@%d" % offset
                parts.append(build_batch([RecordSpec(value=plain)], base_offset=offset))
                everything.append(plain)
                offset += 1
            parts.append(
                build_batch(
                    [RecordSpec(value=value)],
                    base_offset=offset,
                    producer_id=pid,
                    producer_epoch=0,
                    transactional=True,
                    compression=draw(st.sampled_from(list(CompressionType))),
                )
            )
            everything.append(value)
            offset += 1
            open_txn[pid] = (remaining - 1, commit, first)
        else:
            parts.append(
                build_control_batch(
                    base_offset=offset, producer_id=pid, producer_epoch=0, commit=commit
                )
            )
            if not commit:
                aborted.append((pid, first))
            offset += 1
            del open_txn[pid]
    return b"".join(parts), aborted, everything


@settings(max_examples=200, deadline=None)
@given(transactions())
def test_read_committed_filters_exactly_aborted_transactions(
    case: tuple[bytes, list[tuple[int, int]], list[bytes]],
) -> None:
    data, aborted, everything = case
    uncommitted = decode_records(data, "t", 0)
    assert uncommitted.values == everything
    committed = decode_records(
        data,
        "t",
        0,
        isolation_level=IsolationLevel.READ_COMMITTED,
        aborted_transactions=[_Aborted(pid, first) for pid, first in aborted],
    )
    # Independent oracle: a data batch of producer p at offset o is aborted iff some aborted
    # txn (p, first) has first <= o and no marker of p lies between first and o.
    markers = _markers(data)
    expected = []
    for offset, value in zip(uncommitted.offsets, uncommitted.values, strict=True):
        assert value is not None
        if value.startswith(b"plain"):
            expected.append(value)
            continue
        pid = int(value.split(b"@")[0])
        is_aborted = any(
            p == pid
            and first <= offset
            and not any(mp == pid and first < mo < offset for mo, mp in markers)
            for p, first in aborted
        )
        if not is_aborted:
            expected.append(value)
    assert committed.values == expected
    assert committed.next_fetch_offset == uncommitted.next_fetch_offset


class _Aborted:
    def __init__(self, producer_id: int, first_offset: int) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset


def _markers(data: bytes) -> list[tuple[int, int]]:
    """(offset, producer id) of every control batch, read from the raw batch headers."""
    import struct

    out = []
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        attributes = struct.unpack_from(">h", data, pos + 21)[0]
        pid = struct.unpack_from(">q", data, pos + 43)[0]
        if attributes & 0x20:
            out.append((base, pid))
        pos += 12 + length
    return out
