"""The objects the NetworkActor composes: UnsentRequests and MetadataRecovery (pure, no I/O)."""

from __future__ import annotations

from kafka_actors.actors.network.messages import Send
from kafka_actors.actors.network.rebootstrap import MetadataRecovery
from kafka_actors.actors.network.unsent import UnsentRequests
from kafka_actors.protocol.connection.node import Completed, PendingRequest
from kafka_actors.protocol.messages import ANY_NODE


class _Request:
    """Stands in for a kio request (UnsentRequests never looks inside one)."""

    __api_key__ = 3
    __version__ = 12


def _pending(deadline: float, node: int = ANY_NODE, request_id: int = 0) -> PendingRequest:
    send = Send(_Request(), node=node, reply_to=None, request_id=request_id)
    return PendingRequest(send.request, send, deadline, "")


def test_expire_takes_only_what_is_due_in_queue_order_and_keeps_the_rest() -> None:
    unsent = UnsentRequests()
    a, b, c = _pending(1.0, request_id=1), _pending(5.0, request_id=2), _pending(2.0, request_id=3)
    for p in (a, b, c):
        unsent.add_any(p)
    w1, w2 = _pending(1.5, node=7, request_id=4), _pending(9.0, node=7, request_id=5)
    unsent.wait_for(7, w1)
    unsent.wait_for(7, w2)
    dropped = _pending(0.5, request_id=6)
    unsent.drop(dropped)
    expired, gone = unsent.expire(2.0)
    assert expired == [(a, ANY_NODE), (c, ANY_NODE), (w1, 7)]
    assert gone == [dropped]
    assert list(unsent.any_pending()) == [b]
    assert list(unsent.take_waiting(7)) == [w2]
    assert list(unsent.take_waiting(7)) == []  # taken once
    assert sorted(unsent.deadlines()) == [5.0]


def test_take_any_empties_the_queue_and_add_any_restores_the_order() -> None:
    unsent = UnsentRequests()
    items = [_pending(float(i), request_id=i) for i in range(4)]
    for p in items:
        unsent.add_any(p)
    taken = unsent.take_any()
    assert list(taken) == items and not unsent.has_any()
    for p in taken:
        if p is not items[1]:
            unsent.add_any(p)
    assert list(unsent.any_pending()) == [items[0], items[2], items[3]]


def test_delayed_responses_come_due_earliest_first_and_shutdown_takes_everything() -> None:
    unsent = UnsentRequests()
    first, second = _pending(10.0, request_id=1), _pending(10.0, request_id=2)
    unsent.delay(3.0, 1, Completed(second, 2, None))
    unsent.delay(2.0, 1, Completed(first, 1, None))
    assert unsent.take_due(1.0) == []
    assert sorted(unsent.deadlines())[0] == 2.0
    due = unsent.take_due(2.5)
    assert [d.event.request for d in due] == [first]
    any_node, waiting, dropped = _pending(9.0), _pending(9.0, node=4), _pending(9.0)
    unsent.add_any(any_node)
    unsent.wait_for(4, waiting)
    unsent.drop(dropped)
    assert unsent.take_all() == [(any_node, None), (waiting, 4), (dropped, None), (second, 1)]
    assert unsent.take_all() == [] and list(unsent.deadlines()) == []


def test_recovery_is_due_only_with_known_brokers_and_a_metadata_request_waiting() -> None:
    recovery = MetadataRecovery(rebootstrap=True, trigger_s=300.0)
    assert recovery.overdue(1_000.0, brokers_known=True) is None  # nothing waits
    recovery.requested(10.0)
    recovery.requested(50.0)  # counted from the first unanswered request
    assert recovery.deadline(brokers_known=False) is None
    assert recovery.deadline(brokers_known=True) == 310.0
    assert recovery.overdue(309.9, brokers_known=True) is None
    assert recovery.overdue(320.0, brokers_known=True) == 310.0
    recovery.restart(320.0)
    assert recovery.deadline(brokers_known=True) == 620.0
    recovery.answered()
    assert not recovery.waiting and recovery.overdue(10_000.0, brokers_known=True) is None
    recovery.restart(5.0)  # nothing waits: nothing to restart
    assert not recovery.waiting


def test_a_zero_trigger_never_recovers() -> None:
    recovery = MetadataRecovery(rebootstrap=False, trigger_s=0.0)
    recovery.requested(0.0)
    assert recovery.deadline(brokers_known=True) is None
    assert recovery.overdue(1e9, brokers_known=True) is None
