"""The blocking reader (the Spark reader's and the testkit's client): a frame's size prefix,
read from the network, never decides a read's allocation beyond a bound."""

from __future__ import annotations

import socket
import struct

import pytest

from kafka_actors.blocking_io import _RECV_MAX, read_frame
from kafka_actors.errors import DisconnectedError
from kafka_actors.protocol.wire.framing import FrameDecoder


class _Socket:
    """Hands out ``data`` in pieces of at most ``piece`` bytes and records each read's size."""

    def __init__(self, data: bytes, piece: int) -> None:
        self.data = data
        self.piece = piece
        self.asked: list[int] = []

    def recv(self, size: int) -> bytes:
        self.asked.append(size)
        out, self.data = self.data[: min(size, self.piece)], self.data[min(size, self.piece) :]
        return out


def test_a_huge_size_prefix_does_not_size_the_reads() -> None:
    # A prefix of 100 MiB and then a little: every read asks for at most _RECV_MAX.
    sock = _Socket(struct.pack(">i", 100 * 1024 * 1024) + b"x" * 5000, piece=1000)
    with pytest.raises(DisconnectedError):
        read_frame(sock, FrameDecoder(), "n")  # type: ignore[arg-type]
    assert len(sock.asked) > 2
    assert max(sock.asked) <= _RECV_MAX


def test_a_large_frame_is_read_whole_in_bounded_reads() -> None:
    body = bytes(range(256)) * (3 * _RECV_MAX // 256)
    sock = _Socket(struct.pack(">i", len(body)) + body, piece=4 * _RECV_MAX)
    assert read_frame(sock, FrameDecoder(), "n") == body  # type: ignore[arg-type]
    assert max(sock.asked) == _RECV_MAX  # as large as allowed while much is missing


def test_a_real_socket_pair() -> None:
    a, b = socket.socketpair()
    try:
        a.sendall(struct.pack(">i", 3) + b"abc")
        assert read_frame(b, FrameDecoder(), "n") == b"abc"
    finally:
        a.close()
        b.close()
