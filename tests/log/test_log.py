"""kafka_actors.log: trace ids bind to lines, secrets are redacted, JSON and stdlib routing."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import MutableMapping
from typing import Any

import pytest
import structlog

from kafka_actors import log


@pytest.fixture(autouse=True)
def _reset_structlog() -> object:
    yield
    structlog.reset_defaults()
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
    assert "committed" in records[0].getMessage()
    assert getattr(records[0], "password", None) == "[hidden]"
    assert getattr(records[0], "trace_id", None) == "abc"


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


def test_stdlib_routing_with_reserved_keys(caplog: pytest.LogCaptureFixture) -> None:
    log.configure(stdlib=True)
    with caplog.at_level(logging.INFO, logger="kafka_actors"):
        log.get_logger("x").info("tell_dropped", message="m", args=(1,))
    record = next(r for r in caplog.records if r.name == "kafka_actors.x")
    assert getattr(record, "message_", None) == "m"


def test_unconfigured_structlog_logs_only_warnings_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # Nobody configured structlog (structlog's own defaults would print debug lines to stdout).
    structlog.reset_defaults()
    logger = log.get_logger("fetch", client_id="c1").bind(node=1)
    with log.traced("t1"):
        logger.debug("fetch_request", sent=1)
        logger.info("assigned")
        logger.warning("commit_failed", sasl_password="hunter2")
    out, err = capfd.readouterr()
    assert out == ""
    assert "fetch_request" not in err and "assigned" not in err
    assert "commit_failed" in err
    assert "client_id=c1" in err and "node=1" in err and "trace_id=t1" in err
    assert "hunter2" not in err
    # A later configuration is followed by the same logger object (it stays lazy).
    buf = io.StringIO()
    log.configure(json=True, level="DEBUG", stream=buf)
    logger.debug("fetch_request", sent=2)
    assert json.loads(buf.getvalue())["sent"] == 2


def test_a_services_own_structlog_configuration_is_followed() -> None:
    seen: list[dict[str, object]] = []

    def keep(_: Any, __: str, event: MutableMapping[str, Any]) -> str:
        seen.append(dict(event))
        return ""

    structlog.configure(
        processors=[keep], logger_factory=structlog.ReturnLoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
    )
    log.get_logger("network", client_id="c2").debug("node_ready", node=3)
    assert seen == [{"client_id": "c2", "node": 3, "event": "node_ready"}]
