"""The NetworkActor's default SASL and TLS factories, built from the consumer configuration.

Owns: turning ``security.protocol``, ``sasl.*`` and ``ssl.*`` into the factories the
NetworkActor takes (one SASL mechanism per connection attempt; one TLS channel per socket).
May touch: :mod:`kafka_actors.protocol.connection.sasl`,
:mod:`kafka_actors.protocol.connection.tls`, the OAUTHBEARER token source it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kafka_actors.config import ConsumerConfig
from kafka_actors.protocol.connection.node import MechanismFactory

if TYPE_CHECKING:
    from kafka_actors.oauth import OAuthBearerTokenSource  # imported only for OAUTHBEARER
    from kafka_actors.protocol.connection.sasl import SaslMechanism
    from kafka_actors.protocol.connection.tls import TlsChannel

# (sasl and tls are imported by the factories: a SASL_PLAINTEXT consumer needs no ssl, an SSL
# one no SASL)

__all__ = [
    "default_sasl",
    "default_tls",
    "oauthbearer_sasl",
]


def default_sasl(config: ConsumerConfig) -> MechanismFactory:
    from kafka_actors.protocol.connection.sasl import mechanism_from_config

    mechanism_from_config(config)  # a bad setting fails now, naming its key

    def make() -> SaslMechanism:
        return mechanism_from_config(config)

    return make


def oauthbearer_sasl(config: ConsumerConfig, source: OAuthBearerTokenSource) -> MechanismFactory:
    """SASL/OAUTHBEARER with the source's current token: a connection attempt made before
    the first token arrived fails with a retriable error and is retried after its backoff."""
    from kafka_actors.protocol.connection.sasl import mechanism_from_config

    def make() -> SaslMechanism:
        return mechanism_from_config(config, token_source=source)

    return make


def default_tls(config: ConsumerConfig) -> Callable[[str, int], TlsChannel]:
    from kafka_actors.protocol.connection.tls import TlsChannel, build_ssl_context

    context = build_ssl_context(config)

    def make(host: str, node: int) -> TlsChannel:
        return TlsChannel(context, host, node=node)

    return make
