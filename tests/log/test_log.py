"""kafka_actors.log: trace ids bind to lines, secrets are redacted, JSON and stdlib routing."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from kafka_actors import log


@pytest.fixture(autouse=True)
def _clear_contextvars() -> object:
    yield
    structlog.contextvars.clear_contextvars()


def test_json_lines_carry_trace_id_and_hide_secrets() -> None:
    out = io.StringIO()
    log.configure(json=True, level="DEBUG", stream=out)
    logger = log.get_logger("network", client_id="c1")
    trace = log.new_trace_id()
    with log.traced(trace):
        assert log.current_trace_id() == trace
        logger.info("send", api="Metadata", sasl_password="hunter2", cfg={"ssl.key.password": "x"})
    logger.info("after")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["trace_id"] == trace
    assert lines[0]["client_id"] == "c1"
    assert lines[0]["sasl_password"] == "[hidden]"
    assert lines[0]["cfg"]["ssl.key.password"] == "[hidden]"
    assert "hunter2" not in out.getvalue()
    assert "trace_id" not in lines[1]
    assert log.current_trace_id() is None


def test_level_filtering() -> None:
    out = io.StringIO()
    log.configure(json=True, level="WARNING", stream=out)
    log.get_logger("x").info("quiet")
    log.get_logger("x").warning("loud")
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["loud"]


def test_stdlib_routing(caplog: pytest.LogCaptureFixture) -> None:
    log.configure(stdlib=True)
    with caplog.at_level(logging.INFO, logger="kafka_actors"):
        with log.traced("abc"):
            log.get_logger("commit").info("committed", password="p")
    records = [r for r in caplog.records if r.name == "kafka_actors.commit"]
    assert len(records) == 1
    assert records[0].getMessage() == "committed password=[hidden] trace_id=abc"
    fields = records[0].kafka_actors  # type: ignore[attr-defined]
    assert fields == {"event": "committed", "password": "[hidden]", "trace_id": "abc"}


def test_bad_level_is_an_error() -> None:
    with pytest.raises(ValueError):
        log.configure(level="LOUD")


def test_logger_created_before_configure_follows_it() -> None:
    early = log.get_logger("early", client_id="c9")  # e.g. a module-level logger
    out = io.StringIO()
    log.configure(json=True, level="INFO", stream=out)
    early.info("hello")
    line = json.loads(out.getvalue().splitlines()[0])
    assert line["event"] == "hello"
    assert line["client_id"] == "c9"


def test_keys_named_like_logrecord_attributes_do_not_clash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="kafka_actors"):
        log.get_logger("x").info("tell_dropped", message="m", args=(1,), name="n")
    record = next(r for r in caplog.records if r.name == "kafka_actors.x")
    assert record.getMessage() == "tell_dropped message=m args=(1,) name=n"
    assert record.kafka_actors["message"] == "m"  # type: ignore[attr-defined]
    assert record.name == "kafka_actors.x"


def test_context_variables_cross_between_our_lines_and_an_applications_structlog(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """We bind without structlog (issue 26), under structlog's names: the application's
    ``bind_contextvars`` shows in our lines, our trace id in its structlog lines, and its
    ``clear_contextvars`` clears ours too."""
    structlog.contextvars.bind_contextvars(request_id="r7")
    app_lines: list[dict[str, object]] = []

    def keep(_logger: object, _name: str, event_dict: dict[str, object]) -> dict[str, object]:
        app_lines.append(dict(event_dict))
        raise structlog.DropEvent

    app = structlog.wrap_logger(
        structlog.ReturnLogger(), processors=[structlog.contextvars.merge_contextvars, keep]
    )
    with caplog.at_level(logging.INFO, logger="kafka_actors"), log.traced("t1", phase="poll"):
        log.get_logger("fetch").info("ours", request_id="explicit")
        log.get_logger("fetch").info("ours_again")
        app.info("theirs")
        assert structlog.contextvars.get_contextvars() == {
            "request_id": "r7",
            "trace_id": "t1",
            "phase": "poll",
        }
        structlog.contextvars.clear_contextvars()
        assert log.current_trace_id() is None
        log.get_logger("fetch").info("cleared")
    fields = [r.kafka_actors for r in caplog.records if r.name == "kafka_actors.fetch"]  # type: ignore[attr-defined]
    assert fields == [
        {"event": "ours", "request_id": "explicit", "trace_id": "t1", "phase": "poll"},
        {"event": "ours_again", "request_id": "r7", "trace_id": "t1", "phase": "poll"},
        {"event": "cleared"},
    ]
    assert app_lines == [{"event": "theirs", "request_id": "r7", "trace_id": "t1", "phase": "poll"}]


def test_traced_restores_what_was_bound_before_and_nests() -> None:
    with log.traced("outer"):
        with log.traced("inner", stage="x"):
            assert log.current_trace_id() == "inner"
        assert log.current_trace_id() == "outer"
        assert structlog.contextvars.get_contextvars() == {"trace_id": "outer"}
        with log.traced(None):
            assert log.current_trace_id() == "outer"
    assert log.current_trace_id() is None
    assert structlog.contextvars.get_contextvars() == {}


def test_bound_loggers_bind_unbind_and_new_as_structlogs_do() -> None:
    base = log.get_logger("x", a=1)
    bound = base.bind(b=2)
    assert bound != base and bound == log.get_logger("x", a=1, b=2)
    assert bound.unbind("a") == log.get_logger("x", b=2)
    with pytest.raises(KeyError):
        bound.unbind("missing")
    assert bound.try_unbind("a", "missing") == log.get_logger("x", b=2)
    assert bound.new(c=3) == log.get_logger("x", c=3)
    assert base == log.get_logger("x", a=1)  # binding made new loggers
