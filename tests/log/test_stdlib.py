"""Logging as Python libraries do (issue 25, Show 1): our lines are stdlib ``logging`` records
under ``kafka_actors.*``, governed by the application's handlers and levels; structlog's
global configuration is never touched; a plain ``%(message)s`` names the context.

Each test failed on the old code, where our lines went to structlog's own printer (or, once
structlog was configured, through the application's structlog chain), never to stdlib
handlers, and ``configure()`` called ``structlog.configure``."""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from kafka_actors import log
from kafka_actors.testing import capture_logs

ROOT = Path(__file__).resolve().parents[2]


class _Lines(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing into a string, formatted ``LEVEL name message``."""

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))

    def getvalue(self) -> str:
        return str(self.stream.getvalue())


@pytest.fixture
def root_handler() -> Iterator[_Lines]:
    """A handler on the root logger, as an application's ``logging.basicConfig`` puts there
    (basicConfig itself does nothing under pytest, whose own handlers are on the root
    logger); removed after the test, and the root's level restored."""
    handler = _Lines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def test_the_applications_handlers_and_levels_govern_our_lines(root_handler: _Lines) -> None:
    logger = log.get_logger("network", client_id="c1").bind(node=1)
    logging.getLogger().setLevel(logging.WARNING)
    logger.info("node_ready")
    logger.warning("node_unavailable", reason="refused")
    assert root_handler.getvalue().splitlines() == [
        "WARNING kafka_actors.network node_unavailable client_id=c1 node=1 reason=refused"
    ]
    # The application silences us below ERROR, as it would any library.
    logging.getLogger("kafka_actors").setLevel(logging.ERROR)
    logger.warning("node_unavailable", reason="again")
    logger.error("fatal", reason="gone")
    assert [line.split()[2] for line in root_handler.getvalue().splitlines()] == [
        "node_unavailable",
        "fatal",
    ]
    # ... or asks for our debug lines of one component.
    logging.getLogger("kafka_actors").setLevel(logging.NOTSET)
    logging.getLogger("kafka_actors.fetch").setLevel(logging.DEBUG)
    try:
        log.get_logger("fetch").debug("fetch_request", node=2)
        logger.debug("not_this_one")
    finally:
        logging.getLogger("kafka_actors.fetch").setLevel(logging.NOTSET)
    assert root_handler.getvalue().splitlines()[-1] == (
        "DEBUG kafka_actors.fetch fetch_request node=2"
    )
    assert "not_this_one" not in root_handler.getvalue()


def test_a_filter_of_the_application_applies(root_handler: _Lines) -> None:
    class NoHeartbeats(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not record.getMessage().startswith("heartbeat")

    root_handler.addFilter(NoHeartbeats())
    logger = log.get_logger("membership")
    logger.warning("heartbeat_error", error_code=14)
    logger.warning("member_fenced", member_id="m1")
    assert root_handler.getvalue() == "WARNING kafka_actors.membership member_fenced member_id=m1\n"


def test_a_disabled_level_renders_nothing() -> None:
    """A debug call below the logger's level returns before any processor runs (here a value
    that cannot be rendered would raise)."""

    class Unprintable:
        def __str__(self) -> str:
            raise AssertionError("rendered")

        __repr__ = __str__

    logging.getLogger("kafka_actors").setLevel(logging.INFO)
    log.get_logger("fetch").debug("fetch_request", value=Unprintable())
    assert not log.get_logger("fetch").is_enabled_for(logging.DEBUG)
    with pytest.raises(AssertionError, match="rendered"):
        log.get_logger("fetch").info("fetch_request", value=Unprintable())


def test_the_record_names_the_caller_and_carries_the_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="kafka_actors"):
        try:
            raise ValueError("boom")
        except ValueError:
            log.get_logger("supervisor").exception("child_crashed", child="w")
    (record,) = [r for r in caplog.records if r.name == "kafka_actors.supervisor"]
    assert (record.pathname, record.funcName) == (
        __file__,
        "test_the_record_names_the_caller_and_carries_the_exception",
    )
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)
    assert record.getMessage() == "child_crashed child=w"


def test_message_values_with_spaces_are_quoted(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="kafka_actors"):
        log.get_logger("x").info(
            "e", a="two words", b='say "hi"', c="", d=None, e=["x", "y"], f="a=b", g="l1\nl2"
        )
    (record,) = [r for r in caplog.records if r.name == "kafka_actors.x"]
    assert record.getMessage() == (
        'e a="two words" b="say \\"hi\\"" c="" d=None e="[\'x\', \'y\']" f="a=b" g="l1\\nl2"'
    )


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_plain_message_format_names_the_broker_address_and_the_error() -> None:
    """The network's real ``node_unavailable`` warning (a consumer whose bootstrap server
    refuses connections), through a handler formatted with ``%(message)s`` only. On the old
    code, with ``configure(stdlib=True)``, it read ``node_unavailable``: its context went to
    ``extra``."""
    from kafka_actors import KafkaConsumer

    port = _closed_port()
    address = f"127.0.0.1:{port}"
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    records: list[logging.LogRecord] = []
    handler.addFilter(lambda record: records.append(record) or True)
    consumer = KafkaConsumer({"bootstrap.servers": address, "group.id": "plain-format"})
    try:
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 60  # a bound for a loaded machine, not a timing
        while "all_brokers_unavailable" not in out.getvalue():
            assert time.monotonic() < deadline, out.getvalue()
            consumer.poll(0.1)
    finally:
        consumer.close(timeout=1)
        root.removeHandler(handler)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("node_unavailable "))
    error = f"Cannot connect to {address}: Connection refused (ECONNREFUSED)"
    assert f"address={address} " in line, line
    assert 'reason="connection could not be established"' in line, line
    assert f'error="{error}' in line, line
    assert "bootstrap=True" in line, line
    every = next(x for x in out.getvalue().splitlines() if x.startswith("all_brokers_unavailable"))
    assert address in every and f'last_error="{error}' in every, every
    # The same as structured fields, for JSON formatters.
    fields = next(
        r.kafka_actors  # type: ignore[attr-defined]
        for r in records
        if r.kafka_actors["event"] == "node_unavailable"  # type: ignore[attr-defined]
    )
    assert fields["address"] == address and fields["error"].startswith(error), fields
    assert fields["reason"] == "connection could not be established"


def _structlog_state() -> tuple[bool, dict[str, Any]]:
    return structlog.is_configured(), structlog.get_config()


def test_structlog_configuration_is_untouched_when_nobody_configured_it(
    root_handler: _Lines,
) -> None:
    structlog.reset_defaults()
    before = _structlog_state()
    _use_everything(root_handler)
    assert _structlog_state() == before
    assert not structlog.is_configured()


def test_an_application_on_structlog_keeps_its_configuration_and_gets_our_lines_in_stdlib(
    root_handler: _Lines,
) -> None:
    seen: list[dict[str, Any]] = []

    def keep(_: Any, __: str, event: MutableMapping[str, Any]) -> str:
        seen.append(dict(event))
        return ""

    structlog.configure(
        processors=[keep],
        logger_factory=structlog.ReturnLoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=True,
    )
    before = _structlog_state()
    _use_everything(root_handler)
    assert _structlog_state() == before
    assert seen == []  # none of our lines went through the application's structlog chain
    structlog.get_logger("app").info("app_line")
    assert [e["event"] for e in seen] == ["app_line"]


def _use_everything(root_handler: _Lines) -> None:
    """Import the package, create loggers, log at every level, create and close a consumer,
    call every form of configure(): our lines reach the root logger's handler."""
    import kafka_actors
    from kafka_actors import KafkaConsumer

    assert kafka_actors.__name__
    logging.getLogger().setLevel(logging.DEBUG)
    logger = log.get_logger("network", client_id="c1").bind(node=1)
    with log.traced(log.new_trace_id()):
        for method in ("debug", "info", "warning", "error", "critical"):
            getattr(logger, method)(f"{method}_line", n=1)
        try:
            raise ValueError("x")
        except ValueError:
            logger.exception("exception_line")
    lines = [x for x in root_handler.getvalue().splitlines() if " kafka_actors.network " in x]
    assert [x.split()[:3] for x in lines] == [
        ["DEBUG", "kafka_actors.network", "debug_line"],
        ["INFO", "kafka_actors.network", "info_line"],
        ["WARNING", "kafka_actors.network", "warning_line"],
        ["ERROR", "kafka_actors.network", "error_line"],
        ["CRITICAL", "kafka_actors.network", "critical_line"],
        ["ERROR", "kafka_actors.network", "exception_line"],
    ]
    assert "warning_line client_id=c1 node=1 n=1 trace_id=" in lines[2]
    assert "ValueError: x" in root_handler.getvalue()
    address = f"127.0.0.1:{_closed_port()}"
    consumer = KafkaConsumer({"bootstrap.servers": address, "group.id": "untouched"})
    consumer.subscribe(["orders"])
    consumer.poll(0.1)
    consumer.close(timeout=1)
    out = io.StringIO()
    log.configure(stream=out)
    log.configure(json=True, level="DEBUG", stream=out)
    logger.debug("json_line")
    assert json.loads(out.getvalue())["event"] == "json_line"
    log.configure(stdlib=True)


def test_configure_prints_our_lines_once_and_stdlib_true_undoes_it(
    root_handler: _Lines,
) -> None:
    ours = logging.getLogger("kafka_actors")
    out = io.StringIO()
    log.configure(level="DEBUG", stream=out)
    log.configure(level="DEBUG", stream=out)  # again: still one handler
    log.get_logger("fetch", client_id="c1").debug("fetch_request", node=2)
    (line,) = out.getvalue().splitlines()
    assert "[debug" in line and "fetch_request" in line and "[kafka_actors.fetch]" in line
    assert "client_id=c1" in line and "node=2" in line and line.startswith("20")
    assert root_handler.getvalue() == ""  # not twice: not also through the root's handlers
    assert ours.level == logging.DEBUG and len(ours.handlers) == 1
    log.configure(stdlib=True)
    assert ours.level == logging.NOTSET and ours.propagate
    assert not [h for h in ours.handlers if not isinstance(h, logging.NullHandler)]
    log.get_logger("fetch").warning("back_to_stdlib")
    assert "back_to_stdlib" in root_handler.getvalue()
    assert "back_to_stdlib" not in out.getvalue()


def test_a_structlog_application_renders_our_lines_as_its_own(
    root_handler: _Lines,
) -> None:
    """The set-up of the logging guide for an application on structlog whose stdlib handler
    uses structlog's ProcessorFormatter: ``merge_record_fields`` in its foreign_pre_chain."""
    root_handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_log_level, log.merge_record_fields],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    log.get_logger("network").warning("node_unavailable", address="h:1", sasl_password="pw")
    assert json.loads(root_handler.getvalue()) == {
        "event": "node_unavailable",
        "address": "h:1",
        "sasl_password": "[hidden]",
        "level": "warning",
    }


def test_capture_logs_gives_event_dicts_and_restores_the_level() -> None:
    ours = logging.getLogger("kafka_actors")
    ours.setLevel(logging.ERROR)
    with capture_logs() as logs, log.traced("t9"):
        log.get_logger("commit", group_id="g").debug("commit_sent", token="secret")
    assert logs == [
        {
            "event": "commit_sent",
            "group_id": "g",
            "token": "[hidden]",
            "trace_id": "t9",
            "log_level": "debug",
        }
    ]
    assert ours.level == logging.ERROR


_CHILD = """
import sys
from kafka_actors.log import get_logger
logger = get_logger("fetch", client_id="c1").bind(node=1)
logger.debug("fetch_request", sent=1)
logger.info("assigned")
logger.warning("commit_failed", sasl_password="hunter2", error="Connection refused")
"""


def test_a_program_that_never_set_up_logging_sees_our_warnings_on_stderr() -> None:
    """stdlib's last resort (WARNING and above, ``%(message)s``, to stderr) while no handler
    is configured anywhere: a wrong bootstrap server is visible by default (issue 10)."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        'commit_failed client_id=c1 node=1 sasl_password=[hidden] error="Connection refused"'
    ]
