"""confluent-kafka's Schema Registry serializers write Avro, JSON Schema and Protobuf records
(real ``Producer`` on the embedded mock cluster); its deserializers, plugged into our
``KafkaConsumer`` and ``AsyncKafkaConsumer`` as they are, give back objects equal to those
produced. The consumers are assigned the partition (no group: deserialization is what is
tested, and the mock's group coordinator is not).

The registry is the client's own in-memory one (``mock://`` URL): no Schema Registry server
installs from the package registries this project reaches (Karapace is not on the index,
Confluent's server jars are not on Maven Central). The wire format (magic byte, schema id,
Protobuf message indexes) and the registry calls (register on produce, fetch by id on
consume) are those of a real registry; serializer and deserializer share one client because
the in-memory store lives in the client object.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("jsonschema")
pytest.importorskip("google.protobuf")

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import (
    JSONDeserializer,
    JSONSerializer,
)
from confluent_kafka.schema_registry.protobuf import (
    ProtobufDeserializer,
    ProtobufSerializer,
)
from confluent_kafka.serialization import (
    MessageField,
    SerializationContext,
    StringDeserializer,
    StringSerializer,
)
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.testing import MockCluster

pytestmark = pytest.mark.mock

AVRO_SCHEMA = """
{"type": "record", "name": "Order", "namespace": "shop",
 "fields": [{"name": "id", "type": "long"}, {"name": "product", "type": "string"},
            {"name": "price", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "note", "type": ["null", "string"], "default": null}]}
"""

JSON_SCHEMA = """
{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
 "properties": {"id": {"type": "integer"}, "product": {"type": "string"},
                "price": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}},
                "note": {"type": ["string", "null"]}},
 "required": ["id", "product", "price"]}
"""


def _order_message_class() -> Any:
    """A Protobuf message class ``shop.Order`` built from a descriptor (no protoc needed)."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="kafka_actors_test_shop_order.proto", package="shop", syntax="proto3"
    )
    msg = fdp.message_type.add(name="Order")
    f = descriptor_pb2.FieldDescriptorProto
    for number, (name, ftype, label) in enumerate(
        [
            ("id", f.TYPE_INT64, f.LABEL_OPTIONAL),
            ("product", f.TYPE_STRING, f.LABEL_OPTIONAL),
            ("price", f.TYPE_DOUBLE, f.LABEL_OPTIONAL),
            ("tags", f.TYPE_STRING, f.LABEL_REPEATED),
        ],
        start=1,
    ):
        msg.field.add(name=name, number=number, type=ftype, label=label)
    pool = descriptor_pool.Default()
    try:
        file = pool.FindFileByName(fdp.name)
    except KeyError:
        file = pool.Add(fdp)
    return message_factory.GetMessageClass(file.message_types_by_name["Order"])


Order = _order_message_class()


def _orders() -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "product": f"p-{i % 3}",
            "price": 1.5 * i,
            "tags": ["a", "b"][: i % 3],
            "note": None if i % 2 else f"n{i}",
        }
        for i in range(20)
    ]


def _proto_orders() -> list[Any]:
    return [
        Order(id=o["id"], product=o["product"], price=o["price"], tags=o["tags"]) for o in _orders()
    ]


Case = tuple[
    list[Any], Callable[[SchemaRegistryClient], Any], Callable[[SchemaRegistryClient], Any]
]


def _case(kind: str) -> Case:
    if kind == "avro":
        return (
            _orders(),
            lambda sr: AvroSerializer(sr, AVRO_SCHEMA),
            lambda sr: AvroDeserializer(sr),
        )
    if kind == "json":
        return (
            _orders(),
            lambda sr: JSONSerializer(JSON_SCHEMA, sr),
            lambda sr: JSONDeserializer(None, schema_registry_client=sr),
        )
    return (
        _proto_orders(),
        lambda sr: ProtobufSerializer(Order, sr, {"use.deprecated.format": False}),
        lambda sr: ProtobufDeserializer(Order, {"use.deprecated.format": False}),
    )


def _produce(mock: MockCluster, topic: str, objects: list[Any], serializer: Any) -> None:
    key_ser = StringSerializer()
    producer = Producer({"bootstrap.servers": mock.bootstrap_servers})
    for i, obj in enumerate(objects):
        producer.produce(
            topic,
            key=key_ser(f"order-{i}"),
            value=serializer(obj, SerializationContext(topic, MessageField.VALUE)),
            headers=[("source", b"test")],
        )
    assert producer.flush(30) == 0


def _config(mock: MockCluster, group: str) -> dict[str, object]:
    return {
        "bootstrap.servers": mock.bootstrap_servers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }


KINDS = ["avro", "json", "protobuf"]


@pytest.mark.parametrize("kind", KINDS)
def test_kafka_consumer_with_schema_registry_deserializers(
    mock_cluster: MockCluster, kafka_topic: Callable[..., str], kind: str
) -> None:
    objects, make_ser, make_deser = _case(kind)
    sr = SchemaRegistryClient.new_client({"url": "mock://kafka-actors-test"})
    topic = kafka_topic(mock_cluster, 1)
    _produce(mock_cluster, topic, objects, make_ser(sr))
    assert sr.get_subjects() == [f"{topic}-value"]

    got: list[Any] = []
    keys: list[Any] = []
    with KafkaConsumer(
        _config(mock_cluster, f"g-{topic}"),
        key_deserializer=StringDeserializer(),
        value_deserializer=make_deser(sr),
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 60
        while len(got) < len(objects) and time.monotonic() < deadline:
            for record in consumer.poll(1.0):
                got.append(record.value)
                keys.append(record.key)
    assert got == objects
    assert keys == [f"order-{i}" for i in range(len(objects))]


@pytest.mark.parametrize("kind", KINDS)
def test_async_kafka_consumer_with_schema_registry_deserializers(
    mock_cluster: MockCluster, kafka_topic: Callable[..., str], kind: str
) -> None:
    objects, make_ser, make_deser = _case(kind)
    sr = SchemaRegistryClient.new_client({"url": "mock://kafka-actors-test"})
    topic = kafka_topic(mock_cluster, 1)
    _produce(mock_cluster, topic, objects, make_ser(sr))

    async def consume() -> list[Any]:
        got: list[Any] = []
        async with AsyncKafkaConsumer(
            config=_config(mock_cluster, f"g-{topic}"), value_deserializer=make_deser(sr)
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            async with asyncio.timeout(60):
                while len(got) < len(objects):
                    batch = await consumer.getmany(timeout_ms=1000)
                    for records in batch.values():
                        got.extend(r.value for r in records)
        return got

    assert asyncio.run(consume()) == objects


def test_a_record_the_registry_cannot_resolve_is_a_deserialization_error(
    mock_cluster: MockCluster, kafka_topic: Callable[..., str]
) -> None:
    """Avro written with one registry, read with another that lacks the schema id: the
    confluent deserializer raises, our consumer raises RecordDeserializationError naming the
    record (origin value, raw bytes kept), as for any deserializer."""
    from kafka_actors.errors import DeserializationOrigin, RecordDeserializationError

    objects, make_ser, make_deser = _case("avro")
    topic = kafka_topic(mock_cluster, 1)
    writer = SchemaRegistryClient.new_client({"url": "mock://writer"})
    _produce(mock_cluster, topic, objects[:1], make_ser(writer))
    reader = SchemaRegistryClient.new_client({"url": "mock://reader"})
    with KafkaConsumer(
        _config(mock_cluster, f"g-{topic}"), value_deserializer=make_deser(reader)
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 60
        error: RecordDeserializationError | None = None
        while error is None and time.monotonic() < deadline:
            try:
                assert not consumer.poll(1.0)
            except RecordDeserializationError as exc:
                error = exc
    assert error is not None
    assert (error.topic, error.partition, error.offset) == (topic, 0, 0)
    assert error.origin is DeserializationOrigin.VALUE
    assert error.value is not None and error.value[0] == 0  # the wire format's magic byte
