"""``health()`` on the embedded mock cluster (issue 24), where errors can be injected: one
KIP-848 member walks through healthy -> coordinator lost (NOT_COORDINATOR on a heartbeat,
FindCoordinator answered COORDINATOR_NOT_AVAILABLE) -> healthy -> fenced
(FENCED_MEMBER_EPOCH on a heartbeat, while the application does not poll: the member waits
for its onPartitionsLost, run by the next poll) -> healthy again, and ``current_lag``."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kafka_actors import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka_actors.errors import IllegalStateError
from kafka_actors.health import GroupStatus
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.testing.mock import MockCluster
from tests.consumer.helpers import health_until

pytestmark = pytest.mark.mock

COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, FENCED_MEMBER_EPOCH = 15, 16, 110


class _Lost(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.lost: list[set[TopicPartition]] = []

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        pass

    def on_partitions_lost(self, lost: Any) -> None:
        self.lost.append(set(lost))




def test_health_through_coordinator_loss_and_fencing() -> None:
    with MockCluster(1) as cluster:
        cluster.set_group_consumer_heartbeat_interval_ms(200)
        cluster.create_topic("health", 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(10):
            producer.produce("health", value=f"v{i}".encode())
        producer.flush(10)
        tp = TopicPartition("health", 0)
        listener = _Lost()
        consumer = KafkaConsumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": "health",
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 200,
            }
        )
        try:
            with pytest.raises(IllegalStateError):
                consumer.current_lag(tp)
            consumer.subscribe(["health"], listener=listener)
            healthy = health_until(consumer, lambda h: h.ready and bool(h.partitions))
            health_until(consumer, lambda h: h.partitions[0].position == 10)
            assert consumer.current_lag(tp) == 0
            healthy = consumer.health()
            assert healthy.group_status is GroupStatus.IN_GROUP
            assert healthy.member_epoch is not None and healthy.member_epoch > 0
            assert healthy.coordinator_id == 1
            assert healthy.last_heartbeat_age_ms is not None
            print("healthy:", healthy)

            # The coordinator is lost and cannot be found again for a while.
            cluster.push_request_errors(ApiKey.FIND_COORDINATOR, [COORDINATOR_NOT_AVAILABLE] * 50)
            cluster.push_request_errors(ApiKey.CONSUMER_GROUP_HEARTBEAT, [NOT_COORDINATOR])
            lost = health_until(consumer, lambda h: not h.coordinator_known)
            assert lost.group_status is GroupStatus.COORDINATOR_UNKNOWN
            assert (lost.live, lost.ready) == (True, False)
            assert "not in the group: coordinator unknown" in lost.reasons
            print("coordinator lost:", lost)
            cluster.clear_request_errors(ApiKey.FIND_COORDINATOR)
            health_until(consumer, lambda h: h.ready)

            # Fenced, while the application does not poll.
            cluster.push_request_errors(ApiKey.CONSUMER_GROUP_HEARTBEAT, [FENCED_MEMBER_EPOCH])
            fenced = health_until(
                consumer, lambda h: h.group_status is GroupStatus.FENCED, poll=False
            )
            assert (fenced.live, fenced.ready) == (True, False)
            assert fenced.reasons == ("not in the group: fenced",)
            assert fenced.member_state == "FENCED"
            print("fenced:", fenced)
            back = health_until(consumer, lambda h: h.ready and bool(h.assignment))
            assert listener.lost == [{tp}]
            assert back.member_epoch is not None and back.member_epoch > 0
        finally:
            consumer.close(timeout=2)
        closed = consumer.health()
        assert (closed.live, closed.ready, closed.group_status) == (
            False,
            False,
            GroupStatus.CLOSED,
        )
        assert closed.connections == ()  # the network actor stopped


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_the_probe_endpoint_of_the_production_guide() -> None:
    """The Kubernetes probe block of docs/production.md, run as it is (on loopback)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "production.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "serve_health" in b]
    namespace: dict[str, Any] = {"__name__": "docs_production"}
    exec(compile(code, "production.md[probe]", "exec"), namespace)
    with MockCluster(1) as cluster:
        cluster.create_topic("probe", 1)
        consumer = KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers})
        server = namespace["serve_health"](consumer, host="127.0.0.1", port=0)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            status, body = _get(f"{url}/readyz")
            assert status == 503 and "no partitions assigned" in body["reasons"]
            assert _get(f"{url}/livez")[0] == 200
            consumer.assign([TopicPartition("probe", 0)])
            deadline = time.monotonic() + 30
            while not consumer.health().ready:
                assert time.monotonic() < deadline, consumer.health()
                consumer.poll(0.1)
            status, body = _get(f"{url}/readyz")
            assert (status, body["ready"], body["group_status"]) == (200, True, "no_group")
            consumer.close(timeout=2)
            status, body = _get(f"{url}/livez")
            assert (status, body["reasons"]) == (503, ["closed"])
        finally:
            server.shutdown()
            server.server_close()
            consumer.close(timeout=2)
