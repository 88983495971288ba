"""One partition's completion window: the committed offset, gaps, the inherited map, and
the transitions count that bounds the map's size."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_actors.parallel import offset_map as om
from kafka_actors.parallel.window import CompletionWindow


def _recount(window: CompletionWindow) -> int:
    status = window._status[window._head :]
    return sum(1 for i in range(len(status) - 1) if status[i] != status[i + 1])


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, list[int], list[int]]:
    start = draw(st.integers(0, 10**12))
    steps = draw(st.lists(st.integers(1, 4), min_size=1, max_size=300))
    offsets = []
    offset = start
    for step in steps:
        offset += step - 1 if not offsets else step  # steps above 1 leave gaps
        offsets.append(offset)
    order = draw(st.permutations(offsets))
    done = order[: draw(st.integers(0, len(order)))]
    return start, offsets, list(done)


@given(histories())
@settings(max_examples=300, deadline=None)
def test_base_map_and_transitions_follow_any_completion_order(
    history: tuple[int, list[int], list[int]],
) -> None:
    start, offsets, done = history
    window = CompletionWindow(start)
    for offset in offsets:
        assert window.receive(offset)
    received = set(offsets)
    completed: set[int] = set()
    for offset in done:
        window.complete(offset)
        completed.add(offset)
        pending = received - completed
        expected_base = min(pending) if pending else offsets[-1] + 1
        assert window.base == expected_base
        assert window.transitions == _recount(window)
    decoded = om.decode(window.encode(), window.base)
    assert decoded is not None
    for offset in range(window.base + 1, offsets[-1] + 1):
        is_done = offset in completed or offset not in received  # a gap is completed
        assert (offset in decoded) is is_done
    assert len(window.encode()) <= window.size_bound(0)
    # every record of the window completes: the bound held for all of them beforehand
    bound = window.size_bound(len(received - completed))
    for offset in sorted(received - completed, reverse=True):
        window.complete(offset)
        assert len(window.encode()) <= bound
    assert window.base == offsets[-1] + 1 and window.span == 0


def test_gaps_are_completed_and_the_base_passes_them() -> None:
    window = CompletionWindow(100)
    assert window.receive(100)
    assert window.receive(103)  # 101, 102: transaction markers or compacted
    window.complete(100)
    assert window.base == 103
    window.complete(103)
    assert window.base == 104 and window.span == 0


def test_a_large_gap_while_nothing_is_pending_costs_nothing() -> None:
    window = CompletionWindow(0)
    assert window.receive(10**12)
    assert window.base == 10**12 and len(window._status) == 1


def test_records_completed_by_the_inherited_map_are_not_work() -> None:
    inherited = om.decode(om.encode_ranges(50, [(51, 53), (55, 56)]), 50)
    window = CompletionWindow(50, inherited)
    assert window.base == 50
    assert [window.receive(o) for o in range(50, 58)] == [
        True,
        False,
        False,
        True,
        True,
        False,
        True,
        True,
    ]
    window.complete(50)
    assert window.base == 53  # 51 and 52 were completed by the previous owner
    # the inherited offsets stay in the map of the next commit
    decoded = om.decode(window.encode(), 53)
    assert decoded is not None and decoded.ranges == ((55, 56),)


def test_inherited_offsets_not_yet_received_stay_in_the_map() -> None:
    inherited = om.decode(om.encode_ranges(10, [(20, 30)]), 10)
    window = CompletionWindow(10, inherited)
    assert window.receive(10)
    decoded = om.decode(window.encode(), 10)
    assert decoded is not None and decoded.ranges == ((20, 30),)


def test_a_record_received_twice_is_work_once() -> None:
    window = CompletionWindow(0)
    assert window.receive(0)
    assert not window.receive(0)


def _state(window: CompletionWindow) -> tuple[object, ...]:
    return (
        window.base,
        window.next_offset,
        window.span,
        window.transitions,
        bytes(window._status[window._head :]),
    )


@st.composite
def runs(draw: st.DrawFn) -> tuple[int, om.OffsetMap | None, list[int], list[int], int, int]:
    """A window (maybe inherited), records received and completed, then a run to receive."""
    start = draw(st.integers(0, 10**12))
    inherited: om.OffsetMap | None = None
    if draw(st.booleans()):
        completed = draw(st.lists(st.booleans(), min_size=1, max_size=40))
        completed[-1] = True
        inherited = om.decode(om.encode(start, bytes(completed)), start)
    received = sorted(set(draw(st.lists(st.integers(start, start + 60), max_size=40))))
    done = draw(st.permutations(received))
    done = done[: draw(st.integers(0, len(done)))]
    last = received[-1] + 1 if received else start
    first = draw(st.integers(last - 2, last + 3))
    count = draw(st.integers(1, 30))
    return start, inherited, received, list(done), first, count


@given(runs())
@settings(max_examples=400, deadline=None)
def test_a_run_received_at_once_is_what_receiving_it_record_by_record_makes(
    case: tuple[int, om.OffsetMap | None, list[int], list[int], int, int],
) -> None:
    start, inherited, received, done, first, count = case
    windows = [CompletionWindow(start, inherited), CompletionWindow(start, inherited)]
    for window in windows:
        for offset in received:
            window.receive(offset)
        for offset in done:
            window.complete(offset)
    at_once, one_by_one = windows
    before = _state(at_once)
    if not at_once.receive_run(first, count):
        assert _state(at_once) == before  # nothing changed: the caller goes one by one
        return
    work = [one_by_one.receive(offset) for offset in range(first, first + count)]
    assert all(work)
    assert _state(at_once) == _state(one_by_one)
    assert at_once.transitions == _recount(at_once)


def test_a_gap_at_the_base_before_inherited_offsets_moves_the_base_past_them() -> None:
    # Committed 921 with 922 and 923 completed in its map; 921 is gone (compacted): the
    # fetch starts at 922. The gap completes 921, the base jumps to 924.
    inherited = om.decode(om.encode(921, b"\x01\x01"), 921)
    window = CompletionWindow(921, inherited)
    assert not window.receive(922)
    assert window.base == 924
    assert window.receive(924)
    # the same with the next record further on: the gaps after the inherited ones too
    window = CompletionWindow(805, om.decode(om.encode(805, b"\x01\x01"), 805))
    assert window.receive(861)
    assert (window.base, window.span, window.transitions) == (861, 0, 0)
    assert window.receive(862) and window.base == 861
