"""What the NetworkActor does with a request's answer: KIP-219 throttling, fault injection's
error codes, and the reply to whoever sent it.

Owns: :data:`CLIENT_THROTTLES_FROM` (from which response version the client holds back its own
requests), :func:`reply` (a :class:`Response` or :class:`RequestFailed` to an actor, a future or
a callable, never raising), :func:`with_error_code` and :func:`api_label`. The requests' life
(accepting, routing, deadlines) is the NetworkActor's; the requests it holds off any
connection are :class:`~kafka_actors.actors.network.unsent.UnsentRequests`. May touch: the
reply targets (actor refs, futures, callables).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Final, cast

import pykka
from kio.schema.errors import ErrorCode as KioErrorCode

from kafka_actors.actors.network.messages import RequestFailed, Response
from kafka_actors.protocol.wire.apis import ApiKey, api_name
from kafka_actors.runtime import AlreadySet

__all__ = ["CLIENT_THROTTLES_FROM", "api_label", "reply", "with_error_code"]


#: KIP-219: from which version of each response the broker no longer delays the response
#: itself but expects the client to hold back its next requests for ``throttle_time_ms``
#: (Java's ``AbstractResponse.shouldClientThrottle``); APIs not listed are newer than KIP-219
#: and always client-throttled.
CLIENT_THROTTLES_FROM: Final[Mapping[int, int]] = {
    ApiKey.FETCH: 8,
    ApiKey.LIST_OFFSETS: 3,
    ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4,
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3,
    ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2,
    ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2,
    16: 2,  # ListGroups
    ApiKey.API_VERSIONS: 2,
    23: 2,  # OffsetForLeaderEpoch
}


def reply(target: Any, answer: Response | RequestFailed, log: Any) -> None:
    """Give ``answer`` to ``target`` (an actor, a future or a callable; None: nobody waits);
    a dead actor, a future already set or a failing callable is logged, never raised."""
    if target is None:
        return
    try:
        if isinstance(target, pykka.ActorRef):
            target.tell(answer)
        elif isinstance(target, pykka.Future):
            target.set(answer)
        else:
            target(answer)
    except pykka.ActorDeadError:
        log.debug("reply_target_dead", reply=type(answer).__name__)
    except AlreadySet:
        log.debug("reply_future_already_set", reply=type(answer).__name__)
    except Exception:
        log.exception("reply_failed", reply=type(answer).__name__)


@functools.cache
def api_label(api: int) -> str:
    """The API's name for log lines (cached)."""
    return api_name(api)


def with_error_code(response: Any, code: int) -> Any | None:
    """``response`` with its top-level ``error_code`` set to ``code``; None if it has none."""
    if not dataclasses.is_dataclass(response) or not any(
        f.name == "error_code" for f in dataclasses.fields(response)
    ):
        return None
    try:
        value = KioErrorCode(code)
    except ValueError:
        return None
    return dataclasses.replace(cast(Any, response), error_code=value)
