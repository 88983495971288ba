"""Show 3 (issue #13): a share consumer SIGKILLed while it holds acquired records (no close,
no acknowledgement, no leave): after the group's record lock duration the broker releases
them and another member gets them (delivery count 2); nothing is lost. Real Kafka 4.4."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kafka_actors.testing import KafkaBroker
from tests.share.helpers import produce, share_api, share_config

ROOT = Path(__file__).resolve().parents[2]
N = 20
LOCK_MS = 3000

# The doomed member: explicit mode, prints what it got, then holds it without acknowledging.
HOLDER = """
import sys, time
from kafka_actors import KafkaShareConsumer
bootstrap, group, topic = sys.argv[1:4]
consumer = KafkaShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                               "share.acknowledgement.mode": "explicit"})
consumer.subscribe([topic])
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    records = consumer.poll(0.5)
    if records:
        print("HOLD " + " ".join(str(r.offset) for r in records), flush=True)
        break
time.sleep(600)
"""


@pytest.mark.broker
def test_records_of_a_sigkilled_member_go_to_another_after_the_lock(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=LOCK_MS)
    produce(share_broker.bootstrap_servers, topic, N)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, share_broker.bootstrap_servers, group, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()  # blocks until it holds records (or dies)
        assert line.startswith("HOLD "), (line, holder.stderr.read() if holder.poll() else "")
        held = {int(x) for x in line.split()[1:]}
        assert held
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)

    accepted: dict[int, int] = {}
    config = share_config(share_broker, group, share_acknowledgement_mode="explicit")
    with ka.KafkaShareConsumer(config) as other:
        other.subscribe([topic])
        deadline = time.monotonic() + 120
        while len(accepted) < N and time.monotonic() < deadline:
            for r in other.poll(0.5):
                assert r.offset not in accepted, f"offset {r.offset} delivered twice"
                accepted[r.offset] = r.delivery_count
                other.acknowledge(r, ka.AcknowledgeType.ACCEPT)
        result = other.commit_sync(30.0)
        assert all(error is None for error in result.values()), result
    assert sorted(accepted) == list(range(N)), f"lost: {set(range(N)) - set(accepted)}"
    for offset in held:  # acquired by the killed member once, then by this one
        assert accepted[offset] == 2, (offset, accepted[offset])
