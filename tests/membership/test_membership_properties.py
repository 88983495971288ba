"""Hypothesis state machine: random responses, errors, callbacks and time, checking invariants.

Invariants checked after every step:

* never two heartbeats in flight;
* a partition is paused (PauseFetching) before onPartitionsRevoked is asked for it, and stays
  paused until it leaves the assignment: records are never returned after revocation started;
* partitions leave the assignment only after an onPartitionsRevoked / onPartitionsLost that
  named them completed; at most one rebalance callback is outstanding;
* InvokeAssigned names the assignment just published, and its partitions belong to it;
* after a fence the member epoch is 0; a STABLE member has reconciled its target;
* no illegal state transition happens (it would raise).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from membership_harness import TOPIC_IDS, Harness, make_response

from kafka_actors import errors
from kafka_actors.protocol.group.consumer.membership import (
    AssignmentChanged,
    CommitBeforeRevocation,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    MemberState,
    PauseFetching,
)
from kafka_actors.protocol.messages import TopicPartition, UnsentRequest

S = MemberState
TOPICS = sorted(TOPIC_IDS)
ASSIGNMENTS = st.dictionaries(
    st.sampled_from(TOPICS), st.sets(st.integers(0, 2), min_size=1, max_size=3), max_size=3
)
RECOVERABLE_CODES = st.sampled_from([14, 15, 16, 25, 110, 29, 13])
FATAL_CODES = st.sampled_from([30, 35, 82, 42])
# Disruptive rules act only when this is True (about 1 in 10), so runs get deep enough.
RARELY = st.sampled_from([False] * 9 + [True])


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    # Thousands of steps: keep our loggers from rendering every transition (or warning: the
    # rules inject errors), whatever level the run's logging has.
    ours = logging.getLogger("kafka_actors")
    previous = ours.level
    ours.setLevel(logging.CRITICAL)
    yield
    ours.setLevel(previous)


class MembershipMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()
        self.in_flight: UnsentRequest | None = None
        self.callbacks: dict[int, Any] = {}
        self.commits: list[int] = []
        self.paused: set[TopicPartition] = set()
        self.released: set[TopicPartition] = set()
        self.mirror: frozenset[TopicPartition] = frozenset()
        self.broker_epoch = 1

    @initialize(
        auto_commit=st.booleans(),
        static=st.booleans(),
        topics=st.sets(st.sampled_from(TOPICS), min_size=1),
        names_known=st.booleans(),
        initial=st.none() | ASSIGNMENTS,
    )
    def setup(
        self,
        auto_commit: bool,
        static: bool,
        topics: set[str],
        names_known: bool,
        initial: dict[str, set[int]] | None,
    ) -> None:
        self.h = Harness(
            auto_commit=auto_commit,
            instance_id="static-1" if static else None,
            rebalance_timeout_ms=60_000,
        )
        if names_known:
            self.h.m.on_topic_names({TOPIC_IDS[t]: t for t in TOPICS})
        self.h.m.subscribe(topics)
        self.h.m.on_poll(self.h.now)
        self._poll()
        if initial is not None:
            # Start from a member that joined and reconciled ``initial`` (as far as the names
            # are known), so that runs explore revocations and fencing with owned partitions.
            self._respond_success(True, initial)
            for _ in range(6):
                while self.callbacks:
                    self.complete_callback(False)
                while self.commits:
                    self.complete_commit(False)
                self.application_poll()
                if self.in_flight is not None:
                    self._respond_success(False, None)

    # -- plumbing ----------------------------------------------------------------------------

    def _poll(self) -> None:
        result = self.h.m.poll(self.h.now)
        for request in result.requests:
            assert self.in_flight is None, "two heartbeats in flight"
            self.in_flight = request
        self._check_events(result.events)

    def _check_events(self, events: tuple[Any, ...]) -> None:
        for event in events:
            if isinstance(event, PauseFetching):
                assert event.partitions <= self.mirror
                self.paused |= event.partitions
            elif isinstance(event, InvokeRevoked):
                assert event.partitions <= self.paused, "revoked before PauseFetching"
                assert event.partitions <= self.mirror
                self.callbacks[event.callback_id] = event
            elif isinstance(event, InvokeLost):
                assert event.partitions <= self.mirror
                self.callbacks[event.callback_id] = event
            elif isinstance(event, InvokeAssigned):
                assert event.assignment == self.mirror
                assert event.partitions <= event.assignment
                self.callbacks[event.callback_id] = event
            elif isinstance(event, AssignmentChanged):
                removed = self.mirror - event.assignment
                assert removed <= self.released, (
                    f"partitions {removed} left the assignment without a completed callback"
                )
                self.released -= removed
                self.released -= event.assignment - self.mirror
                self.paused -= removed
                self.mirror = event.assignment
            elif isinstance(event, CommitBeforeRevocation):
                self.commits.append(event.commit_id)
        assert len(self.callbacks) <= 1, "more than one rebalance callback outstanding"

    def _take_request(self) -> UnsentRequest:
        request = self.in_flight
        assert request is not None
        self.in_flight = None
        return request

    # -- rules -------------------------------------------------------------------------------

    @rule(delta=st.sampled_from([0, 1, 50, 120, 1_000, 5_000, 20_000, 61_000]), rare=RARELY)
    def advance(self, delta: int, rare: bool) -> None:
        """Time passes; the application usually polls meanwhile (rarely not: poll timer)."""
        self.h.now += delta
        if not rare:
            self.h.m.on_poll(self.h.now)
        self._poll()

    @rule()
    def application_poll(self) -> None:
        self.h.m.on_poll(self.h.now)
        self._poll()

    @rule(topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def subscribe(self, topics: set[str]) -> None:
        self.h.m.subscribe(topics)
        self._poll()

    @precondition(lambda self: self.in_flight is not None)
    @rule(
        outcome=st.integers(0, 19),
        bump=st.booleans(),
        assignment=st.none() | ASSIGNMENTS,
        code=RECOVERABLE_CODES,
        fatal=FATAL_CODES,
    )
    def respond(
        self,
        outcome: int,
        bump: bool,
        assignment: dict[str, set[int]] | None,
        code: int,
        fatal: int,
    ) -> None:
        """Mostly successes; recoverable errors, network failures and (rarely) fatal errors."""
        if outcome < 13:
            self._respond_success(bump, assignment)
        elif outcome < 17:
            self._respond_error(code)
        elif outcome < 19:
            self._fail_request(disconnect=outcome == 17)
        else:
            self._respond_error(fatal)

    def _respond_success(self, bump: bool, assignment: dict[str, set[int]] | None) -> None:
        request = self._take_request()
        sent_epoch = int(request.request.member_epoch)
        if sent_epoch < 0:
            epoch = sent_epoch
            assignment = None
        else:
            if bump or sent_epoch == 0:
                self.broker_epoch += 1
            epoch = self.broker_epoch
            if sent_epoch == 0 and assignment is None:
                assignment = {}  # the coordinator answers a join with an assignment
        response = make_response(
            epoch=epoch,
            assignment=None
            if assignment is None
            else {t: sorted(p) for t, p in assignment.items()},
        )
        self.h.m.on_response(request.request_id, response, self.h.now)
        self._poll()

    def _respond_error(self, code: int) -> None:
        request = self._take_request()
        before = self.h.m.state
        self.h.m.on_response(request.request_id, make_response(error=code), self.h.now)
        if code in (25, 110) and before in (S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING):
            if int(request.request.member_epoch) >= 0:
                assert self.h.m.state in (S.FENCED, S.JOINING)
                assert self.h.m.member_epoch == 0
        self._poll()

    def _fail_request(self, disconnect: bool) -> None:
        request = self._take_request()
        error: errors.KafkaError = (
            errors.DisconnectedError("gone")
            if disconnect
            else errors.CoordinatorLoadInProgressError()
        )
        self.h.m.on_failure(request.request_id, error, self.h.now)
        self._poll()

    @precondition(lambda self: bool(self.callbacks))
    @rule(fail=st.booleans())
    def complete_callback(self, fail: bool) -> None:
        callback_id, event = next(iter(self.callbacks.items()))
        del self.callbacks[callback_id]
        if isinstance(event, (InvokeRevoked, InvokeLost)):
            self.released |= event.partitions
        self.h.m.on_callback_completed(callback_id, RuntimeError("listener") if fail else None)
        self._poll()

    @precondition(lambda self: bool(self.commits))
    @rule(fail=st.booleans())
    def complete_commit(self, fail: bool) -> None:
        commit_id = self.commits.pop(0)
        self.h.m.on_commit_done(commit_id, errors.RequestTimedOutError() if fail else None)
        self._poll()

    @rule(topics=st.sets(st.sampled_from(TOPICS)))
    def topic_names(self, topics: set[str]) -> None:
        self.h.m.on_topic_names({TOPIC_IDS[t]: t for t in topics})
        self._poll()

    @rule(run_callbacks=st.booleans(), rare=RARELY)
    def leave_group(self, run_callbacks: bool, rare: bool) -> None:
        if not rare:
            return
        if not run_callbacks:
            # Leaving without callbacks releases what is owned at once.
            self.released |= self.mirror
        self.h.m.leave_group(self.h.now, run_callbacks=run_callbacks)
        self._poll()

    @rule(rare=RARELY)
    def coordinator(self, rare: bool) -> None:
        if not rare:
            self.h.m.on_coordinator_discovered(self.h.now)
        else:
            self.h.m.on_coordinator_unknown(self.h.now)
        self._poll()

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def mirror_matches(self) -> None:
        m = self.h.m
        assert m.assignment == self.mirror
        assert m.partitions_pending_revocation <= m.assignment
        assert m.partitions_awaiting_callback <= m.assignment
        assert m.request_in_flight == (self.in_flight is not None)

    @invariant()
    def fenced_means_epoch_zero(self) -> None:
        if self.h.m.state is S.FENCED:
            assert self.h.m.member_epoch == 0

    @invariant()
    def stable_means_reconciled(self) -> None:
        m = self.h.m
        if m.state is S.STABLE:
            assert m.current_assignment == m.target_assignment

    @invariant()
    def leaving_epochs(self) -> None:
        m = self.h.m
        if m.state in (S.LEAVING, S.STALE):
            assert m.member_epoch in (-1, -2)
            assert m.member_epoch == (-2 if m.group_instance_id else -1)


MembershipMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMembershipMachine = MembershipMachine.TestCase
