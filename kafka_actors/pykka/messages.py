"""The pykka bridge's protocol: the shared bridge messages, plus what pykka needs on top.

Owns: :class:`Call` (a request with the address of its reply: pykka's ``tell`` carries no
sender, which Thespian gives every message implicitly) and :class:`BatchFailed` (the
subscriber raised on a record batch: pykka's counterpart of Thespian returning the batch as
``PoisonMessage``). Every other message kind is :mod:`kafka_actors.bridges.messages`, the
same types the Thespian bridge speaks (:mod:`kafka_actors.pykka` exports them all).

Addresses: the subscriber is a pykka ``ActorRef`` (``Subscribe(topics, subscriber=ref)``);
the bridge sends it every stream message with ``tell``. Messages from the subscriber
(:class:`Request`, :class:`Handled`, :class:`RebalanceAck`, :class:`BatchFailed`) need no
sender: a bridge serves one subscriber, in-process, and whoever holds the bridge's ref speaks
for it. A request whose answer comes later (:class:`Commit`, :class:`Close`) names its reply
address in :class:`Call`; told bare, its reply goes to the subscriber (a :class:`Commit`) or
nowhere (a :class:`Close`).

May touch: nothing (plain values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka_actors.bridges.messages import ErrorInfo

__all__ = ["BatchFailed", "Call", "Reply"]

#: Where a reply goes: called once with the reply, on the bridge's thread, so it must not
#: block: an ``ActorRef``'s ``tell``, a ``pykka.ThreadingFuture``'s ``set``, a
#: ``concurrent.futures.Future``'s ``set_result``.
Reply = Callable[[Any], object]


@dataclass(frozen=True, slots=True)
class Call:
    """``message`` (a :class:`Subscribe`, :class:`Assign`, :class:`Commit`, :class:`GetStats`
    or :class:`Close`), answered by calling ``reply_to`` with the reply (a typed error reply
    when the bridge fails it: :class:`CommitFailed` for a commit, else :class:`StreamError`)."""

    message: Any
    reply_to: Reply


@dataclass(frozen=True, slots=True)
class BatchFailed:
    """Subscriber → bridge: handling the record batch ``seq`` raised ``error``. The bridge
    treats it and every later batch not yet acknowledged as not delivered, seeks their
    partitions back, drops the demand to zero and answers :class:`BatchRejected`."""

    seq: int
    error: ErrorInfo
