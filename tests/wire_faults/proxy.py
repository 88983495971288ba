"""A Kafka-aware TCP proxy in front of a real broker that mutates the broker's answers.

Owns: its listening socket, the client and upstream sockets of every proxied connection, one
thread. Test code only.

Every connection a client opens is forwarded to the broker. The proxy reads the request
headers going up (API key, version, correlation id) so it knows which API each response frame
coming down answers (and counts the requests of each API, with their arrival times, in
``requests``). Metadata and FindCoordinator answers are rewritten so that every broker
address points back at the proxy (the client then never talks to the broker directly). A
:class:`Rule` armed for an API mutates the next ``count`` answers of that API (see
:data:`MUTATIONS`); after that the proxy forwards faithfully again. What it did is in
``applied`` (for the test's report).
"""

from __future__ import annotations

import dataclasses
import random
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kio.schema.response_header.v1 as response_header_v1

from kafka_actors.protocol.wire.apis import ApiKey, api_name, response_type
from kafka_actors.protocol.wire.framing import (
    decode_response_with_header,
    encode_response,
    response_header_type,
)
from tests.wire_faults.fields import SizeField, size_fields

#: What a mutation may do with one response frame: the bytes to send instead (size prefix
#: included), or None for "close the connection instead of answering".
Action = bytes | None

HUGE_VARINT_35 = b"\xff\xff\xff\xff\x7f"  # 2^35 - 1, a 5-byte unsigned varint
HUGE_VARINT_31 = b"\xff\xff\xff\xff\x07"  # 2^31 - 1


@dataclass(frozen=True, slots=True)
class Frame:
    """One response frame from the broker (without its size prefix) and what it answers."""

    payload: bytes
    api: int
    version: int

    @property
    def header_size(self) -> int:
        """Bytes of the response header (correlation id, and the tag buffer in header v1)."""
        if not self.flexible_header:
            return 4
        return 4 + 1 if len(self.payload) > 4 and self.payload[4] == 0 else 4

    @property
    def flexible_header(self) -> bool:
        rtype = response_type(self.api, self.version)
        return response_header_type(rtype) is response_header_v1.ResponseHeader


def _prefixed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def bit_flip(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    body = bytearray(frame.payload)
    start = frame.header_size
    if len(body) <= start:
        return _prefixed(bytes(body)), "bit_flip (empty body)"
    flips = rng.randint(1, 8)
    where = []
    for _ in range(flips):
        i = rng.randrange(start, len(body))
        body[i] ^= 1 << rng.randrange(8)
        where.append(i)
    return _prefixed(bytes(body)), f"bit_flip at {sorted(where)}"


def truncate(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    keep = rng.randrange(frame.header_size, max(frame.header_size + 1, len(frame.payload)))
    return _prefixed(frame.payload[:keep]), f"truncate to {keep} of {len(frame.payload)}"


def huge(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    """One length or count field (array count, string or bytes length, tag count) set to a
    huge value: 2^31-1 as int32, 2^15-1 as int16, 2^31-1 or 2^35-1 as a 5-byte varint."""
    fields = size_fields(
        frame.payload, response_type(frame.api, frame.version), frame.flexible_header
    )
    if not fields:
        at = rng.randrange(frame.header_size, max(frame.header_size + 1, len(frame.payload)))
        fields = [SizeField(at, 4, "int32", "bytes", f"<offset {at}>")]
    target = rng.choice(fields)
    return _set_huge(frame, target, rng)


def huge_first_count(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    """The first array count of the body set to 2^35-1 (a 5-byte varint; 2^31-1 as int32)."""
    fields = size_fields(
        frame.payload, response_type(frame.api, frame.version), frame.flexible_header
    )
    arrays = [f for f in fields if f.kind == "array"]
    if not arrays:
        return huge(frame, rng)
    target = arrays[0]
    value = HUGE_VARINT_35 if target.encoding == "uvarint" else struct.pack(">i", 2**31 - 1)
    return _replace(frame, target, value), f"huge {target.path} := {value.hex()}"


def _set_huge(frame: Frame, target: SizeField, rng: random.Random) -> tuple[Action, str]:
    if target.encoding == "int32":
        value = struct.pack(">i", 2**31 - 1)
    elif target.encoding == "int16":
        value = struct.pack(">h", 2**15 - 1)
    else:
        value = rng.choice((HUGE_VARINT_31, HUGE_VARINT_35))
    return _replace(frame, target, value), f"huge {target.kind} {target.path} := {value.hex()}"


def _replace(frame: Frame, target: SizeField, value: bytes) -> bytes:
    payload = frame.payload
    return _prefixed(payload[: target.offset] + value + payload[target.offset + target.size :])


def frame_size(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    """The size prefix says 2^31-1 bytes (the body that follows is the real one)."""
    return struct.pack(">i", 2**31 - 1) + frame.payload, "frame size := 2^31-1"


def wrong_correlation_id(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    (cid,) = struct.unpack_from(">i", frame.payload, 0)
    other = (cid + rng.randint(1, 1000)) % 2**31
    return _prefixed(struct.pack(">i", other) + frame.payload[4:]), f"correlation id {other}"


def garbage(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    """The header kept (so the answer matches its request), the body random bytes."""
    size = max(1, len(frame.payload) - frame.header_size)
    size = rng.choice((size, rng.randint(1, 64)))
    body = bytes(rng.getrandbits(8) for _ in range(size))
    return _prefixed(frame.payload[: frame.header_size] + body), f"garbage body of {size} bytes"


def silence(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    return b"", "silence"


def early_close(frame: Frame, rng: random.Random) -> tuple[Action, str]:
    return None, "close"


def rewrite_error_codes(frame: Frame, code: int) -> tuple[Action, str]:
    """The answer decoded, every ``error_code`` field in it (top level, per topic, per
    partition) set to ``code``, encoded again: a broker answering that error everywhere."""
    rtype = response_type(frame.api, frame.version)
    header, body = decode_response_with_header(frame.payload, rtype)
    body, changed = _with_error_code(body, code)
    encoded = encode_response(body, correlation_id=int(header.correlation_id))
    return encoded, f"error_code := {code} in {changed} fields"


def _with_error_code(value: Any, code: int) -> tuple[Any, int]:
    if isinstance(value, tuple):
        items = [_with_error_code(v, code) for v in value]
        return tuple(v for v, _ in items), sum(n for _, n in items)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value, 0
    changes: dict[str, Any] = {}
    count = 0
    for f in dataclasses.fields(value):
        old = getattr(value, f.name)
        if f.name == "error_code":
            changes[f.name] = type(old)(code)
            count += 1
        else:
            new, n = _with_error_code(old, code)
            if n:
                changes[f.name] = new
                count += n
    return (dataclasses.replace(value, **changes) if changes else value), count


Mutation = Callable[[Frame, random.Random], tuple[Action, str]]

MUTATIONS: dict[str, Mutation] = {
    "bit_flip": bit_flip,
    "truncate": truncate,
    "huge": huge,
    "huge_first_count": huge_first_count,
    "frame_size": frame_size,
    "correlation_id": wrong_correlation_id,
    "garbage": garbage,
    "silence": silence,
    "close": early_close,
}


@dataclass(slots=True)
class Rule:
    mutation: str
    count: int
    rng: random.Random
    skip: int = 0  # answers of this API to forward untouched before mutating
    error_code: int | None = None  # set: rewrite every error code to it (arm_error)


@dataclass(slots=True)
class _Link:
    client: socket.socket
    upstream: socket.socket
    up_buffer: bytearray = field(default_factory=bytearray)
    down_buffer: bytearray = field(default_factory=bytearray)
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)


class FaultProxy:
    """See the module docstring. ``arm(api, mutation, count)`` before or while clients run."""

    def __init__(self, target: tuple[str, int], *, host: str = "127.0.0.1") -> None:
        self.target = target
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((host, 0))
        self._server.listen(32)
        self._server.setblocking(False)
        self.host = host
        self.port: int = self._server.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._links: dict[socket.socket, _Link] = {}
        self._lock = threading.Lock()
        self._rules: dict[int, Rule] = {}
        self._stop = False
        #: (API name, version, what was done), in order.
        self.applied: list[tuple[str, int, str]] = []
        #: (API key, version, the bytes sent instead, size prefix included), in order: a failing
        #: case's answers can be decoded again without a broker.
        self.mutated: list[tuple[int, int, bytes]] = []
        #: Answers forwarded per API key (mutated or not).
        self.answers: dict[int, int] = {}
        #: (API key, time.monotonic() at arrival) of every request clients sent, in order.
        self.requests: list[tuple[int, float]] = []
        self.accepted = 0
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def arm(self, api: int, mutation: str, count: int, *, seed: int = 0, skip: int = 0) -> None:
        if mutation not in MUTATIONS:
            raise ValueError(f"unknown mutation {mutation!r}")
        with self._lock:
            self._rules[int(api)] = Rule(mutation, count, random.Random(seed), skip)

    def arm_error(self, api: int, error_code: int, count: int) -> None:
        """Answer the next ``count`` answers of ``api`` with every error code set to
        ``error_code`` (see :func:`rewrite_error_codes`)."""
        with self._lock:
            self._rules[int(api)] = Rule("error", count, random.Random(0), error_code=error_code)

    def request_count(self, api: int, since: float = 0.0, until: float = float("inf")) -> int:
        """Requests of ``api`` that arrived in [since, until] (``time.monotonic()`` times)."""
        with self._lock:
            return sum(1 for a, t in self.requests if a == api and since <= t <= until)

    def disarm(self) -> None:
        with self._lock:
            self._rules.clear()

    def remaining(self, api: int) -> int:
        with self._lock:
            rule = self._rules.get(int(api))
            return 0 if rule is None else rule.count

    def close(self) -> None:
        self._stop = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(10)
        self._wake_w.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop:
                for key, _mask in self._selector.select(0.5):
                    if key.data == "wake":
                        self._wake_r.recv(64)
                    elif key.fileobj is self._server:
                        self._accept()
                    else:
                        sock = key.fileobj
                        assert isinstance(sock, socket.socket)
                        link = self._links.get(sock)
                        if link is not None:
                            self._readable(link, sock)
        except Exception as exc:  # pragma: no cover - reported by the tests
            self.errors.append(repr(exc))
        finally:
            for link in list(self._links.values()):
                self._drop(link)
            self._selector.close()
            self._server.close()
            self._wake_r.close()

    def _accept(self) -> None:
        try:
            client, _ = self._server.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        self.accepted += 1
        link = _Link(client, upstream)
        for s in (client, upstream):
            s.setblocking(True)
            s.settimeout(10)
            self._links[s] = link
            self._selector.register(s, selectors.EVENT_READ, "peer")

    def _drop(self, link: _Link) -> None:
        for s in (link.client, link.upstream):
            if self._links.pop(s, None) is not None:
                try:
                    self._selector.unregister(s)
                except (KeyError, ValueError):
                    pass
            try:
                s.close()
            except OSError:
                pass

    def _readable(self, link: _Link, sock: socket.socket) -> None:
        try:
            data = sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self._drop(link)
            return
        try:
            if sock is link.client:
                self._from_client(link, data)
            else:
                self._from_broker(link, data)
        except OSError:
            self._drop(link)

    def _from_client(self, link: _Link, data: bytes) -> None:
        link.up_buffer += data
        for payload in _frames(link.up_buffer):
            if len(payload) >= 8:
                api, version, cid = struct.unpack_from(">hhi", payload, 0)
                link.pending[cid] = (api, version)
                with self._lock:
                    self.requests.append((api, time.monotonic()))
        link.upstream.sendall(data)

    def _from_broker(self, link: _Link, data: bytes) -> None:
        link.down_buffer += data
        for payload in _frames(link.down_buffer):
            (cid,) = struct.unpack_from(">i", payload, 0)
            answered = link.pending.pop(cid, None)
            if answered is None:
                link.client.sendall(_prefixed(payload))
                continue
            api, version = answered
            frame = Frame(self._rewrite(payload, api, version), api, version)
            action = self._mutate(frame)
            if action is None:
                self._drop(link)
                return
            if action:
                link.client.sendall(action)

    def _mutate(self, frame: Frame) -> Action:
        with self._lock:
            self.answers[frame.api] = self.answers.get(frame.api, 0) + 1
            rule = self._rules.get(frame.api)
            if rule is None or rule.count <= 0:
                return _prefixed(frame.payload)
            if rule.skip > 0:
                rule.skip -= 1
                return _prefixed(frame.payload)
            rule.count -= 1
            if rule.error_code is not None:
                action, what = rewrite_error_codes(frame, rule.error_code)
            else:
                action, what = MUTATIONS[rule.mutation](frame, rule.rng)
            self.applied.append((api_name(frame.api), frame.version, what))
            self.mutated.append((frame.api, frame.version, action or b""))
            return action

    def _rewrite(self, payload: bytes, api: int, version: int) -> bytes:
        """Point every broker address in Metadata / FindCoordinator answers at the proxy."""
        if api not in (ApiKey.METADATA, ApiKey.FIND_COORDINATOR):
            return payload
        rtype = response_type(api, version)
        header, body = decode_response_with_header(payload, rtype)
        here: dict[str, Any] = {"host": self.host, "port": self.port}
        if api == ApiKey.METADATA:
            brokers = tuple(dataclasses.replace(b, **here) for b in body.brokers)
            body = dataclasses.replace(body, brokers=brokers)
        elif getattr(body, "coordinators", None):
            coordinators = tuple(dataclasses.replace(c, **here) for c in body.coordinators)
            body = dataclasses.replace(body, coordinators=coordinators)
        elif hasattr(body, "host"):
            body = dataclasses.replace(body, **here)
        return encode_response(body, correlation_id=int(header.correlation_id))[4:]


def _frames(buffer: bytearray) -> list[bytes]:
    """Take the complete size-prefixed frames off the front of ``buffer``."""
    out: list[bytes] = []
    while len(buffer) >= 4:
        (size,) = struct.unpack_from(">i", buffer, 0)
        if len(buffer) < 4 + size:
            break
        out.append(bytes(buffer[4 : 4 + size]))
        del buffer[: 4 + size]
    return out
