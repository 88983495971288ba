"""Start-up (issue 26): what a fresh interpreter loads for a consumer's first call.

``import kafka_actors`` loads the package root only; ``from kafka_actors import
KafkaConsumer`` and constructing one load the consumer's runtime but none of the optional
parts (other front ends, the share and classic group protocols, the OAUTHBEARER token
fetcher, Spark, OpenTelemetry, the testkit, the CLI) nor hypothesis, which kio imports
whenever it is installed unless hypothesis is hidden from it (``kafka_actors/protocol``); nor
what only some consumers need, loaded on demand: SASL (its mechanisms, hmac, Kerberos),
TLS (``protocol.connection.tls``, tempfile), the health snapshot (``health()``), the
decompressors (cramjam, mmap, gzip). A consumer configured with SASL or TLS loads them when it
is built, ``health()`` when first called.
A classic group member (a real broker) imports the classic protocol when it joins; a consumer
reading its first record imports no ApiVersions schema but the handshake's (the managers' ask
goes at the handshake's version, issue 26). Module sets,
read from ``sys.modules`` of a child interpreter run in this tree; never timings
(``bench/startup.py`` measures those).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.consumer.helpers import produce, unique

ROOT = Path(__file__).resolve().parents[2]

#: Loaded by none of the three steps below (a name stands for the module and its submodules).
OPTIONAL = (
    "hypothesis",
    "pyspark",
    "opentelemetry",
    "thespian",
    "confluent_kafka",
    "aiokafka",
    "pyarrow",
    "crc32c",
    "urllib.request",
    # our lines bind and render without it (kafka_actors.log): configure()'s renderers and the
    # parallel consumer import it
    "structlog",
    "kafka_actors.testing",
    "kafka_actors.parallel",
    "kafka_actors.spark",
    "kafka_actors.cli",
    "kafka_actors.otel",
    "kafka_actors.oauth",
    "kafka_actors.thespian",
    "kafka_actors.bridges",
    "kafka_actors.pykka",
    "kafka_actors.aio",
    "kafka_actors.aio_loop",
    "kafka_actors.aio_share",
    "kafka_actors.share_consumer",
    "kafka_actors.config_docs",
    "kafka_actors.protocol.group.classic",
    "kafka_actors.protocol.share.fetch",
    "kafka_actors.protocol.share.buffer",
    "kafka_actors.protocol.share.membership",
    "kafka_actors.protocol.share.acknowledgements",
    "kafka_actors.actors.managers.share_fetch",
    "kafka_actors.actors.managers.share_membership",
    # on demand: SASL, TLS (security.protocol, sasl.mechanism), health(), compressed batches
    "kafka_actors.actors.network.security",
    "kafka_actors.protocol.connection.sasl",
    "kafka_actors.protocol.connection.oauth",
    "kafka_actors.protocol.connection.gssapi",
    "kafka_actors.protocol.connection.tls",
    "kafka_actors.kerberos",
    "gssapi",
    "hmac",
    "secrets",
    "tempfile",
    "kafka_actors.health",
    "kafka_actors.core.health",
    "cramjam",
    "mmap",
    "gzip",
)

#: Loaded by a consumer configured with SASL (sasl.mechanism) / TLS (security.protocol).
SASL = (
    "kafka_actors.actors.network.security",
    "kafka_actors.protocol.connection.sasl",
    "hmac",
)
TLS = ("kafka_actors.actors.network.security", "kafka_actors.protocol.connection.tls")
HEALTH = ("kafka_actors.health", "kafka_actors.core.health")

CONSTRUCT = """
from kafka_actors import KafkaConsumer
consumer = KafkaConsumer(
    bootstrap_servers="127.0.0.1:1", group_id="startup-imports", client_id="startup-imports"
)
consumer.close(timeout=5)
"""


#: A classic group member reads what the test produced (the classic protocol is imported by
#: the membership actor when it builds the member; the share protocol and the KIP-848
#: heartbeat's kio schemas are not needed). ``sys.argv``: bootstrap servers, topic, group.
CLASSIC_MEMBER = """
import sys, time
from kafka_actors import KafkaConsumer

bootstrap, topic, group = sys.argv[1:4]
consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "group.protocol": "classic", "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
values = []
deadline = time.monotonic() + 60
while len(values) < 20 and time.monotonic() < deadline:
    values.extend(r.value for r in consumer.poll(0.5))
consumer.close()
assert len(values) == 20, values
"""


#: An assigned consumer (no group) reads its first record. ``sys.argv``: bootstrap, topic.
FIRST_RECORD = """
import sys
from kafka_actors import KafkaConsumer, TopicPartition

consumer = KafkaConsumer(bootstrap_servers=sys.argv[1], enable_auto_commit=False)
tp = TopicPartition(sys.argv[2], 0)
consumer.assign([tp])
consumer.seek_to_beginning([tp])
while not consumer.poll(1.0):
    pass
consumer.close()
"""


def _modules_after(code: str, *args: str) -> set[str]:
    """``sys.modules`` of a fresh interpreter (working directory: this tree) after ``code``
    (``args``: its ``sys.argv[1:]``)."""
    script = f"{code}\nimport json as _j, sys as _s\nprint(_j.dumps(sorted(_s.modules)))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_import_kafka_actors_loads_the_package_root_only() -> None:
    modules = _modules_after("import kafka_actors")
    ours = sorted(m for m in modules if m.split(".")[0] == "kafka_actors")
    assert ours == ["kafka_actors", "kafka_actors._version"]
    assert _loaded(modules, ("kio", "structlog", "pykka", "hypothesis")) == []


def test_from_kafka_actors_import_kafka_consumer_leaves_the_optional_parts_out() -> None:
    modules = _modules_after("from kafka_actors import KafkaConsumer")
    # the consumer's own runtime is there (the check below is not about an empty import)
    assert {"kafka_actors.consumer", "kafka_actors.core.consumer_core", "kio.index"} <= modules
    assert "kafka_actors.actors.routing" in modules
    assert _loaded(modules, OPTIONAL) == []


def test_constructing_a_consumer_leaves_the_optional_parts_out() -> None:
    modules = _modules_after(CONSTRUCT)
    assert "kafka_actors.actors.managers.membership" in modules
    assert _loaded(modules, OPTIONAL) == []


def _construct(security_protocol: str, **settings: str) -> str:
    """``CONSTRUCT`` with ``security.protocol`` and ``settings`` (nothing connects)."""
    config = {
        "bootstrap.servers": "127.0.0.1:1",
        "group.id": "startup-imports",
        "security.protocol": security_protocol,
        **settings,
    }
    return (
        "from kafka_actors import KafkaConsumer\n"
        f"consumer = KafkaConsumer({config!r})\n"
        "consumer.close(timeout=5)\n"
    )


def test_a_sasl_consumer_loads_sasl_when_it_is_built_and_no_tls() -> None:
    modules = _modules_after(
        _construct(
            "SASL_PLAINTEXT",
            **{"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"},
        )
    )
    assert _loaded(modules, SASL) == sorted(SASL)
    assert _loaded(modules, ("kafka_actors.protocol.connection.tls", "tempfile")) == []


def test_a_tls_consumer_loads_tls_when_it_is_built_and_no_sasl() -> None:
    modules = _modules_after(_construct("SSL"))
    assert _loaded(modules, TLS) == sorted(TLS)
    assert _loaded(modules, ("kafka_actors.protocol.connection.sasl", "hmac")) == []


def test_a_sasl_ssl_consumer_loads_both() -> None:
    modules = _modules_after(
        _construct(
            "SASL_SSL",
            **{"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": "p"},
        )
    )
    assert _loaded(modules, SASL + TLS) == sorted(set(SASL + TLS))


def test_health_loads_the_health_snapshot_when_first_called() -> None:
    modules = _modules_after(
        "from kafka_actors import KafkaConsumer\n"
        "consumer = KafkaConsumer(bootstrap_servers='127.0.0.1:1', group_id='startup-imports')\n"
        "health = consumer.health()\n"
        "assert type(health).__module__ == 'kafka_actors.health', type(health)\n"
        "consumer.close(timeout=5)\n"
    )
    assert _loaded(modules, HEALTH) == sorted(HEALTH)


def test_the_share_types_of_the_package_root_still_load_on_first_use() -> None:
    modules = _modules_after(
        "from kafka_actors import AcknowledgeType, ShareConsumerRecord\n"
        "from kafka_actors.structs import ShareConsumerRecords\n"
        "assert AcknowledgeType.ACCEPT.name == 'ACCEPT'\n"
        "assert ShareConsumerRecord.__module__ == 'kafka_actors.protocol.share.buffer'\n"
    )
    assert {
        "kafka_actors.protocol.share.acknowledgements",
        "kafka_actors.protocol.share.buffer",
    } <= modules


def test_hypothesis_stays_importable_and_keeps_kios_strategies_when_imported_first() -> None:
    """Hidden from kio only while kio's phantom base loads: imported afterwards it works (kio's
    strategies not registered); imported before kafka_actors, kio registers its strategies."""
    after = _modules_after(
        "from kafka_actors import KafkaConsumer\n"
        "from hypothesis import strategies as st\n"
        "from kio.static.primitive import i16\n"
        "assert repr(st.from_type(i16)) == 'from_type(kio.static.primitive.i16)', "
        "repr(st.from_type(i16))\n"
    )
    assert "hypothesis.strategies" in after
    before = _modules_after(
        "import hypothesis\n"
        "from kafka_actors import KafkaConsumer\n"
        "from hypothesis import strategies as st\n"
        "from kio.static.primitive import i16\n"
        "assert repr(st.from_type(i16)) == 'integers(min_value=-32768, max_value=32767)', "
        "repr(st.from_type(i16))\n"
    )
    assert "kio.static._phantom" in before


@pytest.mark.broker
def test_a_classic_member_loads_the_classic_protocol_when_it_joins(kafka_broker: Any) -> None:
    topic, group = unique("startup-classic"), unique("g")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker.bootstrap_servers, topic, 20)
    modules = _modules_after(CLASSIC_MEMBER, kafka_broker.bootstrap_servers, topic, group)
    assert "kafka_actors.protocol.group.classic.membership" in modules
    assert _loaded(modules, ("kafka_actors.protocol.share.fetch", "kafka_actors.oauth")) == []
    assert _loaded(modules, ("kio.schema.consumer_group_heartbeat",)) == []


@pytest.mark.broker
def test_the_first_record_needs_one_api_versions_schema(kafka_broker: Any) -> None:
    """The managers' ApiVersions ask goes at the version of the connection's handshake, so
    it reuses that schema (and codecs) instead of importing another version's (issue 26)."""
    topic = unique("startup-first")
    kafka_broker.create_topic(topic, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, 5)
    modules = _modules_after(FIRST_RECORD, kafka_broker.bootstrap_servers, topic)
    assert "kio.schema.fetch" in modules
    loaded = _loaded(modules, ("kio.schema.api_versions",))
    versions = sorted({m.split(".")[3] for m in loaded if m.count(".") >= 3})
    assert len(versions) == 1, loaded
    assert _loaded(modules, OPTIONAL) == []
