"""Request round trips through the NetworkActor beside a blocking one-socket loop, and the idle
CPU of a connected NetworkActor.

Owns: nothing but its own run. Starts a one-node Kafka 4.x broker with the testkit, creates a
one-partition topic, then measures for Metadata v12 (all topics) and an empty Fetch (the
partition at its end offset, max_wait_ms=0):

* ``blocking``: :class:`kafka_actors.testing.client.BlockingKafkaConnection`, one socket,
  strictly sequential, the same codec (the baseline);
* ``actor seq``: sequential ask-style round trips through the NetworkActor (a caller thread
  sends :class:`Send` with a pykka Future and waits for each reply);
* ``actor pipe N``: the same caller keeping N requests in flight (max.in.flight 100).

Rates are requests/s, best of ``--repeat`` rounds in which the three take turns (so a
change in machine load hits all of them); the ratios are actor / blocking, i.e. what
the actor hop (mailbox, selector wake-up, reply future) costs or gains. Finally a connected,
idle NetworkActor is left alone for ``--idle`` seconds and the process CPU time
(``time.process_time``: every thread of this process; the broker is another process) and the
number of selector wake-ups of the actor are printed.

    .venv/bin/python bench/network.py [--requests 2000] [--repeat 5] [--pipeline 16] [--idle 10]
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import pykka

from kafka_actors import log
from kafka_actors.actors.network import NetworkActor, RequestFailed, Send, request
from kafka_actors.config import ConsumerConfig
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.testing import KafkaBroker
from kafka_actors.testing.client import BlockingKafkaConnection


def rate(run: Callable[[int], None], n: int) -> tuple[float, float]:
    """Requests per second (wall clock) and client-process CPU microseconds per request."""
    started, cpu = time.perf_counter(), time.process_time()
    run(n)
    return n / (time.perf_counter() - started), (time.process_time() - cpu) * 1e6 / n


def blocking_loop(conn: BlockingKafkaConnection, make: Callable[[], Any]) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            conn.send(make())

    return run


def actor_sequential(
    ref: pykka.ActorRef[Any], node: int, make: Callable[[], Any]
) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            request(ref, make(), node=node, timeout=30)

    return run


def actor_pipelined(
    ref: pykka.ActorRef[Any], node: int, make: Callable[[], Any], depth: int
) -> Callable[[int], None]:
    def run(n: int) -> None:
        window: deque[pykka.Future[Any]] = deque()
        for _ in range(n):
            if len(window) >= depth:
                check(window.popleft().get(timeout=30))
            future: pykka.Future[Any] = pykka.ThreadingFuture()
            ref.tell(Send(make(), node=node, reply_to=future, timeout_ms=30_000))
            window.append(future)
        while window:
            check(window.popleft().get(timeout=30))

    return run


def check(reply: Any) -> None:
    if isinstance(reply, RequestFailed):
        raise reply.error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pipeline", type=int, default=16)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    log.configure(level="WARNING")

    with KafkaBroker() as broker:
        broker.create_topic("bench-network", 1, 1)
        config = ConsumerConfig.from_dict(
            {"bootstrap.servers": broker.bootstrap_servers, "client.id": "bench"}
        )
        ref = NetworkActor.start(config)
        try:
            meta = request(ref, rq.metadata_request(12, topics=["bench-network"]), timeout=60)
            node = int(meta.response.brokers[0].node_id)
            [topic] = meta.response.topics
            topic_id = topic.topic_id
            host, port = broker.bootstrap_servers.split(",")[0].rsplit(":", 1)

            def metadata_v12() -> Any:
                return rq.metadata_request(12, topics=None)

            def empty_fetch() -> Any:
                return rq.fetch_request(
                    17,
                    partitions=[rq.FetchPartition("bench-network", 0, 0, 1 << 20)],
                    max_wait_ms=0,
                    min_bytes=0,
                    max_bytes=1 << 20,
                    topic_ids={"bench-network": topic_id},
                )

            print("requests/s (best round); in brackets: CPU us per request in this process")
            print(
                f"{'request':<14} {'blocking':>16} {'actor seq':>16} "
                f"{f'actor pipe {args.pipeline}':>16} {'seq/blk':>8} {'pipe/blk':>9}"
            )
            with BlockingKafkaConnection(host, int(port), client_id="bench") as conn:
                for name, make in (("Metadata v12", metadata_v12), ("empty Fetch", empty_fetch)):
                    request(ref, make(), node=node, timeout=30)  # connection to node ready
                    conn.send(make())
                    warm = max(100, args.requests // 10)
                    blocking_loop(conn, make)(warm)
                    actor_sequential(ref, node, make)(warm)
                    modes = {
                        "blk": blocking_loop(conn, make),
                        "seq": actor_sequential(ref, node, make),
                        "pipe": actor_pipelined(ref, node, make, args.pipeline),
                    }
                    best = dict.fromkeys(modes, 0.0)
                    cpu_us = dict.fromkeys(modes, float("inf"))
                    for _ in range(args.repeat):  # modes take turns: load changes hit all
                        for mode, run in modes.items():
                            rps, us = rate(run, args.requests)
                            best[mode] = max(best[mode], rps)
                            cpu_us[mode] = min(cpu_us[mode], us)
                    blk, seq, pipe = best["blk"], best["seq"], best["pipe"]
                    cells = [f"{best[m]:>8.0f} ({cpu_us[m]:>4.0f})" for m in modes]
                    print(
                        f"{name:<14} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} "
                        f"{seq / blk:>8.2f} {pipe / blk:>9.2f}"
                    )

            inbox = ref.actor_inbox
            wakeups_before = inbox.wakeups  # type: ignore[attr-defined]
            cpu_before = time.process_time()
            wall_before = time.perf_counter()
            time.sleep(args.idle)
            cpu = time.process_time() - cpu_before
            wall = time.perf_counter() - wall_before
            wakeups = inbox.wakeups - wakeups_before  # type: ignore[attr-defined]
            print(
                f"idle connected NetworkActor: {cpu * 1000:.1f} ms process CPU in {wall:.1f} s "
                f"({100 * cpu / wall:.3f}% of a core), {wakeups} selector wake-ups"
            )
        finally:
            ref.stop(timeout=30)


if __name__ == "__main__":
    main()
