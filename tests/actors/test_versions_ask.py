"""Issue 22: the manager actors' own ApiVersions ask (the negotiation gate of
:class:`~kafka_actors.actors.base.ManagerActor`) is one ask per consumer, paced by one request
state that survives the actors' restarts.

The storm it guards against (tests/pacing, ``ApiVersions-UNSUPPORTED_VERSION-assign-start``:
50 ApiVersions in 3 s, bound 16): the connection's handshake succeeded just before the broker
began refusing ApiVersions, and then each of the six manager actors asked on its own, stepped
v3 -> v2 -> v1 -> v0 at once after each refusal, and backed off on a schedule of its own
(started over by a restart).

Deterministic: a manual clock drives every timer; after each step the test waits until the
actors have handled every message (a barrier asked of each until nothing moves).
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pykka
import pytest

from kafka_actors.actors.base import ManagerActor, versions_learned
from kafka_actors.actors.context import ConsumerContext
from kafka_actors.actors.network import RequestFailed, Response, Send
from kafka_actors.clock import ManualClock
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import KafkaConnectionError
from kafka_actors.protocol.messages import PollResult
from kafka_actors.protocol.subscription import SubscriptionState
from kafka_actors.protocol.wire.apis import ApiKey, VersionRange, response_type
from kafka_actors.protocol.wire.versions import NegotiatedVersions
from kafka_actors.supervisors import ChildContext, ChildTable, TreeStatus
from tests.pacing.cases import java_attempts

ACTORS = 6
WINDOW_S = 3.0
STEP_S = 0.01


class Barrier:
    """Asked of an actor: answered once it has handled everything told to it before."""


class _Idle:
    def poll(self, now_ms: int) -> PollResult:
        return PollResult()


class Gate(ManagerActor):
    """A manager actor with nothing to do but learn the API versions."""

    component = "gate"

    def build(self) -> Any:
        return _Idle()

    def handle_unbuilt(self, message: Any, now_ms: int) -> bool:
        return isinstance(message, Barrier)

    def handle(self, message: Any, now_ms: int) -> Any:
        return "built" if isinstance(message, Barrier) else None


class Record:
    """The ApiVersions sends the fake network saw: (clock time, version)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: list[tuple[float, int]] = []

    def add(self, at: float, version: int) -> None:
        with self._lock:
            self._sent.append((at, version))

    def sends(self) -> list[tuple[float, int]]:
        with self._lock:
            return list(self._sent)


@dataclass
class Broker:
    """How the fake network answers ApiVersions: refuse (UNSUPPORTED_VERSION), fail (nothing
    reachable), accept, or stay silent (the answer still on its way)."""

    mode: str = "refuse"


class FakeNetwork(pykka.ThreadingActor):
    """Stands for the NetworkActor: records every ApiVersions ``Send`` (at the clock's time)
    and answers it at once as ``broker.mode`` says."""

    def __init__(self, clock: ManualClock, broker: Broker, record: Record) -> None:
        super().__init__()
        self.clock = clock
        self.broker = broker
        self.record = record

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Barrier):
            return None
        if not isinstance(message, Send):
            return None  # ChildExited and the like
        version = int(message.request.__version__)
        self.record.add(self.clock.monotonic(), version)
        if self.broker.mode == "silent":
            return None
        if self.broker.mode == "fail":
            reply: Any = RequestFailed(
                message.request_id,
                message.node,
                ApiKey.API_VERSIONS,
                KafkaConnectionError("no node is reachable"),
            )
        else:
            code = 35 if self.broker.mode == "refuse" else 0
            cls: Any = response_type(ApiKey.API_VERSIONS, version)
            entry = cls.__dataclass_fields__["api_keys"].type.__args__[0]
            keys = (entry(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=3),)
            if code == 0:
                keys += (entry(api_key=ApiKey.METADATA, min_version=0, max_version=12),)
            fields: dict[str, Any] = {"error_code": code, "api_keys": keys}
            if version >= 1:
                import datetime

                fields["throttle_time"] = datetime.timedelta(0)
            if version >= 3:
                fields.update(
                    supported_features=(),
                    finalized_features_epoch=-1,
                    finalized_features=(),
                    zk_migration_ready=False,
                )
            reply = Response(message.request_id, 1, 1, cls(**fields))
        message.reply_to.tell(reply)
        return None


@dataclass
class Rig:
    clock: ManualClock
    ctx: ConsumerContext
    broker: Broker
    network: pykka.ActorRef[FakeNetwork]
    fake: Record
    actors: list[pykka.ActorRef[Any]]

    def start(self, index: int, generation: int = 0) -> pykka.ActorRef[Any]:
        child = ChildContext(f"gate{index}", generation, self.network, TreeStatus())
        return Gate.start(self.ctx, context=child)

    def settle(self) -> None:
        """Wait until no actor has a message left from before (and nothing new was sent)."""
        quiet = 0
        before = len(self.fake.sends())
        while quiet < 3:
            for ref in [self.network, *self.actors]:
                try:
                    ref.ask(Barrier(), timeout=10)
                except pykka.ActorDeadError:
                    pass
            now = len(self.fake.sends())
            quiet = quiet + 1 if now == before else 0
            before = now

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / STEP_S)):
            self.clock.advance(STEP_S)
            self.settle()


@pytest.fixture
def rig() -> Iterator[Rig]:
    config = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "group.id": "g",
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
        }
    )
    clock = ManualClock(monotonic=1_000.0)
    rng = random.Random(22)
    ctx = ConsumerContext(
        config=config,
        clock=clock,
        scheduler=clock.scheduler(),
        subscriptions=SubscriptionState(),
        random=rng.random,
        network_table=ChildTable("network", TreeStatus()),
        group_protocol="consumer",
    )
    broker = Broker()
    fake = Record()
    network = FakeNetwork.start(clock, broker, fake)
    rig = Rig(clock, ctx, broker, network, fake, [])
    try:
        yield rig
    finally:
        for ref in [*rig.actors, network]:
            try:
                ref.stop(timeout=10)
            except pykka.ActorDeadError:
                pass


def _start_all(rig: Rig) -> None:
    rig.actors.extend(rig.start(i) for i in range(ACTORS))
    rig.settle()


def _bound(window_s: float) -> int:
    # Java's schedule (retry.backoff.ms 100 doubling to 1000, every jitter at 0.8) in the
    # window, plus the one immediate fallback after the first refusal.
    return java_attempts(window_s * 1000, 100, 1000) + 1


def test_a_refusing_broker_gets_one_paced_ask_per_consumer(rig: Rig) -> None:
    _start_all(rig)
    rig.run(WINDOW_S)
    sent = rig.fake.sends()
    assert 3 <= len(sent) <= _bound(WINDOW_S), sent
    # Nothing right after a refusal, except the one fallback to a lower version.
    times = [t for t, _ in sent]
    immediate = [i for i in range(1, len(times)) if times[i] - times[i - 1] < 0.08]
    assert immediate == [1], sent
    assert sent[1][1] < sent[0][1]
    assert rig.ctx.versions is None


def test_unreachable_cluster_gets_one_paced_ask_per_consumer(rig: Rig) -> None:
    rig.broker.mode = "fail"
    _start_all(rig)
    rig.run(WINDOW_S)
    sent = rig.fake.sends()
    assert 3 <= len(sent) <= java_attempts(WINDOW_S * 1000, 100, 1000), sent
    times = [t for t, _ in sent]
    assert all(b - a >= 0.08 for a, b in itertools.pairwise(times)), sent


def test_a_restarted_actor_does_not_start_the_backoff_over(rig: Rig) -> None:
    _start_all(rig)
    rig.run(1.0)
    before = len(rig.fake.sends())
    # Every actor restarts (a new incarnation each): the consumer's backoff goes on.
    for index, ref in enumerate(rig.actors):
        ref.stop(timeout=10)
        rig.actors[index] = rig.start(index, generation=1)
    rig.settle()
    rig.run(0.05)
    assert len(rig.fake.sends()) - before <= 1, rig.fake.sends()[before:]


def test_every_actor_builds_once_the_versions_are_known(rig: Rig) -> None:
    _start_all(rig)
    rig.run(0.5)
    rig.broker.mode = "accept"
    rig.run(WINDOW_S)
    assert rig.ctx.versions is not None
    assert [ref.ask(Barrier(), timeout=10) for ref in rig.actors] == ["built"] * ACTORS
    # Once known, nobody asks again.
    count = len(rig.fake.sends())
    rig.run(1.0)
    assert len(rig.fake.sends()) == count


def test_a_connection_handshake_ends_the_wait_before_the_ask_is_answered(rig: Rig) -> None:
    """Issue 26: the NetworkActor reports the versions of the connection the ask opened
    (``versions_learned``): every actor builds at once, the asker too, without the ask's own
    round trip; its answer, when it comes, changes nothing."""
    rig.broker.mode = "silent"
    _start_all(rig)
    assert len(rig.fake.sends()) == 1  # the one ask, unanswered
    versions = NegotiatedVersions({int(ApiKey.METADATA): VersionRange(0, 12)})
    versions_learned(rig.ctx, versions)
    rig.settle()
    assert rig.ctx.versions is versions
    assert [ref.ask(Barrier(), timeout=10) for ref in rig.actors] == ["built"] * ACTORS
    versions_learned(rig.ctx, NegotiatedVersions({}))  # a later connection: the first stays
    assert rig.ctx.versions is versions
    rig.run(1.0)
    assert len(rig.fake.sends()) == 1
