"""Fetch responses v12-v17 decoded without copying their records.

Owns: :func:`decode_fetch_body`, a reader of the flexible Fetch response versions that builds
kio's own response classes, with each partition's ``records`` a read-only ``memoryview`` of
the frame instead of a ``bytes`` copy (kio's reader copies every partition's records: about
30 ms per 50 MiB response in fresh pages on a 2-core machine, against 2 ms here; issue 26).
Used by the consumer's connections only (``decode_response(..., record_views=True)``); v4-v11
stay with kio. A view keeps its whole frame alive: the fetch buffer lets it go once decoded
and copies a paused partition's data out (:class:`~kafka_actors.protocol.fetch.buffer.
CompletedFetch`), and each connection keeps two responses' frames
(:func:`~kafka_actors.protocol.connection.node.frame_pool_bytes`).

Every length and count read from the frame is checked against the bytes that remain before
anything is built from it; a frame that ends early raises TruncatedFrameError, any other
inconsistency InvalidFrameError. Unknown tagged fields are skipped, as the protocol says.
"""

from __future__ import annotations

import struct
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from kafka_actors.errors import InvalidFrameError, TruncatedFrameError

__all__ = ["FLEXIBLE_VERSIONS", "decode_fetch_body"]

#: The Fetch response versions this reader decodes (the flexible ones kio has).
FLEXIBLE_VERSIONS = range(12, 18)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error code, high watermark, LSO, log start
_ABORTED = struct.Struct(">qq")


class _Reader:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def need(self, n: int, what: str) -> int:
        pos = self.pos
        if n < 0:
            raise InvalidFrameError(f"Fetch response: negative length for {what}")
        if pos + n > self.end:
            raise TruncatedFrameError(f"Fetch response ended inside {what}")
        self.pos = pos + n
        return pos

    def uvarint(self, what: str) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        value = shift = 0
        while True:
            if pos >= end:
                raise TruncatedFrameError(f"Fetch response ended inside {what}")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 28:
                raise InvalidFrameError(f"Fetch response: varint too long for {what}")
        self.pos = pos
        return value

    def count(self, what: str, min_size: int) -> int | None:
        """A compact array's length (None: null), bounded by what remains at ``min_size``
        bytes per element."""
        n = self.uvarint(what) - 1
        if n < 0:
            return None
        if n * min_size > self.end - self.pos:
            raise InvalidFrameError(f"Fetch response: {n} {what} cannot fit in the frame")
        return n

    def i32(self, what: str) -> int:
        value: int = _I32.unpack_from(self.buf, self.need(4, what))[0]
        return value

    def i64(self, what: str) -> int:
        value: int = _I64.unpack_from(self.buf, self.need(8, what))[0]
        return value

    def string(self, what: str) -> str | None:
        n = self.uvarint(what) - 1
        if n < 0:
            return None
        start = self.need(n, what)
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidFrameError(f"Fetch response: {what} is not UTF-8") from exc

    def skip_tags(self, what: str, known: tuple[int, ...] = ()) -> dict[int, _Reader]:
        """The tagged fields here, skipped: tag -> a reader of the value of each tag in
        ``known``, bounded by the value (the rest are not kept: a frame of many tiny unknown
        tags builds nothing)."""
        tags: dict[int, _Reader] = {}
        for _ in range(self.uvarint(what)):
            tag = self.uvarint(what)
            size = self.uvarint(what)
            start = self.need(size, what)
            if tag in known:
                tags[tag] = _Reader(self.buf[: start + size], start)
        return tags


def decode_fetch_body(frame: memoryview, offset: int, version: int, module: Any) -> tuple[Any, int]:
    """The Fetch response body of ``version`` at ``offset`` of ``frame`` (kio's classes from
    ``module``, e.g. ``kio.schema.fetch.v17.response``), and the bytes it took."""
    if version not in FLEXIBLE_VERSIONS:
        raise ValueError(f"Fetch v{version} is not a flexible version")
    r = _Reader(frame.toreadonly() if not frame.readonly else frame, offset)
    throttle_ms = r.i32("throttle_time_ms")
    error_code = _I16.unpack_from(r.buf, r.need(2, "error_code"))[0]
    session_id = r.i32("session_id")
    topics = []
    n_topics = r.count("topics", 2) or 0
    for _ in range(n_topics):
        if version >= 13:
            start = r.need(16, "topic_id")
            raw = bytes(r.buf[start : start + 16])
            # the zero UUID is kio's None (no topic id), as kio reads it
            topic_key: Any = {"topic_id": uuid.UUID(bytes=raw) if any(raw) else None}
        else:
            topic_key = {"topic": r.string("topic")}
        partitions = []
        for _ in range(r.count("partitions", 36) or 0):
            index, code, hw, lso, log_start = _PARTITION_HEAD.unpack_from(
                r.buf, r.need(_PARTITION_HEAD.size, "partition")
            )
            n_aborted = r.count("aborted_transactions", 17)
            aborted = None
            if n_aborted is not None:
                items = []
                for _ in range(n_aborted):
                    producer_id, first = _ABORTED.unpack_from(r.buf, r.need(16, "aborted"))
                    r.skip_tags("aborted transaction tags")
                    items.append(
                        module.AbortedTransaction(producer_id=producer_id, first_offset=first)
                    )
                aborted = tuple(items)
            preferred = r.i32("preferred_read_replica")
            size = r.uvarint("records") - 1
            records: memoryview | None = None
            if size >= 0:
                start = r.need(size, "records")
                records = r.buf[start : start + size]
            tags = r.skip_tags("partition tags", (0, 1, 2))
            extra: dict[str, Any] = {}
            if (sub := tags.get(0)) is not None:
                extra["diverging_epoch"] = module.EpochEndOffset(
                    epoch=sub.i32("epoch"), end_offset=sub.i64("end_offset")
                )
            if (sub := tags.get(1)) is not None:
                extra["current_leader"] = module.LeaderIdAndEpoch(
                    leader_id=sub.i32("leader_id"), leader_epoch=sub.i32("leader_epoch")
                )
            if (sub := tags.get(2)) is not None:
                extra["snapshot_id"] = module.SnapshotId(
                    end_offset=sub.i64("end_offset"), epoch=sub.i32("epoch")
                )
            partitions.append(
                module.PartitionData(
                    partition_index=index,
                    error_code=ErrorCode(code),
                    high_watermark=hw,
                    last_stable_offset=lso,
                    log_start_offset=log_start,
                    aborted_transactions=aborted,
                    preferred_read_replica=preferred,
                    records=records,
                    **extra,
                )
            )
        r.skip_tags("topic tags")
        topics.append(module.FetchableTopicResponse(partitions=tuple(partitions), **topic_key))
    tags = r.skip_tags("response tags", (0,))
    extra = {}
    if (sub := tags.get(0)) is not None and version >= 16:
        endpoints = []
        for _ in range(sub.count("node_endpoints", 10) or 0):
            node_id = sub.i32("node_id")
            host = sub.string("host")
            port = sub.i32("port")
            rack = sub.string("rack")
            sub.skip_tags("node endpoint tags")
            endpoints.append(module.NodeEndpoint(node_id=node_id, host=host, port=port, rack=rack))
        extra["node_endpoints"] = tuple(endpoints)
    response = module.FetchResponse(
        throttle_time=i32Timedelta.parse(timedelta(milliseconds=throttle_ms)),
        error_code=ErrorCode(error_code),
        session_id=session_id,
        responses=tuple(topics),
        **extra,
    )
    return response, r.pos - offset
