"""Bootstrap name resolution (KIP-909): at construction, or within a time budget.

Owns: :func:`check_bootstrap_resolvable`, the check made when a client is built with
``bootstrap.resolve.timeout.ms=0`` (Java's default: the bootstrap servers are resolved then,
an unresolvable one is skipped with a warning, and none resolvable is a ConfigError), and
:class:`BootstrapResolution`, the NetworkActor's record of whether a bootstrap server has
resolved yet when the timeout is positive (names are then resolved on the resolver threads
and retried with the reconnect backoff until the budget is spent, after which the client fails
for good with :class:`~kafka_actors.errors.BootstrapResolutionError`). Pure but for the
resolver it is given. May touch: the resolver.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafka_actors.actors.network.transport import Resolver
from kafka_actors.config import BrokerAddress
from kafka_actors.errors import BootstrapResolutionError, ConfigError
from kafka_actors.log import get_logger

__all__ = ["BootstrapResolution", "check_bootstrap_resolvable"]

_log = get_logger("network")


def check_bootstrap_resolvable(
    servers: Sequence[BrokerAddress], resolver: Resolver
) -> tuple[BrokerAddress, ...]:
    """The bootstrap servers whose names resolve now (each other one logged as a warning);
    ConfigError (key ``bootstrap.servers``) when none does."""
    resolvable: list[BrokerAddress] = []
    for address in servers:
        try:
            found = resolver(address.host, address.port)
        except OSError as exc:
            _log.warning(
                "bootstrap_server_unresolvable",
                address=str(address),
                error=str(exc),
                hint="skipped; bootstrap.resolve.timeout.ms > 0 retries resolution instead",
            )
            continue
        if found:
            resolvable.append(address)
    if not resolvable:
        raise ConfigError(
            "No resolvable bootstrap urls given in bootstrap.servers: "
            + ", ".join(str(a) for a in servers)
            + " (with bootstrap.resolve.timeout.ms=0 the names are resolved when the client is"
            " built; a positive value retries resolution for that long instead)",
            key="bootstrap.servers",
        )
    return tuple(resolvable)


class BootstrapResolution:
    """Whether a bootstrap server resolved within ``bootstrap.resolve.timeout.ms``.

    ``timeout_s`` > 0 counts from ``start`` (the client's start); the first bootstrap name that
    resolves ends the watch for good (later failures are ordinary connection failures). Once
    the budget is spent with none resolved, :meth:`expired` returns the error the client fails
    with, once; :attr:`failure` keeps it.
    """

    __slots__ = ("_deadline", "_timeout_s", "failure", "last_error")

    def __init__(self, timeout_s: float, start: float) -> None:
        self._timeout_s = timeout_s
        self._deadline: float | None = start + timeout_s if timeout_s > 0 else None
        self.failure: BootstrapResolutionError | None = None
        self.last_error: str | None = None

    @property
    def watching(self) -> bool:
        """Still waiting for the first bootstrap name to resolve, within a budget."""
        return self._deadline is not None and self.failure is None

    def deadline(self) -> float | None:
        """When the budget is spent (None: not watching)."""
        return self._deadline if self.watching else None

    def resolved(self) -> None:
        """A bootstrap server's name resolved: the watch is over."""
        self._deadline = None

    def failed(self, error: str) -> None:
        """A bootstrap server's name did not resolve (kept for the final error's message)."""
        self.last_error = error

    def expired(
        self, now: float, servers: Sequence[BrokerAddress]
    ) -> BootstrapResolutionError | None:
        """The error to fail with when the budget has just been spent, else None."""
        if self._deadline is None or self.failure is not None or now < self._deadline:
            return None
        self.failure = BootstrapResolutionError(
            "Unable to resolve any of bootstrap.servers ("
            + ", ".join(str(a) for a in servers)
            + f") within bootstrap.resolve.timeout.ms={round(self._timeout_s * 1000)}"
            + (f"; last error: {self.last_error}" if self.last_error else "")
            + ". The client cannot recover: close it and build a new one once DNS or "
            "bootstrap.servers is fixed."
        )
        return self.failure
