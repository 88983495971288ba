"""ShareFetch answers with hostile acquired-records ranges (issue #13, robustness): nothing
read from the network decides an allocation before it is bounded, and acquired offsets are
not dropped silently: overlapping ranges keep every offset once."""

from __future__ import annotations

import tracemalloc

from tests.protocol.test_share_fetch import A0, A_ID, _fetch_response, _manager, _part, _records

INT64_MAX = (1 << 63) - 1


def _answer(*acquired: tuple[int, int, int], data: bytes) -> object:
    return _fetch_response((A_ID, [_part(0, data=data, acquired=acquired)]))


def test_a_range_to_int64_max_allocates_nothing_and_hands_out_nothing() -> None:
    for acquired in (
        ((0, INT64_MAX, 1),),
        ((0, 4, 1), (5, INT64_MAX, 1)),
        tuple((i * 1000, i * 1000 + 999, 1) for i in range(2000)),  # many ranges, 2M offsets
    ):
        m = _manager()
        m.on_assignment({A0})
        (req,) = m.poll(0).requests
        tracemalloc.start()
        try:
            m.on_response(req.request_id, _answer(*acquired, data=_records(0, 5)), 1)
            m.collect(10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20, peak
        assert m.buffered_count == 0
        assert m.pending_acknowledgements() == {}


def test_bad_ranges_are_skipped_and_huge_delivery_counts_kept() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    acquired = ((-5, 1, 1), (3, 2, 1), (0, 1, 2**31 - 1), (2, 2, -7))
    m.on_response(req.request_id, _answer(*acquired, data=_records(0, 3)), 1)
    out = m.collect(10).records[A0]
    assert [(r.offset, r.delivery_count) for r in out] == [(0, 2**31 - 1), (1, 2**31 - 1), (2, 1)]


def test_overlapping_ranges_hand_out_every_acquired_offset_once() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    acquired = ((0, 5, 1), (3, 9, 2), (4, 4, 3))
    m.on_response(req.request_id, _answer(*acquired, data=_records(0, 10)), 1)
    out = m.collect(20).records[A0]
    assert [r.offset for r in out] == list(range(10))  # 6..9 were dropped before the fix
    assert [r.delivery_count for r in out] == [1] * 6 + [2] * 4
