"""A share group's own configuration for these tests (``share.auto.offset.reset``,
``share.record.lock.duration.ms``), through confluent-kafka's AdminClient
IncrementalAlterConfigs on the GROUP resource. (The testkit grows its own helper for this;
this one keeps the share consumer's tests standing on their own meanwhile.)"""

from __future__ import annotations

from collections.abc import Mapping


def set_group_config(bootstrap: str, group: str, values: Mapping[str, str]) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in values.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
