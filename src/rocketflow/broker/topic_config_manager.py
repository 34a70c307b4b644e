"""`TopicConfigManager`: the broker's topic table (``config/topics.json``) and how topics come to be.

System topics are added at start (as RocketMQ 4.9.3's TopicConfigManager does); other topics are
created by admin requests, on a send to an unknown topic from a default topic that has
PERM_INHERIT, or for retry / dead-letter queues. Every change bumps the table's data version,
is persisted (off the loop, see `rocketflow.store.config_file`), and calls ``on_change`` (the broker
then re-registers with its name servers).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable

from rocketflow.broker.config import BrokerConfig
from rocketflow.protocol.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper, TopicFilterType
from rocketflow.protocol.names import (
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    PermName,
    is_inherited,
    is_system_topic,
    reply_topic,
)
from rocketflow.store.config_file import TopicConfigTable

logger = logging.getLogger(__name__)

#: Queues of SCHEDULE_TOPIC_XXXX (one per delay level; 4.9.3's SCHEDULE_TOPIC_QUEUE_NUM).
SCHEDULE_TOPIC_QUEUE_NUMS = 18


class TopicConfigManager:
    """Topic name -> `TopicConfig`, persisted in ``topics.json``."""

    def __init__(self, config: BrokerConfig, on_change: Callable[[], None] | None = None) -> None:
        self.config = config
        self.table = TopicConfigTable(config.store.config_dir)
        self.on_change = on_change
        #: names treated as system topics besides the well-known ones
        self.extra_system_topics: set[str] = set()

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Load ``topics.json`` and add the system topics that are missing."""
        self.table.load()
        config = self.config
        system: list[TopicConfig] = [TopicConfig(SELF_TEST_TOPIC, 1, 1)]
        if config.auto_create_topic_enable:
            system.append(TopicConfig(DEFAULT_TOPIC, config.default_topic_queue_nums, config.default_topic_queue_nums,
                                      perm=int(PermName.INHERIT | PermName.READ | PermName.WRITE)))
        system.append(TopicConfig(BENCHMARK_TOPIC, 1024, 1024))
        cluster_perm = PermName.INHERIT | (PermName.READ | PermName.WRITE if config.cluster_topic_enable else 0)
        system.append(TopicConfig(config.cluster, perm=int(cluster_perm)))
        broker_perm = PermName.INHERIT | (PermName.READ | PermName.WRITE if config.broker_topic_enable else 0)
        system.append(TopicConfig(config.broker_name, 1, 1, perm=int(broker_perm)))
        system.append(TopicConfig(OFFSET_MOVED_EVENT, 1, 1))
        system.append(TopicConfig(reply_topic(config.cluster), 1, 1))
        system.append(TopicConfig(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUMS, SCHEDULE_TOPIC_QUEUE_NUMS))
        if config.trace_topic_enable:
            system.append(TopicConfig(config.msg_trace_topic_name, 1, 1))
        self.extra_system_topics = {config.cluster, config.broker_name}
        topics = self.table.topics
        for topic_config in system:
            if topic_config.topic_name not in topics:
                topics[topic_config.topic_name] = topic_config
        if not config.auto_create_topic_enable and DEFAULT_TOPIC in topics:
            # TBW102 stays (an older run may have created it) but no longer lends its INHERIT bit.
            topics[DEFAULT_TOPIC].perm &= ~int(PermName.INHERIT)

    def persist(self) -> None:
        self.table.persist()

    # ------------------------------------------------------------------ queries

    @property
    def data_version(self) -> DataVersion:
        return self.table.data_version

    @property
    def topics(self) -> dict[str, TopicConfig]:
        return self.table.topics

    def select(self, topic: str) -> TopicConfig | None:
        return self.table.topics.get(topic)

    def is_system_topic(self, topic: str) -> bool:
        return is_system_topic(topic, self.config.cluster, self.config.broker_name)

    def snapshot(self) -> TopicConfigSerializeWrapper:
        """A copy of the table and its data version (for REGISTER_BROKER and GET_ALL_TOPIC_CONFIG); safe
        to take from any thread."""
        wrapper = self.table.snapshot()
        wrapper.topic_config_table = {
            name: TopicConfig(c.topic_name, c.read_queue_nums, c.write_queue_nums, c.perm, c.topic_filter_type,
                              c.topic_sys_flag, c.order, dict(c.attributes))
            for name, c in wrapper.topic_config_table.items()
        }
        return wrapper

    def written(self) -> concurrent.futures.Future[bool]:
        """Done once every change so far is on disk (True), or its write failed (False; see `TopicConfigTable`)."""
        return self.table.when_written()

    # ------------------------------------------------------------------ changes

    def update(self, topic_config: TopicConfig) -> None:
        """Create or replace a topic (admin), persist (see `written`), notify."""
        topic_config.perm = int(topic_config.perm)
        self.table.put(topic_config)
        logger.info("topic %s created/updated: %s", topic_config.topic_name, topic_config)
        self._changed()

    def delete(self, topic: str) -> TopicConfig | None:
        removed = self.table.remove(topic)
        if removed is not None:
            logger.info("topic %s deleted", topic)
            self._changed()
        return removed

    def plan_in_send(self, topic: str, default_topic: str, remote_address: str, client_queue_nums: int,
                     topic_sys_flag: int = 0) -> TopicConfig | None:
        """The config ``topic`` gets when a send auto-creates it from ``default_topic`` (None if that is not
        allowed); not stored yet (see `add_if_absent`)."""
        existing = self.select(topic)
        if existing is not None:
            return existing
        default_config = self.select(default_topic)
        if default_config is None:
            logger.warning("cannot auto-create topic %s: default topic %s does not exist (from %s)",
                           topic, default_topic, remote_address)
            return None
        perm = default_config.perm
        if default_topic == DEFAULT_TOPIC and not self.config.auto_create_topic_enable:
            perm = int(PermName.READ | PermName.WRITE)
        if not is_inherited(perm):
            logger.warning("cannot auto-create topic %s: default topic %s has no inherit permission (perm %d), "
                           "from %s", topic, default_topic, perm, remote_address)
            return None
        queue_nums = max(0, min(client_queue_nums, default_config.write_queue_nums))
        return TopicConfig(topic, queue_nums, queue_nums, perm=int(perm & ~PermName.INHERIT),
                           topic_filter_type=TopicFilterType.SINGLE_TAG, topic_sys_flag=topic_sys_flag)

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0) -> TopicConfig:
        """The retry / dead-letter topic ``topic``, created with ``queue_nums`` queues if absent."""
        return self.add_if_absent(self.plan_in_send_back(topic, queue_nums, perm, topic_sys_flag))

    def plan_in_send_back(self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0) -> TopicConfig:
        """What `create_in_send_back` would return, without storing a new topic (see `add_if_absent`)."""
        existing = self.select(topic)
        if existing is not None:
            return existing
        return TopicConfig(topic, queue_nums, queue_nums, perm=int(perm), topic_sys_flag=topic_sys_flag)

    def add_if_absent(self, topic_config: TopicConfig) -> TopicConfig:
        """Store a planned topic unless its name exists (then persist and notify); returns the stored config."""
        existing = self.select(topic_config.topic_name)
        if existing is not None:
            return existing
        logger.info("creating topic %s: %s", topic_config.topic_name, topic_config)
        self.table.put(topic_config)
        self._changed()
        return topic_config

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:
                logger.exception("topic change callback failed")


__all__ = ["SCHEDULE_TOPIC_QUEUE_NUMS", "TopicConfigManager"]
