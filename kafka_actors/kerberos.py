"""Kerberos for SASL/GSSAPI through the ``gssapi`` binding (python-gssapi, MIT or Heimdal).

Owns: the client's Kerberos login (:class:`KerberosLogin`: credentials from a keytab, the
ticket cache or the defaults, as ``sasl.jaas.config``'s ``Krb5LoginModule`` options say) and
the GSS-API contexts made from it (:class:`GssapiContext`, one per authentication, for
``<sasl.kerberos.service.name>@<broker host as connected>``).
May touch: the ``gssapi`` package (imported here only), the keytab and ticket cache files,
the KDC over the network (inside the Kerberos library, which reads ``KRB5_CONFIG`` /
``/etc/krb5.conf``), errors. A keytab login keeps its tickets in a private in-memory cache
(``MEMORY:``), renewed from the keytab by the library when they expire, so it never
disturbs the user's ticket cache.

Install with ``pip install kafka-actors[kerberos]`` (the binding builds against the system's
Kerberos headers, e.g. Debian's ``libkrb5-dev``; ``scripts/bootstrap.sh`` installs them).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import AuthenticationError, ConfigError, SaslAuthenticationFailedError
from kafka_actors.protocol.connection.gssapi import GssapiMechanism

if TYPE_CHECKING:
    from kafka_actors.protocol.connection.sasl import SaslMechanism

__all__ = ["GssapiContext", "KerberosLogin", "gssapi_available", "require_gssapi"]

_cache_ids = itertools.count(1)


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError as exc:
        raise ConfigError(
            "sasl.mechanism=GSSAPI needs the gssapi package (pip install kafka-actors[kerberos]; "
            f"it builds against the system's Kerberos, e.g. libkrb5-dev): {exc}",
            key="sasl.mechanism",
        ) from None
    return gssapi


def require_gssapi() -> None:
    """Raise :class:`~kafka_actors.errors.ConfigError` (key ``sasl.mechanism``) when the
    ``gssapi`` binding does not import."""
    _gssapi()


def gssapi_available() -> str | None:
    """None when the ``gssapi`` binding imports, else why not."""
    try:
        import gssapi  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def _failure(what: str, exc: Exception) -> SaslAuthenticationFailedError:
    # GSS-API messages name principals and files, never keys.
    text = " ".join(str(exc).split())
    return SaslAuthenticationFailedError(f"GSSAPI: {what}: {text}")


class GssapiContext:
    """One initiating GSS-API context (see :class:`~kafka_actors.protocol.connection.gssapi.
    GssContext`), mutual authentication requested, no delegation, as Java's client."""

    __slots__ = ("_context", "_credentials", "_gssapi", "_target")

    def __init__(self, gssapi: Any, credentials: Any, target: str) -> None:
        self._gssapi = gssapi
        self._credentials = credentials
        self._target = target
        try:
            name = gssapi.Name(target, gssapi.NameType.hostbased_service)
            flags = gssapi.RequirementFlag.mutual_authentication | gssapi.RequirementFlag.integrity
            self._context = gssapi.SecurityContext(
                name=name, creds=credentials, usage="initiate", flags=flags
            )
        except gssapi.exceptions.GSSError as exc:
            raise _failure(f"cannot start a context for {target}", exc) from None

    @property
    def established(self) -> bool:
        return bool(self._context.complete)

    @property
    def initiator(self) -> str:
        try:
            return str(self._context.initiator_name)
        except self._gssapi.exceptions.GSSError as exc:
            raise _failure("no initiator name", exc) from None

    def step(self, token: bytes | None) -> bytes | None:
        try:
            out = self._context.step(token)
        except self._gssapi.exceptions.GSSError as exc:
            what = f"initiating the security context for {self._target} failed"
            raise _failure(what, exc) from None
        return None if out is None else bytes(out)

    def wrap(self, data: bytes) -> bytes:
        try:
            return bytes(self._context.wrap(data, False).message)
        except self._gssapi.exceptions.GSSError as exc:
            raise _failure("wrap failed", exc) from None

    def unwrap(self, data: bytes) -> bytes:
        try:
            return bytes(self._context.unwrap(data).message)
        except self._gssapi.exceptions.GSSError as exc:
            raise _failure("unwrap of the server's security layer offer failed", exc) from None

    def __repr__(self) -> str:
        return f"GssapiContext(target={self._target!r}, established={self.established})"


class KerberosLogin:
    """The client's Kerberos credentials for ``config`` (Java's ``KerberosLogin``), acquired
    by :meth:`start`'s warm-up thread (with the tickets for ``hosts``) or else at the first
    authentication (a keytab login keeps its tickets in memory: later connections reuse
    them). A keytab that does not hold the principal, a
    principal the KDC does not know, a wrong key or an unknown service fail that
    authentication with :class:`~kafka_actors.errors.SaslAuthenticationFailedError` (fatal,
    as Java's ``SaslAuthenticationException``)."""

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        on_change: Callable[[], None] | None = None,
        hosts: Sequence[str] = (),
    ) -> None:
        self._gssapi = _gssapi()
        self._on_change = on_change
        self._hosts = tuple(hosts)
        self._lock = threading.Lock()
        self._settled = threading.Event()
        self._closed = threading.Event()
        service = config.sasl_kerberos_service_name
        if not service:
            raise ConfigError(
                "No serviceName defined in either JAAS or Kafka config",
                key="sasl.kerberos.service.name",
            )
        self.service_name = service
        self.principal = config.sasl_kerberos_principal
        self._store: dict[bytes, bytes] = {}
        if config.sasl_kerberos_keytab is not None:
            self._store[b"client_keytab"] = os.fsencode(config.sasl_kerberos_keytab)
            ccache = f"MEMORY:kafka-actors-{os.getpid()}-{next(_cache_ids)}"
            self._store[b"ccache"] = ccache.encode()
            self.source = f"keytab {config.sasl_kerberos_keytab}"
        elif config.sasl_kerberos_ticket_cache is not None:
            self._store[b"ccache"] = os.fsencode(config.sasl_kerberos_ticket_cache)
            self.source = f"ticket cache {config.sasl_kerberos_ticket_cache}"
        else:
            self.source = "default credentials"
        self._credentials: Any = None

    def credentials(self) -> Any:
        """The login's GSS-API credentials, acquired at the first authentication (a failure
        is not kept: the next attempt tries again)."""
        with self._lock:
            return self._acquire()

    def _acquire(self) -> Any:
        if self._credentials is not None:
            return self._credentials
        gssapi = self._gssapi
        try:
            name = (
                gssapi.Name(self.principal, gssapi.NameType.kerberos_principal)
                if self.principal
                else None
            )
            self._credentials = gssapi.Credentials(
                name=name, usage="initiate", store=self._store or None
            )
        except gssapi.exceptions.GSSError as exc:
            who = self.principal or "the default principal"
            raise _failure(f"login of {who} from {self.source} failed", exc) from None
        return self._credentials

    # -- the warm-up: the KDC exchanges off the network thread ------------------------------

    def start(self) -> None:
        """Ask the KDC for the tickets of ``hosts`` (the bootstrap hosts) on a thread of its
        own: the login (AS exchange) and each ``service@host`` ticket (TGS exchange) land in
        the login's ticket cache, so the network thread's first authentications need no KDC
        round trip. :meth:`settled` turns true (and ``on_change`` is called) when it ends,
        whatever the outcome: a failure is left for the authentication to report."""
        if not self._hosts:
            self._settled.set()
            return
        threading.Thread(target=self._warm, name="kafka-actors-kerberos", daemon=True).start()

    def _warm(self) -> None:
        try:
            for host in self._hosts:
                if self._closed.is_set():
                    break
                self.context(host).step(None)  # the token is dropped; the tickets stay cached
        except AuthenticationError:
            pass  # the connection's own attempt fails with this error, typed and fatal
        finally:
            self._settled.set()
            if self._on_change is not None and not self._closed.is_set():
                self._on_change()

    def settled(self) -> bool:
        """True once the warm-up ended (or there was none)."""
        return self._settled.is_set()

    def close(self) -> None:
        """The warm-up stops after its current KDC exchange and calls no one."""
        self._closed.set()

    def context(self, host: str) -> GssapiContext:
        """A context for ``<service>@<host>`` (``host``: the broker as connected)."""
        return GssapiContext(self._gssapi, self.credentials(), f"{self.service_name}@{host}")

    def mechanism(self, host: str) -> SaslMechanism:
        """A SASL/GSSAPI mechanism for one authentication with the broker at ``host``."""
        return GssapiMechanism(lambda: self.context(host))

    def __repr__(self) -> str:
        return (
            f"KerberosLogin(principal={self.principal!r}, service={self.service_name!r}, "
            f"source={self.source!r})"
        )
