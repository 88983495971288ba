"""Command line of the testkit: ``python -m kafka_actors.testing {fetch,broker,mock}``.

Owns: argument parsing and the foreground lifetime of the clusters it starts (until SIGINT
or SIGTERM, then a clean stop). May touch: :mod:`kafka_actors.testing` only.

* ``fetch [--kafka-version V ...]``: resolve the jars of each V (default: the 4.x and 3.9.x
  versions the fixtures use), print each version's cache directory, one per line.
* ``broker [--brokers N] [--kafka-version V] [--share-groups]``: start a cluster, print its
  bootstrap servers as the first line of stdout, run until SIGINT/SIGTERM, stop it.
  ``--share-groups``: the broker settings of the ``share_broker`` fixture
  (:func:`~kafka_actors.testing.share.share_broker_config`).
* ``mock [--brokers N]``: the same with librdkafka's mock cluster.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from kafka_actors.testing import jars as _jars


class _StopSignal:
    """SIGINT/SIGTERM/SIGHUP handlers installed at construction (before anything starts, so
    a signal that arrives while a cluster starts still leads to a clean stop)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.got: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.got.append(signum)
        self.stop.set()

    def wait(self) -> int:
        while not self.stop.wait(1.0):
            pass
        return self.got[0]


def _fetch(args: argparse.Namespace) -> int:
    if args.kafka_version:
        versions = list(args.kafka_version)
    else:
        versions = [_jars.default_version(), _jars.default_version_39()]
    for v in versions:
        found = _jars.resolve(v)
        print(found.directory, flush=True)
    return 0


def _broker(args: argparse.Namespace) -> int:
    from kafka_actors.testing.broker import KafkaCluster
    from kafka_actors.testing.share import share_broker_config

    # Handlers first, so a signal that arrives during start-up still stops the JVMs.
    cluster = KafkaCluster(
        num_brokers=args.brokers,
        kafka_version=args.kafka_version,
        broker_config=share_broker_config() if args.share_groups else None,
    )
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
    try:
        cluster.start()
        print(cluster.bootstrap_servers, flush=True)
        for node in cluster.nodes:
            print(
                f"node {node.node_id} roles={','.join(node.roles)} pid={node.pid} "
                f"log={node.log_path}",
                file=sys.stderr,
                flush=True,
            )
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        cluster.stop()
    return 0


def _mock(args: argparse.Namespace) -> int:
    from kafka_actors.testing.mock import MockCluster

    stop = _StopSignal()
    with MockCluster(num_brokers=args.brokers) as mock:
        print(mock.bootstrap_servers, flush=True)
        if not stop.stop.is_set():
            stop.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_actors.testing")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fetch", help="resolve Kafka's jars with Maven into the cache")
    p.add_argument(
        "--kafka-version",
        action="append",
        default=None,
        help="a version to resolve (repeatable); default: the newest 4.x and 3.9.x the "
        "fixtures use ($KAFKA_ACTORS_KAFKA_VERSION, $KAFKA_ACTORS_KAFKA39_VERSION)",
    )
    p.set_defaults(func=_fetch)
    p = sub.add_parser("broker", help="run a real Kafka cluster until SIGINT/SIGTERM")
    p.add_argument("--brokers", type=int, default=1)
    p.add_argument("--kafka-version", default=None)
    p.add_argument(
        "--share-groups",
        action="store_true",
        help="set up for share-group tests: groups may set a 1 s record lock, 500 ms heartbeats",
    )
    p.set_defaults(func=_broker)
    p = sub.add_parser("mock", help="run librdkafka's mock cluster until SIGINT/SIGTERM")
    p.add_argument("--brokers", type=int, default=3)
    p.set_defaults(func=_mock)
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
