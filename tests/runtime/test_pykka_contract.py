"""Contract test: what kafka_actors.runtime relies on in the installed pykka.

Every private name and semantic listed in the runtime module's docstring is checked here, by
name, first structurally (the attribute exists, takes what we pass) and then through a real
:class:`RuntimeActor` (the hook runs when and where we say). A pykka upgrade that changes any
of it fails here; the fix belongs in ``kafka_actors/runtime.py`` alone.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import queue
import threading
from typing import Any

import pykka
import pytest
from pykka import messages as pykka_messages
from pykka._envelope import Envelope

from kafka_actors.runtime import (
    PYKKA_MAJOR,
    AlreadySet,
    FirstWinsFuture,
    RuntimeActor,
    envelope,
    is_stop,
)

TIMEOUT = 10.0


# -- structure: the private names exist with the signatures we call ------------------------------


def test_installed_pykka_is_the_major_version_the_runtime_is_written_for() -> None:
    version = importlib.metadata.version("pykka")
    assert int(version.split(".")[0]) == PYKKA_MAJOR, (
        f"pykka {version} installed; kafka_actors/runtime.py is written for {PYKKA_MAJOR}.x"
    )


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("_create_actor_inbox", []),
        ("_create_future", []),
        ("_handle_receive", ["self", "message"]),
        ("_handle_failure", ["self", "exception_type", "exception_value", "traceback"]),
        ("_actor_loop", ["self"]),
        ("_actor_loop_teardown", ["self"]),
    ],
)
def test_private_hooks_exist_with_their_signatures(name: str, parameters: list[str]) -> None:
    hook = inspect.getattr_static(pykka.ThreadingActor, name, None)
    if hook is None:
        hook = inspect.getattr_static(pykka.Actor, name, None)
    assert hook is not None, f"pykka.Actor.{name} is gone"
    function = hook.__func__ if isinstance(hook, (staticmethod, classmethod)) else hook
    assert list(inspect.signature(function).parameters) == parameters


def test_envelope_and_stop_message_types() -> None:
    item = Envelope("m")
    assert (item.message, item.reply_to) == ("m", None)
    future: pykka.Future[Any] = pykka.ThreadingFuture()
    assert Envelope("m", reply_to=future).reply_to is future
    assert isinstance(pykka_messages._ActorStop(), tuple)
    assert is_stop(pykka_messages._ActorStop())
    assert not is_stop("stop")
    assert isinstance(envelope("x"), Envelope)


def test_a_future_completed_twice_raises_already_set() -> None:
    future: pykka.Future[Any] = pykka.ThreadingFuture()
    future.set(1)
    with pytest.raises(AlreadySet):
        future.set(2)
    with pytest.raises(AlreadySet):
        future.set_exception((ValueError, ValueError("late"), None))
    assert future.get(timeout=0) == 1


def test_first_wins_future_ignores_later_completions() -> None:
    future = FirstWinsFuture()
    future.set_exception((KeyError, KeyError("first"), None))
    future.set(2)
    future.set_exception((ValueError, ValueError("late"), None))
    with pytest.raises(KeyError):
        future.get(timeout=0)


# -- semantics: the hooks run through a real actor -----------------------------------------------


class RecordingInbox(queue.Queue[Any]):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.seen.append(item)
        super().put(item, block, timeout)


class Probe(RuntimeActor):
    """Records every hook call as (hook, detail, thread name)."""

    def __init__(self, log: list[tuple[str, Any]], *, fail_in: str | None = None) -> None:
        super().__init__()
        self.log = log
        self.fail_in = fail_in
        self.thread: str | None = None

    @classmethod
    def create_inbox(cls) -> Any:
        return RecordingInbox()

    def _note(self, hook: str, detail: Any = None) -> None:
        self.log.append((hook, detail))

    def on_start(self) -> None:
        self.thread = threading.current_thread().name
        self._note("on_start")
        if self.fail_in == "on_start":
            raise RuntimeError("start")

    def before_receive(self, message: Any) -> None:
        self._note("before_receive", message)
        if message == "refuse":
            raise LookupError("refused")

    def on_receive(self, message: Any) -> Any:
        self._note("on_receive", message)
        if message == "boom":
            raise ValueError("boom")
        if message == "block":
            gate.wait(TIMEOUT)
        return ("echo", message)

    def ping(self) -> str:
        return "pong"

    def on_stop(self) -> None:
        self._note("on_stop")
        if self.fail_in == "on_stop":
            raise RuntimeError("stop")

    def on_failure(self, *exc_info: Any) -> None:
        self._note("on_failure", repr(exc_info[1]))

    def on_crash(self, exception: BaseException | None) -> None:
        self._note("on_crash", repr(exception))

    def on_undelivered(self, message: Any) -> None:
        self._note("on_undelivered", message)

    def on_thread_exit(self) -> None:
        assert threading.current_thread().name == self.thread
        self._note("on_thread_exit")


gate = threading.Event()


def _start(log: list[tuple[str, Any]], **kwargs: Any) -> pykka.ActorRef[Probe]:
    return Probe.start(log, **kwargs)


def _wait_exit(ref: pykka.ActorRef[Any], log: list[tuple[str, Any]]) -> None:
    ref.actor_stopped.wait(TIMEOUT)
    for _ in range(1000):
        if log and log[-1][0] == "on_thread_exit":
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"the actor thread did not end: {log}")


def hooks(log: list[tuple[str, Any]]) -> list[str]:
    return [hook for hook, _ in log]


def test_the_inbox_comes_from_create_inbox_and_receives_envelopes() -> None:
    log: list[tuple[str, Any]] = []
    ref = _start(log)
    try:
        inbox = ref.actor_inbox
        assert isinstance(inbox, RecordingInbox)
        ref.tell("told")
        assert ref.ask("asked", timeout=TIMEOUT) == ("echo", "asked")
        told, asked = inbox.seen[:2]
        assert (told.message, told.reply_to) == ("told", None)
        assert asked.message == "asked" and asked.reply_to is not None
        # An envelope the inbox makes itself is handled like a told message.
        inbox.put(envelope("from the inbox"))
        assert ref.ask("sync", timeout=TIMEOUT) == ("echo", "sync")
        assert ("on_receive", "from the inbox") in log
    finally:
        ref.stop()


def test_asks_wait_on_the_reply_future_class() -> None:
    class FirstWins(Probe):
        reply_future = FirstWinsFuture

    log: list[tuple[str, Any]] = []
    ref = FirstWins.start(log)
    try:
        future = ref.ask("x", block=False)
        assert isinstance(future, FirstWinsFuture)
        assert future.get(timeout=TIMEOUT) == ("echo", "x")
        assert type(_start_and_ask(log)) is pykka.ThreadingFuture
    finally:
        ref.stop()


def _start_and_ask(log: list[tuple[str, Any]]) -> Any:
    ref = _start(log)
    try:
        future = ref.ask("y", block=False)
        future.get(timeout=TIMEOUT)
        return future
    finally:
        ref.stop()


def test_before_receive_runs_before_every_message_but_the_stop_request() -> None:
    log: list[tuple[str, Any]] = []
    ref = _start(log)
    ref.tell("t")
    ref.ask("a", timeout=TIMEOUT)
    assert ref.proxy().ping().get(timeout=TIMEOUT) == "pong"
    ref.stop()
    _wait_exit(ref, log)
    received = [(h, d) for h, d in log if h in ("before_receive", "on_receive")]
    assert received[:4] == [
        ("before_receive", "t"),
        ("on_receive", "t"),
        ("before_receive", "a"),
        ("on_receive", "a"),
    ]
    assert isinstance(received[4][1], pykka_messages.ProxyCall)  # proxy calls pass it too
    assert len(received) == 5  # nothing for the stop request
    assert hooks(log)[-2:] == ["on_stop", "on_thread_exit"]
    assert "on_crash" not in hooks(log)


def test_stop_goes_through_the_inbox_as_the_stop_message() -> None:
    log: list[tuple[str, Any]] = []
    ref = _start(log)
    inbox = ref.actor_inbox
    assert isinstance(inbox, RecordingInbox)
    ref.stop()
    _wait_exit(ref, log)
    assert any(is_stop(item.message) for item in inbox.seen)
    assert hooks(log) == ["on_start", "on_stop", "on_thread_exit"]


def test_a_told_message_that_raises_calls_on_crash_then_on_failure() -> None:
    log: list[tuple[str, Any]] = []
    ref = _start(log)
    ref.tell("boom")
    _wait_exit(ref, log)
    assert hooks(log) == [
        "on_start",
        "before_receive",
        "on_receive",
        "on_crash",
        "on_failure",
        "on_thread_exit",
    ]
    assert log[3][1] == repr(ValueError("boom"))
    assert not ref.is_alive()


def test_an_asked_message_that_raises_goes_to_the_caller_and_the_actor_lives() -> None:
    log: list[tuple[str, Any]] = []
    ref = _start(log)
    try:
        with pytest.raises(ValueError, match="boom"):
            ref.ask("boom", timeout=TIMEOUT)
        assert ref.ask("still", timeout=TIMEOUT) == ("echo", "still")
        assert "on_crash" not in hooks(log) and "on_failure" not in hooks(log)
    finally:
        ref.stop()


def test_before_receive_raising_fails_the_message_like_on_receive() -> None:
    log: list[tuple[str, Any]] = []
    ref = _start(log)
    with pytest.raises(LookupError):
        ref.ask("refuse", timeout=TIMEOUT)
    assert ref.is_alive()
    ref.tell("refuse")
    _wait_exit(ref, log)
    assert ("on_receive", "refuse") not in log
    assert hooks(log)[-3:] == ["on_crash", "on_failure", "on_thread_exit"]


def test_a_failed_on_start_calls_only_on_crash() -> None:
    log: list[tuple[str, Any]] = []
    ref = _start(log, fail_in="on_start")
    _wait_exit(ref, log)
    assert hooks(log) == ["on_start", "on_crash", "on_thread_exit"]


def test_a_failed_on_stop_calls_on_crash() -> None:
    log: list[tuple[str, Any]] = []
    ref = _start(log, fail_in="on_stop")
    ref.stop()
    _wait_exit(ref, log)
    assert hooks(log) == ["on_start", "on_stop", "on_crash", "on_thread_exit"]


def test_messages_left_at_stop_reach_on_undelivered_and_their_asks_fail() -> None:
    log: list[tuple[str, Any]] = []
    gate.clear()
    ref = _start(log)
    ref.tell("block")  # holds the actor while the rest queues up behind it
    ref.stop(block=False)
    ref.tell("after stop")
    late = ref.ask("asked late", block=False)
    ref.actor_inbox.put(envelope("raced"))  # an envelope the inbox made itself
    gate.set()
    _wait_exit(ref, log)
    undelivered = [d for h, d in log if h == "on_undelivered"]
    assert undelivered == ["after stop", "asked late", "raced"]
    with pytest.raises(pykka.ActorDeadError):
        late.get(timeout=TIMEOUT)
    # on_stop first, then the leftovers, then the thread's end.
    assert hooks(log)[-5:] == [
        "on_stop",
        "on_undelivered",
        "on_undelivered",
        "on_undelivered",
        "on_thread_exit",
    ]
