"""Mixed groups: our consumers and Java consumers (Kafka's own VerifiableConsumer, from the
cluster's jars) in ONE group on the real 4.x broker, under KIP-848 (group.protocol=consumer
on both sides) and under the classic protocol with the range and the cooperative-sticky
assignors (partition.assignment.strategy on both sides).

While records with unique values are produced, the group goes through joins and leaves of
both kinds of members: Java J1 starts alone, ours A and B join, J1 leaves and Java J2 joins.
Under the classic protocol J1 is the leader first (Java's assignor assigns to our members),
then one of ours is (ours assigns to J2); the broker's log must show both.
Then: the partitions are split between our members and the Java members (each owns some,
none is owned twice); the union of what all members consumed covers every record; no record
is consumed by a second member after the first had committed past it; and
``kafka-consumer-groups --describe`` shows our members (client id, host, assignment) and the
committed offsets as our consumer and the topic's end offsets say.

Members commit explicitly after each poll (and in ``on_partitions_revoked``) in the main
variants; the ``autocommit`` variants run both kinds with auto-commit instead (commits before
revocation and on close), where the checks are: no record lost, everything committed in the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafka_actors import TopicPartition
from tests.consumer.helpers import base_config, unique
from tests.interop.members import (
    JavaMember,
    OurMember,
    Producer,
    cross_member_duplicates_after_commit,
    parse_assignment,
    parse_table,
    wait_until,
)

PARTITIONS = 6
GROUP_TIMEOUT = 120.0

_RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"
_COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
# (group.protocol, our assignor, Java's assignor, auto-commit on both sides); the assignors are
# partition.assignment.strategy (classic) or group.remote.assignor (consumer protocol).
VARIANTS = [
    pytest.param("consumer", None, None, False, id="kip848"),
    pytest.param("consumer", "range", "range", False, id="kip848-range"),
    pytest.param("classic", "range", _RANGE, False, id="classic-range"),
    pytest.param("classic", "cooperative-sticky", _COOPERATIVE, False, id="classic-coop-sticky"),
    # The defaults most applications run with: auto-commit, commits before revocation and on
    # close; no record may be lost.
    pytest.param("consumer", None, None, True, id="kip848-autocommit"),
    pytest.param("classic", "cooperative-sticky", _COOPERATIVE, True, id="classic-coop-autocommit"),
]


Member = OurMember | JavaMember


def _split_state(members: list[Member]) -> str:
    return ", ".join(f"{m.name}={sorted(m.owned())}" for m in members)


def _is_split(members: list[Member]) -> bool:
    owned = [m.owned() for m in members]
    if any(not o for o in owned):
        return False
    union: set[int] = set()
    for o in owned:
        if union & o:
            return False
        union |= o
    return union == set(range(PARTITIONS))


def _wait_split(members: list[Member], java: list[JavaMember]) -> None:
    def state() -> str:
        dead = [j.name for j in java if not j.alive()]
        tails = "".join(f"\n{j.name} stderr:\n{j.stderr_tail()}" for j in java if not j.alive())
        return f"partitions not split: {_split_state(members)}; dead Java members {dead}{tails}"

    def ok() -> bool:
        assert all(j.alive() for j in java), state()
        for m in members:
            if isinstance(m, OurMember):
                assert not m.errors, f"{m.name}: {m.errors!r}"
        return _is_split(members)

    wait_until(ok, GROUP_TIMEOUT, state)


def _classic_leaders(broker: Any, group: str) -> set[str]:
    """Member ids that sent a classic group's assignment, from the broker's log."""
    marker = "Assignment received from leader "
    leaders: set[str] = set()
    for node in broker.brokers:
        for line in node.log_path.read_text(errors="replace").splitlines():
            if marker in line and f" for group {group} " in line:
                leaders.add(line.split(marker, 1)[1].split(" ", 1)[0])
    return leaders


@pytest.mark.broker
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("protocol", "assignor", "java_assignor", "auto_commit"), VARIANTS)
def test_mixed_group_with_java_consumers(
    kafka_broker: Any,
    tmp_path: Path,
    protocol: str,
    assignor: str | None,
    java_assignor: str | None,
    auto_commit: bool,
) -> None:
    run_mixed_group(kafka_broker, tmp_path, protocol, assignor, java_assignor, auto_commit)


@pytest.mark.broker
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("protocol", "assignor", "java_assignor"),
    [
        pytest.param("classic", "range", _RANGE, id="classic-range"),
        pytest.param("classic", "cooperative-sticky", _COOPERATIVE, id="classic-coop-sticky"),
    ],
)
def test_mixed_classic_group_on_kafka_39(
    kafka_broker_39: Any,
    tmp_path: Path,
    protocol: str,
    assignor: str,
    java_assignor: str,
) -> None:
    """The same against Kafka 3.9, with 3.9's Java consumer (its classic assignors)."""
    assert kafka_broker_39.jars.version.startswith("3.9")
    run_mixed_group(kafka_broker_39, tmp_path, protocol, assignor, java_assignor, False)


def run_mixed_group(
    kafka_broker: Any,
    tmp_path: Path,
    protocol: str,
    assignor: str | None,
    java_assignor: str | None,
    auto_commit: bool,
) -> None:
    topic = unique(f"mixed-{protocol}")
    group = unique(f"mixed-{assignor or protocol}")
    kafka_broker.create_topic(topic, partitions=PARTITIONS)
    bootstrap = kafka_broker.bootstrap_servers
    extra: dict[str, object] = {
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": auto_commit,
        "auto.commit.interval.ms": 1000,
        "max.poll.records": 200,
    }
    if assignor is not None:
        # classic: the client-side assignor; consumer protocol: the broker-side one
        key = "partition.assignment.strategy" if protocol == "classic" else "group.remote.assignor"
        extra[key] = assignor

    def ours(name: str) -> OurMember:
        config = base_config(bootstrap, **extra, **{"client.id": f"{name}-{group}"})
        return OurMember(name, topic, config)

    def java(name: str) -> JavaMember:
        return JavaMember(
            kafka_broker,
            f"{name}-{group}",
            topic,
            group,
            tmp_path,
            group_protocol=protocol,
            assignment_strategy=java_assignor if protocol == "classic" else None,
            remote_assignor=java_assignor if protocol == "consumer" else None,
            auto_commit=auto_commit,
            extra={"auto.commit.interval.ms": "1000"},
        )

    producer = Producer(bootstrap, topic)
    producer.produce(1000)
    producer.start()
    started: list[Member] = []
    try:
        # Java first: under the classic protocol it leads the group and assigns to ours.
        j1 = java("java-1")
        started.append(j1)
        wait_until(
            lambda: j1.owned() == set(range(PARTITIONS)) or not j1.alive(),
            GROUP_TIMEOUT,
            lambda: f"java-1 owns {j1.owned()}; stderr:\n{j1.stderr_tail()}",
        )
        assert j1.alive(), j1.stderr_tail()
        a = ours("ours-a").start()
        started.append(a)
        _wait_split([a, j1], [j1])

        b = ours("ours-b").start()
        started.append(b)
        _wait_split([a, b, j1], [j1])

        j1.stop()  # the leader leaves: one of ours leads and assigns to the next Java member
        assert j1.has_event("shutdown_complete"), j1.stderr_tail()
        j2 = java("java-2")
        started.append(j2)
        _wait_split([a, b, j2], [j2])
        # java-2 reads records produced after it took its partitions: the producer stops only
        # once it has (ciA of edd67ae: stopped right after the split, the previous owners had
        # committed everything on java-2's partitions, and java-2 "consumed nothing").
        wait_until(
            lambda: bool(j2.log.snapshot()[0]) or not j2.alive(),
            GROUP_TIMEOUT,
            lambda: f"java-2 consumed nothing; stderr:\n{j2.stderr_tail()}",
        )
        assert j2.alive(), j2.stderr_tail()
        producer.stop()
        final: list[Member] = [a, b, j2]

        # Every record consumed by someone.
        everyone = [m.log for m in started]

        def consumed_values() -> set[bytes]:
            values: set[bytes] = set()
            for log in everyone:
                values |= {c.value for c in log.snapshot()[0]}
            return values

        wait_until(
            lambda: producer.produced <= consumed_values(),
            GROUP_TIMEOUT,
            lambda: f"{len(producer.produced - consumed_values())} records never consumed",
        )
        _wait_split(final, [j2])

        for m in started:
            consumed, commits = m.log.snapshot()
            failed = [c.error for c in commits if not c.success]
            print(
                f"{m.name}: consumed {len(consumed)}, commits {len(commits)}, failed {len(failed)}"
            )
            if isinstance(m, OurMember):
                # Nobody left the group uncleanly: like the Java members' failures, ours can
                # only be "a rebalance is in progress, poll and retry".
                assert all(e.startswith("RebalanceInProgressError") for e in failed), failed
        # No record consumed by a second member after the first committed past it.
        problems = cross_member_duplicates_after_commit(everyone)
        assert not problems, "\n".join(problems[:20])
        # Committed offsets: every record is committed by the final owners. A member whose
        # last commit failed (a rebalance was in progress) commits again after its next
        # records: a partition whose committed offset lags is given one more record.
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        end: dict[TopicPartition, int] = {}
        rows: list[dict[str, str]] = []
        lagging_before: set[int] = set()

        def all_committed() -> bool:
            nonlocal rows, end, lagging_before
            end = a.consumer.end_offsets(tps, timeout=30)
            result = kafka_broker.run_tool(
                "kafka-consumer-groups",
                ["--bootstrap-server", bootstrap, "--describe", "--group", group],
            )
            assert result.returncode == 0, result.stderr
            rows = [r for r in parse_table(result.stdout) if r.get("TOPIC") == topic]
            lagging = {
                int(r["PARTITION"])
                for r in rows
                if r["CURRENT-OFFSET"] != str(end[TopicPartition(topic, int(r["PARTITION"]))])
            }
            for partition in lagging & lagging_before:
                producer.produce(1, partition=partition)
            lagging_before = lagging
            return len(rows) == PARTITIONS and not lagging

        def not_committed() -> str:
            failed = [c for m in started for c in m.log.snapshot()[1] if not c.success]
            return f"describe offsets: {rows}; failed commits: {failed[-10:]}"

        wait_until(all_committed, GROUP_TIMEOUT, not_committed)
        assert sum(end.values()) == len(producer.produced)
        assert producer.produced <= consumed_values()
        # Each member consumed something and committed (the final ones: what they consumed).
        for m in started:
            consumed, commits = m.log.snapshot()
            assert consumed, f"{m.name} consumed nothing"
            assert auto_commit or any(c.success for c in commits), f"{m.name} never committed"
        owner_of = {p: m for m in final for p in m.owned()}
        for row in rows:
            partition = int(row["PARTITION"])
            owner = owner_of[partition]
            assert row["LOG-END-OFFSET"] == str(end[TopicPartition(topic, partition)]), row
            assert row["LAG"] == "0", row
            assert row["CLIENT-ID"] == owner.client_id, (row, _split_state(final))
            assert row["HOST"] == "/127.0.0.1", row
            assert row["CONSUMER-ID"] not in ("", "-"), row
        # Our consumer reads the same committed offsets.
        committed = a.consumer.committed(set(tps), timeout=30)
        assert {tp: (om.offset if om else None) for tp, om in committed.items()} == dict(end)

        # Members: ours listed with client id, host and assignment, as are the Java ones; the
        # member id (and member epoch) we report are the broker's. Each look is a snapshot
        # taken while the group runs, so it is retried until it agrees (or the timeout).
        def members_problems() -> list[str]:
            result = kafka_broker.run_tool(
                "kafka-consumer-groups",
                ["--bootstrap-server", bootstrap, "--describe", "--group", group, "--members",
                 "--verbose"],
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            members = {r["CLIENT-ID"]: r for r in parse_table(result.stdout)}
            if set(members) != {m.client_id for m in final}:
                return [f"members {sorted(members)}"]
            problems: list[str] = []
            for m in final:
                row = members[m.client_id]
                cell = row.get("CURRENT-ASSIGNMENT", row.get("ASSIGNMENT", ""))
                if (
                    row["HOST"] != "/127.0.0.1"
                    or row["#PARTITIONS"] != str(len(m.owned()))
                    or parse_assignment(cell, topic) != m.owned()
                ):
                    problems.append(f"{m.name} owns {sorted(m.owned())}: {row}")
                if isinstance(m, OurMember):
                    metadata = m.consumer.group_metadata()
                    if row["CONSUMER-ID"] != metadata.member_id or (
                        protocol == "consumer"
                        and row["CURRENT-EPOCH"] != str(metadata.generation_id)
                    ):
                        problems.append(f"{m.name} reports {metadata}: {row}")
            return problems

        last: list[str] = []

        def members_agree() -> bool:
            nonlocal last
            last = members_problems()
            return not last

        wait_until(members_agree, GROUP_TIMEOUT, lambda: "\n".join(last))

        # The group: stable, three members, and the assignor both kinds agreed on.
        state: dict[str, str] = {}

        def stable() -> bool:
            nonlocal state
            result = kafka_broker.run_tool(
                "kafka-consumer-groups",
                ["--bootstrap-server", bootstrap, "--describe", "--group", group, "--state"],
            )
            assert result.returncode == 0, result.stderr
            (state,) = parse_table(result.stdout)
            return state["STATE"] == "Stable"

        wait_until(stable, GROUP_TIMEOUT, lambda: f"group state {state}")
        assert state["#MEMBERS"] == "3", state
        assert state["ASSIGNMENT-STRATEGY"] == (assignor or "uniform"), state
        if protocol == "classic":
            leaders = _classic_leaders(kafka_broker, group)
            assert any(name.startswith(j1.client_id) for name in leaders), leaders
            assert any(name.startswith(("ours-a", "ours-b")) for name in leaders), leaders
    finally:
        for m in reversed(started):
            try:
                m.stop()
            except Exception:
                pass
        producer.halt()
    for m in started:
        if isinstance(m, OurMember):
            assert not m.errors, f"{m.name}: {m.errors!r}"
