"""SASL/GSSAPI (Kerberos) against a real KDC and a real broker.

One module fixture starts Apache Kerby's KDC on loopback (kafka_actors.testing.kerberos, as
Kafka's own tests use Kerby's MiniKdc) with the broker's service principal
``kafka/127.0.0.1``, a client principal and a second one, then one Kafka broker whose
``KERBEROS`` listener is SASL_PLAINTEXT with GSSAPI (Krb5LoginModule with its keytab) and
``KERBEROSTLS`` SASL_SSL with GSSAPI (Kerberos inside TLS, the test CA). The
consumer logs in from the client's keytab through the ``gssapi`` binding (the ``kerberos``
extra, which scripts/bootstrap.sh installs); without the binding the module is skipped.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_actors.kerberos import gssapi_available

_missing = gssapi_available()
if _missing is not None:
    pytest.skip(
        f"the gssapi binding is not installed (pip install kafka-actors[kerberos]): {_missing}",
        allow_module_level=True,
    )

from kafka_actors.actors.network import GetConnectionEvents  # noqa: E402
from kafka_actors.consumer import KafkaConsumer as Consumer  # noqa: E402
from kafka_actors.errors import SaslAuthenticationFailedError  # noqa: E402
from kafka_actors.testing.broker import KafkaBroker  # noqa: E402
from kafka_actors.testing.kerberos import TestKdc, broker_gssapi_args  # noqa: E402
from kafka_actors.testing.security import ListenerSpec  # noqa: E402

pytestmark = pytest.mark.broker

RECORDS = 40
SERVICE = "kafka/127.0.0.1"
LISTENER = "KERBEROS"
TLS_LISTENER = "KERBEROSTLS"  # SASL_SSL with GSSAPI: Kerberos inside TLS
#: The TLS listener's session lifetime (connections.max.reauth.ms): re-authenticated in place.
REAUTH_MS = 6_000  # as test_reauth_broker.py: margin for a loaded 2-core machine


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestKdc]:
    directory = tmp_path_factory.mktemp("kdc")
    with TestKdc(directory, (SERVICE, "client", "other")) as started:
        previous = os.environ.get("KRB5_CONFIG")
        os.environ["KRB5_CONFIG"] = str(started.krb5_conf)  # read by the MIT libraries
        try:
            yield started
        finally:
            if previous is None:
                os.environ.pop("KRB5_CONFIG", None)
            else:
                os.environ["KRB5_CONFIG"] = previous


@pytest.fixture(scope="module")
def broker(kdc: TestKdc) -> Iterator[KafkaBroker]:
    args = broker_gssapi_args(kdc, LISTENER, SERVICE)
    over_tls = broker_gssapi_args(kdc, TLS_LISTENER, SERVICE)
    listeners = [
        ListenerSpec(LISTENER, "SASL_PLAINTEXT", ("GSSAPI",)),
        ListenerSpec(TLS_LISTENER, "SASL_SSL", ("GSSAPI",)),
    ]
    with KafkaBroker(
        broker_config={
            **args["broker_config"],  # type: ignore[dict-item]
            **over_tls["broker_config"],  # type: ignore[dict-item]
            # KIP-368 on the TLS listener only: its GSSAPI sessions last REAUTH_MS.
            f"listener.name.{TLS_LISTENER.lower()}.gssapi.connections.max.reauth.ms": REAUTH_MS,
        },
        listeners=listeners,
        jvm_options=args["jvm_options"],  # type: ignore[arg-type]
    ) as started:
        yield started


def _client(broker: KafkaBroker, kdc: TestKdc, principal: str, keytab: Path) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.listener_bootstrap(LISTENER),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        "sasl.jaas.config": (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
            f'storeKey=true keyTab="{keytab}" principal="{kdc.principal(principal)}";'
        ),
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "reconnect.backoff.max.ms": 500,
    }


def test_kerberos_login_and_consumption(broker: KafkaBroker, kdc: TestKdc) -> None:
    """Records produced over the plaintext listener come back through a consumer that
    authenticated with Kerberos (keytab login, service kafka@127.0.0.1, every connection:
    bootstrap, coordinator, fetch)."""
    from confluent_kafka import Producer

    topic = f"krb-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), key=str(i).encode())
    assert producer.flush(60) == 0

    seen: set[str] = set()
    deadline = time.monotonic() + 120
    with Consumer(_client(broker, kdc, "client", kdc.keytab("client"))) as consumer:
        consumer.subscribe([topic])
        while len(seen) < RECORDS and time.monotonic() < deadline:
            for record in consumer.poll(0.5):
                assert record.value is not None
                seen.add(record.value.decode())
    assert seen == {f"v{i}" for i in range(RECORDS)}


def test_kerberos_over_tls_and_reauthenticated_in_place(broker: KafkaBroker, kdc: TestKdc) -> None:
    """SASL_SSL with GSSAPI: the TLS handshake (the test CA trusted through
    ssl.ca.location) then the Kerberos exchange inside it; the records come back. The
    listener's sessions last REAUTH_MS (KIP-368): every connection re-authenticates with a
    new Kerberos exchange on its own socket, none is lost."""
    from confluent_kafka import Producer

    topic = f"krb-tls-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(RECORDS):
        producer.produce(topic, value=f"t{i}".encode())
    assert producer.flush(60) == 0
    conf = _client(broker, kdc, "client", kdc.keytab("client"))
    conf["bootstrap.servers"] = broker.listener_bootstrap(TLS_LISTENER)
    conf["security.protocol"] = "SASL_SSL"
    conf["ssl.ca.location"] = str(broker.ca_path)
    seen: list[str] = []
    deadline = time.monotonic() + 120  # a bound on a hang, not a timing assertion
    with Consumer(conf) as consumer:
        consumer.subscribe([topic])
        while len(seen) < RECORDS and time.monotonic() < deadline:
            seen += [r.value.decode() for r in consumer.poll(0.5) if r.value is not None]
        assert seen == [f"t{i}" for i in range(RECORDS)]
        # KIP-368: the broker ends each session after REAUTH_MS; the consumer authenticates
        # again with Kerberos on the same connections, never losing one.
        until = time.monotonic() + 2 * REAUTH_MS / 1000
        while time.monotonic() < until:
            assert list(consumer.poll(0.5)) == []
        network, _ = consumer._tree.children.current("network")
        recorded = network.ask(GetConnectionEvents(None), timeout=10)
    kinds = Counter(e.kind for e in recorded)
    assert kinds["reauthenticated"] >= 2, kinds
    assert kinds["disconnected"] == kinds["auth_failed"] == kinds["connect_failed"] == 0, kinds


def _expect_failure(conf: dict[str, object]) -> SaslAuthenticationFailedError:
    # Bounded: the failure is fatal (no retry), so the loop ends at the first poll that
    # sees it; 60 s only keeps a regression from hanging the suite.
    started = time.monotonic()
    with pytest.raises(SaslAuthenticationFailedError) as info:
        with Consumer(conf) as consumer:
            consumer.subscribe(["whatever"])
            while time.monotonic() - started < 60:
                consumer.poll(0.5)
    return info.value


def test_keytab_without_the_principal_is_a_typed_failure(broker: KafkaBroker, kdc: TestKdc) -> None:
    """principal=client with the keytab of another principal: the login fails."""
    error = _expect_failure(_client(broker, kdc, "client", kdc.keytab("other")))
    assert "client@" in str(error)


def test_unknown_service_principal_is_a_typed_failure(broker: KafkaBroker, kdc: TestKdc) -> None:
    """A service name the KDC has no principal for (nosuch/127.0.0.1): the ticket request
    fails at the first authentication, and the consumer raises instead of retrying."""
    conf = _client(broker, kdc, "client", kdc.keytab("client"))
    conf["sasl.kerberos.service.name"] = "nosuch"
    error = _expect_failure(conf)
    assert "nosuch@127.0.0.1" in str(error)


def test_the_warm_up_caches_the_tickets_so_authentication_needs_no_kdc(
    tmp_path: Path,
) -> None:
    """KerberosLogin.start() asks the KDC on its own thread (the network thread's actor waits
    for it to settle before connecting); afterwards a new context for a bootstrap host gets
    its first token with the KDC gone: the network thread made no KDC round trip."""
    from kafka_actors.config import ConsumerConfig
    from kafka_actors.kerberos import KerberosLogin

    with TestKdc(tmp_path / "kdc", (SERVICE, "client")) as own:
        previous = os.environ.get("KRB5_CONFIG")
        os.environ["KRB5_CONFIG"] = str(own.krb5_conf)
        try:
            config = ConsumerConfig.from_dict(
                {
                    "bootstrap.servers": "127.0.0.1:9092",
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "GSSAPI",
                    "sasl.kerberos.service.name": "kafka",
                    "sasl.jaas.config": (
                        f"com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
                        f'keyTab="{own.keytab("client")}" principal="{own.principal("client")}";'
                    ),
                }
            )
            woke: list[bool] = []
            login = KerberosLogin(config, on_change=lambda: woke.append(True), hosts=["127.0.0.1"])
            assert not login.settled()
            login.start()
            deadline = time.monotonic() + 60
            while not login.settled() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert login.settled() and woke == [True]
            own.stop()
            token = login.context("127.0.0.1").step(None)
            assert token  # an AP-REQ from the cached service ticket
            with pytest.raises(SaslAuthenticationFailedError):
                login.context("localhost").step(None)  # not warmed: needs the (gone) KDC
        finally:
            if previous is None:
                os.environ.pop("KRB5_CONFIG", None)
            else:
                os.environ["KRB5_CONFIG"] = previous
