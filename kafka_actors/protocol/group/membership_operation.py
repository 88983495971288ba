"""What a member does with its group membership when the consumer closes (KIP-1092, Java's
``CloseOptions.GroupMembershipOperation``): the vocabulary and the pure rules of both group
protocols. Pure.

Owns: :data:`GroupMembershipOperation` (``"default"``, ``"leave"``, ``"remain"``),
:func:`check_membership_operation` and the two rules the membership managers apply:

* classic (:func:`classic_sends_leave_group`): ``"leave"`` sends LeaveGroup, a static member
  too (with its group.instance.id, LeaveGroup v3+); ``"remain"`` sends none; ``"default"``
  sends it for a dynamic member only (a static member stays until its session times out);
* consumer, KIP-848 (:func:`consumer_leave_epoch`): the member epoch of the leave heartbeat, or
  None when none is sent. ``"leave"``: -1, a static member too (the broker has no other way
  for a static member to leave for good); ``"default"``: -2 for a static member (it leaves for
  a while and comes back within the session timeout), -1 for a dynamic one; ``"remain"``: -2
  for a static member, no heartbeat at all for a dynamic one.

May touch: nothing (the errors module for the typed error).
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from kafka_actors.errors import InvalidArgumentError

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "MEMBERSHIP_OPERATIONS",
    "GroupMembershipOperation",
    "check_membership_operation",
    "classic_sends_leave_group",
    "consumer_leave_epoch",
]

GroupMembershipOperation = Literal["default", "leave", "remain"]
"""What ``close(membership=...)`` does with the group membership (KIP-1092, Java's
``CloseOptions.GroupMembershipOperation``): ``"default"`` (DEFAULT: a dynamic member leaves, a
static member (``group.instance.id``) remains until its session times out), ``"leave"``
(LEAVE_GROUP: leave, a static member too) or ``"remain"`` (REMAIN_IN_GROUP: stay until the
session times out)."""

MEMBERSHIP_OPERATIONS: Final[tuple[GroupMembershipOperation, ...]] = get_args(
    GroupMembershipOperation
)

#: ConsumerGroupHeartbeat member epochs of a leave (KIP-848).
LEAVE_GROUP_MEMBER_EPOCH: Final = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH: Final = -2


def check_membership_operation(value: object) -> GroupMembershipOperation:
    """``value`` as a :data:`GroupMembershipOperation`; InvalidArgumentError otherwise."""
    for operation in MEMBERSHIP_OPERATIONS:
        if value == operation:
            return operation
    raise InvalidArgumentError(
        f"Invalid group membership operation {value!r}: one of "
        + ", ".join(repr(op) for op in MEMBERSHIP_OPERATIONS)
    )


def classic_sends_leave_group(operation: GroupMembershipOperation, *, static: bool) -> bool:
    """Whether a classic member in the group sends LeaveGroup (Java's
    shouldSendLeaveGroupRequest, once the coordinator and the member id are known)."""
    if operation == "leave":
        return True
    if operation == "remain":
        return False
    return not static


def consumer_leave_epoch(operation: GroupMembershipOperation, *, static: bool) -> int | None:
    """The member epoch of a KIP-848 member's leave heartbeat; None: send none (a dynamic
    member that remains)."""
    if operation == "leave":
        return LEAVE_GROUP_MEMBER_EPOCH
    if static:
        return LEAVE_GROUP_STATIC_MEMBER_EPOCH
    if operation == "remain":
        return None
    return LEAVE_GROUP_MEMBER_EPOCH
