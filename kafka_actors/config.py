"""Consumer configuration by Kafka's own names, with the Java client's defaults and validation.

Owns: :class:`ConsumerConfig` (an immutable, typed view of a consumer's settings),
:class:`Password` (a secret whose ``repr``/``str`` is ``[hidden]``, as Java's), the parsing of
``bootstrap.servers``, ``auto.offset.reset`` (incl. ``by_duration:``), assignor names and
``sasl.jaas.config``. Pure: it reads no files, no environment and no clock.
May touch: nothing but :mod:`kafka_actors.errors` (it raises :class:`ConfigError`).

Reference: Java's ``ConsumerConfig`` / ``CommonClientConfigs`` / ``ConfigDef`` (Kafka 4.x).
Values may be given typed (``500``, ``True``, a list) or as Java properties strings (``"500"``,
``"true"``, ``"a:1,b:2"``), as ``ConfigDef`` accepts them. Deliberate differences from Java,
each because this client cannot do otherwise or to make a choice Java leaves to the JVM:

* ``group.protocol`` defaults to ``consumer`` (KIP-848); Java 4.x defaults to ``classic``.
* An unknown key is an error naming the key (Java only logs "supplied but not used").
* What the Java consumer refuses only when it is constructed (a bootstrap address without a
  port, heartbeat.interval.ms >= session.timeout.ms, duplicate assignors, group.instance.id
  without group.id) is refused here when the config is built. Duplicate bootstrap addresses
  are accepted and kept once, as Java 4.x accepts them.
* ``ssl.truststore.type`` / ``ssl.keystore.type`` accept ``PEM`` and ``PKCS12`` and default to
  ``PEM`` (Java: JKS, refused with a hint to convert); ``ssl.context`` takes a ready
  ``ssl.SSLContext``; ``sasl.mechanism`` accepts PLAIN, SCRAM-SHA-256/512, OAUTHBEARER and
  GSSAPI (Java's default; Kerberos through the optional ``gssapi`` binding, the ``kerberos``
  extra). GSSAPI without ``sasl.jaas.config`` uses the default credentials (the ticket cache
  or ``KRB5_CLIENT_KTNAME``) where Java needs a static JAAS file.
* ``key.deserializer`` / ``value.deserializer`` are Python objects, not class names: a
  callable ``(bytes | None) -> Any``, or one that receives the record's topic, partition,
  headers and key/value (see :mod:`kafka_actors.serialization`; default: none, the raw bytes
  are returned).
* ``sasl.username`` / ``sasl.password`` (librdkafka's names) are accepted as a convenience in
  place of ``sasl.jaas.config``; giving both is an error. ``ssl.ca.location`` (librdkafka's
  name for a PEM file of trusted CA certificates) is accepted in place of
  ``ssl.truststore.location``, so the testkit's ``client_config`` serves both clients.
* ``max.in.flight.requests.per.connection`` is a producer setting in Java; the Java consumer
  hard-codes 100 per connection, which is our default.
* ``client.id`` is kept as given (Java generates ``consumer-<group>-<n>`` when empty; the
  consumer does that at construction, where the sequence lives).
* ``rebalance.safe.commits`` (default false) and ``rebalance.safe.commits.max.duration.ms``
  (default -1: ``max.poll.interval.ms``) are this client's own (zio-kafka's
  ``rebalanceSafeCommits``): a revocation is acknowledged only once the records handed out
  for the revoked partitions are committed, or the maximum duration passed.
* ``send.buffer.bytes`` / ``receive.buffer.bytes`` = 0 is refused here (Java's socket refuses it
  only when the connection is made); -1 keeps the operating system's default.
  ``connections.max.idle.ms`` < 0 never closes a connection for idleness.
* ``max.decompressed.batch.bytes`` (default 268435456, 256 MiB; an int >= 1) is this client's
  own: the most bytes one compressed record batch may decompress to. A larger batch raises
  ``DecompressedBatchTooLargeError`` (a ``CorruptRecordError`` naming topic, partition and
  offset) and nothing past the bound is allocated. Java has no bound; librdkafka caps
  decompression at ``receive.message.max.bytes`` (100 MB). 256 MiB is 5x ``fetch.max.bytes``'
  default and lets a 1 MiB batch expand 256 times (repetitive text compresses 10-100x).
* ``retry.backoff.ms`` > ``retry.backoff.max.ms`` is accepted with a warning (as Java, which
  then uses the max as a fixed backoff); the warning is in :attr:`ConsumerConfig.warnings`.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any, Final, cast

from kafka_actors.errors import ConfigError

__all__ = [
    "ASSIGNOR_CLASS_NAMES",
    "CONSUMER_ONLY_KEYS",
    "SHARE_ONLY_KEYS",
    "BrokerAddress",
    "ConsumerConfig",
    "JaasLoginModule",
    "Password",
    "config_keys",
    "parse_bootstrap_servers",
    "parse_jaas_config",
]

_HIDDEN: Final = "[hidden]"
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class Password:
    """A secret value. ``str``/``repr`` give ``[hidden]``, as Java's ``Password``.

    The value is read with :meth:`value`; two passwords are equal when their values are.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return _HIDDEN

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Password):
            return NotImplemented
        import hmac  # (here: hashlib and hmac cost ~3 ms of every start-up)

        return hmac.compare_digest(other._value.encode(), self._value.encode())

    def __hash__(self) -> int:
        return hash(self._value)


def _error(key: str | None, message: str) -> ConfigError:
    return ConfigError(message, key=key)


# --------------------------------------------------------------------------------------------
# bootstrap.servers


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-_]*://")
_DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    if len(host) > 253 or not host:
        return False
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if all(label.isdigit() for label in labels):  # looks like a (bad) IPv4 address
        return False
    return all(_DNS_LABEL.match(label) for label in labels)


def _parse_address(entry: str, key: str = "bootstrap.servers") -> BrokerAddress:
    text = _SCHEME.sub("", entry.strip(), count=1)
    host: str
    port_text: str
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or text[close + 1 : close + 2] != ":":
            raise _error(key, f"Invalid url in {key}: {entry!r} (expected [ipv6]:port)")
        host, port_text = text[1:close], text[close + 2 :]
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise _error(key, f"Invalid url in {key}: {entry!r} (bad IPv6 address)") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise _error(key, f"Invalid url in {key}: {entry!r} (expected host:port)")
        if ":" in host:  # unbracketed IPv6, as Java's HOST_PORT_PATTERN accepts
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise _error(key, f"Invalid url in {key}: {entry!r}") from None
        elif not _valid_host(host):
            raise _error(key, f"Invalid url in {key}: {entry!r} (bad host name)")
    if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise _error(key, f"Invalid url in {key}: {entry!r} (bad port)")
    return BrokerAddress(host, int(port_text))


def parse_bootstrap_servers(value: object) -> tuple[BrokerAddress, ...]:
    """Parse ``bootstrap.servers`` (a list, or a comma-separated string) as Java does."""
    if isinstance(value, (list, tuple)):
        value = [str(v) if isinstance(v, BrokerAddress) else v for v in value]
    entries = _as_list("bootstrap.servers", value)
    if not entries:
        raise _error("bootstrap.servers", "bootstrap.servers must contain at least one address")
    addresses: list[BrokerAddress] = []
    for entry in entries:
        address = _parse_address(entry)
        if address not in addresses:  # Java 4.x accepts duplicates; one connection is enough
            addresses.append(address)
    return tuple(addresses)


# --------------------------------------------------------------------------------------------
# auto.offset.reset (incl. KIP-1106 by_duration:<ISO-8601 duration>)

# (compiled when first used, by re's own cache: most configurations have no duration)
_DURATION: Final = (
    r"^\+?P(?:(\+?\d+)D)?(?:T(?:(\+?\d+)H)?(?:(\+?\d+)M)?(?:(\+?\d+)(?:[.,](\d{0,9}))?S)?)?$"
)


def _parse_duration(text: str) -> timedelta | None:
    """A non-negative ISO-8601 duration as ``java.time.Duration.parse`` reads it, or None."""
    m = re.match(_DURATION, text, re.IGNORECASE)
    if m is None or text.upper().endswith("T"):
        return None
    days, hours, minutes, seconds, fraction = m.groups()
    if days is None and hours is None and minutes is None and seconds is None:
        return None
    micros = int((fraction or "").ljust(6, "0")[:6]) if fraction else 0
    return timedelta(
        days=int(days or 0),
        hours=int(hours or 0),
        minutes=int(minutes or 0),
        seconds=int(seconds or 0),
        microseconds=micros,
    )


def _parse_auto_offset_reset(value: object) -> tuple[str, timedelta | None]:
    key = "auto.offset.reset"
    text = _as_string(key, value)
    lowered = text.lower()
    if lowered in ("earliest", "latest", "none"):
        return lowered, None
    if lowered.startswith("by_duration:"):
        duration = _parse_duration(text[len("by_duration:") :].strip())
        if duration is None:
            raise _error(
                key,
                f"Invalid value {text!r} for configuration {key}: by_duration needs a "
                "non-negative ISO-8601 duration such as by_duration:P1DT2H",
            )
        return "by_duration", duration
    raise _error(
        key,
        f"Invalid value {text!r} for configuration {key}: "
        "String must be one of: latest, earliest, none, by_duration:PnDTnHnMn.nS",
    )


# --------------------------------------------------------------------------------------------
# partition.assignment.strategy

ASSIGNOR_CLASS_NAMES: Final[Mapping[str, str]] = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
_ASSIGNOR_NAMES: Final = frozenset(ASSIGNOR_CLASS_NAMES.values())


def _parse_assignors(value: object) -> tuple[str, ...]:
    key = "partition.assignment.strategy"
    names: list[str] = []
    for entry in _as_list(key, value):
        simple = entry.rsplit(".", 1)[-1]
        name = ASSIGNOR_CLASS_NAMES.get(entry)
        if name is None and entry in _ASSIGNOR_NAMES:
            name = entry
        if name is None:  # "RangeAssignor" without its package
            name = next(
                (n for c, n in ASSIGNOR_CLASS_NAMES.items() if c.endswith("." + simple)), None
            )
        if name is None:
            raise _error(
                key,
                f"Invalid value {entry!r} for configuration {key}: not a known assignor "
                f"(one of {', '.join(sorted(_ASSIGNOR_NAMES))} or their Java class names)",
            )
        if name in names:
            raise _error(key, f"Configuration {key} has duplicate value {entry!r}")
        names.append(name)
    return tuple(names)


# --------------------------------------------------------------------------------------------
# sasl.jaas.config

_PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTHBEARER_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_KRB5_MODULE: Final = "com.sun.security.auth.module.Krb5LoginModule"
# (compiled when first used, by re's own cache: for SASL only)
_JAAS_TOKEN: Final = r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))'


@dataclass(frozen=True, slots=True)
class JaasLoginModule:
    """One login module entry of a ``sasl.jaas.config`` (its option values may be secrets)."""

    module: str
    control_flag: str
    options: Mapping[str, Password]

    def __repr__(self) -> str:
        return (
            f"JaasLoginModule(module={self.module!r}, control_flag={self.control_flag!r}, "
            f"options={sorted(self.options)!r})"
        )


def parse_jaas_config(text: str) -> JaasLoginModule:
    """Parse Java's ``<LoginModule> <flag> key="value" ... ;`` (one module, as Kafka clients).

    Errors never quote the text, which holds a password.
    """
    key = "sasl.jaas.config"
    tokens: list[tuple[str, str]] = []  # (kind, text): kind in word/quoted/=/;
    pos = 0
    stripped = text.rstrip()
    token = re.compile(_JAAS_TOKEN, re.DOTALL)
    while pos < len(stripped):
        m = token.match(stripped, pos)
        if m is None or m.end() == pos:
            raise _error(key, "sasl.jaas.config could not be parsed (unexpected character)")
        quoted, word, eq, semi = m.groups()
        if quoted is not None:
            tokens.append(("quoted", re.sub(r"\\(.)", r"\1", quoted, flags=re.DOTALL)))
        elif word is not None:
            tokens.append(("word", word))
        elif eq is not None:
            tokens.append(("=", "="))
        elif semi is not None:
            tokens.append((";", ";"))
        pos = m.end()
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise _error(key, "sasl.jaas.config must start with '<LoginModule> <controlFlag>'")
    if tokens[-1][0] != ";":
        raise _error(key, "sasl.jaas.config must end with ';'")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in ("required", "requisite", "sufficient", "optional"):
        raise _error(key, f"sasl.jaas.config has invalid control flag {tokens[1][1]!r}")
    options: dict[str, Password] = {}
    body = tokens[2:-1]
    if any(kind == ";" for kind, _ in body):
        raise _error(key, "sasl.jaas.config must contain exactly one login module")
    if len(body) % 3:
        raise _error(key, "sasl.jaas.config options must be key=value pairs")
    for i in range(0, len(body), 3):
        (k_kind, k_text), (e_kind, _), (v_kind, v_text) = body[i : i + 3]
        if k_kind != "word" or e_kind != "=" or v_kind not in ("word", "quoted"):
            raise _error(key, "sasl.jaas.config options must be key=value pairs")
        options[k_text] = Password(v_text)
    return JaasLoginModule(module=module, control_flag=flag, options=options)


# --------------------------------------------------------------------------------------------
# primitive parsers (ConfigDef.parseType)


def _show(key: str, value: object) -> str:
    return _HIDDEN if key in _SECRET_KEYS else repr(value)


def _as_string(key: str, value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    raise _error(
        key,
        f"Invalid value {_show(key, value)} for configuration {key}: Expected value to be a string",
    )


def _as_optional_string(key: str, value: object) -> str | None:
    return None if value is None else _as_string(key, value)


def _as_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _error(
        key,
        f"Invalid value {value!r} for configuration {key}: "
        "Expected value to be either true or false",
    )


def _as_integer(key: str, value: object, lo: int, hi: int, kind: str) -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        number = int(value.strip())
    if number is None:
        raise _error(
            key,
            f"Invalid value {value!r} for configuration {key}: "
            f"Expected value to be a {kind} number",
        )
    if not lo <= number <= hi:
        raise _error(key, f"Invalid value {value!r} for configuration {key}: Not a {kind}")
    return number


def _as_list(key: str, value: object) -> list[str]:
    if isinstance(value, str):
        text = value.strip()
        return [] if not text else [part.strip() for part in text.split(",")]
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for item in value:
            if not isinstance(item, str):
                raise _error(
                    key,
                    f"Invalid value {value!r} for configuration {key}: Expected a list of strings",
                )
            out.append(item.strip())
        return out
    raise _error(
        key, f"Invalid value {value!r} for configuration {key}: Expected a comma separated list"
    )


def _as_password(key: str, value: object) -> Password | None:
    if value is None:
        return None
    if isinstance(value, Password):
        return value
    if isinstance(value, str):
        return Password(value)
    raise _error(
        key, f"Invalid value {_HIDDEN} for configuration {key}: Expected value to be a string"
    )


def _as_deserializer(key: str, value: object) -> Any:
    from kafka_actors.serialization import as_deserializer

    try:
        as_deserializer(value)  # validated here; normalized by the consumer (kept picklable)
    except TypeError:
        raise _error(
            key,
            f"Invalid value {value!r} for configuration {key}: expected a callable "
            "(bytes | None) -> Any, an object with deserialize(topic, headers, data), a "
            "kafka_actors.serialization.ContextDeserializer or a confluent-kafka Deserializer "
            "(Java class names are not supported)",
        ) from None
    return value


Parser = Callable[[str, object], object]


def _int(lo: int = _INT_MIN, hi: int = _INT_MAX) -> Parser:
    def parse(key: str, value: object) -> int:
        number = _as_integer(key, value, _INT_MIN, _INT_MAX, "32-bit integer")
        _range(key, number, lo, hi)
        return number

    return parse


def _long(lo: int = _LONG_MIN, hi: int = _LONG_MAX) -> Parser:
    def parse(key: str, value: object) -> int:
        number = _as_integer(key, value, _LONG_MIN, _LONG_MAX, "64-bit integer")
        _range(key, number, lo, hi)
        return number

    return parse


def _range(key: str, number: int, lo: int, hi: int) -> None:
    if number < lo:
        raise _error(
            key, f"Invalid value {number} for configuration {key}: Value must be at least {lo}"
        )
    if number > hi:
        raise _error(
            key, f"Invalid value {number} for configuration {key}: Value must be no more than {hi}"
        )


def _buffer_size(key: str, value: object) -> int:
    """send.buffer.bytes / receive.buffer.bytes: -1 (the OS default) or a positive size (Java's
    ``Socket.setSendBufferSize`` refuses 0 when the connection is made; we refuse it here)."""
    number = _as_integer(key, value, _INT_MIN, _INT_MAX, "32-bit integer")
    _range(key, number, -1, _INT_MAX)
    if number == 0:
        raise _error(
            key,
            f"Invalid value 0 for configuration {key}: Value must be -1 (the operating "
            "system's default) or a positive number of bytes",
        )
    return number


def _enum(*allowed: str, upper: bool = False) -> Parser:
    def parse(key: str, value: object) -> str:
        text = _as_string(key, value)
        normal = text.upper() if upper else text.lower()
        if normal not in allowed:
            raise _error(
                key,
                f"Invalid value {text!r} for configuration {key}: "
                f"String must be one of: {', '.join(allowed)}",
            )
        return normal

    return parse


def _non_empty_optional_string(key: str, value: object) -> str | None:
    text = _as_optional_string(key, value)
    if text is not None and not text:
        raise _error(key, f"Invalid value '' for configuration {key}: String may not be empty")
    return text


def _identification_algorithm(key: str, value: object) -> str:
    text = _as_optional_string(key, value) or ""
    if text.lower() not in ("https", ""):
        raise _error(
            key,
            f"Invalid value {text!r} for configuration {key}: "
            "only 'https' (verify the broker's host name) or '' (do not) are supported",
        )
    return text.lower()


def _double(lo: float, hi: float) -> Parser:
    def parse(key: str, value: object) -> float:
        number: float | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is None or number != number:
            raise _error(key, f"Invalid value {value!r} for configuration {key}: Expected a number")
        if not lo <= number <= hi:
            raise _error(
                key,
                f"Invalid value {number} for configuration {key}: "
                f"Value must be between {lo} and {hi}",
            )
        return number

    return parse


def _optional_int(lo: int) -> Parser:
    inner = _int(lo)

    def parse(key: str, value: object) -> int | None:
        return None if value is None else cast(int, inner(key, value))

    return parse


def _as_token_provider(key: str, value: object) -> Callable[[], Any] | None:
    if value is None or callable(value):
        return value
    raise _error(
        key,
        f"Invalid value {value!r} for configuration {key}: expected a callable returning "
        "(token, expiry epoch seconds), or an awaitable of it",
    )


def _ssl_store_type(key: str, value: object) -> str:
    text = _as_string(key, value).upper()
    if text not in ("PEM", "PKCS12"):
        raise _error(
            key,
            f"Invalid value {text!r} for configuration {key}: only PEM and PKCS12 stores "
            "are supported (convert a JKS store: keytool -importkeystore -deststoretype PKCS12)",
        )
    return text


_TLS_PROTOCOLS: Final = ("TLSv1.2", "TLSv1.3")


def _ssl_protocol(key: str, value: object) -> str:
    """``ssl.protocol``: the newest protocol the context may speak (Java's SSLContext
    protocol): ``TLSv1.3`` (default), ``TLSv1.2`` or ``TLS`` (the newest available)."""
    text = _as_string(key, value)
    if text not in (*_TLS_PROTOCOLS, "TLS"):
        raise _error(
            key,
            f"Invalid value {text!r} for configuration {key}: use TLSv1.3, TLSv1.2 or TLS "
            "(older protocols are not supported)",
        )
    return text


def _ssl_enabled_protocols(key: str, value: object) -> tuple[str, ...]:
    names = _as_list(key, value)
    bad = [n for n in names if n not in _TLS_PROTOCOLS]
    if bad or not names:
        raise _error(
            key,
            f"Invalid value {value!r} for configuration {key}: a list of TLSv1.2 and/or "
            "TLSv1.3 (older protocols are not supported)",
        )
    return tuple(dict.fromkeys(names))


def _ssl_context(key: str, value: object) -> Any:
    import ssl

    if value is None or isinstance(value, ssl.SSLContext):
        return value
    raise _error(key, f"Invalid value for configuration {key}: expected an ssl.SSLContext")


# Kafka name -> (attribute, parser, default). Order is the dataclass field order.
_SPECS: Final[dict[str, tuple[str, Parser, object]]] = {
    "bootstrap.servers": ("bootstrap_servers", lambda k, v: parse_bootstrap_servers(v), None),
    "client.id": ("client_id", _as_string, ""),
    "client.rack": ("client_rack", _as_string, ""),
    "group.id": ("group_id", _as_optional_string, None),
    "group.instance.id": ("group_instance_id", _non_empty_optional_string, None),
    "group.protocol": ("group_protocol", _enum("consumer", "classic"), "consumer"),
    "group.remote.assignor": ("group_remote_assignor", _as_optional_string, None),
    "session.timeout.ms": ("session_timeout_ms", _int(), 45_000),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _int(), 3_000),
    "partition.assignment.strategy": (
        "partition_assignment_strategy",
        lambda k, v: _parse_assignors(v),
        ("range", "cooperative-sticky"),
    ),
    "auto.offset.reset": ("auto_offset_reset", _as_string, "latest"),  # parsed specially
    "enable.auto.commit": ("enable_auto_commit", _as_bool, True),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _int(0), 5_000),
    "max.poll.records": ("max_poll_records", _int(1), 500),
    "share.acknowledgement.mode": (
        "share_acknowledgement_mode",
        _enum("implicit", "explicit"),
        "implicit",
    ),
    "share.acquire.mode": (  # any case; kept as Java spells it
        "share_acquire_mode",
        _enum("BATCH_OPTIMIZED", "RECORD_LIMIT", upper=True),
        "BATCH_OPTIMIZED",
    ),
    "max.poll.interval.ms": ("max_poll_interval_ms", _int(1), 300_000),
    "rebalance.safe.commits": ("rebalance_safe_commits", _as_bool, False),
    "rebalance.safe.commits.max.duration.ms": (
        "rebalance_safe_commits_max_duration_ms",
        _int(-1),
        -1,
    ),
    "fetch.min.bytes": ("fetch_min_bytes", _int(0), 1),
    "fetch.max.bytes": ("fetch_max_bytes", _int(0), 52_428_800),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int(0), 500),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _int(0), 1_048_576),
    "isolation.level": (
        "isolation_level",
        _enum("read_uncommitted", "read_committed"),
        "read_uncommitted",
    ),
    "check.crcs": ("check_crcs", _as_bool, True),
    "max.decompressed.batch.bytes": ("max_decompressed_batch_bytes", _int(1), 268_435_456),
    "exclude.internal.topics": ("exclude_internal_topics", _as_bool, True),
    "allow.auto.create.topics": ("allow_auto_create_topics", _as_bool, True),
    "enable.metrics.push": ("enable_metrics_push", _as_bool, True),
    "request.timeout.ms": ("request_timeout_ms", _int(0), 30_000),
    "default.api.timeout.ms": ("default_api_timeout_ms", _int(0), 60_000),
    "retry.backoff.ms": ("retry_backoff_ms", _long(0), 100),
    "retry.backoff.max.ms": ("retry_backoff_max_ms", _long(0), 1_000),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _long(0), 50),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _long(0), 1_000),
    "connections.max.idle.ms": ("connections_max_idle_ms", _long(), 540_000),
    "metadata.max.age.ms": ("metadata_max_age_ms", _long(0), 300_000),
    "client.dns.lookup": (
        "client_dns_lookup",
        _enum("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
        "use_all_dns_ips",
    ),
    "metadata.recovery.strategy": (
        "metadata_recovery_strategy",
        _enum("rebootstrap", "none"),
        "rebootstrap",
    ),
    "metadata.recovery.rebootstrap.trigger.ms": (
        "metadata_recovery_rebootstrap_trigger_ms",
        _long(0),
        300_000,
    ),
    "metadata.cluster.check.enable": ("metadata_cluster_check_enable", _as_bool, True),
    "bootstrap.resolve.timeout.ms": ("bootstrap_resolve_timeout_ms", _long(0), 0),
    "socket.connection.setup.timeout.ms": ("socket_connection_setup_timeout_ms", _long(), 10_000),
    "socket.connection.setup.timeout.max.ms": (
        "socket_connection_setup_timeout_max_ms",
        _long(),
        30_000,
    ),
    "receive.buffer.bytes": ("receive_buffer_bytes", _buffer_size, -1),
    "send.buffer.bytes": ("send_buffer_bytes", _buffer_size, 131_072),
    "max.in.flight.requests.per.connection": (
        "max_in_flight_requests_per_connection",
        _int(1),
        100,
    ),
    # Java's sampled metrics (kafka_actors.metrics): window length and number of windows.
    "metrics.sample.window.ms": ("metrics_sample_window_ms", _long(1), 30_000),
    "metrics.num.samples": ("metrics_num_samples", _int(1), 2),
    "key.deserializer": ("key_deserializer", _as_deserializer, None),
    "value.deserializer": ("value_deserializer", _as_deserializer, None),
    "security.protocol": (
        "security_protocol",
        _enum("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", upper=True),
        "PLAINTEXT",
    ),
    "sasl.mechanism": ("sasl_mechanism", _as_string, "GSSAPI"),
    "sasl.jaas.config": ("sasl_jaas_config", _as_password, None),
    "sasl.username": ("sasl_username", _as_optional_string, None),
    "sasl.kerberos.service.name": ("sasl_kerberos_service_name", _as_optional_string, None),
    "sasl.password": ("sasl_password", _as_password, None),
    "sasl.oauthbearer.token.endpoint.url": (
        "sasl_oauthbearer_token_endpoint_url",
        _as_optional_string,
        None,
    ),
    "sasl.oauthbearer.client.credentials.client.id": (
        "sasl_oauthbearer_client_credentials_client_id",
        _as_optional_string,
        None,
    ),
    "sasl.oauthbearer.client.credentials.client.secret": (
        "sasl_oauthbearer_client_credentials_client_secret",
        _as_password,
        None,
    ),
    "sasl.oauthbearer.scope": ("sasl_oauthbearer_scope", _as_optional_string, None),
    "sasl.oauthbearer.sub.claim.name": ("sasl_oauthbearer_sub_claim_name", _as_string, "sub"),
    "sasl.oauthbearer.token.provider": (
        "sasl_oauthbearer_token_provider",
        _as_token_provider,
        None,
    ),
    "sasl.oauthbearer.jwt.retriever.class": (
        "sasl_oauthbearer_jwt_retriever_class",
        _as_string,
        "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever",
    ),
    "sasl.oauthbearer.assertion.file": (
        "sasl_oauthbearer_assertion_file",
        _as_optional_string,
        None,
    ),
    "sasl.oauthbearer.assertion.algorithm": (
        "sasl_oauthbearer_assertion_algorithm",
        _enum("RS256", "ES256", upper=True),
        "RS256",
    ),
    "sasl.oauthbearer.assertion.private.key.file": (
        "sasl_oauthbearer_assertion_private_key_file",
        _as_optional_string,
        None,
    ),
    "sasl.oauthbearer.assertion.private.key.passphrase": (
        "sasl_oauthbearer_assertion_private_key_passphrase",
        _as_password,
        None,
    ),
    "sasl.oauthbearer.assertion.template.file": (
        "sasl_oauthbearer_assertion_template_file",
        _as_optional_string,
        None,
    ),
    "sasl.oauthbearer.assertion.claim.iss": (
        "sasl_oauthbearer_assertion_claim_iss",
        _as_optional_string,
        None,
    ),
    "sasl.oauthbearer.assertion.claim.sub": (
        "sasl_oauthbearer_assertion_claim_sub",
        _as_optional_string,
        None,
    ),
    "sasl.oauthbearer.assertion.claim.aud": (
        "sasl_oauthbearer_assertion_claim_aud",
        _as_optional_string,
        None,
    ),
    "sasl.oauthbearer.assertion.claim.exp.seconds": (
        "sasl_oauthbearer_assertion_claim_exp_seconds",
        _int(0, 86_400),
        300,
    ),
    "sasl.oauthbearer.assertion.claim.nbf.seconds": (
        "sasl_oauthbearer_assertion_claim_nbf_seconds",
        _int(0, 3_600),
        60,
    ),
    "sasl.oauthbearer.assertion.claim.jti.include": (
        "sasl_oauthbearer_assertion_claim_jti_include",
        _as_bool,
        False,
    ),
    "sasl.login.refresh.window.factor": (
        "sasl_login_refresh_window_factor",
        _double(0.5, 1.0),
        0.8,
    ),
    "sasl.login.refresh.window.jitter": (
        "sasl_login_refresh_window_jitter",
        _double(0.0, 0.25),
        0.05,
    ),
    "sasl.login.refresh.min.period.seconds": (
        "sasl_login_refresh_min_period_seconds",
        _int(0, 900),
        60,
    ),
    "sasl.login.refresh.buffer.seconds": ("sasl_login_refresh_buffer_seconds", _int(0, 3600), 300),
    "sasl.login.connect.timeout.ms": ("sasl_login_connect_timeout_ms", _optional_int(1), None),
    "sasl.login.read.timeout.ms": ("sasl_login_read_timeout_ms", _optional_int(1), None),
    "sasl.login.retry.backoff.ms": ("sasl_login_retry_backoff_ms", _long(0), 100),
    "sasl.login.retry.backoff.max.ms": ("sasl_login_retry_backoff_max_ms", _long(0), 10_000),
    "ssl.truststore.location": ("ssl_truststore_location", _as_optional_string, None),
    "ssl.ca.location": ("ssl_ca_location", _as_optional_string, None),
    "ssl.truststore.type": ("ssl_truststore_type", _ssl_store_type, "PEM"),
    "ssl.truststore.certificates": ("ssl_truststore_certificates", _as_password, None),
    "ssl.truststore.password": ("ssl_truststore_password", _as_password, None),
    "ssl.keystore.location": ("ssl_keystore_location", _as_optional_string, None),
    "ssl.keystore.type": ("ssl_keystore_type", _ssl_store_type, "PEM"),
    "ssl.keystore.certificate.chain": ("ssl_keystore_certificate_chain", _as_password, None),
    "ssl.keystore.key": ("ssl_keystore_key", _as_password, None),
    "ssl.keystore.password": ("ssl_keystore_password", _as_password, None),
    "ssl.key.password": ("ssl_key_password", _as_password, None),
    "ssl.endpoint.identification.algorithm": (
        "ssl_endpoint_identification_algorithm",
        _identification_algorithm,
        "https",
    ),
    "ssl.protocol": ("ssl_protocol", _ssl_protocol, "TLSv1.3"),
    "ssl.enabled.protocols": (
        "ssl_enabled_protocols",
        _ssl_enabled_protocols,
        ("TLSv1.2", "TLSv1.3"),
    ),
    "ssl.cipher.suites": ("ssl_cipher_suites", lambda k, v: tuple(_as_list(k, v)), ()),
    "ssl.context": ("ssl_context", _ssl_context, None),
}

_SECRET_KEYS: Final = frozenset(
    {
        "sasl.jaas.config",
        "sasl.password",
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "ssl.truststore.certificates",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.keystore.password",
        "ssl.key.password",
    }
)
_KEY_BY_ATTRIBUTE: Final = {attr: key for key, (attr, _, _) in _SPECS.items()}
_SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
_CONSUMER_PROTOCOL_UNSUPPORTED: Final = (
    "partition.assignment.strategy",
    "heartbeat.interval.ms",
    "session.timeout.ms",
)
_CLASSIC_PROTOCOL_UNSUPPORTED: Final = ("group.remote.assignor",)
#: Keys a share consumer (KIP-932) refuses, as Java's KafkaShareConsumer: share groups have no
#: offsets to reset or commit, no static membership, no client-side assignors or protocol.
CONSUMER_ONLY_KEYS: Final = frozenset(
    {
        "auto.offset.reset",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "group.instance.id",
        "group.protocol",
        "group.remote.assignor",
        "isolation.level",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "rebalance.safe.commits",
        "rebalance.safe.commits.max.duration.ms",
    }
)
#: Keys only a share consumer understands (a consumer refuses them).
SHARE_ONLY_KEYS: Final = frozenset({"share.acknowledgement.mode", "share.acquire.mode"})
_NOT_SUPPORTED_HINTS: Final = {
    "interceptor.classes": "interceptors are not supported by this client",
}


def _unknown_key(key: str) -> ConfigError:
    hint = _NOT_SUPPORTED_HINTS.get(key)
    if hint is not None:
        return _error(key, f"Unknown configuration {key!r}: {hint}")
    candidates = [key, key.replace("_", ".").replace("-", ".").lower()]
    for candidate in candidates:
        if candidate != key and candidate in _SPECS:
            return _error(key, f"Unknown configuration {key!r}; did you mean {candidate!r}?")
    import difflib  # (here: only a misspelt key needs it)

    close = difflib.get_close_matches(candidates[1], list(_SPECS), n=1, cutoff=0.75)
    suffix = f"; did you mean {close[0]!r}?" if close else ""
    return _error(key, f"Unknown configuration {key!r}{suffix}")


# --------------------------------------------------------------------------------------------
# the config object


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig:
    """A validated consumer configuration. Build it with :meth:`from_dict` or :meth:`of`.

    Attributes are the Kafka names with dots as underscores; :meth:`get` reads by Kafka name.
    ``explicit_keys`` are the keys the user set (Java's ``originals()``), which decide rules
    such as "``enable.auto.commit`` explicitly true without ``group.id``".
    """

    bootstrap_servers: tuple[BrokerAddress, ...]
    client_id: str = ""
    client_rack: str = ""
    group_id: str | None = None
    group_instance_id: str | None = None
    group_protocol: str = "consumer"
    group_remote_assignor: str | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    partition_assignment_strategy: tuple[str, ...] = ("range", "cooperative-sticky")
    auto_offset_reset: str = "latest"
    auto_offset_reset_duration: timedelta | None = None
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    max_poll_records: int = 500
    #: Share consumer (KIP-932) only: who acknowledges the records of a poll.
    share_acknowledgement_mode: str = "implicit"
    #: Share consumer only: "RECORD_LIMIT" caps each fetch at max.poll.records (ShareFetch
    #: v2); given in any case ("record_limit"), kept as Java spells it.
    share_acquire_mode: str = "BATCH_OPTIMIZED"
    max_poll_interval_ms: int = 300_000
    rebalance_safe_commits: bool = False
    rebalance_safe_commits_max_duration_ms: int = -1
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1_048_576
    isolation_level: str = "read_uncommitted"
    check_crcs: bool = True
    max_decompressed_batch_bytes: int = 268_435_456
    exclude_internal_topics: bool = True
    allow_auto_create_topics: bool = True
    #: KIP-714: push the metrics a broker subscribes to (GetTelemetrySubscriptions /
    #: PushTelemetry); also what ``client_instance_id()`` needs.
    enable_metrics_push: bool = True
    request_timeout_ms: int = 30_000
    default_api_timeout_ms: int = 60_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    connections_max_idle_ms: int = 540_000
    metadata_max_age_ms: int = 300_000
    #: KIP-899 / KIP-1102: "rebootstrap" forgets the known brokers and goes back to the
    #: bootstrap servers when no Metadata response came for
    #: ``metadata_recovery_rebootstrap_trigger_ms`` (or a broker answers REBOOTSTRAP_REQUIRED);
    #: "none" never goes back once brokers are known.
    metadata_recovery_strategy: str = "rebootstrap"
    metadata_recovery_rebootstrap_trigger_ms: int = 300_000
    #: KIP-1242 (Kafka 4.4): connecting to a broker the metadata named, send the cluster id
    #: and node id expected (ApiVersions v5): a broker of another cluster answers
    #: REBOOTSTRAP_REQUIRED and the client rebootstraps. Ignored with
    #: ``metadata.recovery.strategy=none``; older brokers do no check.
    metadata_cluster_check_enable: bool = True
    #: KIP-909: 0 (Java's default) resolves the bootstrap servers when the client is built (an
    #: unresolvable one is skipped with a warning; none resolvable is a ConfigError); a
    #: positive value resolves them in the background, retrying with the reconnect backoff,
    #: and fails the client for good (BootstrapResolutionError) when none resolved in time.
    bootstrap_resolve_timeout_ms: int = 0
    #: "use_all_dns_ips": try each address a name resolves to in turn;
    #: "resolve_canonical_bootstrap_servers_only": also use the canonical names of the
    #: bootstrap servers' addresses as their TLS / SASL server names.
    client_dns_lookup: str = "use_all_dns_ips"
    socket_connection_setup_timeout_ms: int = 10_000
    socket_connection_setup_timeout_max_ms: int = 30_000
    #: -1: the OS default (auto-tuned on Linux), where Java's is 65,536 (``config_docs``).
    receive_buffer_bytes: int = -1
    send_buffer_bytes: int = 131_072
    max_in_flight_requests_per_connection: int = 100
    metrics_sample_window_ms: int = 30_000
    metrics_num_samples: int = 2
    key_deserializer: Any = None
    value_deserializer: Any = None
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "GSSAPI"
    sasl_jaas_config: Password | None = None
    sasl_username: str | None = None
    sasl_password: Password | None = None
    sasl_kerberos_service_name: str | None = None
    sasl_oauthbearer_token_endpoint_url: str | None = None
    sasl_oauthbearer_client_credentials_client_id: str | None = None
    sasl_oauthbearer_client_credentials_client_secret: Password | None = None
    sasl_oauthbearer_scope: str | None = None
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_token_provider: Callable[[], Any] | None = field(default=None, compare=False)
    sasl_oauthbearer_jwt_retriever_class: str = (
        "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever"
    )
    sasl_oauthbearer_assertion_file: str | None = None
    sasl_oauthbearer_assertion_algorithm: str = "RS256"
    sasl_oauthbearer_assertion_private_key_file: str | None = None
    sasl_oauthbearer_assertion_private_key_passphrase: Password | None = None
    sasl_oauthbearer_assertion_template_file: str | None = None
    sasl_oauthbearer_assertion_claim_iss: str | None = None
    sasl_oauthbearer_assertion_claim_sub: str | None = None
    sasl_oauthbearer_assertion_claim_aud: str | None = None
    sasl_oauthbearer_assertion_claim_exp_seconds: int = 300
    sasl_oauthbearer_assertion_claim_nbf_seconds: int = 60
    sasl_oauthbearer_assertion_claim_jti_include: bool = False
    sasl_login_refresh_window_factor: float = 0.8
    sasl_login_refresh_window_jitter: float = 0.05
    sasl_login_refresh_min_period_seconds: int = 60
    sasl_login_refresh_buffer_seconds: int = 300
    sasl_login_connect_timeout_ms: int | None = None
    sasl_login_read_timeout_ms: int | None = None
    sasl_login_retry_backoff_ms: int = 100
    sasl_login_retry_backoff_max_ms: int = 10_000
    ssl_truststore_location: str | None = None
    ssl_ca_location: str | None = None
    ssl_truststore_type: str = "PEM"
    ssl_truststore_certificates: Password | None = None
    ssl_truststore_password: Password | None = None
    ssl_keystore_location: str | None = None
    ssl_keystore_type: str = "PEM"
    ssl_keystore_certificate_chain: Password | None = None
    ssl_keystore_key: Password | None = None
    ssl_keystore_password: Password | None = None
    ssl_key_password: Password | None = None
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_protocol: str = "TLSv1.3"
    ssl_enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    ssl_cipher_suites: tuple[str, ...] = ()
    #: A user-built ``ssl.SSLContext`` used as is (every other ssl.* key must be unset).
    ssl_context: Any = field(default=None, compare=False)
    # Derived / bookkeeping.
    sasl_token_auth: bool = False
    #: GSSAPI, from the Krb5LoginModule options of sasl.jaas.config: the client principal
    #: (``principal``), its keytab (``keyTab`` with ``useKeyTab=true``) and whether the ticket
    #: cache is used (``useTicketCache=true``, or no sasl.jaas.config at all).
    sasl_kerberos_principal: str | None = None
    sasl_kerberos_keytab: str | None = None
    sasl_kerberos_use_ticket_cache: bool = False
    sasl_kerberos_ticket_cache: str | None = None
    explicit_keys: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_dict(cls, mapping: Mapping[str, object]) -> ConsumerConfig:
        """Build from Kafka-named keys (``{"bootstrap.servers": "localhost:9092", ...}``).

        Raises :class:`ConfigError` naming the offending key (never a secret's value).
        """
        values: dict[str, object] = {}
        for key, raw in mapping.items():
            if not isinstance(key, str):
                raise _error(None, f"Configuration keys must be strings, got {key!r}")
            spec = _SPECS.get(key)
            if spec is None:
                raise _unknown_key(key)
            attribute, parse, _default = spec
            if key == "auto.offset.reset":
                values["auto_offset_reset"], values["auto_offset_reset_duration"] = (
                    _parse_auto_offset_reset(raw)
                )
            else:
                values[attribute] = parse(key, raw)
        if "bootstrap.servers" not in mapping:
            raise _error(
                "bootstrap.servers",
                'Missing required configuration "bootstrap.servers" which has no default value.',
            )
        explicit = frozenset(mapping)
        values = _post_process(values, explicit)
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def of(cls, **kwargs: object) -> ConsumerConfig:
        """Build from keyword arguments named like the attributes (``max_poll_records=10``)."""
        mapping: dict[str, object] = {}
        for name, value in kwargs.items():
            key = _KEY_BY_ATTRIBUTE.get(name)
            if key is None:
                raise _unknown_key(name)
            mapping[key] = value
        return cls.from_dict(mapping)

    def with_overrides(self, mapping: Mapping[str, object]) -> ConsumerConfig:
        """A new config: this one's explicit settings updated by ``mapping`` (Kafka names)."""
        return ConsumerConfig.from_dict({**self.originals(), **mapping})

    def __post_init__(self) -> None:
        _cross_validate(self)

    # ---------------------------------------------------------------- reading

    def get(self, key: str) -> object:
        """The value of a Kafka-named key (``auto.offset.reset`` gives its original text)."""
        spec = _SPECS.get(key)
        if spec is None:
            raise _unknown_key(key)
        if key == "auto.offset.reset" and self.auto_offset_reset_duration is not None:
            return f"by_duration:{_format_duration(self.auto_offset_reset_duration)}"
        value: object = getattr(self, spec[0])
        return value

    def originals(self) -> dict[str, object]:
        """The explicitly set keys with their (parsed) values, secrets as :class:`Password`."""
        return {key: self.get(key) for key in _SPECS if key in self.explicit_keys}

    @property
    def rebalance_safe_commits_max_duration(self) -> int:
        """The effective ``rebalance.safe.commits.max.duration.ms`` (-1: max.poll.interval.ms)."""
        value = self.rebalance_safe_commits_max_duration_ms
        return self.max_poll_interval_ms if value < 0 else value

    @property
    def ssl_enabled(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl_enabled(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def ssl_check_hostname(self) -> bool:
        """``ssl.endpoint.identification.algorithm=https`` (default): verify the host name."""
        return self.ssl_endpoint_identification_algorithm == "https"


def _format_duration(duration: timedelta) -> str:
    text = f"P{duration.days}DT{duration.seconds}"
    if duration.microseconds:
        text += f".{duration.microseconds:06d}".rstrip("0")
    return text + "S"


def _post_process(values: dict[str, object], explicit: frozenset[str]) -> dict[str, object]:
    """Java's ``postProcessParsedConfig``: defaults that depend on other settings."""
    values["explicit_keys"] = explicit
    warnings: list[str] = []
    # CommonClientConfigs.postProcessReconnectBackoffConfigs: an explicit reconnect.backoff.ms
    # above the default max raises the max when the max is not set.
    if "reconnect.backoff.ms" in explicit and "reconnect.backoff.max.ms" not in explicit:
        backoff = values["reconnect_backoff_ms"]
        assert isinstance(backoff, int)
        if backoff > 1_000:
            values["reconnect_backoff_max_ms"] = backoff
    # CommonClientConfigs.warnDisablingExponentialBackoff.
    for low, high, low_key, high_key in (
        ("retry_backoff_ms", "retry_backoff_max_ms", "retry.backoff.ms", "retry.backoff.max.ms"),
        (
            "reconnect_backoff_ms",
            "reconnect_backoff_max_ms",
            "reconnect.backoff.ms",
            "reconnect.backoff.max.ms",
        ),
    ):
        lo = values.get(low, _SPECS[low_key][2])
        hi = values.get(high, _SPECS[high_key][2])
        assert isinstance(lo, int) and isinstance(hi, int)
        if lo > hi:
            warnings.append(
                f"Configuration '{high_key}' with value '{hi}' is less than configuration "
                f"'{low_key}' with value '{lo}'. This disables exponential backoff: "
                f"'{high_key}' is used as a fixed backoff."
            )
    # maybeOverrideEnableAutoCommit: without a group, auto-commit is off unless set true
    # explicitly (then InvalidConfigurationException, checked in _cross_validate).
    if values.get("group_id") is None and "enable.auto.commit" not in explicit:
        values["enable_auto_commit"] = False
    # SASL credentials from sasl.jaas.config.
    jaas = values.get("sasl_jaas_config")
    if isinstance(jaas, Password):
        if "sasl.username" in explicit or "sasl.password" in explicit:
            raise _error(
                "sasl.jaas.config",
                "Set either sasl.jaas.config or sasl.username/sasl.password, not both",
            )
        module = parse_jaas_config(jaas.value())
        mechanism = str(values.get("sasl_mechanism", "GSSAPI"))
        expected = {
            "PLAIN": _PLAIN_MODULE,
            "OAUTHBEARER": _OAUTHBEARER_MODULE,
            "GSSAPI": _KRB5_MODULE,
        }.get(mechanism, _SCRAM_MODULE)
        if mechanism in _SASL_MECHANISMS and module.module != expected:
            raise _error(
                "sasl.jaas.config",
                f"sasl.jaas.config uses login module {module.module!r}, but "
                f"sasl.mechanism={mechanism} needs {expected!r}",
            )
        if mechanism == "OAUTHBEARER":
            _oauthbearer_jaas(module, values, explicit)
        elif mechanism == "GSSAPI":
            _krb5_jaas(module, values)
        else:
            username = module.options.get("username")
            password = module.options.get("password")
            if username is None or password is None:
                raise _error(
                    "sasl.jaas.config", "sasl.jaas.config must set username and password"
                )
            values["sasl_username"] = username.value()
            values["sasl_password"] = password
            token = module.options.get("tokenauth")
            values["sasl_token_auth"] = token is not None and token.value().lower() == "true"
    # librdkafka's ssl.ca.location: a PEM file of trusted certificates, i.e.
    # ssl.truststore.location with ssl.truststore.type=PEM.
    ca = values.get("ssl_ca_location")
    if ca is not None:
        if "ssl.truststore.location" in explicit or "ssl.truststore.certificates" in explicit:
            raise _error(
                "ssl.ca.location",
                "Set either ssl.ca.location or ssl.truststore.location/certificates, not both",
            )
        values["ssl_truststore_location"] = ca
    values["warnings"] = tuple(warnings)
    return values


def _krb5_jaas(module: JaasLoginModule, values: dict[str, object]) -> None:
    """SASL/GSSAPI's ``Krb5LoginModule`` options, as Java's: ``useKeyTab=true`` with
    ``keyTab`` and ``principal`` logs in from a keytab; ``useTicketCache=true`` takes the
    ticket cache (``ticketCache``, or ``KRB5CCNAME``/the default cache); ``serviceName`` is
    the broker's service name when ``sasl.kerberos.service.name`` is not set (both set and
    different is an error, as Java's ``SaslChannelBuilder``). Other options are accepted and
    ignored (``storeKey``, ``debug``, ...)."""
    options = {k: v.value() for k, v in module.options.items()}
    use_keytab = options.get("useKeyTab", "false").lower() == "true"
    use_cache = options.get("useTicketCache", "false").lower() == "true"
    principal = options.get("principal")
    if use_keytab:
        if not principal:
            raise _error(
                "sasl.jaas.config",
                "Krb5LoginModule with useKeyTab=true needs principal= (the client principal)",
            )
        keytab = options.get("keyTab")
        if not keytab:
            raise _error("sasl.jaas.config", "Krb5LoginModule with useKeyTab=true needs keyTab=")
        values["sasl_kerberos_keytab"] = keytab
    elif not use_cache:
        raise _error(
            "sasl.jaas.config",
            "Krb5LoginModule needs useKeyTab=true (with keyTab and principal) or "
            "useTicketCache=true",
        )
    values["sasl_kerberos_principal"] = principal or None
    values["sasl_kerberos_use_ticket_cache"] = use_cache and not use_keytab
    if use_cache and not use_keytab and options.get("ticketCache"):
        values["sasl_kerberos_ticket_cache"] = options["ticketCache"]
    service = options.get("serviceName")
    configured = values.get("sasl_kerberos_service_name")
    if service:
        if configured is not None and configured != service:
            raise _error(
                "sasl.kerberos.service.name",
                f"Conflicting serviceName values found in JAAS and Kafka configs value in "
                f"JAAS file {service}, value in Kafka config {configured}",
            )
        values["sasl_kerberos_service_name"] = service


def _oauthbearer_jaas(
    module: JaasLoginModule, values: dict[str, object], explicit: frozenset[str]
) -> None:
    """Kafka 3.x's way of giving the client credentials: the ``OAuthBearerLoginModule``'s
    ``clientId`` / ``clientSecret`` / ``scope`` options. Kafka 4.x's explicit keys
    (``sasl.oauthbearer.client.credentials.*``, ``sasl.oauthbearer.scope``) win when set."""
    for option, key, attribute in (
        ("clientId", "sasl.oauthbearer.client.credentials.client.id", None),
        ("clientSecret", "sasl.oauthbearer.client.credentials.client.secret", None),
        ("scope", "sasl.oauthbearer.scope", None),
    ):
        given = module.options.get(option)
        if given is None:
            continue
        if key in explicit:
            raise _error(
                key, f"Set either {key} or the {option} option of sasl.jaas.config, not both"
            )
        attribute = _SPECS[key][0]
        values[attribute] = given if option == "clientSecret" else given.value()


def _explicitly_set(config: ConsumerConfig, key: str) -> bool:
    if key not in config.explicit_keys:
        return False
    value = config.get(key)
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, (tuple, list)):
        return bool(value)
    return True


def _cross_validate(config: ConsumerConfig) -> None:
    """Rules that involve several keys, as Java's ConsumerConfig and consumer constructors."""
    if not config.bootstrap_servers:
        raise _error("bootstrap.servers", "bootstrap.servers must contain at least one address")
    if config.group_id is None:
        if config.enable_auto_commit:
            raise _error(
                "enable.auto.commit",
                "enable.auto.commit cannot be set to true when default group id (null) is used.",
            )
        if config.group_instance_id is not None:
            raise _error("group.instance.id", "group.instance.id requires group.id to be set")
    if config.group_instance_id is not None:
        if len(config.group_instance_id) > 249 or not re.fullmatch(
            r"[A-Za-z0-9._-]+", config.group_instance_id
        ):
            raise _error(
                "group.instance.id",
                f"Invalid value {config.group_instance_id!r} for configuration "
                "group.instance.id: at most 249 characters of ASCII alphanumerics, '.', '_' "
                "and '-'",
            )
    safe_max = config.rebalance_safe_commits_max_duration_ms
    if safe_max == 0 or safe_max > config.max_poll_interval_ms:
        raise _error(
            "rebalance.safe.commits.max.duration.ms",
            f"rebalance.safe.commits.max.duration.ms ({safe_max}) must be -1 (use "
            f"max.poll.interval.ms) or between 1 and max.poll.interval.ms "
            f"({config.max_poll_interval_ms}): a revocation must be acknowledged within the "
            "rebalance timeout",
        )
    if config.rebalance_safe_commits and config.group_id is None:
        raise _error("rebalance.safe.commits", "rebalance.safe.commits requires group.id")
    protocol = config.group_protocol
    unsupported = (
        _CONSUMER_PROTOCOL_UNSUPPORTED if protocol == "consumer" else _CLASSIC_PROTOCOL_UNSUPPORTED
    )
    invalid = [key for key in unsupported if _explicitly_set(config, key)]
    if invalid:
        raise _error(
            invalid[0],
            f"{', '.join(invalid)} cannot be set when group.protocol={protocol.upper()}",
        )
    if protocol == "classic":
        if config.heartbeat_interval_ms >= config.session_timeout_ms:
            raise _error(
                "heartbeat.interval.ms",
                f"heartbeat.interval.ms ({config.heartbeat_interval_ms}) must be set lower "
                f"than session.timeout.ms ({config.session_timeout_ms})",
            )
        if config.group_id is not None and not config.partition_assignment_strategy:
            raise _error(
                "partition.assignment.strategy",
                "partition.assignment.strategy must name at least one assignor when group.id "
                "is set and group.protocol=classic",
            )
    if config.sasl_enabled:
        if config.sasl_mechanism not in _SASL_MECHANISMS:
            raise _error(
                "sasl.mechanism",
                f"sasl.mechanism {config.sasl_mechanism!r} is not supported with "
                f"security.protocol={config.security_protocol}; use one of "
                f"{', '.join(_SASL_MECHANISMS)}",
            )
        if config.sasl_mechanism == "OAUTHBEARER":
            _validate_oauthbearer(config)
        elif config.sasl_mechanism == "GSSAPI":
            if not config.sasl_kerberos_service_name:
                raise _error(
                    "sasl.kerberos.service.name",
                    "No serviceName defined in either JAAS or Kafka config "
                    "(sasl.kerberos.service.name is required for SASL/GSSAPI)",
                )
        elif config.sasl_username is None or config.sasl_password is None:
            raise _error(
                "sasl.jaas.config",
                f"security.protocol={config.security_protocol} needs credentials: set "
                "sasl.jaas.config, or sasl.username and sasl.password",
            )
    elif config.sasl_mechanism not in _SASL_MECHANISMS:
        raise _error(
            "sasl.mechanism",
            f"Invalid value {config.sasl_mechanism!r} for configuration sasl.mechanism: "
            f"supported are {', '.join(_SASL_MECHANISMS)}",
        )
    if config.ssl_truststore_location is not None and config.ssl_truststore_certificates:
        raise _error(
            "ssl.truststore.certificates",
            "Set either ssl.truststore.location or ssl.truststore.certificates, not both",
        )
    chain, key = config.ssl_keystore_certificate_chain, config.ssl_keystore_key
    if (chain is None) != (key is None):
        raise _error(
            "ssl.keystore.key" if key is None else "ssl.keystore.certificate.chain",
            "ssl.keystore.certificate.chain and ssl.keystore.key must be set together",
        )
    if config.ssl_keystore_location is not None and chain is not None:
        raise _error(
            "ssl.keystore.location",
            "Set either ssl.keystore.location or ssl.keystore.certificate.chain/key, not both",
        )


def _validate_oauthbearer(config: ConsumerConfig) -> None:
    """OAUTHBEARER needs a token source: a token provider callable, or the OIDC client
    credentials flow (token endpoint URL, client id and client secret)."""
    url = config.sasl_oauthbearer_token_endpoint_url
    provider = config.sasl_oauthbearer_token_provider
    if provider is not None:
        if url:
            raise _error(
                "sasl.oauthbearer.token.provider",
                "Set either sasl.oauthbearer.token.provider or "
                "sasl.oauthbearer.token.endpoint.url, not both",
            )
        return
    if not url:
        raise _error(
            "sasl.oauthbearer.token.endpoint.url",
            "sasl.mechanism=OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url (OIDC client "
            "credentials) or sasl.oauthbearer.token.provider (a callable)",
        )
    retriever = config.sasl_oauthbearer_jwt_retriever_class
    if (
        retriever is not None
        and retriever not in _RETRIEVERS
        and retriever.rsplit(".", 1)[-1] not in {r.rsplit(".", 1)[-1] for r in _RETRIEVERS}
    ):
        raise _error(
            "sasl.oauthbearer.jwt.retriever.class",
            f"Unsupported sasl.oauthbearer.jwt.retriever.class {retriever!r}: this client does "
            "the client credentials and the jwt-bearer grants (ClientCredentialsJwtRetriever, "
            "JwtBearerJwtRetriever)",
        )
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("http", "https"):
        raise _error(
            "sasl.oauthbearer.token.endpoint.url",
            f"Invalid value {url!r} for configuration sasl.oauthbearer.token.endpoint.url: "
            "expected an http(s) URL",
        )
    if uses_jwt_bearer_grant(config):
        _validate_jwt_bearer(config)
        return
    if not config.sasl_oauthbearer_client_credentials_client_id:
        raise _error(
            "sasl.oauthbearer.client.credentials.client.id",
            "The OIDC client credentials flow needs "
            "sasl.oauthbearer.client.credentials.client.id (or clientId in sasl.jaas.config)",
        )
    secret = config.sasl_oauthbearer_client_credentials_client_secret
    if secret is None or not secret.value():
        raise _error(
            "sasl.oauthbearer.client.credentials.client.secret",
            "The OIDC client credentials flow needs "
            "sasl.oauthbearer.client.credentials.client.secret (or clientSecret in "
            "sasl.jaas.config)",
        )


#: Java's retriever classes (``sasl.oauthbearer.jwt.retriever.class``), by the grant they do.
JWT_BEARER_RETRIEVER: Final = "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"
_RETRIEVERS: Final = (
    JWT_BEARER_RETRIEVER,
    "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever",
    "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever",
)


def uses_jwt_bearer_grant(config: ConsumerConfig) -> bool:
    """Whether ``sasl.oauthbearer.jwt.retriever.class`` selects the jwt-bearer grant (KIP-1139);
    the short name ``JwtBearerJwtRetriever`` is accepted too."""
    name = config.sasl_oauthbearer_jwt_retriever_class
    return name.rsplit(".", 1)[-1] == "JwtBearerJwtRetriever"


def _validate_jwt_bearer(config: ConsumerConfig) -> None:
    """KIP-1139: a ready assertion in a file, or one built and signed from a private key file
    (PEM, PKCS#8, optionally encrypted with the passphrase), not both."""
    ready = config.sasl_oauthbearer_assertion_file
    key = config.sasl_oauthbearer_assertion_private_key_file
    if ready and key:
        raise _error(
            "sasl.oauthbearer.assertion.file",
            "Set either sasl.oauthbearer.assertion.file (a ready assertion) or "
            "sasl.oauthbearer.assertion.private.key.file (an assertion signed here), not both",
        )
    if not ready and not key:
        raise _error(
            "sasl.oauthbearer.assertion.private.key.file",
            "The jwt-bearer grant (sasl.oauthbearer.jwt.retriever.class=JwtBearerJwtRetriever) "
            "needs sasl.oauthbearer.assertion.file or "
            "sasl.oauthbearer.assertion.private.key.file",
        )
    for name, path in (
        ("sasl.oauthbearer.assertion.file", ready),
        ("sasl.oauthbearer.assertion.private.key.file", key),
        (
            "sasl.oauthbearer.assertion.template.file",
            config.sasl_oauthbearer_assertion_template_file,
        ),
    ):
        if path and not os.path.isfile(path):
            raise _error(name, f"The file {path!r} of configuration {name} does not exist")
    if key and config.sasl_oauthbearer_assertion_claim_exp_seconds <= 0:
        raise _error(
            "sasl.oauthbearer.assertion.claim.exp.seconds",
            "sasl.oauthbearer.assertion.claim.exp.seconds must be positive",
        )


def config_keys() -> Iterable[str]:
    """Every configuration key this client understands, in Kafka's names."""
    return iter(_SPECS)


# Keep the attribute table honest: every spec maps onto a dataclass field.
assert set(_KEY_BY_ATTRIBUTE) <= {f.name for f in fields(ConsumerConfig)}
