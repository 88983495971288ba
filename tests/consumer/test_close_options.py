"""close(membership=...) (KIP-1092) and enforce_rebalance() against a real broker, both group
protocols. Six members of one group close with each membership operation, dynamic and static
(group.instance.id); the group's description (the broker's view, right after the closes) lists
the members that remain until their session times out and no longer lists those that left:

* ``"default"``: the dynamic member leaves, the static one remains;
* ``"leave"``: both leave (consumer protocol: epoch -1; classic: LeaveGroup with the identity);
* ``"remain"``: both remain.

Before the closes, ``enforce_rebalance(reason)`` gives a classic group a new generation; under
the consumer protocol it changes nothing (Java's AsyncKafkaConsumer only logs a warning)."""

from __future__ import annotations

import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.errors import IllegalStateError, InvalidArgumentError
from kafka_actors.structs import GroupMembershipOperation
from kafka_actors.testing.broker import KafkaBroker
from tests.consumer.helpers import base_config, described_client_ids, poll_all_until, unique

#: (client id suffix, static, membership operation, remains in the group after close)
MEMBERS: list[tuple[str, bool, GroupMembershipOperation, bool]] = [
    ("dynamic-default", False, "default", False),
    ("dynamic-leave", False, "leave", False),
    ("dynamic-remain", False, "remain", True),
    ("static-default", True, "default", True),
    ("static-leave", True, "leave", False),
    ("static-remain", True, "remain", True),
]




@pytest.mark.broker
@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_close_membership_operations_as_the_broker_sees_them(
    kafka_broker: KafkaBroker, protocol: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("closeopts"), unique("closeopts-g")
    kafka_broker.create_topic(topic, partitions=len(MEMBERS) * 2)
    prefix = unique("c")
    # Classic: the client's session timeout (the broker's default minimum is 6 s); consumer
    # protocol: the broker's group.consumer.session.timeout.ms (45 s). Either way far longer
    # than the closes take: who remains is still listed when the group is described.
    session = {"session.timeout.ms": 45_000} if protocol == "classic" else {}
    consumers: dict[str, KafkaConsumer] = {}
    try:
        for name, static, _, _ in MEMBERS:
            consumers[name] = KafkaConsumer(
                base_config(
                    bootstrap,
                    **{
                        "group.id": group,
                        "group.protocol": protocol,
                        "client.id": f"{prefix}-{name}",
                        **({"group.instance.id": f"{prefix}-{name}"} if static else {}),
                        **session,
                    },
                )
            )
        members = list(consumers.values())
        for consumer in members:
            consumer.subscribe([topic])
        # Every member owns partitions (joined and settled) before the closes.
        poll_all_until(
            members, lambda: all(c.assignment() for c in members), "every member assigned"
        )
        first = members[0]

        generation = first.group_metadata().generation_id
        first.enforce_rebalance("closeopts test")
        if protocol == "classic":
            poll_all_until(
                members,
                lambda: (
                    first.group_metadata().generation_id > generation
                    and all(c.assignment() for c in members)
                ),
                "a new generation after enforce_rebalance",
            )
        with pytest.raises(InvalidArgumentError):
            first.close(membership="LEAVE_GROUP")  # type: ignore[arg-type]
        assert first.assignment()  # still open and a member

        for name, _, operation, _ in MEMBERS:
            consumers[name].close(timeout=20, membership=operation)

        described = described_client_ids(bootstrap, group)
        remaining = {f"{prefix}-{name}" for name, _, _, remains in MEMBERS if remains}
        assert described == remaining, (protocol, sorted(described))
    finally:
        for consumer in consumers.values():
            consumer.close(timeout=10)


@pytest.mark.broker
def test_enforce_rebalance_without_a_group(kafka_broker: KafkaBroker) -> None:
    config = base_config(kafka_broker.bootstrap_servers, **{"group.protocol": "classic"})
    with KafkaConsumer(config) as consumer:
        with pytest.raises(IllegalStateError, match="does not have a group"):
            consumer.enforce_rebalance()
