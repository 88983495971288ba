"""Show 2 of issue 23: rebalances and faults against real brokers while handlers are slow.

* a second member joins and leaves (clean hand-overs both ways): every record handled, none
  handled twice (not even started twice), committed = end offsets;
* a member in its own process is SIGTERMed (it stops, awaits its records in flight, commits,
  leaves): the same;
* a member in its own process is killed (SIGKILL): every record handled; a record handled
  twice is one the last commit before the kill did not mark completed (in flight, or
  completed since that commit); the counts are printed (``-s``);
* the group's coordinator (a broker of a 3-broker cluster, replication factor 3) is stopped
  (controlled shutdown) while records are handled, 300 more are handled while it is away, and
  it is started again: every record handled, committed = end offsets; records handled twice
  are counted and printed (none were in our runs: the members keep their partitions).

Both group protocols where a member's hand-over differs (classic eager, KIP-848).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kafka_actors import ParallelConsumer
from kafka_actors.testing import KafkaBroker, KafkaCluster
from tests.consumer_resilience.common import set_group_session_timeout
from tests.parallel.faults import (
    Ledger,
    ThreadMember,
    committed,
    completed_by_commit,
    member_config,
    produce_keyed,
    wait_for,
)

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 6
TOTAL = 3000
# The process members start alone and get a head start: more records, so that they still
# have work when they are signalled.
PROCESS_TOTAL = 8000
KEYS = 300
HANDLER_MS = 20
PROTOCOLS = ["classic", "consumer"]


def _group() -> str:
    return f"show2-{uuid.uuid4().hex[:8]}"


def _member(
    bootstrap: str, group: str, protocol: str, topic: str, ledger: Ledger, name: str
) -> ThreadMember:
    pc = ParallelConsumer(
        member_config(bootstrap, group, protocol),
        handler=ledger.handler(name, HANDLER_MS / 1000),
        max_concurrency=8,
    )
    return ThreadMember(pc, topic)


def _spawn(
    bootstrap: str, topic: str, group: str, protocol: str, out: Path
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.parallel.member",
            bootstrap,
            topic,
            group,
            protocol,
            str(out),
            str(HANDLER_MS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _await_consuming(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until its first record is done (or it dies)
    assert line.strip() == "consuming", (line, proc.poll())


def _stop_process(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


def _assert_all_handled_and_committed(
    bootstrap: str, group: str, topic: str, ledger: Ledger, ends: dict[int, int]
) -> None:
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    assert set(ledger.done_counts()) == expected  # nothing lost, nothing foreign
    got = committed(bootstrap, group, topic, range(PARTITIONS))
    assert got == {p: (end, "") for p, end in ends.items()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_member_joining_and_leaving_hands_over_without_handling_twice(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], protocol: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(kafka_broker, partitions=PARTITIONS)
    ends = produce_keyed(bootstrap, topic, PARTITIONS, TOTAL, KEYS)
    group = _group()
    ledger = Ledger()
    a = _member(bootstrap, group, protocol, topic, ledger, "a")
    b: ThreadMember | None = None
    try:
        wait_for(lambda: len(ledger.done_by("a")) >= 400, 120, "a's first records")
        b = _member(bootstrap, group, protocol, topic, ledger, "b")
        wait_for(lambda: len(ledger.done_by("b")) >= 300, 120, "b's records")
        b_partitions = {p for p, _ in ledger.done_by("b")}
        b_done = len(ledger.done_by("b"))
        b.close()  # a clean leave: b's partitions go back to a
        b = None
        wait_for(lambda: ledger.distinct_done() == TOTAL, 180, "every record")
    finally:
        if b is not None:
            b.close()
        a.close()
    a_after = {p for p, _ in ledger.done_by("a")[-200:]}
    print(
        f"\n[join/leave {protocol}] b handled {b_done} records on partitions "
        f"{sorted(b_partitions)}; started twice: "
        f"{sum(1 for n in ledger.start_counts().values() if n > 1)}"
    )
    assert b_partitions and a_after & b_partitions  # b's partitions came back to a
    _assert_all_handled_and_committed(bootstrap, group, topic, ledger, ends)
    assert max(ledger.done_counts().values()) == 1  # no completed record handled twice
    assert max(ledger.start_counts().values()) == 1  # the running ones were awaited


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_sigtermed_member_hands_over_without_handling_twice(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], protocol: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(kafka_broker, partitions=PARTITIONS)
    ends = produce_keyed(bootstrap, topic, PARTITIONS, PROCESS_TOTAL, KEYS)
    group = _group()
    ledger = Ledger()
    out = tmp_path / "member.log"
    proc = _spawn(bootstrap, topic, group, protocol, out)
    a: ThreadMember | None = None
    try:
        _await_consuming(proc)
        a = _member(bootstrap, group, protocol, topic, ledger, "a")
        wait_for(lambda: len(ledger.done_by("a")) >= 300, 120, "a's records")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert proc.stdout is not None and proc.stdout.read().strip() == "closed"
        ledger.add_file("term", out)
        wait_for(lambda: ledger.distinct_done() == PROCESS_TOTAL, 180, "every record")
    finally:
        _stop_process(proc)
        if a is not None:
            a.close()
    term_done = ledger.done_by("term")
    print(f"\n[sigterm {protocol}] the SIGTERMed member handled {len(term_done)} records")
    assert term_done
    assert {p for p, _ in term_done} & {p for p, _ in ledger.done_by("a")}  # handed over
    _assert_all_handled_and_committed(bootstrap, group, topic, ledger, ends)
    assert max(ledger.done_counts().values()) == 1
    assert max(ledger.start_counts().values()) == 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_killed_member_is_redone_only_past_its_last_commit(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], protocol: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(kafka_broker, partitions=PARTITIONS)
    ends = produce_keyed(bootstrap, topic, PARTITIONS, PROCESS_TOTAL, KEYS)
    group = _group()
    if protocol == "consumer":
        set_group_session_timeout(bootstrap, group, 6000)
    ledger = Ledger()
    out = tmp_path / "member.log"
    proc = _spawn(bootstrap, topic, group, protocol, out)
    a: ThreadMember | None = None
    try:
        _await_consuming(proc)
        a = _member(bootstrap, group, protocol, topic, ledger, "a")
        wait_for(lambda: len(ledger.done_by("a")) >= 300, 120, "a's records")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        # What the group had committed when the member died (a's commits move only a's
        # partitions; a commit marks records completed for good).
        at_kill = committed(bootstrap, group, topic, range(PARTITIONS))
        ledger.add_file("killed", out)
        wait_for(lambda: ledger.distinct_done() == PROCESS_TOTAL, 180, "every record")
    finally:
        _stop_process(proc)
        if a is not None:
            a.close()
    completed = completed_by_commit(at_kill)
    killed_started = {place for m, place in ledger.started if m == "killed"}
    killed_done = set(ledger.done_by("killed"))
    in_flight = killed_started - killed_done
    since_commit = {place for place in killed_done if not completed(place)}
    counts = ledger.done_counts()
    twice = {place for place, n in counts.items() if n > 1}
    print(
        f"\n[kill -9 {protocol}] killed member: {len(killed_done)} done, {len(in_flight)} in "
        f"flight at the kill, {len(since_commit)} done since its last commit; handled twice: "
        f"{len(twice)}"
    )
    assert killed_done and in_flight  # killed while it was handling records
    _assert_all_handled_and_committed(bootstrap, group, topic, ledger, ends)
    assert max(counts.values()) <= 2
    # Only records the last commit did not mark completed were handled again.
    assert not [place for place in twice if completed(place)]
    assert twice <= since_commit


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_restarted_coordinator_loses_nothing(
    kafka_cluster: KafkaCluster, kafka_topic: Callable[..., str], protocol: str
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = kafka_topic(kafka_cluster, partitions=PARTITIONS, replication_factor=3)
    ends = produce_keyed(bootstrap, topic, PARTITIONS, PROCESS_TOTAL, KEYS)
    group = _group()
    ledger = Ledger()
    members = [
        _member(bootstrap, group, protocol, topic, ledger, "a"),
        _member(bootstrap, group, protocol, topic, ledger, "b"),
    ]
    try:
        wait_for(lambda: ledger.distinct_done() >= 600, 120, "the first records")
        coordinator = _coordinator(kafka_cluster, group)
        index = next(i for i, n in enumerate(kafka_cluster.brokers) if n.node_id == coordinator)
        done_before = ledger.distinct_done()
        kafka_cluster.stop_broker(index)  # SIGTERM: a controlled shutdown
        stopped_at = ledger.distinct_done()
        # Records are handled while the coordinator is away (it moved to another broker).
        wait_for(lambda: ledger.distinct_done() >= stopped_at + 300, 120, "work meanwhile")
        kafka_cluster.start_broker(index)
        restarted_at = ledger.distinct_done()
        wait_for(lambda: ledger.distinct_done() == PROCESS_TOTAL, 240, "every record")
        commit_failures = sum(m.pc.metrics()["commit-failed-total"] for m in members)
    finally:
        for member in members:
            member.close()
    counts = ledger.done_counts()
    twice = sum(1 for n in counts.values() if n > 1)
    print(
        f"\n[broker restart {protocol}] coordinator {coordinator} stopped after {done_before} "
        f"records, started again after {restarted_at}; commits failed meanwhile: "
        f"{commit_failures:.0f}; handled twice: {twice}"
    )
    assert stopped_at < PROCESS_TOTAL - 300  # it stopped while records were being handled
    _assert_all_handled_and_committed(bootstrap, group, topic, ledger, ends)


def _coordinator(cluster: KafkaCluster, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
    description = admin.describe_consumer_groups([group])[group].result(30)
    return int(description.coordinator.id)
