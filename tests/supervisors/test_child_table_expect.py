"""ChildTable.expect: messages told to a child before its first incarnation runs are kept and
delivered to it first when it starts; everything else is refused as before (unknown child:
KeyError; asks before the start and tells while a child that ran restarts:
ChildRestartingError). The supervisor side is driven by hand (``_set_running`` /
``_child_down`` / ``_set_status``, what :class:`Supervision` calls), so no start races."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from kafka_actors.supervisors.core import ChildStatus
from kafka_actors.supervisors.errors import ChildRestartingError
from kafka_actors.supervisors.supervisor import ChildTable, TreeStatus

WAIT = 15.0


class Recorder(pykka.ThreadingActor):
    def __init__(self, seen: list[Any], done: threading.Event, until: Any) -> None:
        super().__init__()
        self.seen = seen
        self.done = done
        self.until = until

    def on_receive(self, message: Any) -> Any:
        self.seen.append(message)
        if message == self.until:
            self.done.set()
        return message


@pytest.fixture
def actors() -> Iterator[list[pykka.ActorRef[Any]]]:
    started: list[pykka.ActorRef[Any]] = []
    yield started
    for ref in started:
        ref.stop(block=True, timeout=WAIT)


def _recorder(
    actors: list[pykka.ActorRef[Any]], until: Any
) -> tuple[pykka.ActorRef[Any], list[Any], threading.Event]:
    seen: list[Any] = []
    done = threading.Event()
    ref = Recorder.start(seen, done, until)
    actors.append(ref)
    return ref, seen, done


def test_tells_before_the_first_start_are_delivered_first_in_order(
    actors: list[pykka.ActorRef[Any]],
) -> None:
    table = ChildTable("network", TreeStatus())
    table.expect(["membership"])
    table.tell("membership", "subscribe")
    table.tell("membership", "poll")
    ref, seen, done = _recorder(actors, until="later")
    table._set_running("membership", 1, ref)
    table.tell("membership", "later")
    assert done.wait(WAIT)
    assert seen == ["subscribe", "poll", "later"]
    assert table.status("membership") is ChildStatus.RUNNING


def test_asks_before_the_first_start_are_refused_as_restarting() -> None:
    table = ChildTable("network", TreeStatus())
    table.expect(["fetch"])
    with pytest.raises(ChildRestartingError):
        table.ask("fetch", "collect", WAIT)


def test_a_child_nobody_announced_is_unknown() -> None:
    table = ChildTable("network", TreeStatus())
    table.expect(["metadata"])
    with pytest.raises(KeyError):
        table.tell("membership", "poll")


def test_a_failed_first_start_keeps_the_messages_for_the_next_attempt(
    actors: list[pykka.ActorRef[Any]],
) -> None:
    table = ChildTable("network", TreeStatus())
    table.expect(["commit"])
    table.tell("commit", "poll")
    table._set_status("commit", ChildStatus.RESTARTING)  # start failed, restart planned
    table.tell("commit", "poll again")
    ref, seen, done = _recorder(actors, until="poll again")
    table._set_running("commit", 2, ref)
    assert done.wait(WAIT)
    assert seen == ["poll", "poll again"]


def test_a_child_that_ran_refuses_tells_while_it_restarts(
    actors: list[pykka.ActorRef[Any]],
) -> None:
    table = ChildTable("network", TreeStatus())
    table.expect(["membership"])
    ref, seen, done = _recorder(actors, until="first")
    table._set_running("membership", 1, ref)
    table.tell("membership", "first")
    assert done.wait(WAIT)
    table._child_down("membership", 1)
    table._set_status("membership", ChildStatus.RESTARTING)
    with pytest.raises(ChildRestartingError):
        table.tell("membership", "dropped")  # the restarted incarnation rebuilds its state
    assert seen == ["first"]


def test_expect_leaves_a_known_child_alone(actors: list[pykka.ActorRef[Any]]) -> None:
    table = ChildTable("network", TreeStatus())
    ref, seen, done = _recorder(actors, until="direct")
    table._set_running("fetch", 1, ref)
    table.expect(["fetch"])
    table.tell("fetch", "direct")
    assert done.wait(WAIT)
    assert seen == ["direct"]
    assert table.status("fetch") is ChildStatus.RUNNING
