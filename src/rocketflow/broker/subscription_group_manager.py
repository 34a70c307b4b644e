"""`SubscriptionGroupManager`: consumer groups' broker-side configs (``config/subscriptionGroup.json``)."""

from __future__ import annotations

import concurrent.futures
import logging

from rocketflow.broker.config import BrokerConfig
from rocketflow.protocol.bodies import DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper
from rocketflow.store.config_file import SubscriptionGroupTable

logger = logging.getLogger(__name__)

#: Groups 4.9.3 creates at start (tools, filter servers, self test, ONS proxies, transactions).
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_SYS_RMQ_TRANS",
)


class SubscriptionGroupManager:
    """Group name -> `SubscriptionGroupConfig`; unknown groups are created on lookup when allowed."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.table = SubscriptionGroupTable(config.store.config_dir)

    def load(self) -> None:
        self.table.load()
        groups = self.table.groups
        for name in SYSTEM_GROUPS:
            if name not in groups:
                groups[name] = SubscriptionGroupConfig(name, consume_broadcast_enable=name != "TOOLS_CONSUMER")

    def persist(self) -> None:
        self.table.persist()

    @property
    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        return self.table.groups

    @property
    def data_version(self) -> DataVersion:
        return self.table.wrapper.data_version

    def snapshot(self) -> SubscriptionGroupWrapper:
        return self.table.snapshot()

    def written(self) -> concurrent.futures.Future[bool]:
        """Done once every change so far is on disk (True), or its write failed (False)."""
        return self.table.when_written()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults if absent and ``auto_create_subscription_group``."""
        found = self.lookup(group)
        return None if found is None else self.add_if_absent(found)

    def lookup(self, group: str) -> SubscriptionGroupConfig | None:
        """Like `find`, but a group that would be auto-created is returned without being stored yet.

        Request handlers validate first and store (`add_if_absent`) only once the request is accepted.
        """
        found = self.table.get(group)
        if found is not None or not self.config.auto_create_subscription_group:
            return found
        return SubscriptionGroupConfig(group)

    def add_if_absent(self, group_config: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        """Store ``group_config`` unless its group exists; returns the stored config."""
        found = self.table.get(group_config.group_name)
        if found is not None:
            return found
        self.table.put(group_config)
        logger.info("auto-created subscription group %s", group_config.group_name)
        return group_config

    def update(self, group_config: SubscriptionGroupConfig) -> None:
        self.table.put(group_config)
        logger.info("subscription group %s created/updated", group_config.group_name)

    def delete(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.remove(group)


__all__ = ["SYSTEM_GROUPS", "SubscriptionGroupManager"]
