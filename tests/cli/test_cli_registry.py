"""``consume -s/-r``: keys and values decoded through a Schema Registry (Avro, JSON Schema).

The registry is confluent-kafka's in-memory one (``mock://``), as in
tests/interop/test_schema_registry.py: its store lives in the client object, so the CLI is
run in this process and handed the client the producer registered the schemas with.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("jsonschema")

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_actors.cli import main, registry

pytestmark = [pytest.mark.mock, pytest.mark.timeout(180)]

AVRO_SCHEMA = """
{"type": "record", "name": "Order", "namespace": "shop",
 "fields": [{"name": "id", "type": "long"}, {"name": "product", "type": "string"},
            {"name": "note", "type": ["null", "string"], "default": null}]}
"""
KEY_SCHEMA = """{"$schema": "http://json-schema.org/draft-07/schema#", "title": "OrderKey",
 "type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}"""


def test_avro_values_and_json_schema_keys_through_the_registry(
    mock_cluster: Any, kafka_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = SchemaRegistryClient.new_client({"url": "mock://kafka-actors-cli"})
    topic = kafka_topic(mock_cluster)
    values = AvroSerializer(client, AVRO_SCHEMA)
    keys = JSONSerializer(KEY_SCHEMA, client)
    orders = [
        {"id": i, "product": f"p\u00e9-{i}", "note": None if i % 2 else "n"} for i in range(5)
    ]
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap_servers, "log_level": 3})
    for order in orders:
        producer.produce(
            topic,
            key=keys({"order": f"o-{order['id']}"}, SerializationContext(topic, MessageField.KEY)),
            value=values(order, SerializationContext(topic, MessageField.VALUE)),
            partition=0,
        )
    producer.produce(topic, key=None, value=None, partition=0)  # a tombstone stays null
    assert producer.flush(30) == 0

    asked: list[tuple[str, dict[str, str]]] = []

    def shared(url: str, settings: dict[str, str]) -> Any:
        asked.append((url, dict(settings)))
        return client

    monkeypatch.setattr(registry, "registry_client", shared)
    out = io.StringIO()
    argv = [
        "consume",
        "-b",
        mock_cluster.bootstrap_servers,
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-s",
        "key=json",
        "-s",
        "value=avro",
        "-r",
        "mock://kafka-actors-cli",
        "--schema-registry-setting",
        "basic.auth.user.info=u:p",
        "-f",
        "%k\\t%s\\n",
        "--null",
        "NULL",
    ]
    assert main(argv, out=out) == 0
    assert asked == [("mock://kafka-actors-cli", {"basic.auth.user.info": "u:p"})]
    lines = out.getvalue().splitlines()
    assert lines[-1] == "NULL\tNULL"
    decoded = [tuple(json.loads(part) for part in line.split("\t")) for line in lines[:-1]]
    assert decoded == [({"order": f"o-{o['id']}"}, o) for o in orders]


def test_serdes_names_are_checked() -> None:
    assert registry.parse_serdes(["avro"]) == {"key": "avro", "value": "avro"}
    assert registry.parse_serdes(["value=json"]) == {"value": "json"}
    for bad in ("protobuf", "header=avro", "key=string"):
        with pytest.raises(ValueError):
            registry.parse_serdes([bad])
    assert main(["consume", "-b", "h:9092", "-t", "t", "-s", "avro"], out=io.StringIO()) == 2
