"""ConsumerConfig: Kafka names, Java defaults, parsing as Java properties, validation, secrets."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_actors.config import (
    BrokerAddress,
    ConsumerConfig,
    Password,
    config_keys,
    parse_bootstrap_servers,
    parse_jaas_config,
)
from kafka_actors.errors import ConfigError, KafkaError

BASE = {"bootstrap.servers": "localhost:9092"}
RANGE_CLASS = "org.apache.kafka.clients.consumer.RangeAssignor"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def make(**kafka_named: object) -> ConsumerConfig:
    return ConsumerConfig.from_dict(
        {**BASE, **{k.replace("__", "."): v for k, v in kafka_named.items()}}
    )


def config_error(mapping: dict[str, object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_dict({**BASE, **mapping})
    return info.value


# -- defaults -------------------------------------------------------------------------------------

JAVA_DEFAULTS = {
    "session.timeout.ms": 45_000,
    "heartbeat.interval.ms": 3_000,
    "max.poll.records": 500,
    "max.poll.interval.ms": 300_000,
    "auto.commit.interval.ms": 5_000,
    "fetch.min.bytes": 1,
    "fetch.max.bytes": 52_428_800,
    "fetch.max.wait.ms": 500,
    "max.partition.fetch.bytes": 1_048_576,
    "request.timeout.ms": 30_000,
    "default.api.timeout.ms": 60_000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1_000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1_000,
    "connections.max.idle.ms": 540_000,
    "metadata.max.age.ms": 300_000,
    "socket.connection.setup.timeout.ms": 10_000,
    "socket.connection.setup.timeout.max.ms": 30_000,
    "send.buffer.bytes": 131_072,
    "isolation.level": "read_uncommitted",
    "auto.offset.reset": "latest",
    "check.crcs": True,
    "exclude.internal.topics": True,
    "allow.auto.create.topics": True,
    "client.id": "",
    "client.rack": "",
    "group.id": None,
    "group.instance.id": None,
    "group.remote.assignor": None,
    "partition.assignment.strategy": ("range", "cooperative-sticky"),
    "security.protocol": "PLAINTEXT",
    "sasl.mechanism": "GSSAPI",
    "ssl.endpoint.identification.algorithm": "https",
}


@pytest.mark.parametrize(("key", "value"), sorted(JAVA_DEFAULTS.items()))
def test_java_defaults(key: str, value: object) -> None:
    assert ConsumerConfig.from_dict(BASE).get(key) == value


def test_the_receive_buffer_defaults_to_the_os_where_java_sets_64_kib() -> None:
    """A default that is not Java's (config_docs says why, and the description says so)."""
    from kafka_actors.config_docs import JAVA_DEFAULTS, KEY_DOCS

    assert ConsumerConfig.from_dict(BASE).get("receive.buffer.bytes") == -1
    assert JAVA_DEFAULTS["receive.buffer.bytes"] == "65536"
    assert "where Java's is 65536" in KEY_DOCS["receive.buffer.bytes"].description


def test_project_defaults_that_differ_from_java() -> None:
    c = ConsumerConfig.from_dict({**BASE, "group.id": "g"})
    assert c.group_protocol == "consumer"  # Java 4.x: classic
    assert c.enable_auto_commit is True
    assert c.max_in_flight_requests_per_connection == 100
    assert c.ssl_truststore_type == "PEM"
    assert c.key_deserializer is None and c.value_deserializer is None


def test_max_decompressed_batch_bytes_is_validated() -> None:
    """This client's own bound on one batch's decompressed size (issue 10)."""
    assert ConsumerConfig.from_dict(BASE).max_decompressed_batch_bytes == 256 * 1024 * 1024
    c = ConsumerConfig.from_dict({**BASE, "max.decompressed.batch.bytes": "1048576"})
    assert c.get("max.decompressed.batch.bytes") == 1_048_576
    for bad in (0, -1, "lots", 2**31):
        with pytest.raises(ConfigError, match=r"max\.decompressed\.batch\.bytes"):
            ConsumerConfig.from_dict({**BASE, "max.decompressed.batch.bytes": bad})


def test_every_key_has_an_attribute_and_reads_back() -> None:
    c = ConsumerConfig.from_dict(BASE)
    for key in config_keys():
        c.get(key)  # no error
    assert "bootstrap.servers" in set(config_keys())


def test_config_is_immutable() -> None:
    c = ConsumerConfig.from_dict(BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.max_poll_records = 5  # type: ignore[misc]


# -- bootstrap.servers ----------------------------------------------------------------------------


def test_bootstrap_servers_forms() -> None:
    expected = (
        BrokerAddress("localhost", 9092),
        BrokerAddress("::1", 9093),
        BrokerAddress("kafka-1.example.com", 19092),
        BrokerAddress("10.0.0.7", 9094),
    )
    text = "localhost:9092, [::1]:9093,kafka-1.example.com:19092 ,10.0.0.7:9094"
    assert parse_bootstrap_servers(text) == expected
    assert parse_bootstrap_servers(text.split(",")) == expected
    assert make(bootstrap__servers=text).bootstrap_servers == expected
    assert str(expected[1]) == "[::1]:9093"
    # Java's pattern also accepts a scheme prefix and unbracketed IPv6
    assert parse_bootstrap_servers("PLAINTEXT://broker:9092") == (BrokerAddress("broker", 9092),)
    assert parse_bootstrap_servers("::1:9092") == (BrokerAddress("::1", 9092),)
    assert parse_bootstrap_servers("[fe80::1%eth0]:9092")[0].port == 9092
    # duplicates are accepted (as Java 4.x) and kept once
    assert parse_bootstrap_servers("a:1, a:1,b:2") == (BrokerAddress("a", 1), BrokerAddress("b", 2))


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "localhost",
        "localhost:",
        "localhost:0",
        "localhost:65536",
        "localhost:port",
        "bad host:9092",
        "-leading.dash:9092",
        "1.2.3:9092",
        "[::1:9092",
        "[not-ipv6]:9092",
        [],
        42,
    ],
)
def test_bootstrap_servers_rejected(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_dict({"bootstrap.servers": bad})
    assert info.value.key == "bootstrap.servers"


def test_bootstrap_servers_is_required() -> None:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_dict({"group.id": "g"})
    assert info.value.key == "bootstrap.servers"
    assert "Missing required configuration" in str(info.value)


# -- parsing as Java properties --------------------------------------------------------------------


def test_strings_are_accepted_as_java_properties() -> None:
    c = make(
        max__poll__records="10",
        enable__auto__commit="FALSE",
        check__crcs=" true ",
        retry__backoff__ms="250",
        isolation__level="READ_COMMITTED",
        group__protocol="Classic",
        security__protocol="ssl",
        partition__assignment__strategy="roundrobin," + RANGE_CLASS,
        group__id=" g ",
    )
    assert c.max_poll_records == 10
    assert c.enable_auto_commit is False
    assert c.check_crcs is True
    assert c.retry_backoff_ms == 250
    assert c.isolation_level == "read_committed"
    assert c.group_protocol == "classic"
    assert c.security_protocol == "SSL"
    assert c.partition_assignment_strategy == ("roundrobin", "range")
    assert c.group_id == "g"


@given(st.integers(1, 2**31 - 1))
def test_int_strings_round_trip(n: int) -> None:
    assert make(max__poll__records=str(n)).max_poll_records == n
    assert make(max__poll__records=n).max_poll_records == n


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("max.poll.records", "abc", "32-bit integer number"),
        ("max.poll.records", 1.5, "32-bit integer number"),
        ("max.poll.records", True, "32-bit integer number"),
        ("max.poll.records", 0, "at least 1"),
        ("max.poll.records", 2**31, "Not a 32-bit integer"),
        ("retry.backoff.ms", 2**63, "Not a 64-bit integer"),
        ("fetch.min.bytes", -1, "at least 0"),
        ("receive.buffer.bytes", -2, "at least -1"),
        ("enable.auto.commit", "yes", "either true or false"),
        ("enable.auto.commit", 1, "either true or false"),
        ("isolation.level", "snapshot", "read_uncommitted, read_committed"),
        ("group.protocol", "streams", "consumer, classic"),
        ("security.protocol", "TLS", "PLAINTEXT"),
        ("client.id", 7, "string"),
        ("group.instance.id", "", "may not be empty"),
        ("partition.assignment.strategy", "bogus", "not a known assignor"),
        ("partition.assignment.strategy", "range,RangeAssignor", "duplicate"),
        ("ssl.truststore.type", "JKS", "only PEM"),
        ("ssl.endpoint.identification.algorithm", "ldaps", "https"),
        (
            "key.deserializer",
            "org.apache.kafka.common.serialization.StringDeserializer",
            "callable",
        ),
    ],
)
def test_bad_values_name_key_and_value(key: str, value: object, fragment: str) -> None:
    err = config_error({key: value, "group.id": "g"})
    assert err.key == key
    assert fragment in str(err)
    if fragment == "duplicate":
        assert "'RangeAssignor'" in str(err)
    elif not isinstance(value, bool) and key != "group.instance.id":
        assert repr(value) in str(err) or str(value) in str(err)


def test_config_error_is_a_kafka_error() -> None:
    assert isinstance(config_error({"max.poll.records": 0}), KafkaError)


# -- unknown keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("max.pol.records", "max.poll.records"),
        ("max_poll_records", "max.poll.records"),
        ("session.timeout", "session.timeout.ms"),
        ("bootstrap.server", "bootstrap.servers"),
        ("auto-offset-reset", "auto.offset.reset"),
    ],
)
def test_unknown_key_suggests_the_close_name(key: str, suggestion: str) -> None:
    err = config_error({key: "1"})
    assert err.key == key
    assert f"did you mean '{suggestion}'" in str(err)


def test_unknown_key_without_a_close_name() -> None:
    err = config_error({"zzzz.qqqq": 1})
    assert err.key == "zzzz.qqqq" and "did you mean" not in str(err)


def test_interceptors_are_refused_with_a_reason() -> None:
    err = config_error({"interceptor.classes": "x.Y"})
    assert "not supported" in str(err)


# -- auto.offset.reset ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "duration"),
    [
        ("by_duration:P1D", timedelta(days=1)),
        ("by_duration:PT1H", timedelta(hours=1)),
        ("by_duration:PT90M", timedelta(minutes=90)),
        ("by_duration:PT0.5S", timedelta(milliseconds=500)),
        ("by_duration:P2DT3H4M5.25S", timedelta(days=2, hours=3, minutes=4, seconds=5.25)),
        ("BY_DURATION:pt10s", timedelta(seconds=10)),
        ("by_duration:PT0S", timedelta(0)),
    ],
)
def test_auto_offset_reset_by_duration(text: str, duration: timedelta) -> None:
    c = make(auto__offset__reset=text)
    assert c.auto_offset_reset == "by_duration"
    assert c.auto_offset_reset_duration == duration
    assert (
        make(auto__offset__reset=str(c.get("auto.offset.reset"))).auto_offset_reset_duration
        == duration
    )


@pytest.mark.parametrize("text", ["EARLIEST", "latest", "none"])
def test_auto_offset_reset_names(text: str) -> None:
    c = make(auto__offset__reset=text)
    assert c.auto_offset_reset == text.lower() and c.auto_offset_reset_duration is None


@pytest.mark.parametrize(
    "text",
    [
        "smallest",
        "by_duration:",
        "by_duration:P",
        "by_duration:PT",
        "by_duration:-PT1H",
        "by_duration:1H",
        "by_duration:PT1X",
    ],
)
def test_auto_offset_reset_rejected(text: str) -> None:
    assert config_error({"auto.offset.reset": text}).key == "auto.offset.reset"


# -- assignors ------------------------------------------------------------------------------------


def test_assignment_strategy_accepts_java_class_names() -> None:
    c = make(
        group__id="g",
        group__protocol="classic",
        partition__assignment__strategy=[
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
            "StickyAssignor",
            "org.apache.kafka.clients.consumer.RoundRobinAssignor",
            "range",
        ],
    )
    assert c.partition_assignment_strategy == (
        "cooperative-sticky",
        "sticky",
        "roundrobin",
        "range",
    )


def test_classic_group_needs_an_assignor() -> None:
    err = config_error(
        {"group.id": "g", "group.protocol": "classic", "partition.assignment.strategy": ""}
    )
    assert err.key == "partition.assignment.strategy"


# -- cross-field rules ----------------------------------------------------------------------------


def test_auto_commit_without_group() -> None:
    assert make().enable_auto_commit is False  # default is overridden without a group
    assert make(enable__auto__commit=False).enable_auto_commit is False
    err = config_error({"enable.auto.commit": "true"})
    assert err.key == "enable.auto.commit"
    assert "default group id (null)" in str(err)


def test_group_instance_id_requires_group_id() -> None:
    assert config_error({"group.instance.id": "i-1"}).key == "group.instance.id"
    assert make(group__id="g", group__instance__id="i-1").group_instance_id == "i-1"
    assert (
        config_error({"group.id": "g", "group.instance.id": "bad id!"}).key == "group.instance.id"
    )


def test_heartbeat_must_be_below_session_timeout_for_classic() -> None:
    err = config_error(
        {
            "group.id": "g",
            "group.protocol": "classic",
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 10_000,
        }
    )
    assert err.key == "heartbeat.interval.ms"
    ok = make(
        group__id="g",
        group__protocol="classic",
        session__timeout__ms=10_000,
        heartbeat__interval__ms=3_000,
    )
    assert ok.session_timeout_ms == 10_000


@pytest.mark.parametrize(
    "key", ["session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"]
)
def test_classic_only_settings_rejected_with_consumer_protocol(key: str) -> None:
    value = {"partition.assignment.strategy": "range", "session.timeout.ms": 60_000}.get(key, 1_000)
    err = config_error({"group.id": "g", key: value})
    assert err.key == key
    assert "group.protocol=CONSUMER" in str(err)
    # the same settings are fine for classic (heartbeat below session)
    extra = {"session.timeout.ms": 45_000} if key == "heartbeat.interval.ms" else {}
    make(**{"group__id": "g", "group__protocol": "classic", key.replace(".", "__"): value, **extra})


def test_remote_assignor_only_with_consumer_protocol() -> None:
    assert make(group__id="g", group__remote__assignor="uniform").group_remote_assignor == "uniform"
    err = config_error(
        {"group.id": "g", "group.protocol": "classic", "group.remote.assignor": "uniform"}
    )
    assert err.key == "group.remote.assignor"


def test_backoff_post_processing_as_java() -> None:
    # reconnect.backoff.ms above the default max raises the (unset) max
    assert make(reconnect__backoff__ms=5_000).reconnect_backoff_max_ms == 5_000
    # an explicit smaller max is kept, with a warning (exponential backoff disabled)
    c = make(retry__backoff__ms=2_000, retry__backoff__max__ms=500)
    assert c.retry_backoff_max_ms == 500
    assert any("retry.backoff.max.ms" in w for w in c.warnings)
    assert make().warnings == ()


# -- security -------------------------------------------------------------------------------------

PLAIN_JAAS = PLAIN + ' required username="alice" password="p@ss \\"w0rd\\"";'


def test_plain_jaas_config() -> None:
    c = make(security__protocol="SASL_SSL", sasl__mechanism="PLAIN", sasl__jaas__config=PLAIN_JAAS)
    assert c.sasl_username == "alice"
    assert isinstance(c.sasl_password, Password)
    assert c.sasl_password.value() == 'p@ss "w0rd"'
    assert c.sasl_enabled and c.ssl_enabled


def test_scram_jaas_config_with_unquoted_values_and_tokenauth() -> None:
    jaas = SCRAM + ' required\n  username=bob\n  password="pw"  tokenauth=true ;'
    module = parse_jaas_config(jaas)
    assert module.module == SCRAM and module.control_flag == "required"
    assert "pw" not in repr(module)
    c = make(
        security__protocol="SASL_PLAINTEXT",
        sasl__mechanism="SCRAM-SHA-512",
        sasl__jaas__config=jaas,
    )
    assert c.sasl_username == "bob"
    assert c.sasl_password == Password("pw")
    assert c.sasl_token_auth is True


def test_jaas_module_must_match_mechanism() -> None:
    err = config_error(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": PLAIN_JAAS,
        }
    )
    assert err.key == "sasl.jaas.config"
    assert "p@ss" not in str(err)


@pytest.mark.parametrize(
    "jaas",
    [
        PLAIN + ' required username="u" password="secret-1"',
        PLAIN + ' maybe username="u" password="secret-1";',
        PLAIN + ' required username "u" password="secret-1";',
        PLAIN + ' required username="u" password="secret-1',
        PLAIN + " required password=secret-1;",
        'a.B required password="secret-1"; c.D required password="secret-1";',
    ],
)
def test_malformed_jaas_never_leaks_the_password(jaas: str) -> None:
    err = config_error(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}
    )
    assert "secret-1" not in str(err) and "secret-1" not in repr(err)
    assert err.key == "sasl.jaas.config"


def test_librdkafka_style_credentials() -> None:
    c = make(
        security__protocol="SASL_PLAINTEXT",
        sasl__mechanism="SCRAM-SHA-256",
        sasl__username="u",
        sasl__password="pw",
    )
    assert c.sasl_username == "u" and c.sasl_password == Password("pw")
    err = config_error(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": PLAIN_JAAS,
            "sasl.username": "u",
            "sasl.password": "pw",
        }
    )
    assert "not both" in str(err)


def test_sasl_needs_a_supported_mechanism_and_credentials() -> None:
    # The default GSSAPI (Kerberos, tests/security/test_kerberos.py) needs the service name.
    assert config_error({"security.protocol": "SASL_SSL"}).key == "sasl.kerberos.service.name"
    assert (
        config_error({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}).key
        == "sasl.jaas.config"
    )
    # OAUTHBEARER is supported now (tests/security/test_oauth.py); other names are not.
    assert config_error({"sasl.mechanism": "AWS_MSK_IAM"}).key == "sasl.mechanism"


def test_passwords_are_hidden_everywhere() -> None:
    secret = "hunter2-very-secret"
    c = make(
        security__protocol="SASL_SSL",
        sasl__mechanism="PLAIN",
        sasl__username="u",
        sasl__password=secret,
        ssl__key__password=secret,
        ssl__keystore__certificate__chain="-----BEGIN CERTIFICATE-----" + secret,
        ssl__keystore__key="-----BEGIN PRIVATE KEY-----" + secret,
        ssl__truststore__certificates="-----BEGIN CERTIFICATE-----" + secret,
    )
    assert secret not in repr(c) and secret not in str(c)
    assert repr(Password(secret)) == str(Password(secret)) == "[hidden]"
    assert secret not in repr(c.originals())
    assert c.ssl_key_password is not None and c.ssl_key_password.value() == secret
    for key in ("sasl.password", "ssl.key.password", "ssl.keystore.key", "sasl.jaas.config"):
        err = config_error({key: ["not", secret]})
        assert secret not in str(err) and err.key == key


def test_ssl_settings() -> None:
    c = make(
        security__protocol="SSL",
        ssl__truststore__location="/etc/ca.pem",
        ssl__endpoint__identification__algorithm="",
    )
    assert c.ssl_truststore_location == "/etc/ca.pem"
    assert c.ssl_check_hostname is False
    assert make(ssl__endpoint__identification__algorithm="HTTPS").ssl_check_hostname is True
    assert (
        config_error(
            {"ssl.truststore.location": "/ca.pem", "ssl.truststore.certificates": "-----BEGIN"}
        ).key
        == "ssl.truststore.certificates"
    )
    assert config_error({"ssl.keystore.certificate.chain": "-----BEGIN"}).key == "ssl.keystore.key"
    assert (
        config_error(
            {
                "ssl.keystore.location": "/k.pem",
                "ssl.keystore.certificate.chain": "c",
                "ssl.keystore.key": "k",
            }
        ).key
        == "ssl.keystore.location"
    )


# -- other helpers --------------------------------------------------------------------------------


def test_of_with_attribute_names_and_overrides() -> None:
    def deserialize(b: bytes | None) -> str | None:
        return None if b is None else b.decode()

    c = ConsumerConfig.of(bootstrap_servers=["h:1"], group_id="g", value_deserializer=deserialize)
    assert c.value_deserializer is deserialize
    assert c.originals()["group.id"] == "g"
    d = c.with_overrides({"max.poll.records": "7"})
    assert d.max_poll_records == 7 and d.group_id == "g" and c.max_poll_records == 500
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.of(bootstrap_servers="h:1", max_poll_record=3)
    assert "max_poll_record" in str(info.value)


def test_replace_revalidates() -> None:
    c = make(group__id="g")
    with pytest.raises(ConfigError):
        dataclasses.replace(c, group_id=None, enable_auto_commit=True)


# -- fuzz: any input gives a config or a ConfigError, never another exception ----------------------

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.lists(st.text(max_size=10), max_size=3),
    st.sampled_from(
        ["true", "false", "10", "-1", "", " ", "PLAIN", "SASL_SSL", "classic", "localhost:1"]
    ),
)


@given(
    st.dictionaries(
        st.sampled_from(sorted(config_keys())) | st.text(max_size=20), values, max_size=8
    )
)
def test_fuzz_only_config_errors(mapping: dict[str, object]) -> None:
    try:
        ConsumerConfig.from_dict(mapping)
    except ConfigError as err:
        assert err.key is None or isinstance(err.key, str)
