"""The documentation of every configuration key of :mod:`kafka_actors.config`: what it does,
its type, the values it accepts, how important it is, and Java's default for the same key.

:data:`KEY_DOCS` has one entry per key of ``config._SPECS`` (the documentation build and
``tests/docs/test_config_reference.py`` refuse a key without one, or an entry without a
key); the configuration reference (``docs/configuration.md``) is generated from both at each build
(``docs/_hooks/kafka_actors_docs.py``), with the defaults read from the specs themselves.

The descriptions are ours. The importance is Java's ``ConfigDef`` importance where the Java
consumer has the key (our own judgement otherwise), and :data:`JAVA_DEFAULTS` holds the Java
consumer's defaults (Kafka 4.x), as Java prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["JAVA_DEFAULTS", "KEY_DOCS", "KeyDoc"]

Importance = Literal["high", "medium", "low"]


@dataclass(frozen=True, slots=True)
class KeyDoc:
    """The documentation of one configuration key."""

    #: The Python type the key takes (strings in Java's properties syntax are accepted too).
    type: str
    #: The values accepted, in words (``""`` when any value of the type is).
    valid: str
    importance: Importance
    description: str


INT = "int"
LONG = "int (64-bit)"
STR = "str"
OPT_STR = "str | None"
BOOL = "bool"
SECRET = "str (secret)"
MS = "milliseconds"

_ANY_INT = "a 32-bit integer"
_AT_LEAST_0 = ">= 0"
_AT_LEAST_1 = ">= 1"
_BUFFER = "-1 (the operating system's default) or > 0"

#: The Java consumer's default for each key it also has (``None``: Java has no default, the
#: key must be given; a key absent from this table is not a Java consumer key).
JAVA_DEFAULTS: Final[dict[str, str | None]] = {
    "bootstrap.servers": None,
    "client.id": "",
    "client.rack": "",
    "group.id": "null",
    "group.instance.id": "null",
    "group.protocol": "classic",
    "group.remote.assignor": "null",
    "session.timeout.ms": "45000",
    "heartbeat.interval.ms": "3000",
    "partition.assignment.strategy": "RangeAssignor, CooperativeStickyAssignor",
    "auto.offset.reset": "latest",
    "enable.auto.commit": "true",
    "auto.commit.interval.ms": "5000",
    "max.poll.records": "500",
    "share.acknowledgement.mode": "implicit",
    "share.acquire.mode": "BATCH_OPTIMIZED",
    "max.poll.interval.ms": "300000",
    "fetch.min.bytes": "1",
    "fetch.max.bytes": "52428800",
    "fetch.max.wait.ms": "500",
    "max.partition.fetch.bytes": "1048576",
    "isolation.level": "read_uncommitted",
    "check.crcs": "true",
    "exclude.internal.topics": "true",
    "allow.auto.create.topics": "true",
    "enable.metrics.push": "true",
    "request.timeout.ms": "30000",
    "default.api.timeout.ms": "60000",
    "retry.backoff.ms": "100",
    "retry.backoff.max.ms": "1000",
    "reconnect.backoff.ms": "50",
    "reconnect.backoff.max.ms": "1000",
    "connections.max.idle.ms": "540000",
    "metadata.max.age.ms": "300000",
    "client.dns.lookup": "use_all_dns_ips",
    "metadata.recovery.strategy": "rebootstrap",
    "metadata.recovery.rebootstrap.trigger.ms": "300000",
    "metadata.cluster.check.enable": "true",
    "bootstrap.resolve.timeout.ms": "0",
    "socket.connection.setup.timeout.ms": "10000",
    "socket.connection.setup.timeout.max.ms": "30000",
    "receive.buffer.bytes": "65536",
    "send.buffer.bytes": "131072",
    "metrics.sample.window.ms": "30000",
    "metrics.num.samples": "2",
    "key.deserializer": None,
    "value.deserializer": None,
    "security.protocol": "PLAINTEXT",
    "sasl.mechanism": "GSSAPI",
    "sasl.jaas.config": "null",
    "sasl.kerberos.service.name": "null",
    "sasl.oauthbearer.token.endpoint.url": "null",
    "sasl.oauthbearer.client.credentials.client.id": "null",
    "sasl.oauthbearer.client.credentials.client.secret": "null",
    "sasl.oauthbearer.scope": "null",
    "sasl.oauthbearer.sub.claim.name": "sub",
    "sasl.oauthbearer.jwt.retriever.class": (
        "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever"
    ),
    "sasl.oauthbearer.assertion.file": "null",
    "sasl.oauthbearer.assertion.algorithm": "RS256",
    "sasl.oauthbearer.assertion.private.key.file": "null",
    "sasl.oauthbearer.assertion.private.key.passphrase": "null",
    "sasl.oauthbearer.assertion.template.file": "null",
    "sasl.oauthbearer.assertion.claim.iss": "null",
    "sasl.oauthbearer.assertion.claim.sub": "null",
    "sasl.oauthbearer.assertion.claim.aud": "null",
    "sasl.oauthbearer.assertion.claim.exp.seconds": "300",
    "sasl.oauthbearer.assertion.claim.nbf.seconds": "60",
    "sasl.oauthbearer.assertion.claim.jti.include": "false",
    "sasl.login.refresh.window.factor": "0.8",
    "sasl.login.refresh.window.jitter": "0.05",
    "sasl.login.refresh.min.period.seconds": "60",
    "sasl.login.refresh.buffer.seconds": "300",
    "sasl.login.connect.timeout.ms": "null",
    "sasl.login.read.timeout.ms": "null",
    "sasl.login.retry.backoff.ms": "100",
    "sasl.login.retry.backoff.max.ms": "10000",
    "ssl.truststore.location": "null",
    "ssl.truststore.type": "JKS",
    "ssl.truststore.certificates": "null",
    "ssl.truststore.password": "null",
    "ssl.keystore.location": "null",
    "ssl.keystore.type": "JKS",
    "ssl.keystore.certificate.chain": "null",
    "ssl.keystore.key": "null",
    "ssl.keystore.password": "null",
    "ssl.key.password": "null",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.protocol": "TLSv1.3",
    "ssl.enabled.protocols": "TLSv1.2, TLSv1.3",
    "ssl.cipher.suites": "",
}

KEY_DOCS: Final[dict[str, KeyDoc]] = {
    "bootstrap.servers": KeyDoc(
        "str | list[str]",
        "host:port pairs, comma separated; a port is required",
        "high",
        "The brokers to contact first; the rest of the cluster is learned from their metadata.",
    ),
    "client.id": KeyDoc(
        STR, "", "low", "A name for this client in broker logs, quotas and our metrics."
    ),
    "client.rack": KeyDoc(
        STR, "", "low", "The rack (or zone) of this client, for fetching from a nearby replica."
    ),
    "group.id": KeyDoc(
        OPT_STR,
        "",
        "high",
        "The consumer (or share) group to join. Needed for subscribe() and for committing.",
    ),
    "group.instance.id": KeyDoc(
        OPT_STR,
        "not empty",
        "medium",
        "A stable member name for static membership: a restart within the session timeout "
        "does not cause a rebalance. Needs group.id.",
    ),
    "group.protocol": KeyDoc(
        STR,
        "consumer, classic",
        "high",
        "The group protocol: `consumer` (KIP-848, the broker assigns) or `classic` "
        "(join/sync, the client assigns).",
    ),
    "group.remote.assignor": KeyDoc(
        OPT_STR,
        "an assignor the broker knows (uniform, range)",
        "medium",
        "With group.protocol=consumer: the broker-side assignor to ask for (the broker's "
        "default when unset).",
    ),
    "session.timeout.ms": KeyDoc(
        INT,
        _ANY_INT,
        "high",
        "Classic protocol: how long the coordinator waits for a heartbeat before removing the "
        "member (the consumer protocol takes it from the broker).",
    ),
    "heartbeat.interval.ms": KeyDoc(
        INT,
        "below session.timeout.ms",
        "high",
        "Classic protocol: how often the member heartbeats to the coordinator.",
    ),
    "partition.assignment.strategy": KeyDoc(
        "list[str]",
        "range, roundrobin, cooperative-sticky (or Java's class names for them)",
        "medium",
        "Classic protocol: the client-side assignors offered to the group, by preference.",
    ),
    "auto.offset.reset": KeyDoc(
        STR,
        "earliest, latest, none, by_duration:<ISO-8601 duration>",
        "medium",
        "Where to start a partition with no committed offset (or an offset out of range); "
        "`none` raises NoOffsetForPartitionError instead.",
    ),
    "enable.auto.commit": KeyDoc(
        BOOL,
        "",
        "medium",
        "Commit the positions of the records handed out, in the background and on close.",
    ),
    "auto.commit.interval.ms": KeyDoc(
        INT, _AT_LEAST_0, "low", "How often positions are auto-committed, in milliseconds."
    ),
    "max.poll.records": KeyDoc(INT, _AT_LEAST_1, "medium", "The most records one poll returns."),
    "share.acknowledgement.mode": KeyDoc(
        STR,
        "implicit, explicit",
        "medium",
        "Share consumers only: `implicit` accepts every record of a poll at the next poll "
        "or commit; `explicit` needs acknowledge() for each record.",
    ),
    "share.acquire.mode": KeyDoc(
        STR,
        "BATCH_OPTIMIZED, RECORD_LIMIT (any case)",
        "medium",
        "Share consumers only: whether the broker may hand out whole batches "
        "(BATCH_OPTIMIZED) or at most max.poll.records records (RECORD_LIMIT).",
    ),
    "max.poll.interval.ms": KeyDoc(
        INT,
        _AT_LEAST_1,
        "medium",
        "The longest time between two polls before the member leaves the group and its "
        "partitions are reassigned.",
    ),
    "rebalance.safe.commits": KeyDoc(
        BOOL,
        "",
        "low",
        "Ours: acknowledge a revocation only once the records handed out for the revoked "
        "partitions are committed (or the maximum duration passed).",
    ),
    "rebalance.safe.commits.max.duration.ms": KeyDoc(
        INT,
        ">= -1",
        "low",
        "Ours: how long a revocation may wait for those commits; -1 means max.poll.interval.ms.",
    ),
    "fetch.min.bytes": KeyDoc(
        INT,
        _AT_LEAST_0,
        "high",
        "The least data a fetch response should carry; the broker waits for it up to "
        "fetch.max.wait.ms.",
    ),
    "fetch.max.bytes": KeyDoc(
        INT,
        _AT_LEAST_0,
        "medium",
        "The most data one fetch response should carry (a larger first batch still comes).",
    ),
    "fetch.max.wait.ms": KeyDoc(
        INT,
        _AT_LEAST_0,
        "low",
        "How long the broker may hold a fetch to gather fetch.min.bytes.",
    ),
    "max.partition.fetch.bytes": KeyDoc(
        INT,
        _AT_LEAST_0,
        "high",
        "The most data a fetch returns per partition (a larger first batch still comes).",
    ),
    "isolation.level": KeyDoc(
        STR,
        "read_uncommitted, read_committed",
        "medium",
        "`read_committed` hides aborted transactional records and stops at the last stable offset.",
    ),
    "check.crcs": KeyDoc(BOOL, "", "low", "Verify each record batch's CRC32C when decoding."),
    "enable.metrics.push": KeyDoc(
        BOOL,
        "",
        "low",
        "KIP-714: fetch the broker's client-metrics subscription and push the subscribed "
        "metrics (OTLP) every push interval, with a terminating push on close; "
        "`client_instance_id()` needs it.",
    ),
    "max.decompressed.batch.bytes": KeyDoc(
        INT,
        _AT_LEAST_1,
        "low",
        "Ours: the most bytes one compressed batch may expand to; a larger batch raises "
        "DecompressedBatchTooLargeError.",
    ),
    "exclude.internal.topics": KeyDoc(
        BOOL,
        "",
        "medium",
        "Leave internal topics (such as __consumer_offsets) out of pattern subscriptions.",
    ),
    "allow.auto.create.topics": KeyDoc(
        BOOL,
        "",
        "medium",
        "Let the broker create a subscribed topic that does not exist (if the broker allows "
        "it too).",
    ),
    "request.timeout.ms": KeyDoc(
        INT,
        _AT_LEAST_0,
        "medium",
        "How long one request may wait for its response before it fails (and is retried).",
    ),
    "default.api.timeout.ms": KeyDoc(
        INT,
        _AT_LEAST_0,
        "medium",
        "The deadline of a blocking call given no timeout of its own.",
    ),
    "retry.backoff.ms": KeyDoc(
        LONG, _AT_LEAST_0, "low", "The first wait before retrying a failed request."
    ),
    "retry.backoff.max.ms": KeyDoc(
        LONG,
        _AT_LEAST_0,
        "low",
        "The longest wait between retries (the wait doubles from retry.backoff.ms, with jitter).",
    ),
    "reconnect.backoff.ms": KeyDoc(
        LONG, _AT_LEAST_0, "low", "The first wait before reconnecting to a broker."
    ),
    "reconnect.backoff.max.ms": KeyDoc(
        LONG, _AT_LEAST_0, "low", "The longest wait between reconnection attempts."
    ),
    "connections.max.idle.ms": KeyDoc(
        LONG,
        "any; < 0 never closes",
        "medium",
        "Close a connection idle this long.",
    ),
    "metadata.max.age.ms": KeyDoc(
        LONG,
        _AT_LEAST_0,
        "low",
        "Refresh the cluster metadata at least this often, even with no change seen.",
    ),
    "client.dns.lookup": KeyDoc(
        STR,
        "use_all_dns_ips, resolve_canonical_bootstrap_servers_only",
        "medium",
        "Try every address a broker name resolves to, or expand bootstrap names to their "
        "canonical names first.",
    ),
    "metadata.recovery.strategy": KeyDoc(
        STR,
        "rebootstrap, none",
        "low",
        "When no known broker answers: go back to bootstrap.servers (`rebootstrap`) or not.",
    ),
    "metadata.recovery.rebootstrap.trigger.ms": KeyDoc(
        LONG,
        _AT_LEAST_0,
        "low",
        "How long without any reachable broker before rebootstrapping.",
    ),
    "metadata.cluster.check.enable": KeyDoc(
        BOOL,
        "",
        "low",
        "Send the expected cluster and node id when connecting to a broker (ApiVersions v5, "
        "Kafka 4.4+, KIP-1242): a broker of another cluster answers REBOOTSTRAP_REQUIRED and "
        "the client rebootstraps. Ignored with metadata.recovery.strategy=none.",
    ),
    "bootstrap.resolve.timeout.ms": KeyDoc(
        LONG,
        _AT_LEAST_0,
        "low",
        "KIP-909. 0: the bootstrap.servers names are resolved when the client is built (an "
        "unresolvable one is skipped with a warning; none resolvable is a ConfigError). "
        "Positive: they are resolved in the background, retried with the reconnect backoff, "
        "for at most this long; then the client fails for good with BootstrapResolutionError, "
        "raised by every later call (close it and build a new one).",
    ),
    "socket.connection.setup.timeout.ms": KeyDoc(
        LONG,
        "",
        "medium",
        "The first deadline for opening a connection; it grows exponentially (with jitter) "
        "after each failed attempt, up to socket.connection.setup.timeout.max.ms.",
    ),
    "socket.connection.setup.timeout.max.ms": KeyDoc(
        LONG, "", "medium", "The longest deadline for opening a connection."
    ),
    "receive.buffer.bytes": KeyDoc(
        INT,
        _BUFFER,
        "medium",
        "The socket receive buffer size. The default, -1, keeps the operating system's (which "
        "Linux grows with the connection's throughput) where Java's is 65536, as in the other "
        "Python clients: the network thread must run to empty a full buffer before the broker "
        "sends more, and in Python that waits for the interpreter lock: with 64 KiB the "
        "network thread woke about ten times per 1 MiB Fetch response and spent 0.26 us of "
        "CPU per record on one partition, 0.16 us with the default (docs/performance.md).",
    ),
    "send.buffer.bytes": KeyDoc(INT, _BUFFER, "medium", "The socket send buffer size."),
    "max.in.flight.requests.per.connection": KeyDoc(
        INT,
        _AT_LEAST_1,
        "low",
        "The most requests awaiting a response on one connection (a producer key in Java, "
        "whose consumer fixes 100).",
    ),
    "metrics.sample.window.ms": KeyDoc(
        LONG, _AT_LEAST_1, "low", "The length of one sample window of the windowed metrics."
    ),
    "metrics.num.samples": KeyDoc(
        INT, _AT_LEAST_1, "low", "How many sample windows the windowed metrics keep."
    ),
    "key.deserializer": KeyDoc(
        "callable | None",
        "a deserializer (kafka_actors.serialization)",
        "high",
        "Turns key bytes into the record's key; unset, the key stays bytes. A Python callable, "
        "not a class name.",
    ),
    "value.deserializer": KeyDoc(
        "callable | None",
        "a deserializer (kafka_actors.serialization)",
        "high",
        "Turns value bytes into the record's value; unset, the value stays bytes.",
    ),
    "security.protocol": KeyDoc(
        STR,
        "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        "medium",
        "How to talk to brokers: TLS or not, SASL authentication or not.",
    ),
    "sasl.mechanism": KeyDoc(
        STR,
        "GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
        "medium",
        "The SASL mechanism. GSSAPI (Kerberos, Java's default) needs the optional gssapi "
        "binding (pip install kafka-actors[kerberos]).",
    ),
    "sasl.jaas.config": KeyDoc(
        SECRET,
        "a JAAS line for the PLAIN, SCRAM, OAUTHBEARER or Krb5LoginModule (GSSAPI) login module",
        "medium",
        "The SASL credentials in Java's JAAS syntax.",
    ),
    "sasl.username": KeyDoc(
        OPT_STR,
        "",
        "medium",
        "librdkafka's name, ours too: the SASL user, in place of sasl.jaas.config.",
    ),
    "sasl.password": KeyDoc(
        SECRET,
        "",
        "medium",
        "librdkafka's name, ours too: the SASL password, in place of sasl.jaas.config.",
    ),
    "sasl.kerberos.service.name": KeyDoc(
        OPT_STR,
        "",
        "medium",
        "GSSAPI: the broker's Kerberos service name (the principal's first part, e.g. "
        "kafka); required with sasl.mechanism=GSSAPI, unless the Krb5LoginModule in "
        "sasl.jaas.config sets serviceName.",
    ),
    "sasl.oauthbearer.token.endpoint.url": KeyDoc(
        OPT_STR,
        "",
        "medium",
        "OAUTHBEARER: the identity provider's token endpoint (client credentials grant).",
    ),
    "sasl.oauthbearer.client.credentials.client.id": KeyDoc(
        OPT_STR, "", "medium", "OAUTHBEARER: the client id sent to the token endpoint."
    ),
    "sasl.oauthbearer.client.credentials.client.secret": KeyDoc(
        SECRET, "", "medium", "OAUTHBEARER: the client secret sent to the token endpoint."
    ),
    "sasl.oauthbearer.scope": KeyDoc(
        OPT_STR, "", "medium", "OAUTHBEARER: the scope asked of the token endpoint."
    ),
    "sasl.oauthbearer.sub.claim.name": KeyDoc(
        STR, "", "low", "OAUTHBEARER: the token claim that names the principal."
    ),
    "sasl.oauthbearer.token.provider": KeyDoc(
        "callable | None",
        "a callable returning (token, expiry in epoch seconds), or an awaitable of it",
        "medium",
        "Ours: OAUTHBEARER tokens from your own code instead of a token endpoint.",
    ),
    "sasl.login.refresh.window.factor": KeyDoc(
        "float",
        "0.5 to 1.0",
        "low",
        "Refresh a token once this fraction of its lifetime has passed.",
    ),
    "sasl.login.refresh.window.jitter": KeyDoc(
        "float",
        "0.0 to 0.25",
        "low",
        "A random fraction of the lifetime added to the refresh time.",
    ),
    "sasl.login.refresh.min.period.seconds": KeyDoc(
        INT, "0 to 900", "low", "The least time between two token refreshes."
    ),
    "sasl.oauthbearer.jwt.retriever.class": KeyDoc(
        STR,
        "DefaultJwtRetriever, ClientCredentialsJwtRetriever, JwtBearerJwtRetriever",
        "medium",
        "OAUTHBEARER: the grant. JwtBearerJwtRetriever (KIP-1139) sends a signed assertion "
        "(grant urn:ietf:params:oauth:grant-type:jwt-bearer) instead of client credentials.",
    ),
    "sasl.oauthbearer.assertion.file": KeyDoc(
        OPT_STR,
        "",
        "medium",
        "jwt-bearer: a file holding a ready assertion, read again for each token request.",
    ),
    "sasl.oauthbearer.assertion.algorithm": KeyDoc(
        STR, "RS256, ES256", "medium", "jwt-bearer: how the assertion is signed."
    ),
    "sasl.oauthbearer.assertion.private.key.file": KeyDoc(
        OPT_STR,
        "",
        "medium",
        "jwt-bearer: the PEM (PKCS#8) private key that signs the assertion built here.",
    ),
    "sasl.oauthbearer.assertion.private.key.passphrase": KeyDoc(
        SECRET, "", "medium", "jwt-bearer: the passphrase of an encrypted private key."
    ),
    "sasl.oauthbearer.assertion.template.file": KeyDoc(
        OPT_STR,
        "",
        "low",
        "jwt-bearer: a JSON file with 'header' and 'payload' objects added to the assertion.",
    ),
    "sasl.oauthbearer.assertion.claim.iss": KeyDoc(
        OPT_STR, "", "low", "jwt-bearer: the assertion's issuer claim."
    ),
    "sasl.oauthbearer.assertion.claim.sub": KeyDoc(
        OPT_STR, "", "low", "jwt-bearer: the assertion's subject claim."
    ),
    "sasl.oauthbearer.assertion.claim.aud": KeyDoc(
        OPT_STR, "", "low", "jwt-bearer: the assertion's audience claim."
    ),
    "sasl.oauthbearer.assertion.claim.exp.seconds": KeyDoc(
        INT, "0 to 86400", "low", "jwt-bearer: the assertion expires this long after issue."
    ),
    "sasl.oauthbearer.assertion.claim.nbf.seconds": KeyDoc(
        INT, "0 to 3600", "low", "jwt-bearer: the assertion is valid from this long before issue."
    ),
    "sasl.oauthbearer.assertion.claim.jti.include": KeyDoc(
        BOOL, "", "low", "jwt-bearer: add a unique 'jti' claim to each assertion."
    ),
    "sasl.login.refresh.buffer.seconds": KeyDoc(
        INT, "0 to 3600", "low", "Refresh at least this long before the token expires."
    ),
    "sasl.login.connect.timeout.ms": KeyDoc(
        "int | None", _AT_LEAST_1, "low", "The connect timeout of token endpoint requests."
    ),
    "sasl.login.read.timeout.ms": KeyDoc(
        "int | None", _AT_LEAST_1, "low", "The read timeout of token endpoint requests."
    ),
    "sasl.login.retry.backoff.ms": KeyDoc(
        LONG, _AT_LEAST_0, "low", "The first wait before retrying a token request."
    ),
    "sasl.login.retry.backoff.max.ms": KeyDoc(
        LONG, _AT_LEAST_0, "low", "The longest wait between token request retries."
    ),
    "ssl.truststore.location": KeyDoc(
        OPT_STR,
        "a file path",
        "high",
        "The certificates to trust (PEM or PKCS12, per ssl.truststore.type); unset, the "
        "system's trusted CAs.",
    ),
    "ssl.ca.location": KeyDoc(
        OPT_STR,
        "a PEM file path",
        "high",
        "librdkafka's name for a PEM file of trusted CAs, in place of ssl.truststore.location.",
    ),
    "ssl.truststore.type": KeyDoc(
        STR,
        "PEM, PKCS12",
        "medium",
        "The trust store's format. JKS is refused (convert it to PKCS12).",
    ),
    "ssl.truststore.certificates": KeyDoc(
        SECRET, "PEM text", "high", "Trusted certificates given inline, as PEM text."
    ),
    "ssl.truststore.password": KeyDoc(SECRET, "", "high", "The password of a PKCS12 trust store."),
    "ssl.keystore.location": KeyDoc(
        OPT_STR,
        "a file path",
        "high",
        "The client certificate and key for mutual TLS (PEM or PKCS12, per ssl.keystore.type).",
    ),
    "ssl.keystore.type": KeyDoc(
        STR,
        "PEM, PKCS12",
        "medium",
        "The key store's format. JKS is refused (convert it to PKCS12).",
    ),
    "ssl.keystore.certificate.chain": KeyDoc(
        SECRET, "PEM text", "high", "The client certificate chain given inline, as PEM text."
    ),
    "ssl.keystore.key": KeyDoc(
        SECRET, "PEM text", "high", "The client private key given inline, as PEM text."
    ),
    "ssl.keystore.password": KeyDoc(SECRET, "", "high", "The password of a PKCS12 key store."),
    "ssl.key.password": KeyDoc(SECRET, "", "high", "The password of an encrypted private key."),
    "ssl.endpoint.identification.algorithm": KeyDoc(
        STR,
        'https, "" (empty)',
        "low",
        "`https` checks the broker's host name against its certificate; empty skips the check.",
    ),
    "ssl.protocol": KeyDoc(
        STR,
        "TLSv1.3, TLSv1.2, TLS",
        "medium",
        "The newest TLS version to speak (`TLS`: the newest available).",
    ),
    "ssl.enabled.protocols": KeyDoc(
        "list[str]", "TLSv1.2 and/or TLSv1.3", "medium", "The TLS versions allowed."
    ),
    "ssl.cipher.suites": KeyDoc(
        "list[str]",
        "IANA cipher suite names (OpenSSL names too)",
        "low",
        "The cipher suites allowed; empty keeps the TLS library's defaults. Python cannot "
        "pick among the TLS 1.3 suites, so a list naming only some of them is refused.",
    ),
    "ssl.context": KeyDoc(
        "ssl.SSLContext | None",
        "",
        "low",
        "Ours: a ready SSLContext, used as it is; no other trust, identity, protocol or "
        "cipher key may be given with it.",
    ),
}
