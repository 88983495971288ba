"""Share consumer throughput (KIP-932): kafka-actors' sync and asyncio share consumers beside
confluent-kafka's ShareConsumer and Java's share consumer performance tool.

Owns: nothing but its own run. Starts ONE Kafka 4.x broker with the testkit (share groups
are on in 4.x; :func:`~kafka_actors.testing.share.share_broker_config` with a 30 s record
lock), creates one topic (``--partitions``, default 1), produces ``--records`` records once
with confluent-kafka (8-byte keys, ``--value-size``-byte values, no compression), then lets
every client read the whole topic, each in a share group of its own
(``share.auto.offset.reset=earliest`` set on the group through IncrementalAlterConfigs) and
in its own subprocess:

* ``kafka-actors``: ``KafkaShareConsumer.poll(1.0)``, implicit acknowledgement (each poll
  ACCEPTs the previous one's records);
* ``kafka-actors explicit``: the same in explicit mode, ``acknowledge(record)`` (ACCEPT) for
  every record (sent with the next ShareFetch);
* ``kafka-actors async``: ``await AsyncKafkaShareConsumer.poll(1.0)``, implicit;
* ``kafka-actors async iter``: ``async for record in consumer``, implicit;
* ``kafka-actors big polls``: as ``kafka-actors`` with ``max.poll.records`` =
  :data:`BIG_POLL_RECORDS`, a poll then hands out about what one ShareFetch acquired, as
  confluent-kafka's ``poll`` does (its rows are not capped at 500 records a poll; ours and
  Java's are: their acknowledgements go a poll at a time, and the broker acquires the next
  records only once its limit of records in flight per share partition allows);
* ``confluent-kafka``: ``ShareConsumer.poll(1.0)``, implicit (librdkafka's preview);
* ``confluent-kafka explicit``: ``acknowledge(message)`` (ACCEPT) for every record;
* ``java``: Java's ``org.apache.kafka.tools.ShareConsumerPerformance``
  (kafka-share-consumer-perf-test, the testkit's jars, one thread, its default mode;
  only when this script started the broker); its own figures: records over its fetch time.

Every Python client touches the key, value and offset of each record. The clock runs from
just before the consumer is created until the last record is handed out (the share group
join and the share-partition's first fetch included, as in Java's figure; a throw-away share
group reads one record first, so that the broker's one-time share-group set-up is in no
client's figure); "first" is when the first record arrived, "steady rec/s" the records after
the first over the time after it (the rate once the member is in the group; not for Java);
"cpu s" the child's CPU time over that span; "redelivered" the records that came with a
delivery count above 1 (a lock that ran out). Ratios: ``ka/peer rate`` is kafka-actors (sync,
implicit) records/s over the row's (> 1: we are faster), ``peer/ka cpu`` the row's CPU time
over ours (over ``confluent-kafka``'s row when ``--clients`` leaves ours out). A client that
fails (our share consumers included: an import error is a failure, never a reason to leave
them out) stops the run with an error, and one that read fewer records than produced makes
the script exit with 1 after the table.

    .venv/bin/python bench/share.py [--records 20000] [--value-size 100] [--partitions 1]
        [--repeat 1] [--clients kafka-actors,confluent-kafka,...] [--bootstrap HOST:PORT]

``--repeat N`` lets the clients take turns N times (a new share group each time) and keeps
each client's best (by wall time). Children are run with ``--child`` (internal).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# bench/ is this script's directory (sys.path[0]): the same data and the same RSS figure as
# the consumer benchmark.
import consume
from consume import CHILD_TIMEOUT_S, MAX_RECORDS, peak_rss_kb, produce

OURS = (
    "kafka-actors",
    "kafka-actors explicit",
    "kafka-actors async",
    "kafka-actors async iter",
    "kafka-actors big polls",
)
PEERS = ("confluent-kafka", "confluent-kafka explicit", "java")
CLIENTS = (*OURS, *PEERS)
RECORD_LOCK_MS = 30_000
#: max.poll.records of "kafka-actors big polls": above the records one ShareFetch acquires
#: here (whole batches of the produced data).
BIG_POLL_RECORDS = 10_000


class Tally(consume.Tally):
    """consume.py's tally (the fair work per record: touch key, value and offset), plus the
    records that came more than once (a lock that ran out)."""

    __slots__ = ("redelivered",)

    def __init__(self) -> None:
        super().__init__()
        self.redelivered = 0

    def add(self, key: bytes | None, value: bytes | None, delivery_count: int | None) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()
        self.nbytes += (len(value) if value is not None else 0) + (len(key) if key else 0)
        if delivery_count is not None and delivery_count > 1:
            self.redelivered += 1
        self.count += 1


#: Our clients by the kafka_actors name each needs.
NEEDS = {
    "kafka-actors": "KafkaShareConsumer",
    "kafka-actors explicit": "KafkaShareConsumer",
    "kafka-actors async": "AsyncKafkaShareConsumer",
    "kafka-actors async iter": "AsyncKafkaShareConsumer",
    "kafka-actors big polls": "KafkaShareConsumer",
}


# -- the children: one client each ------------------------------------------------------------


def _our_config(
    bootstrap: str, group: str, explicit: bool, max_poll_records: int = MAX_RECORDS
) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "max.poll.records": max_poll_records,
        "share.acknowledgement.mode": "explicit" if explicit else "implicit",
    }


def run_kafka_actors(
    bootstrap: str,
    topic: str,
    group: str,
    expected: int,
    explicit: bool,
    max_poll_records: int = MAX_RECORDS,
) -> Tally:
    from kafka_actors import KafkaShareConsumer  # type: ignore[attr-defined,unused-ignore]

    tally = Tally()
    consumer = KafkaShareConsumer(_our_config(bootstrap, group, explicit, max_poll_records))
    try:
        consumer.subscribe([topic])
        while tally.count < expected:
            for r in consumer.poll(1.0):
                tally.add(r.key, r.value, r.delivery_count)
                _ = r.offset
                if explicit:
                    consumer.acknowledge(r)
    finally:
        consumer.close(30.0)
    return tally


async def run_kafka_actors_async(
    bootstrap: str, topic: str, group: str, expected: int, one_by_one: bool
) -> Tally:
    from kafka_actors import AsyncKafkaShareConsumer  # type: ignore[attr-defined,unused-ignore]

    tally = Tally()
    async with AsyncKafkaShareConsumer(_our_config(bootstrap, group, False)) as consumer:
        consumer.subscribe([topic])
        if one_by_one:
            async for r in consumer:
                tally.add(r.key, r.value, r.delivery_count)
                _ = r.offset
                if tally.count >= expected:
                    break
        else:
            while tally.count < expected:
                for r in await consumer.poll(1.0):
                    tally.add(r.key, r.value, r.delivery_count)
                    _ = r.offset
    return tally


def run_confluent(bootstrap: str, topic: str, group: str, expected: int, explicit: bool) -> Tally:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    tally = Tally()
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit" if explicit else "implicit",
            "log_level": 3,
        }
    )
    accept = AcknowledgeType.ACCEPT
    try:
        consumer.subscribe([topic])
        while tally.count < expected:
            for m in consumer.poll(1.0):
                if m.error() is not None:
                    continue
                tally.add(m.key(), m.value(), m.delivery_count())
                _ = m.offset()
                if explicit:
                    consumer.acknowledge(m, accept)
    finally:
        consumer.close()
    return tally


def child(args: argparse.Namespace) -> int:
    b, t, g, n = args.bootstrap, args.topic, args.group, args.records
    runners: dict[str, Callable[[], Tally]] = {
        "kafka-actors": lambda: run_kafka_actors(b, t, g, n, False),
        "kafka-actors explicit": lambda: run_kafka_actors(b, t, g, n, True),
        "kafka-actors async": lambda: asyncio.run(run_kafka_actors_async(b, t, g, n, False)),
        "kafka-actors async iter": lambda: asyncio.run(run_kafka_actors_async(b, t, g, n, True)),
        "kafka-actors big polls": lambda: run_kafka_actors(b, t, g, n, False, BIG_POLL_RECORDS),
        "confluent-kafka": lambda: run_confluent(b, t, g, n, False),
        "confluent-kafka explicit": lambda: run_confluent(b, t, g, n, True),
    }
    runner = runners[args.child]
    if args.child.startswith("kafka-actors"):
        from kafka_actors import log

        log.configure(level="WARNING")
    # Imports are not part of the measurement: kafka_actors loads its share consumer (and
    # the actors under it) lazily, on first use of the name, so it is named here.
    module = importlib.import_module("kafka_actors" if args.child in OURS else "confluent_kafka")
    getattr(module, NEEDS.get(args.child, "ShareConsumer"))
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    tally = runner()
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    result = {
        "client": args.child,
        "records": tally.count,
        "bytes": tally.nbytes,
        "redelivered": tally.redelivered,
        "seconds": elapsed,
        "first_s": (tally.first_at - t0) if tally.first_at is not None else None,
        "cpu_s": cpu,
        "max_rss_kb": peak_rss_kb(),
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# -- the parent: broker, data, children, table -------------------------------------------------


def new_group(bootstrap: str, client: str) -> str:
    """A share group of its own for one run of ``client``, reading from the earliest."""
    from kafka_actors.testing.share import set_share_group_config

    group = f"bench-share-{client.replace(' ', '-')}-{time.time_ns()}"
    set_share_group_config(bootstrap, group, auto_offset_reset="earliest")
    return group


def warm_up(bootstrap: str, topic: str) -> float:
    """Read one record in a throw-away share group, so that no client's figure carries the
    broker's first share-group work (creating the share-group state topic)."""
    from confluent_kafka import ShareConsumer

    t0 = time.perf_counter()
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": new_group(bootstrap, "warm-up"),
            "log_level": 3,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(m.error() is None for m in consumer.poll(1.0)):
                break
        else:
            raise RuntimeError("warm-up: no record in 120 s")
    finally:
        consumer.close()
    return time.perf_counter() - t0


def run_child(client: str, bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        client,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--group",
        new_group(bootstrap, client),
        "--records",
        str(n),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"{client} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def run_java(broker: Any, topic: str, n: int) -> dict[str, Any]:
    """Java's ShareConsumerPerformance: records over its own fetch time."""
    args = [
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--group",
        new_group(broker.bootstrap_servers, "java"),
        "--timeout",
        "120000",
        "--command-property",
        f"max.poll.records={MAX_RECORDS}",
    ]
    cmd = broker.tool_command("kafka-share-consumer-perf-test", args, short_lived=False)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in proc.stdout.splitlines() if line.strip() and "," in line]
    if proc.returncode != 0 or len(lines) < 2:
        raise RuntimeError(f"java failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    header = [h.strip() for h in lines[-2].split(",")]
    row = dict(zip(header, (v.strip() for v in lines[-1].split(",")), strict=True))
    return {
        "client": "java",
        "records": int(row["data.consumed.in.nMsg"]),
        "bytes": int(float(row["data.consumed.in.MB"]) * 1024 * 1024),
        "redelivered": 0,  # not reported by the tool
        "seconds": float(row["fetch.time.ms"]) / 1000.0,
        "first_s": None,
        "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "max_rss_kb": 0,  # not measured (the JVM is not our child's child)
    }


def print_table(title: str, results: list[dict[str, Any]], n: int) -> list[str]:
    """Print the table; return the clients that read fewer than ``n`` records."""
    base = next((r for r in results if r["client"] == "kafka-actors"), None)
    base_name = "ka"
    if base is None:
        base = next((r for r in results if r["client"] == "confluent-kafka"), None)
        base_name = "ck"
    short: list[str] = []
    print(f"\n{title}")
    print(
        f"{'client':26} {'records/s':>11} {'MB/s':>7} {'total s':>8} {'first s':>8} "
        f"{'steady rec/s':>13} {'cpu s':>7} {'peak RSS MB':>12} {'redelivered':>12} "
        f"{base_name + '/peer rate':>13} {'peer/' + base_name + ' cpu':>12}"
    )
    for r in results:
        rate = r["records"] / r["seconds"]
        mbs = r["bytes"] / r["seconds"] / 1e6
        rss = f"{r['max_rss_kb'] / 1024:12.1f}" if r["max_rss_kb"] else f"{'-':>12}"
        first = f"{r['first_s']:8.2f}" if r["first_s"] is not None else f"{'-':>8}"
        steady = f"{'-':>13}"
        if r["first_s"] is not None and r["seconds"] > r["first_s"] and r["records"] > 1:
            steady = f"{(r['records'] - 1) / (r['seconds'] - r['first_s']):13,.0f}"
        ratio = cpu_ratio = ""
        if base is not None:
            ratio = f"{base['records'] / base['seconds'] / rate:12.2f}x"
            cpu_ratio = f"{r['cpu_s'] / base['cpu_s']:11.2f}x" if base["cpu_s"] else "-"
        print(
            f"{r['client']:26} {rate:11,.0f} {mbs:7.1f} {r['seconds']:8.2f} {first} {steady} "
            f"{r['cpu_s']:7.2f} {rss} {r['redelivered']:12d} {ratio:>13} {cpu_ratio:>12}"
        )
        if r["records"] < n:
            print(f"  !! {r['client']} consumed {r['records']} records, expected {n}")
            short.append(r["client"])
    return short


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000, help="records in the topic")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="runs per client, best kept")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--bootstrap", help="use this broker (else start one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; known: {', '.join(CLIENTS)}")
    from kafka_actors.testing import KafkaBroker, share_broker_config

    broker: Any = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = KafkaBroker(broker_config=share_broker_config(RECORD_LOCK_MS))
        broker.start()
        bootstrap = broker.bootstrap_servers
    try:
        topic = f"bench-share-{time.time_ns() % 10**9}"
        if broker is not None:
            broker.create_topic(topic, args.partitions)
        else:
            from confluent_kafka.admin import AdminClient
            from confluent_kafka.cimpl import NewTopic

            admin = AdminClient({"bootstrap.servers": bootstrap})
            for f in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
                f.result(60)
            time.sleep(2)
        took = produce(bootstrap, topic, args.records, args.value_size)
        print(
            f"{args.records:,} records, {args.value_size}-byte values, 8-byte keys, no "
            f"compression, {args.partitions} partition(s); produced with confluent-kafka in "
            f"{took:.1f}s; one share group per client run"
        )
        print(f"warm-up (first share group on this broker): {warm_up(bootstrap, topic):.1f}s")
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeat):  # clients take turns: load spreads over all
            for client in clients:
                if client == "java":
                    if broker is None:
                        continue  # needs the testkit's jars: only with our own broker
                    r = run_java(broker, topic, args.records)
                else:
                    r = run_child(client, bootstrap, topic, args.records)
                if client not in best or r["seconds"] < best[client]["seconds"]:
                    best[client] = r
        title = f"{topic}: {args.partitions} partition(s)"
        if args.repeat > 1:
            title += f", best of {args.repeat} (by wall time)"
        short = print_table(title, [best[c] for c in clients if c in best], args.records)
    finally:
        if broker is not None:
            broker.stop()
    if short:
        print(f"FAILED: {', '.join(short)} read fewer than {args.records:,} records")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
