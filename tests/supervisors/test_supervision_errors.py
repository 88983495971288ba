"""Supervision errors sit in the project's hierarchy and survive pickling."""

from __future__ import annotations

import pickle

from kafka_actors.errors import FatalConsumerError, KafkaTimeoutError, RetriableError
from kafka_actors.supervisors import (
    ChildRestartingError,
    ChildTimeoutError,
    ExitReason,
    GiveUp,
    InjectedFault,
    SupervisorEscalation,
    SupervisorFatalError,
)

CAUSE = GiveUp("root", "fetch", ExitReason.EXCEPTION, ValueError("bad"), 4, 3, 5.0)


def test_retriable_and_fatal_classification() -> None:
    assert isinstance(ChildRestartingError(child="a"), RetriableError)
    assert ChildRestartingError(child="a").retriable
    assert isinstance(ChildTimeoutError(child="a", timeout=1.0), KafkaTimeoutError)
    fatal = SupervisorFatalError(supervisor="root", cause=CAUSE)
    assert isinstance(fatal, FatalConsumerError) and not fatal.retriable
    assert not SupervisorEscalation(supervisor="sub", cause=CAUSE).retriable


def test_fatal_error_names_the_cause() -> None:
    text = str(SupervisorFatalError(supervisor="root", cause=CAUSE))
    assert "'fetch'" in text and "4 times" in text and "max_restarts=3" in text
    assert "ValueError('bad')" in text


def test_errors_pickle_with_their_fields() -> None:
    for err in (
        ChildRestartingError(child="a"),
        ChildTimeoutError(child="a", timeout=2.5),
        SupervisorFatalError(supervisor="root", cause=CAUSE),
        SupervisorEscalation(supervisor="root/sub", cause=CAUSE),
    ):
        copy = pickle.loads(pickle.dumps(err))
        assert type(copy) is type(err) and str(copy) == str(err)
        assert copy.__dict__.keys() == err.__dict__.keys()
    fault = pickle.loads(pickle.dumps(InjectedFault("w", "msg")))
    assert (fault.actor, fault.message) == ("w", "msg")
