"""The pytest plugin itself, run in inner pytest sessions: broker logs on failure, JVM leak
check at session end, laziness, and restart of brokers a test left stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_actors.testing.broker import pid_alive
from kafka_actors.testing.jars import cache_root

pytest_plugins = ["pytester"]

# pytester points HOME at its temporary directory, so an inner session would otherwise resolve
# every jar again through Maven into a fresh cache there (minutes, and a second dependence on
# the network that the outer session has already paid). Read before any pytester exists.
_OUTER_CACHE = cache_root()


@pytest.fixture(autouse=True)
def _inner_sessions_share_the_jar_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_ACTORS_CACHE", str(_OUTER_CACHE))


def test_a_session_without_kafka_fixtures_starts_no_jvm(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from kafka_actors.testing import broker
        def test_nothing():
            assert broker.started_pids() == frozenset()
        def test_still_nothing(kafka_topic):
            assert broker.started_pids() == frozenset()
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


@pytest.mark.broker
def test_failure_report_shows_broker_log_tail(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fails(kafka_broker):
            assert kafka_broker.node.running
            assert False, "deliberate"
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    # The inner session used the outer jar cache, not a new one under pytester's HOME.
    assert not (pytester.path / ".cache" / "kafka-actors").exists()
    result.stdout.fnmatch_lines(
        ["*kafka_broker logs (last * lines)*", "*----- node 1 (broker,controller) pid=*"]
    )
    # A line the broker itself logged (4.x: log4j2 pattern "[date] LEVEL message (logger)").
    assert any("INFO" in line and "(kafka." in line for line in result.outlines)


@pytest.mark.broker
def test_session_end_kills_leaked_jvms_and_fails_the_run(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pids"
    pytester.makepyfile(
        f"""
        from kafka_actors.testing.broker import KafkaBroker
        def test_leaks():
            b = KafkaBroker()
            b.start()  # never stopped
            open({str(pid_file)!r}, "w").write(" ".join(str(n.pid) for n in b.nodes))
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*JVMs still alive at session end, killed: *"])
    pids = [int(p) for p in pid_file.read_text().split()]
    assert pids and not any(pid_alive(p) for p in pids)


@pytest.mark.broker
def test_broker_stopped_by_a_test_is_restarted_for_the_next(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_stops_it(kafka_broker):
            kafka_broker.stop_broker(0)
            assert not kafka_broker.node.running

        def test_finds_it_running(kafka_broker):
            from confluent_kafka.admin import AdminClient
            assert kafka_broker.node.running
            md = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
            assert len(md.list_topics(timeout=30).brokers) == 1
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
