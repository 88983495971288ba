"""A group member in its own process, to be killed (SIGKILL) by the churn test.

``python -m tests.consumer_resilience.crash_member BOOTSTRAP TOPIC GROUP PROTOCOL OUT``: subscribes
with a listener that commits what it processed in ``on_partitions_revoked`` (commit_sync), commits
with commit_async every second, and appends each processed id to OUT (one per line, written
and flushed after each poll, before any commit of those records: what is in OUT was processed).
Prints ``consuming`` once it got its first records.

Owns nothing outside the tests.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from kafka_actors import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from tests.consumer_resilience.common import member_config, record_id


def main(argv: list[str]) -> None:
    bootstrap, topic, group, protocol, out_path = argv
    consumer = KafkaConsumer(member_config(bootstrap, group, protocol))
    positions: dict[TopicPartition, int] = {}

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
            offsets = {tp: positions.pop(tp) for tp in revoked if tp in positions}
            if offsets:
                consumer.commit_sync(offsets, timeout=30)

        def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
            for tp in lost:
                positions.pop(tp, None)

    consumer.subscribe([topic], listener=Listener())
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    announced = False
    last_commit = time.monotonic()
    while True:
        records = consumer.poll(0.2)
        if not records:
            continue
        os.write(fd, b"".join(b"%d\n" % record_id(r.value) for r in records))
        for r in records:
            positions[TopicPartition(r.topic, r.partition)] = r.offset + 1
        if not announced:
            print("consuming", flush=True)
            announced = True
        now = time.monotonic()
        if positions and now - last_commit >= 1.0:
            last_commit = now
            consumer.commit_async(dict(positions))


if __name__ == "__main__":
    main(sys.argv[1:])
