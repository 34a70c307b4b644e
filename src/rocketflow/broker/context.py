"""`BrokerContext`: what the broker's request processors and services work on.

The controller builds one `BrokerParts` (settings, identity, store, config tables, client and lock
registries, counters, the ACL hook) and hands it to every processor and service typed as a
`BrokerContext`, or as a narrower protocol such as `ConfigTables`. Nothing in it leads back to the
controller or to a processor: a processor that builds on another part's work (the put path, the
transaction service, the pull filters) receives that object in its constructor. See
docs/design/broker.md#the-context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from rocketflow.acl import AclRequestHook
from rocketflow.broker.client_manager import ClientManager
from rocketflow.broker.config import BrokerConfig
from rocketflow.broker.rebalance_lock_manager import RebalanceLockManager
from rocketflow.broker.stats import BrokerStats
from rocketflow.broker.subscription_group_manager import SubscriptionGroupManager
from rocketflow.broker.topic_config_manager import TopicConfigManager
from rocketflow.broker.unconsumed_deletions import UnconsumedDeletions
from rocketflow.protocol.ids import pack_host
from rocketflow.store import MessageStore
from rocketflow.store.config_file import ConsumerOffsetManager, DelayOffsetManager


@dataclass(slots=True)
class BrokerIdentity:
    """Where this broker is reached: ``ip:port`` and the packed store host its records carry.

    Built from the configured port; `bind` sets the real one once the server listens (a port of 0
    picks a free one).
    """

    ip: str
    port: int
    address: str = field(init=False)
    store_host: bytes = field(init=False)

    def __post_init__(self) -> None:
        self.bind(self.port)

    def bind(self, port: int) -> None:
        self.port = port
        self.address = f"{self.ip}:{port}"
        self.store_host = pack_host(self.ip, port)


class ConfigTables(Protocol):
    """The broker's persisted tables: topics, subscription groups, consumer and delay offsets."""

    @property
    def topics(self) -> TopicConfigManager: ...

    @property
    def groups(self) -> SubscriptionGroupManager: ...

    @property
    def offsets(self) -> ConsumerOffsetManager: ...

    @property
    def delay_offsets(self) -> DelayOffsetManager: ...


class BrokerContext(ConfigTables, Protocol):
    """Everything a request processor may use of its broker, besides the tables."""

    @property
    def config(self) -> BrokerConfig:
        """The live settings: UPDATE_BROKER_CONFIG changes some while the broker runs, so read them on use."""

    @property
    def identity(self) -> BrokerIdentity: ...

    @property
    def store(self) -> MessageStore: ...

    @property
    def clients(self) -> ClientManager: ...

    @property
    def locks(self) -> RebalanceLockManager: ...

    @property
    def stats(self) -> BrokerStats: ...

    @property
    def unconsumed_deletions(self) -> UnconsumedDeletions: ...

    @property
    def acl_hook(self) -> AclRequestHook | None:
        """The server's ACL hook (None: ACL off), for checks that need more than the request."""


@dataclass(frozen=True, slots=True, eq=False)
class BrokerParts:
    """The parts of one broker, as its controller (or a test) assembles them: a `BrokerContext`."""

    config: BrokerConfig
    identity: BrokerIdentity
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    delay_offsets: DelayOffsetManager
    clients: ClientManager
    locks: RebalanceLockManager
    stats: BrokerStats
    unconsumed_deletions: UnconsumedDeletions
    acl_hook: AclRequestHook | None = None

    @classmethod
    def create(cls, config: BrokerConfig, *, acl_hook: AclRequestHook | None = None,
               on_topics_change: Callable[[], None] | None = None) -> BrokerParts:
        """New parts for ``config`` (nothing loaded or started: the controller does that)."""
        store = MessageStore(config.store)
        offsets = ConsumerOffsetManager(config.store.config_dir)
        unconsumed = UnconsumedDeletions(lambda: offsets.table)
        store.clean_service.trim_listeners.append(unconsumed.on_trimmed)
        return cls(
            config=config,
            identity=BrokerIdentity(config.advertised_ip, config.listen_port),
            store=store,
            topics=TopicConfigManager(config, on_change=on_topics_change),
            groups=SubscriptionGroupManager(config),
            offsets=offsets,
            delay_offsets=DelayOffsetManager(config.store.config_dir),
            clients=ClientManager(notify_enabled=lambda: config.notify_consumer_ids_changed_enable,
                                  channel_expired_ms=config.channel_expired_timeout_ms),
            locks=RebalanceLockManager(config.rebalance_lock_max_live_time_ms),
            stats=BrokerStats(),
            unconsumed_deletions=unconsumed,
            acl_hook=acl_hook,
        )


__all__ = ["BrokerContext", "BrokerIdentity", "BrokerParts", "ConfigTables"]
