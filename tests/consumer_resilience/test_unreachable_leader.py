"""FetchManager, pure: a leader that stops answering (killed broker) makes the fetch manager ask
for metadata until the partition has a new leader, which it then fetches from, while the Fetch
queued for the dead node is still pending (found by test_recovery: without it the partitions of
a killed leader were never fetched again)."""

from __future__ import annotations

from kafka_actors.errors import DisconnectedError, KafkaTimeoutError
from kafka_actors.protocol.fetch.manager import MetadataRefreshNeeded
from kafka_actors.protocol.messages import TopicPartition
from tests.fetch.fetch_harness import Part, by_node, cluster, fetch_response, requested, setup

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)
LEADERS = {T0: (1, 5), T1: (1, 5), U0: (2, 7)}


def _refreshes(events: tuple[object, ...]) -> list[MetadataRefreshNeeded]:
    return [e for e in events if isinstance(e, MetadataRefreshNeeded)]


def test_leader_gone_refreshes_metadata_until_a_new_leader_is_fetched() -> None:
    fm, _ = setup({T0: 0, T1: 0, U0: 0}, LEADERS, retry_backoff_ms=100)
    first = by_node(fm.poll(0).requests)
    fm.on_response(first[2].request_id, fetch_response(17, {U0: Part()}, session_id=2), 1)
    fm.on_failure(first[1].request_id, DisconnectedError("connection lost", node=1), 10)

    # At once: a refresh for the partitions node 1 leads.
    result = fm.poll(11)
    [refresh] = _refreshes(result.events)
    assert set(refresh.partitions) == {T0, T1}
    # The cluster view still names node 1 (not fenced yet); after the backoff a Fetch is
    # queued for it again, and metadata is asked for again every second meanwhile.
    fm.on_cluster_updated(cluster(LEADERS))
    again_node_1 = fm.poll(500)
    assert not _refreshes(again_node_1.events)
    queued = by_node(again_node_1.requests)[1]
    assert fm.poll(700).time_until_next_poll_ms is not None
    [again] = _refreshes(fm.poll(1011).events)
    assert set(again.partitions) == {T0, T1}

    # The controller moved T0 and T1 to node 3: fetched from there although the Fetch to
    # node 1 is still pending.
    fm.on_cluster_updated(cluster({T0: (3, 6), T1: (3, 6), U0: (2, 7)}))
    moved = by_node(fm.poll(1100).requests)
    assert set(requested(moved[3])) == {T0, T1}
    assert {requested(moved[3])[tp].current_leader_epoch for tp in (T0, T1)} == {6}
    # Nothing node 1 leads: no more refreshes, even when its queued Fetch times out.
    assert not _refreshes(fm.poll(2100).events)
    fm.on_failure(queued.request_id, KafkaTimeoutError("timed out", node=1), 30_600)
    assert not _refreshes(fm.poll(31_700).events)


def test_answer_from_the_node_stops_the_refreshes() -> None:
    fm, _ = setup({T0: 0}, {T0: (1, 5)}, retry_backoff_ms=100)
    first = fm.poll(0).requests[0]
    fm.on_failure(first.request_id, DisconnectedError("connection lost", node=1), 10)
    assert _refreshes(fm.poll(11).events)
    fm.on_cluster_updated(cluster({T0: (1, 5)}))
    second = fm.poll(200).requests[0]
    fm.on_response(second.request_id, fetch_response(17, {T0: Part()}, session_id=4), 250)
    assert fm.poll(1300).time_until_next_poll_ms is None
    assert not _refreshes(fm.poll(2400).events)
