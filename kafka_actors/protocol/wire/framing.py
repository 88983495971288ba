"""Kafka wire framing, request/response headers and correlation ids (pure, no I/O).

Owns: the 4-byte big-endian size prefix, request headers v1/v2 and response headers v0/v1
(chosen by kio's per-message ``__header_schema__``: flexible versions use request header v2 and
response header v1; ApiVersions responses always use response header v0), correlation id
allocation and matching, and the conversion of every decoding failure into
:class:`kafka_actors.errors.ProtocolError` subclasses. May touch: kio codecs, kafka_actors.errors.

A *frame* here is what follows the size prefix: ``FrameDecoder.feed`` yields frames,
``decode_response`` takes one. ``encode_request`` returns the whole frame including the size
prefix, ready for a socket.
"""

from __future__ import annotations

import io
import struct
import sys
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import kio.schema.request_header.v1 as request_header_v1
import kio.schema.request_header.v2 as request_header_v2
import kio.schema.response_header.v0 as response_header_v0
import kio.schema.response_header.v1 as response_header_v1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import BufferUnderflow
from kio.static.primitive import i16, i32
from kio.static.protocol import RequestPayload, ResponsePayload

from kafka_actors.errors import (
    CorrelationIdMismatchError,
    FrameTooLargeError,
    InvalidFrameError,
    KafkaError,
    ProtocolError,
    TruncatedFrameError,
    UnknownApiError,
)
from kafka_actors.protocol.wire.bounds import check_entity, check_request, check_response
from kafka_actors.protocol.wire.fetch_response import FLEXIBLE_VERSIONS, decode_fetch_body

__all__ = [
    "API_VERSIONS_KEY",
    "DEFAULT_MAX_FRAME_SIZE",
    "FRAME_BUFFER_SHARE",
    "FRAME_POOL_BUFFERS",
    "FRAME_POOL_BYTES",
    "CorrelationIds",
    "FrameDecoder",
    "FramePool",
    "RequestHeader",
    "ResponseHeader",
    "decode_request",
    "decode_response",
    "decode_response_with_header",
    "encode_request",
    "encode_response",
    "read_correlation_id",
    "request_header_type",
    "response_header_type",
]

#: ApiVersions' API key: its responses always use response header v0 (KIP-511).
API_VERSIONS_KEY: Final = 18
#: Largest frame the decoder accepts unless told otherwise (Kafka's fetch.max.bytes default is
#: 50 MiB; message.max.bytes on a topic can make a single batch larger than that).
DEFAULT_MAX_FRAME_SIZE: Final = 128 * 1024 * 1024

#: A frame gets its own buffer (``FrameDecoder.read_buffer``) only once at least 1/N of it has
#: arrived: memory held for a frame is bounded by N times the bytes received for it.
FRAME_BUFFER_SHARE: Final = 4

#: A decoder keeps the buffers of up to this many frames, of up to this many bytes in all
#: (unless its pool is given other bounds), to receive later frames into once nothing refers
#: to them any more (:class:`FramePool`).
FRAME_POOL_BUFFERS: Final = 4
FRAME_POOL_BYTES: Final = 16 * 1024 * 1024

_SIZE = struct.Struct(">i")
_FETCH_KEY: Final = 1
_MAX_CORRELATION_ID: Final = 2**31 - 1

RequestHeader = request_header_v1.RequestHeader | request_header_v2.RequestHeader
ResponseHeader = response_header_v0.ResponseHeader | response_header_v1.ResponseHeader

T = TypeVar("T")
R = TypeVar("R")


# -- Headers -----------------------------------------------------------------------------------


def request_header_type(
    request_type: type[RequestPayload] | RequestPayload,
) -> type[RequestHeader]:
    """Request header class for a request type: v2 for flexible versions, else v1."""
    header = request_type.__header_schema__
    if header not in (request_header_v1.RequestHeader, request_header_v2.RequestHeader):
        raise UnknownApiError(f"{request_type!r} has no request header schema")
    return header


def response_header_type(
    response_type: type[ResponsePayload] | ResponsePayload,
) -> type[ResponseHeader]:
    """Response header class for a response type: v1 for flexible versions, else v0;
    always v0 for ApiVersions."""
    if response_type.__api_key__ == API_VERSIONS_KEY:
        return response_header_v0.ResponseHeader
    header = response_type.__header_schema__
    if header not in (response_header_v0.ResponseHeader, response_header_v1.ResponseHeader):
        raise UnknownApiError(f"{response_type!r} has no response header schema")
    return header


# -- Correlation ids ---------------------------------------------------------------------------


class CorrelationIds:
    """Allocates correlation ids for one connection: 0, 1, 2 ... wrapping at 2**31-1 to 0."""

    __slots__ = ("_next",)

    def __init__(self, start: int = 0) -> None:
        if not 0 <= start <= _MAX_CORRELATION_ID:
            raise ValueError(f"correlation id start {start} out of range")
        self._next = start

    def next(self) -> int:
        value = self._next
        self._next = 0 if value == _MAX_CORRELATION_ID else value + 1
        return value

    def peek(self) -> int:
        return self._next


# -- Encoding ----------------------------------------------------------------------------------


def _prefixed(write: Callable[[io.BytesIO], None]) -> bytes:
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    write(buffer)
    data = buffer.getbuffer()
    size = len(data) - 4
    _SIZE.pack_into(data, 0, size)
    del data
    return buffer.getvalue()


def encode_request(
    request: RequestPayload,
    *,
    correlation_id: int,
    client_id: str | None,
) -> bytes:
    """Encode ``request`` with its header as one size-prefixed frame.

    The API key and version come from the request's kio class. Raises ProtocolError when the
    request cannot be encoded (a field value out of its type's range, a wrong type).
    """
    header_type = request_header_type(request)

    def write(buffer: io.BytesIO) -> None:
        header = header_type(
            request_api_key=i16(request.__api_key__),
            request_api_version=i16(request.__version__),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        )
        entity_writer(header_type)(buffer, header)
        entity_writer(type(request))(buffer, request)

    try:
        return _prefixed(write)
    except Exception as exc:
        raise ProtocolError(f"Cannot encode {type(request).__name__}: {exc}") from exc


def encode_response(response: ResponsePayload, *, correlation_id: int) -> bytes:
    """Encode ``response`` with its header as one size-prefixed frame (tests, fakes)."""
    header_type = response_header_type(response)
    header: ResponseHeader
    if header_type is response_header_v0.ResponseHeader:
        header = response_header_v0.ResponseHeader(correlation_id=i32(correlation_id))
    else:
        header = response_header_v1.ResponseHeader(correlation_id=i32(correlation_id))

    def write(buffer: io.BytesIO) -> None:
        entity_writer(header_type)(buffer, header)
        entity_writer(type(response))(buffer, response)

    try:
        return _prefixed(write)
    except Exception as exc:
        raise ProtocolError(f"Cannot encode {type(response).__name__}: {exc}") from exc


# -- Decoding ----------------------------------------------------------------------------------


def _read(
    reader: Callable[[Any, int], tuple[T, int]], frame: Any, offset: int, what: str
) -> tuple[T, int]:
    """Run a kio reader and turn any failure into a ProtocolError subclass."""
    try:
        return reader(frame, offset)
    except KafkaError:
        raise
    except BufferUnderflow as exc:
        raise TruncatedFrameError(f"Frame ended inside the {what}") from exc
    except RecursionError as exc:  # pragma: no cover - defensive
        raise InvalidFrameError(f"Cannot decode the {what}: nested too deep") from exc
    except MemoryError as exc:
        raise InvalidFrameError(f"Cannot decode the {what}: size field too large") from exc
    except Exception as exc:
        raise InvalidFrameError(f"Cannot decode the {what}: {exc}") from exc


def read_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """The correlation id at the start of a response frame (every response header starts
    with it)."""
    if len(frame) < 4:
        raise TruncatedFrameError(f"Response frame of {len(frame)} bytes has no correlation id")
    value: int = _SIZE.unpack_from(frame, 0)[0]
    return value


def decode_response_with_header(
    frame: bytes | bytearray | memoryview,
    response_type: type[R],
    *,
    correlation_id: int | None = None,
    strict: bool = False,
    record_views: bool = False,
) -> tuple[ResponseHeader, R]:
    """Decode a response frame (bytes after the size prefix) into its header and body.

    ``response_type`` is the kio response class of the request's API and version. When
    ``correlation_id`` is given, a different id in the header raises
    CorrelationIdMismatchError. Bytes left after the body are ignored unless ``strict``
    (then they raise InvalidFrameError): librdkafka's mock cluster, a test peer, writes one
    byte more than the schema has in Metadata v13 responses. Every decoding failure raises a
    ProtocolError subclass. ``record_views``: a Fetch response (v12 and later) is read by
    :mod:`.fetch_response`, each partition's ``records`` a read-only view of ``frame``
    instead of a bytes copy (the consumer's connections; the frame must then not be written
    again while the records are used).
    """
    rtype = cast(type[ResponsePayload], response_type)
    header_type = response_header_type(rtype)
    version = int(rtype.__version__)
    # Fetch v12+ on the consumer's connections: our reader, which bounds every length itself
    # and keeps each partition's records as a view of the frame instead of kio's copy
    # (wire.fetch_response); anything else: kio's reader, every length and count bounded by
    # the bytes that remain before it allocates for them (a huge count aborts the process:
    # see protocol.bounds).
    views = record_views and int(rtype.__api_key__) == _FETCH_KEY and version in FLEXIBLE_VERSIONS
    if views:
        check_entity(frame, 0, header_type, "Fetch response header")
    else:
        check_response(frame, header_type, rtype)
    header, used = _read(entity_reader(header_type), frame, 0, "response header")
    if correlation_id is not None and header.correlation_id != correlation_id:
        raise CorrelationIdMismatchError(expected=correlation_id, received=header.correlation_id)
    if views:
        module = sys.modules[rtype.__module__]
        body, body_size = _read(
            lambda data, at: decode_fetch_body(data, at, version, module),
            memoryview(frame),
            used,
            f"FetchResponse v{version} body",
        )
    else:
        body, body_size = _read(
            entity_reader(rtype), frame, used, f"{rtype.__name__} v{rtype.__version__} body"
        )
    end = used + body_size
    if strict and end != len(frame):
        raise InvalidFrameError(
            f"{rtype.__name__} v{rtype.__version__}: {len(frame) - end} bytes left after the body"
        )
    return header, cast(R, body)


def decode_response(
    frame: bytes | bytearray | memoryview,
    response_type: type[R],
    *,
    correlation_id: int | None = None,
    strict: bool = False,
    record_views: bool = False,
) -> R:
    """Decode a response frame (bytes after the size prefix) into its body; see
    :func:`decode_response_with_header`."""
    return decode_response_with_header(
        frame,
        response_type,
        correlation_id=correlation_id,
        strict=strict,
        record_views=record_views,
    )[1]


def decode_request(
    frame: bytes | bytearray | memoryview,
    request_type_for: Callable[[int, int], type[RequestPayload]],
) -> tuple[RequestHeader, RequestPayload]:
    """Decode a request frame (bytes after the size prefix) into header and body.

    ``request_type_for(api_key, api_version)`` names the body's class (see
    ``kafka_actors.protocol.wire.apis.request_type``). For tests and fake brokers.
    """
    if len(frame) < 4:
        raise TruncatedFrameError("Request frame too short for API key and version")
    api_key, api_version = struct.unpack_from(">hh", frame, 0)
    try:
        body_type = request_type_for(api_key, api_version)
    except KafkaError:
        raise
    except Exception as exc:
        raise UnknownApiError(f"No codec for API {api_key} v{api_version}") from exc
    header_type = request_header_type(body_type)
    check_request(frame, header_type, body_type)
    header, used = _read(entity_reader(header_type), frame, 0, "request header")
    body, size = _read(entity_reader(body_type), frame, used, "request body")
    if used + size != len(frame):
        raise InvalidFrameError(f"{len(frame) - used - size} bytes left after the request body")
    return header, body


# -- Incremental framing -----------------------------------------------------------------------


def _kept_only_refs() -> int:
    """What ``sys.getrefcount`` says of a buffer that only a pool's list refers to, seen from
    the comprehension in :meth:`FramePool._free` (the same pattern: the list's slot, the
    comprehension's variable, the call's argument)."""
    kept = [bytearray(1)]
    (refs,) = [sys.getrefcount(buffer) for buffer in kept]
    return refs


_KEPT_ONLY_REFS: Final = _kept_only_refs()


class FramePool:
    """The buffers a :class:`FrameDecoder` received large frames into, kept to receive later
    frames into instead of new memory.

    A buffer of a megabyte or more is fresh memory from the allocator each time (glibc maps
    it, or trims it from a thread's arena when it is freed): the kernel faults and clears each
    of its pages on the first write, about a third of the CPU the network thread spent on a
    1-partition Fetch stream. A frame handed out is read by other threads (the records decoded
    from it, views of it buffered until the application polls them), so a buffer is reused only
    when nothing else refers to it: every view of a bytearray holds a reference to it, so its
    reference count says so exactly (CPython; read under the GIL, where no other thread can
    take a new reference to an object it has none of).

    Bounded: at most ``max_buffers`` buffers (:data:`FRAME_POOL_BUFFERS`) and ``max_bytes``
    bytes are kept (:data:`FRAME_POOL_BYTES`; a consumer's connections keep a whole Fetch
    response of its fetch.max.bytes: ``ConnectionSettings.frame_pool_bytes``); a larger
    frame's buffer is freed with the frame, as before. A buffer larger than the
    frame, up to :data:`FRAME_BUFFER_SHARE` times, is reused for it (the frame is a view of its
    first bytes); the smallest that fits is taken."""

    __slots__ = ("_buffers", "_kept_bytes", "made", "max_buffers", "max_bytes", "reused")

    def __init__(
        self, max_buffers: int = FRAME_POOL_BUFFERS, max_bytes: int = FRAME_POOL_BYTES
    ) -> None:
        self.max_buffers = max_buffers
        self.max_bytes = max_bytes
        self._buffers: list[bytearray] = []
        self._kept_bytes = 0
        #: Buffers made, and frames received into a kept buffer (for tests and benchmarks).
        self.made = 0
        self.reused = 0

    @property
    def kept_bytes(self) -> int:
        """Bytes of the buffers kept (free or in use)."""
        return self._kept_bytes

    def take(self, size: int) -> bytearray | None:
        """The smallest kept buffer of at least ``size`` bytes, and at most
        :data:`FRAME_BUFFER_SHARE` times that (a small frame does not hold a large buffer),
        that nothing else refers to; or None."""
        largest = size * FRAME_BUFFER_SHARE
        fitting = [buffer for buffer in self._free() if size <= len(buffer) <= largest]
        best = min(fitting, key=len, default=None)
        if best is not None:
            self.reused += 1
        return best

    def make(self, size: int) -> bytearray:
        """A new buffer of ``size`` bytes, kept when the bounds allow (free kept buffers are
        dropped to make room, smallest first)."""
        buffer = bytearray(size)
        self.made += 1
        if size > self.max_bytes:
            return buffer
        if not self._fits(size):
            for old in sorted(self._free(), key=len):
                self._buffers.remove(old)
                self._kept_bytes -= len(old)
                if self._fits(size):
                    break
        if self._fits(size):
            self._buffers.append(buffer)
            self._kept_bytes += size
        return buffer

    def trim(self, max_bytes: int) -> None:
        """Let kept buffers go, the largest free one first, until at most ``max_bytes`` are
        kept or none of the rest is free (one in use stays until a later trim)."""
        for old in sorted(self._free(), key=len, reverse=True):
            if self._kept_bytes <= max_bytes:
                return
            self._buffers.remove(old)
            self._kept_bytes -= len(old)

    def _fits(self, size: int) -> bool:
        """One more kept buffer of ``size`` bytes stays within both bounds."""
        return len(self._buffers) < self.max_buffers and self._kept_bytes + size <= self.max_bytes

    def _free(self) -> list[bytearray]:
        """The kept buffers nothing else refers to (class doc; :func:`_kept_only_refs`)."""
        return [buffer for buffer in self._buffers if sys.getrefcount(buffer) == _KEPT_ONLY_REFS]


class FrameDecoder:
    """Splits a byte stream into frames (the bytes after each 4-byte size prefix).

    ``feed(data)`` returns the frames completed by ``data`` (possibly none). A size prefix
    larger than ``max_frame_size`` raises FrameTooLargeError as soon as the prefix arrives, a
    negative one raises InvalidFrameError; after either the decoder stays failed and raises
    the same error on every later feed (the connection must be closed).

    Each frame is copied once: sliced from the chunk that holds all of it, or joined from
    views of the chunks it spans, never gathered in a growing buffer first.

    A large frame (a Fetch response of up to fetch.max.bytes) need not arrive in chunks at
    all: :meth:`read_buffer` hands out a writable view of the frame's missing bytes (as
    asyncio's ``BufferedProtocol.get_buffer`` does), the caller reads the socket straight
    into it (``recv_into``) and reports what it read with :meth:`buffer_updated`. The frame
    is then written once, where it is decoded: no chunk of it is allocated, kept until the
    last one arrives and copied again. With many partitions a Fetch response reaches
    fetch.max.bytes (50 MiB), beyond glibc's largest mmap threshold: those chunks and the
    join were fresh memory at every response, and their page faults a large part of
    the CPU that 512 partitions cost beyond 8. Such a frame is returned as a read-only
    ``memoryview`` of its own buffer; a frame returned is never written again.

    The size prefix is the broker's word, not bytes that arrived: the frame's buffer is made
    only once a quarter of the frame (:data:`FRAME_BUFFER_SHARE`) has been received in chunks,
    so what the decoder holds is never more than four times what it received (five for the
    moment the chunks are copied into it). Until then a prefix of 128 MiB followed by a few
    bytes costs a few bytes. The exception is memory already made: a frame buffer kept by
    :attr:`pool` that nothing refers to any more is taken as soon as the frame's first chunk
    arrived (:class:`FramePool`, bounded in buffers and bytes), so a stream of Fetch responses
    is received into the same few buffers instead of fresh pages each time.
    """

    __slots__ = (
        "_error",
        "_expected",
        "_frame",
        "_have",
        "_head",
        "_parts",
        "_reused",
        "max_frame_size",
        "pool",
    )

    def __init__(
        self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, pool: FramePool | None = None
    ) -> None:
        if max_frame_size < 0:
            raise ValueError("max_frame_size must be >= 0")
        self.max_frame_size = max_frame_size
        #: The buffers of earlier frames, reused for the next ones once free.
        self.pool = FramePool() if pool is None else pool
        #: Bytes of a size prefix split across reads.
        self._head = b""
        #: Size of the frame being received (its prefix read), else None.
        self._expected: int | None = None
        #: Views of the received part of that frame, and their total length.
        self._parts: list[memoryview] = []
        self._have = 0
        #: That frame's own buffer once :meth:`read_buffer` made one (``_parts`` then empty).
        self._frame: bytearray | None = None
        #: That buffer is one the pool kept from an earlier frame.
        self._reused = False
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        if self._expected is None:
            return len(self._head)
        return 4 + self._have

    @property
    def bytes_needed(self) -> int:
        """Bytes still missing to complete the next size prefix or frame (a read-size hint)."""
        if self._expected is None:
            return 4 - len(self._head)
        return self._expected - self._have

    @property
    def retained(self) -> int:
        """Bytes of memory kept alive for the frame being received: its own buffer, or the
        chunks its received part is a view of (whole, even where they also held bytes before
        it), and a split size prefix. A buffer :attr:`pool` kept from an earlier frame counts
        nothing: it was made then, and is kept anyway."""
        if self._frame is not None:
            return 0 if self._reused else len(self._frame)
        chunks = {id(part.obj): memoryview(part.obj).nbytes for part in self._parts}
        return len(self._head) + sum(chunks.values())

    def read_buffer(self, min_size: int) -> memoryview | None:
        """A writable view of the missing bytes of the frame being received, to read them
        into directly, when at least ``min_size`` of them are missing and enough of the frame
        has arrived: at least ``min_size`` bytes and at least 1/:data:`FRAME_BUFFER_SHARE` of
        its declared size (nothing is allocated on the size prefix's word alone), or at once
        when :attr:`pool` has a free buffer of that size (nothing is allocated). Else None:
        read a chunk and :meth:`feed` it. The switch copies the chunks received so far into
        the buffer, once. Once a frame has its buffer, the view is handed out until the frame
        is complete, whatever ``min_size``. Report what was written with
        :meth:`buffer_updated`; :meth:`feed` may still be used in between (the bytes go on
        in the same buffer)."""
        if self._error is not None:
            raise self._error
        expected = self._expected
        if expected is None:
            return None
        if self._frame is None:
            have = self._have
            if expected - have < min_size:
                return None
            # A kept buffer is memory already made: used at once. A new one only when the
            # rule above (a share of the frame received) allows.
            frame = self.pool.take(expected)
            self._reused = frame is not None
            if frame is None:
                if have < min_size or have * FRAME_BUFFER_SHARE < expected:
                    return None
                frame = self.pool.make(expected)
            parts = self._parts
            self._parts = []
            done = 0
            for part in parts:
                end = done + len(part)
                frame[done:end] = part
                part.release()  # its chunk is freed as soon as it is copied
                done = end
            assert done == have
            self._frame = frame
        return memoryview(self._frame)[self._have : expected]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """``nbytes`` were written at the start of the view :meth:`read_buffer` returned:
        the frame, once complete (as a read-only view of its buffer)."""
        expected = self._expected
        if self._frame is None or expected is None or nbytes < 0 or self._have + nbytes > expected:
            raise ValueError(f"buffer_updated({nbytes}) without a read_buffer() of that room")
        self._have += nbytes
        if self._have < expected:
            return []
        return [self._frame_done()]

    def _frame_done(self) -> memoryview:
        assert self._frame is not None and self._expected is not None
        frame = memoryview(self._frame)[: self._expected].toreadonly()
        self._frame = None
        self._reused = False
        self._have = 0
        self._expected = None
        return frame

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self._error is not None:
            raise self._error
        if not isinstance(data, bytes):
            data = bytes(data)  # the caller may reuse its buffer; views below must not change
        frames: list[bytes] = []
        pos = 0
        total = len(data)
        while pos < total:
            expected = self._expected
            if expected is None:
                if not self._head and total - pos >= 4:
                    size: int = _SIZE.unpack_from(data, pos)[0]
                    pos += 4
                else:
                    head = self._head + data[pos : pos + 4 - len(self._head)]
                    pos += len(head) - len(self._head)
                    if len(head) < 4:
                        self._head = head
                        break
                    self._head = b""
                    size = _SIZE.unpack(head)[0]
                if size < 0:
                    self._error = InvalidFrameError(f"Negative frame size {size}")
                    raise self._error
                if size > self.max_frame_size:
                    self._error = FrameTooLargeError(size, self.max_frame_size)
                    raise self._error
                expected = self._expected = size
            need = expected - self._have
            if not self._have and self._frame is None and total - pos >= need:
                frames.append(data[pos : pos + need])  # all of it in this chunk
                pos += need
                self._expected = None
                continue
            take = min(need, total - pos)
            if not take:
                break  # the prefix ended this chunk
            if self._frame is not None:  # read_buffer() made the frame's own buffer
                self._frame[self._have : self._have + take] = memoryview(data)[pos : pos + take]
                self._have += take
                pos += take
                if self._have == expected:
                    frames.append(bytes(self._frame_done()))  # feed's frames are bytes
                continue
            self._parts.append(memoryview(data)[pos : pos + take])
            self._have += take
            pos += take
            if self._have == expected:
                frames.append(b"".join(self._parts))
                self._parts = []
                self._have = 0
                self._expected = None
        return frames
