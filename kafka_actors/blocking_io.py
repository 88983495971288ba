"""Blocking frame I/O on one socket, for code that runs outside the actor system.

Owns: writing one encoded request frame and reading one response frame on a blocking (or
timeout-blocking) socket, with socket failures turned into the project's typed errors. Used by
the Spark executors' range reader (:mod:`kafka_actors.spark.reader`) and the testkit's
:class:`~kafka_actors.testing.client.BlockingKafkaConnection`, which both keep one request in
flight at a time. The consumer itself never uses it: its sockets belong to the NetworkActor.
May touch: the socket it is given, a :class:`~kafka_actors.protocol.wire.framing.FrameDecoder`.
"""

from __future__ import annotations

import socket
from typing import Final

from kafka_actors.errors import DisconnectedError, KafkaTimeoutError, ProtocolError
from kafka_actors.protocol.wire.framing import FrameDecoder

__all__ = ["read_frame", "write_frame"]

_RECV_SIZE: Final = 256 * 1024
#: The most one read asks for, whatever a frame's size prefix says: the prefix is read from the
#: network, so it may not decide an allocation of up to the largest frame (128 MiB) at once.
_RECV_MAX: Final = 1024 * 1024


def write_frame(sock: socket.socket, data: bytes, node: str) -> None:
    """Send one whole frame; a timeout is KafkaTimeoutError, any other failure a disconnect."""
    try:
        sock.sendall(data)
    except TimeoutError as exc:
        raise KafkaTimeoutError("Timed out sending", node=node) from exc
    except OSError as exc:
        raise DisconnectedError(f"Send failed: {exc}", node=node) from exc


def read_frame(sock: socket.socket, decoder: FrameDecoder, node: str) -> bytes:
    """Read until ``decoder`` yields one frame (the answer to the one request in flight)."""
    while True:
        try:
            chunk = sock.recv(max(_RECV_SIZE, min(decoder.bytes_needed, _RECV_MAX)))
        except TimeoutError as exc:
            raise KafkaTimeoutError("Timed out waiting for a response", node=node) from exc
        except OSError as exc:
            raise DisconnectedError(f"Receive failed: {exc}", node=node) from exc
        if not chunk:
            raise DisconnectedError("Connection closed by the broker", node=node)
        frames = decoder.feed(chunk)
        if frames:
            if len(frames) > 1:
                raise ProtocolError("More responses than requests", node=node)
            return frames[0]
