"""Share groups (KIP-932) in the testkit: a broker configuration for share-group tests and
the group configuration helper.

Owns: :func:`share_broker_config` (broker settings a share-group test needs on Kafka 4.x,
opt-in: the other fixtures keep their configuration) and :func:`set_share_group_config` /
:func:`describe_share_group_config` (a share group's own settings through
IncrementalAlterConfigs / DescribeConfigs on a ``GROUP`` resource, confluent-kafka's
AdminClient). May touch: the cluster it is given, through the AdminClient only.

Facts of the Kafka 4.4.0 broker (its ``ShareGroupConfig``, ``GroupConfig`` and
``GroupCoordinatorConfig`` definitions, and what it answered):

* share groups are on by default in 4.x (the ``share.version`` feature is finalized at
  format time); the 3.9 broker has none of their APIs;
* a group's ``share.record.lock.duration.ms`` (at least 1000) must lie within the broker's
  ``group.share.min.record.lock.duration.ms`` .. ``group.share.max.record.lock.duration.ms``
  (15000 .. 60000 by default; the minimum bound itself may go down to 1000): a default broker
  refuses a lock shorter than 15 s, so :func:`share_broker_config` lowers that bound;
* a group's ``share.delivery.count.limit`` (the delivery attempt limit, at least 2) must lie
  within ``group.share.min.delivery.count.limit`` .. ``group.share.max.delivery.count.limit``
  (2 .. 10 by default); the broker's own default for groups is
  ``group.share.delivery.count.limit`` = 5, range 2..10;
* ``share.auto.offset.reset`` is ``latest`` by default (a new group skips what the topic
  already holds): tests that produce first set ``earliest``;
* group heartbeats are 5 s apart by default (``group.share.heartbeat.interval.ms``, minimum
  bound 5 s): a member's assignment arrives with a heartbeat, so the test broker beats faster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "DELIVERY_COUNT_LIMIT_RANGE",
    "RECORD_LOCK_DURATION_MS_RANGE",
    "SHARE_TEST_RECORD_LOCK_DURATION_MS",
    "ShareGroupConfigError",
    "describe_share_group_config",
    "set_share_group_config",
    "share_broker_config",
]

#: Bounds of the broker's ``group.share.record.lock.duration.ms`` (Kafka 4.4's validator).
RECORD_LOCK_DURATION_MS_RANGE = (1000, 3_600_000)
#: Bounds of the broker's ``group.share.delivery.count.limit`` (Kafka 4.4's validator).
DELIVERY_COUNT_LIMIT_RANGE = (2, 10)
#: The record lock of groups on the test broker unless a group sets its own: short enough for
#: a test waiting for a lock to expire, long enough that a loaded machine does not lose locks
#: of records being processed.
SHARE_TEST_RECORD_LOCK_DURATION_MS = 10_000

_DEFAULT_MAX_RECORD_LOCK_MS = 60_000  # group.share.max.record.lock.duration.ms default


class ShareGroupConfigError(RuntimeError):
    """The broker refused a share group's configuration (its message says why), or the
    arguments are outside what any Kafka 4.4 broker accepts."""


def share_broker_config(
    record_lock_duration_ms: int = SHARE_TEST_RECORD_LOCK_DURATION_MS,
    delivery_count_limit: int | None = None,
) -> dict[str, int]:
    """Broker settings for share-group tests, to pass as ``broker_config`` of a
    :class:`~kafka_actors.testing.KafkaBroker` (the ``share_broker`` fixture uses them).

    * groups may set ``share.record.lock.duration.ms`` down to 1000 ms
      (``group.share.min.record.lock.duration.ms`` = 1000; the default bound is 15000);
    * ``record_lock_duration_ms`` is the broker's default lock for groups that set none
      (``group.share.record.lock.duration.ms``; Kafka's default is 30000);
    * ``delivery_count_limit``, when given, is the broker's default delivery attempt limit
      (``group.share.delivery.count.limit``, 2..10; Kafka's default is 5);
    * members heartbeat every 500 ms (assignments arrive sooner) and a member that stops
      heartbeating leaves the group after 10 s (groups may go down to 1 s).
    """
    low, high = RECORD_LOCK_DURATION_MS_RANGE
    if not low <= record_lock_duration_ms <= high:
        raise ValueError(
            f"group.share.record.lock.duration.ms must be in {low}..{high}, "
            f"got {record_lock_duration_ms}"
        )
    config = {
        "group.share.min.record.lock.duration.ms": 1000,
        "group.share.record.lock.duration.ms": record_lock_duration_ms,
        "group.share.heartbeat.interval.ms": 500,
        "group.share.min.heartbeat.interval.ms": 100,
        "group.share.session.timeout.ms": 10_000,
        "group.share.min.session.timeout.ms": 1000,
    }
    if record_lock_duration_ms > _DEFAULT_MAX_RECORD_LOCK_MS:
        config["group.share.max.record.lock.duration.ms"] = record_lock_duration_ms
    if delivery_count_limit is not None:
        low, high = DELIVERY_COUNT_LIMIT_RANGE
        if not low <= delivery_count_limit <= high:
            raise ValueError(
                f"group.share.delivery.count.limit must be in {low}..{high}, "
                f"got {delivery_count_limit}"
            )
        config["group.share.delivery.count.limit"] = delivery_count_limit
    return config


def _admin(target: Any) -> Any:
    from confluent_kafka.admin import AdminClient

    if isinstance(target, str):
        conf: dict[str, Any] = {"bootstrap.servers": target}
    elif isinstance(target, Mapping):
        conf = dict(target)
    else:  # a KafkaCluster / KafkaBroker
        conf = dict(target.admin_config())
    conf.setdefault("log_level", 0)
    return AdminClient(conf)


def set_share_group_config(
    target: Any,
    group: str,
    *,
    auto_offset_reset: str | None = "earliest",
    record_lock_duration_ms: int | None = None,
    delivery_count_limit: int | None = None,
    config: Mapping[str, object] | None = None,
    timeout: float = 30.0,
) -> dict[str, str]:
    """Set share group ``group``'s configuration (IncrementalAlterConfigs, SET), then return
    its ``share.*`` configuration as the broker describes it.

    ``target``: a KafkaCluster/KafkaBroker, a bootstrap string, or an AdminClient config.
    ``auto_offset_reset`` is ``share.auto.offset.reset`` (``"earliest"`` by default: a test
    produces before its consumers join; ``None`` leaves it alone), ``record_lock_duration_ms``
    is ``share.record.lock.duration.ms``, ``delivery_count_limit`` is
    ``share.delivery.count.limit`` (the delivery attempt limit: a record delivered that many
    times and released again is archived); ``config`` adds any other group config by Kafka's
    name. The group need not exist yet. A refused value raises
    :class:`ShareGroupConfigError` with the broker's reason (e.g. a lock shorter than the
    broker's ``group.share.min.record.lock.duration.ms``)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    if not group:
        raise ShareGroupConfigError("a share group id must not be empty")
    entries: dict[str, object] = {}
    if auto_offset_reset is not None:
        entries["share.auto.offset.reset"] = auto_offset_reset
    if record_lock_duration_ms is not None:
        entries["share.record.lock.duration.ms"] = record_lock_duration_ms
    if delivery_count_limit is not None:
        entries["share.delivery.count.limit"] = delivery_count_limit
    entries.update(config or {})
    if entries:
        set_op: Any = AlterConfigOpType.SET
        resource = ConfigResource(
            ResourceType.GROUP,
            group,
            incremental_configs=[
                ConfigEntry(k, _config_text(v), incremental_operation=set_op)
                for k, v in entries.items()
            ],
        )
        admin = _admin(target)
        futures = admin.incremental_alter_configs([resource], request_timeout=timeout)
        try:
            for future in futures.values():
                future.result(timeout)
        except KafkaException as exc:
            raise ShareGroupConfigError(
                f"share group {group!r}: the broker refused {entries}: {exc.args[0]}"
            ) from exc
    return describe_share_group_config(target, group, timeout=timeout)


def describe_share_group_config(
    target: Any, group: str, *, timeout: float = 30.0
) -> dict[str, str]:
    """Share group ``group``'s ``share.*`` configuration as the broker describes it (values
    set on the group, else the broker's defaults)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ConfigResource,
        ResourceType,
    )

    admin = _admin(target)
    futures = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    out: dict[str, str] = {}
    for future in futures.values():
        for name, entry in future.result(timeout).items():
            if name.startswith("share."):
                out[name] = entry.value
    return out


def _config_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
