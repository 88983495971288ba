"""What ``list`` and ``group`` print.

Owns: the text layout of topic listings and group descriptions (aligned columns, ``-`` for
an unknown value, as ``kafka-consumer-groups --describe`` shows them). May touch: a
:class:`~kafka_actors.cli.admin.ClusterClient`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TextIO

from kafka_actors.cli.admin import ClusterClient, GroupDescription, start_offsets
from kafka_actors.errors import UnsupportedVersionError
from kafka_actors.protocol.messages import TopicPartition

__all__ = ["format_table", "print_group", "print_topics"]


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns, one space apart (the last column is not padded)."""
    cells = [[str(c) for c in header]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        lines.append(" ".join(padded).rstrip())
    return "\n".join(lines) + "\n"


def print_topics(
    client: ClusterClient,
    out: TextIO,
    *,
    topics: Sequence[str] | None,
    internal: bool,
    as_json: bool = False,
) -> int:
    metadata = client.metadata(list(topics) if topics else None)
    controller = int(getattr(metadata, "controller_id", -1))
    brokers = sorted(metadata.brokers, key=lambda b: int(b.node_id))
    if as_json:
        listed = [
            t for t in client.topics(list(topics) if topics else None) if internal or not t.internal
        ]
        document = {
            "controller_id": controller,
            "brokers": [
                {"id": int(b.node_id), "host": str(b.host), "port": int(b.port)} for b in brokers
            ],
            "topics": [
                {
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "internal": t.internal,
                    "partitions": [
                        {
                            "partition": index,
                            "leader": leader,
                            "replicas": list(replicas),
                            "isr": list(isr),
                        }
                        for index, leader, replicas, isr in t.partitions
                    ],
                }
                for t in listed
            ],
        }
        out.write(json.dumps(document) + "\n")
        out.flush()
        return 0
    out.write(f"{len(brokers)} brokers:\n")
    for b in brokers:
        role = " (controller)" if int(b.node_id) == controller else ""
        out.write(f"  broker {int(b.node_id)} at {b.host}:{int(b.port)}{role}\n")
    described = [
        t for t in client.topics(list(topics) if topics else None) if internal or not t.internal
    ]
    out.write(f"{len(described)} topics:\n")
    for t in described:
        out.write(f'  topic "{t.name}" with {len(t.partitions)} partitions:\n')
        for index, leader, replicas, isr in t.partitions:
            out.write(
                f"    partition {index}, leader {leader}, "
                f"replicas: {','.join(map(str, replicas))}, isrs: {','.join(map(str, isr))}\n"
            )
    out.flush()
    return 0


def _assignment_text(partitions: Sequence[TopicPartition]) -> str:
    """``topic:0,1;other:2`` (``-`` when empty, as the table prints None)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{t}:{','.join(map(str, sorted(p)))}" for t, p in sorted(by_topic.items()))


def print_group(
    client: ClusterClient,
    group: str,
    out: TextIO,
    *,
    members: bool,
    state: bool,
    notes: TextIO | None = None,
) -> int:
    """``group``'s rows (see :mod:`kafka_actors.cli`). Where the broker cannot describe
    groups (neither ConsumerGroupDescribe nor DescribeGroups), the committed offsets, log end
    offsets and lag are still printed, members as unknown, with a note on ``notes``;
    ``--members`` and ``--state`` need the description and fail (UnsupportedVersionError)."""
    try:
        description = client.describe_group(group)
    except UnsupportedVersionError as exc:
        if members or state:
            raise
        if notes is not None:
            print(
                f"% the broker cannot describe groups ({exc}): members are unknown; "
                "committed offsets and lag follow",
                file=notes,
            )
        description = GroupDescription(group, "Unknown", "-", "", None, ())
        unknown_members = True
    else:
        unknown_members = False
    # A share group's start offsets are asked once, for the checks below and the rows.
    share = client.share_offsets(group) if description.protocol == "share" else None
    if share is not None:
        committed = start_offsets(share)
    else:
        committed = client.committed(group)
    if unknown_members and not committed:
        out.write(f"Consumer group '{group}' has no committed offsets.\n")
        return 1
    if description.state in ("Dead", "DEAD") and not committed:
        out.write(f"Consumer group '{group}' does not exist.\n")
        return 1
    if state:
        out.write(
            format_table(
                ["GROUP", "PROTOCOL", "STATE", "ASSIGNOR", "EPOCH", "#MEMBERS"],
                [
                    [
                        group,
                        description.protocol,
                        description.state,
                        description.assignor or None,
                        description.epoch,
                        len(description.members),
                    ]
                ],
            )
        )
        return 0
    if members:
        if not description.members:
            out.write(f"Consumer group '{group}' has no active members.\n")
            return 0
        # As kafka-consumer-groups 4.x: each member's epoch and assignment and the target
        # it moves to (KIP-848 groups; "-" for the epochs and target of a classic group).
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        member_rows: list[list[object]] = []
        for m in description.members:
            target = m.target_assignment
            member_rows.append(
                [
                    group,
                    m.member_id,
                    m.client_host,
                    m.client_id,
                    len(m.assignment),
                    m.member_epoch,
                    _assignment_text(m.assignment) or None,
                    description.assignment_epoch,
                    None if target is None else (_assignment_text(target) or None),
                ]
            )
        out.write(format_table(header, member_rows))
        return 0
    rows = client.offsets_with_lag(description, committed, share)
    if not description.members and not unknown_members:
        out.write(f"Consumer group '{group}' has no active members.\n\n")
    out.write(
        format_table(
            [
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ],
            [
                [
                    group,
                    r.topic,
                    r.partition,
                    r.committed,
                    r.log_end,
                    r.lag,
                    r.member.member_id if r.member else None,
                    r.member.client_host if r.member else None,
                    r.member.client_id if r.member else None,
                ]
                for r in rows
            ],
        )
    )
    out.flush()
    return 0
