"""``consume -s/-r``: keys and values decoded through a Schema Registry (Avro, JSON Schema,
Protobuf without the reader's generated class).

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
pytest.importorskip("google.protobuf")

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kafka_actors.cli import main, registry
from tests.cli.test_cli_mock import read_all

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
        *read_all(mock_cluster.bootstrap_servers, topic),
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


def _protobuf_classes() -> tuple[Any, Any]:
    """``shop.cli.Meta`` and ``shop.cli.Order`` (with a nested ``Line`` and a well-known
    Timestamp), built from a descriptor (no protoc); Order is the second message type of its
    file, so records carry message indexes [1]."""
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="kafka_actors_test_cli_order.proto",
        package="shop.cli",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    meta = fdp.message_type.add(name="Meta")
    meta.field.add(name="source", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    order = fdp.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    order.field.add(name="order_id", number=1, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    order.field.add(
        name="lines",
        number=2,
        type=f.TYPE_MESSAGE,
        label=f.LABEL_REPEATED,
        type_name=".shop.cli.Order.Line",
    )
    order.field.add(
        name="placed_at",
        number=3,
        type=f.TYPE_MESSAGE,
        label=f.LABEL_OPTIONAL,
        type_name=".google.protobuf.Timestamp",
    )
    from google.protobuf import timestamp_pb2  # noqa: F401  (the import registers it)

    pool = descriptor_pool.Default()
    try:
        file = pool.FindFileByName(fdp.name)
    except KeyError:
        file = pool.Add(fdp)
    get = message_factory.GetMessageClass
    return get(file.message_types_by_name["Meta"]), get(file.message_types_by_name["Order"])


def test_protobuf_values_without_the_generated_class(
    mock_cluster: Any, kafka_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _meta, order_class = _protobuf_classes()
    client = SchemaRegistryClient.new_client({"url": "mock://kafka-actors-cli-proto"})
    topic = kafka_topic(mock_cluster)
    serializer = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})
    orders = []
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap_servers, "log_level": 3})
    for i in range(4):
        order = order_class(order_id=100 + i)
        for n in range(i):
            order.lines.add(sku=f"s{n}", qty=n + 1)
        order.placed_at.seconds = 1_700_000_000 + i
        orders.append(order)
        producer.produce(
            topic,
            key=StringSerializer()(f"k{i}"),
            value=serializer(order, SerializationContext(topic, MessageField.VALUE)),
            partition=0,
        )
    assert producer.flush(30) == 0
    monkeypatch.setattr(registry, "registry_client", lambda url, settings: client)
    out = io.StringIO()
    argv = [
        *read_all(mock_cluster.bootstrap_servers, topic),
        "-s",
        "value=protobuf",
        "-r",
        "mock://kafka-actors-cli-proto",
        "-K",
        "\\t",
    ]
    assert main(argv, out=out) == 0
    got = [line.split("\t") for line in out.getvalue().splitlines()]
    assert [key for key, _ in got] == [f"k{i}" for i in range(4)]
    decoded = [json.loads(value) for _, value in got]
    from google.protobuf import json_format

    assert decoded == [
        json_format.MessageToDict(o, preserving_proto_field_name=True) for o in orders
    ]
    assert decoded[2]["lines"] == [{"sku": "s0", "qty": 1}, {"sku": "s1", "qty": 2}]
    assert decoded[1]["order_id"] == "101"  # int64 as a string, as protobuf's JSON mapping


def test_protobuf_framing() -> None:
    assert registry.protobuf_framing(b"\x00\x00\x00\x01\x02\x00rest") == (258, (0,))
    # count 2 (zig-zag 4), indexes 1 (2) and 3 (6)
    assert registry.protobuf_framing(b"\x00\x00\x00\x00\x07\x04\x02\x06") == (7, (1, 3))
    for bad in (
        b"",
        b"\x01\x00\x00\x00\x01\x00",
        b"\x00\x00\x00\x00\x01\x80",
        b"\x00\x00\x00\x00\x01\x7e",
    ):
        with pytest.raises(ValueError):
            registry.protobuf_framing(bad)


def test_serdes_names_are_checked() -> None:
    assert registry.parse_serdes(["avro"]) == {"key": "avro", "value": "avro"}
    assert registry.parse_serdes(["value=json"]) == {"value": "json"}
    assert registry.parse_serdes(["key=protobuf"]) == {"key": "protobuf"}
    for bad in ("thrift", "header=avro", "key=string"):
        with pytest.raises(ValueError):
            registry.parse_serdes([bad])
    assert main(["consume", "-b", "h:9092", "-t", "t", "-s", "avro"], out=io.StringIO()) == 2
