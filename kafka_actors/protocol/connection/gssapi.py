"""The client side of SASL/GSSAPI (Kerberos V5, RFC 4752) as Kafka's Java client speaks it.

Owns: the SASL steps around a GSS-API security context: the context's tokens until it is
established (mutual authentication), then the security-layer negotiation: the server's
wrapped 4 bytes (offered layers, maximum message size), answered with a wrapped
``0x01`` (no security layer) + maximum size 0 + the authorization id (the client principal,
as Kafka's ``SaslClientAuthenticator`` passes it).
May touch: the :class:`GssContext` it is given (the Kerberos work itself, done by
:mod:`kafka_actors.kerberos` through the ``gssapi`` binding), errors. No sockets, no clock.

Usage: ``GssapiMechanism(lambda: login.context(service, host))`` per connection attempt; the
context is made at the first step, so a mechanism that is never used costs nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final, Protocol

from kafka_actors.errors import IllegalSaslStateError, SaslAuthenticationFailedError

__all__ = [
    "NO_SECURITY_LAYER",
    "GssContext",
    "GssapiMechanism",
]

#: RFC 4752 security layer bit for "no security layer" (the only one Kafka uses).
NO_SECURITY_LAYER: Final = 0x01


class GssContext(Protocol):
    """An initiating GSS-API security context (``gss_init_sec_context`` and friends).

    Every method raises :class:`~kafka_actors.errors.AuthenticationError` (a subclass) when
    the GSS-API call fails: bad keytab, unknown principal, KDC unreachable, bad token.
    """

    @property
    def established(self) -> bool: ...

    @property
    def initiator(self) -> str:
        """The client principal (``name@REALM``)."""
        ...

    def step(self, token: bytes | None) -> bytes | None:
        """``gss_init_sec_context``: the next token for the server (None: nothing to send)."""
        ...

    def wrap(self, data: bytes) -> bytes:
        """``gss_wrap`` with integrity only (no confidentiality), as Java's client."""
        ...

    def unwrap(self, data: bytes) -> bytes: ...


class _State(enum.Enum):
    INITIAL = "initial"
    CONTEXT = "context"  # exchanging context tokens
    LAYER = "layer"  # waiting for the server's wrapped security-layer offer
    COMPLETE = "complete"
    FAILED = "failed"


class GssapiMechanism:
    """SASL/GSSAPI client for one authentication (see the module docstring).

    ``context`` makes the GSS-API context (for ``service@host``); it is called once, at
    :meth:`initial_response`.
    """

    __slots__ = ("_context", "_factory", "_state")

    name: Final = "GSSAPI"

    def __init__(self, context: Callable[[], GssContext]) -> None:
        self._factory = context
        self._context: GssContext | None = None
        self._state = _State.INITIAL

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def _fail(self, message: str) -> SaslAuthenticationFailedError:
        self._state = _State.FAILED
        return SaslAuthenticationFailedError(f"GSSAPI: {message}")

    def initial_response(self) -> bytes:
        if self._state is not _State.INITIAL:
            raise IllegalSaslStateError("SASL/GSSAPI initial response already sent")
        self._state = _State.FAILED  # until the context gave its first token
        context = self._context = self._factory()
        token = context.step(None)
        self._state = _State.LAYER if context.established else _State.CONTEXT
        return token or b""

    def evaluate(self, challenge: bytes) -> bytes | None:
        context = self._context
        if context is None or self._state in (_State.INITIAL, _State.COMPLETE, _State.FAILED):
            raise IllegalSaslStateError(f"SASL/GSSAPI challenge in state {self._state.value}")
        if self._state is _State.CONTEXT:
            token = context.step(challenge)
            if context.established:
                self._state = _State.LAYER
            # An empty answer once the context is established asks for the layer offer.
            return token or b""
        return self._security_layer(context, challenge)

    def _security_layer(self, context: GssContext, challenge: bytes) -> bytes:
        offer = context.unwrap(challenge)
        if len(offer) != 4:
            raise self._fail(f"the server's security layer offer has {len(offer)} bytes, not 4")
        if not offer[0] & NO_SECURITY_LAYER:
            raise self._fail(
                f"the server requires a security layer (offered 0x{offer[0]:02x}); Kafka uses none"
            )
        reply = bytes((NO_SECURITY_LAYER, 0, 0, 0)) + context.initiator.encode("utf-8")
        wrapped = context.wrap(reply)
        self._state = _State.COMPLETE
        return wrapped

    def __repr__(self) -> str:
        return f"GssapiMechanism(state={self._state.value!r})"
