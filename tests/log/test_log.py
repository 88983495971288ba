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
