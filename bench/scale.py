"""How the cost of consuming grows with partitions and brokers: kafka-actors beside
confluent-kafka (tuned), aiokafka and Java, the same total bytes spread over 1, 8, 64 and 512
partitions, on one broker and on three.

Owns: nothing but its own run. For each cluster size of ``--brokers`` it starts a KRaft
cluster with the testkit (one broker, or N brokers and a controller), and for each partition
count of ``--partitions`` creates a topic (replication 1, so its partitions are spread over
the brokers), produces ``--records`` records into it with confluent-kafka (8-byte keys,
``--value-size``-byte values: the same total bytes whatever the partition count), then
consumes it from the beginning to the end with every client of ``--clients``, each in its
own process, through bench/consume.py's children (same settings and the same work per
record: see its docstring; Java is its ConsumerPerformance, fetch rate, a group
subscription). Per row: records/s, CPU microseconds per record (the child's process CPU time
from creating the consumer to the last record, every thread; Java's includes the JVM's
start and JIT, so its CPU column is shown but not compared) and the peak RSS (not for Java).

Then, on the largest partition count and cluster: a **paused** kafka-actors consumer: it is
assigned every partition, reads until each partition has handed out records (the fetch
buffers full), pauses them all and keeps polling for ``--paused-seconds``; its RSS then
(``VmRSS``) and peak (``VmHWM``) are printed beside the fetch limits that bound what it may
buffer (``fetch.max.bytes`` per response, ``max.partition.fetch.bytes`` per partition).

It ends with the check the speed issue asks for: kafka-actors' CPU per record at the largest
partition count over that at 8 (flat: within 20 %), and kafka-actors' CPU per record over
confluent-kafka tuned's on every row (<= 1.0: we use no more CPU per record). The table is
also written as JSON (``--json``) and plotted (``--plot``, a PNG: CPU per record and
records/s against partitions, one line per client, a panel per cluster size; needs
matplotlib, in the ``bench`` extra).

    .venv/bin/python bench/scale.py [--partitions 1,8,64,512] [--brokers 1,3]
        [--records 1000000] [--value-size 100] [--clients kafka-actors,confluent-kafka tuned,
        aiokafka,java] [--plot docs/images/scale.png] [--json scale.json]

A short form runs in the test suite (tests/bench/test_scale_short.py); the full one on demand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import consume  # bench/consume.py: the children and the producer

CLIENTS = ("kafka-actors", "confluent-kafka tuned", "aiokafka", "java")
#: The comparison the speed issue sets: our CPU per record against this peer's, every row.
PEER = "confluent-kafka tuned"
FLAT_WITHIN = 0.20


def paused_child(args: argparse.Namespace) -> int:
    """A kafka-actors consumer with every partition assigned, then all paused: its RSS."""
    from kafka_actors import KafkaConsumer, log
    from kafka_actors.protocol.messages import TopicPartition

    log.configure(level="WARNING")
    tps = [TopicPartition(args.topic, p) for p in range(args.partitions)]
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": args.bootstrap,
            "auto.offset.reset": "earliest",
            "max.poll.records": consume.MAX_RECORDS,
            **consume.FETCH,
        }
    )
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        seen: set[int] = set()
        deadline = time.monotonic() + 120
        while len(seen) < len(tps) and time.monotonic() < deadline:
            for record in consumer.poll(1.0):
                seen.add(record.partition)
        consumer.pause(tps)
        handed_out_after_pause = 0
        end = time.monotonic() + args.paused_seconds
        while time.monotonic() < end:
            handed_out_after_pause += len(consumer.poll(0.2))
        result = {
            "partitions": len(tps),
            "partitions_read": len(seen),
            "handed_out_after_pause": handed_out_after_pause,
            "rss_kb": _status_kb("VmRSS"),
            "hwm_kb": _status_kb("VmHWM"),
        }
    finally:
        consumer.close(5.0)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def run_paused(bootstrap: str, topic: str, partitions: int, seconds: float) -> dict[str, Any]:
    import subprocess

    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--paused-child",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--child-partitions",
        str(partitions),
        "--paused-seconds",
        str(seconds),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"paused consumer failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def start_cluster(brokers: int) -> Any:
    from kafka_actors.testing import KafkaBroker, KafkaCluster

    cluster = KafkaBroker() if brokers == 1 else KafkaCluster(num_brokers=brokers)
    cluster.start()
    return cluster


def measure(
    cluster: Any, brokers: int, partitions: int, clients: list[str], n: int, value_size: int
) -> tuple[str, list[dict[str, Any]]]:
    topic = f"scale-b{brokers}-p{partitions}-{time.time_ns() % 10**9}"
    cluster.create_topic(topic, partitions)
    took = consume.produce(cluster.bootstrap_servers, topic, n, value_size)
    print(f"produced {topic}: {n:,} records over {partitions} partition(s) in {took:.1f}s")
    rows = []
    for client in clients:
        if client == "java":
            r = consume.run_java(cluster, topic, partitions, n)
        else:
            r = consume.run_child(client, cluster.bootstrap_servers, topic, partitions, n)
        if r["records"] != n:
            raise RuntimeError(f"{client} read {r['records']} records of {n} from {topic}")
        r.update(
            brokers=brokers,
            partitions=partitions,
            rate=r["records"] / r["seconds"],
            cpu_us=r["cpu_s"] / r["records"] * 1e6,
        )
        rows.append(r)
        print(
            f"  {client:<22} {r['rate']:>12,.0f} rec/s {r['cpu_us']:>8.2f} us/rec CPU "
            f"{r['max_rss_kb'] / 1024:>8.1f} MB",
            flush=True,
        )
    return topic, rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        "\n| brokers | partitions | client | records/s | CPU us/record | peak RSS MB "
        f"| CPU vs {PEER} |"
    )
    print("|---|---|---|---|---|---|---|")
    peers = {(r["brokers"], r["partitions"]): r for r in rows if r["client"] == PEER}
    for r in rows:
        peer = peers.get((r["brokers"], r["partitions"]))
        ratio = (
            f"{r['cpu_us'] / peer['cpu_us']:.2f}"
            if peer is not None and r["client"] != "java"
            else "-"
        )
        rss = f"{r['max_rss_kb'] / 1024:.0f}" if r["max_rss_kb"] else "-"
        print(
            f"| {r['brokers']} | {r['partitions']} | {r['client']} | {r['rate']:,.0f} "
            f"| {r['cpu_us']:.2f} | {rss} | {ratio} |"
        )


def checks(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's two targets, as lines ("ok" or "MISSED")."""
    lines = []
    ours = {(r["brokers"], r["partitions"]): r for r in rows if r["client"] == "kafka-actors"}
    peer = {(r["brokers"], r["partitions"]): r for r in rows if r["client"] == PEER}
    for brokers in sorted({b for b, _ in ours}):
        counts = sorted(p for b, p in ours if b == brokers)
        if 8 in counts and counts[-1] > 8:
            top = counts[-1]
            ratio = ours[(brokers, top)]["cpu_us"] / ours[(brokers, 8)]["cpu_us"]
            verdict = "ok" if ratio <= 1 + FLAT_WITHIN else "MISSED"
            lines.append(
                f"{verdict}: {brokers} broker(s): CPU per record at {top} partitions / at 8 = "
                f"{ratio:.2f} (flat: <= {1 + FLAT_WITHIN:.2f})"
            )
    for key in sorted(ours):
        if key in peer:
            ratio = ours[key]["cpu_us"] / peer[key]["cpu_us"]
            verdict = "ok" if ratio <= 1.0 else "MISSED"
            lines.append(
                f"{verdict}: {key[0]} broker(s), {key[1]} partition(s): our CPU per record / "
                f"{PEER}'s = {ratio:.2f} (target <= 1.00)"
            )
    return lines


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no plot written to {path}: matplotlib is not installed (the bench extra has it)")
        return False
    sizes = sorted({r["brokers"] for r in rows})
    fig, axes = plt.subplots(2, len(sizes), figsize=(6 * len(sizes), 8), squeeze=False)
    for col, brokers in enumerate(sizes):
        for client in dict.fromkeys(r["client"] for r in rows):
            mine = sorted(
                (r for r in rows if r["brokers"] == brokers and r["client"] == client),
                key=lambda r: r["partitions"],
            )
            if not mine:
                continue
            xs = [r["partitions"] for r in mine]
            if client != "java":  # its CPU is mostly the JVM's start and JIT: not comparable
                axes[0][col].plot(xs, [r["cpu_us"] for r in mine], marker="o", label=client)
            axes[1][col].plot(xs, [r["rate"] for r in mine], marker="o", label=client)
        for row, label in ((0, "CPU us per record (not java)"), (1, "records/s")):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            ax.set_xlabel("partitions")
            ax.set_ylabel(label)
            ax.set_title(f"{brokers} broker(s): {label}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"plot: {path}")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="1,8,64,512")
    parser.add_argument("--brokers", default="1,3")
    parser.add_argument("--records", type=int, default=1_000_000, help="records per topic")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--paused-seconds", type=float, default=5.0)
    parser.add_argument("--plot", type=Path, help="write the PNG here")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--paused-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--child-partitions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.paused_child:
        args.partitions = args.child_partitions
        return paused_child(args)

    partitions = [int(p) for p in args.partitions.split(",")]
    sizes = [int(b) for b in args.brokers.split(",")]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(consume.CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; known: {', '.join(consume.CLIENTS)}")
    print(
        f"{args.records:,} records per topic ({args.value_size}-byte values, 8-byte keys, "
        f"no compression), spread over {partitions} partitions; clusters of {sizes} broker(s); "
        f"{os.cpu_count()} CPUs"
    )
    rows: list[dict[str, Any]] = []
    paused: dict[str, Any] | None = None
    for brokers in sizes:
        cluster = start_cluster(brokers)
        try:
            last_topic = ""
            for count in partitions:
                print(f"\n{brokers} broker(s), {count} partition(s)")
                last_topic, got = measure(
                    cluster, brokers, count, clients, args.records, args.value_size
                )
                rows.extend(got)
            if brokers == max(sizes):
                paused = run_paused(
                    cluster.bootstrap_servers, last_topic, partitions[-1], args.paused_seconds
                )
        finally:
            cluster.stop()
    print_table(rows)
    if paused is not None:
        print(
            f"\npaused: {paused['partitions']} partitions assigned ({paused['partitions_read']} "
            f"read before the pause), all paused for {args.paused_seconds:.0f}s: RSS "
            f"{paused['rss_kb'] / 1024:.0f} MB, peak {paused['hwm_kb'] / 1024:.0f} MB; "
            f"{paused['handed_out_after_pause']} records handed out after the pause; limits: "
            f"fetch.max.bytes {consume.FETCH['fetch.max.bytes'] >> 20} MiB, "
            f"max.partition.fetch.bytes {consume.FETCH['max.partition.fetch.bytes'] >> 20} MiB"
        )
    print()
    for line in checks(rows):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "paused": paused}, indent=1))
    if args.plot is not None:
        plot(rows, args.plot)
    if paused is not None and paused["handed_out_after_pause"]:
        print("!! the paused consumer handed out records")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
