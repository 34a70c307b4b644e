"""The name server's routing tables (RocketMQ's RouteInfoManager), as plain state with no I/O.

Brokers register their topics; producers and consumers ask for a topic's route. Everything runs
on the name server's event loop, so no locking is needed.

A broker address is owned by the connection it first registered over. While it is live (registered
within the expiry window, its owner connection still open), `address_conflict` says why a registration
from another connection may not move its (broker name, id) to another address, and
`unregister_conflict` why another connection may not unregister it: the name server refuses both
unless the request comes from an admin (ACL on). A restarted broker registering its own address again
over a new connection is no conflict: that connection is kept as a stand-by, which keeps the address
alive but changes none of the owner's tables, and takes over when the owner's connection closes. So
the address stays routed until its last connection closes, and a second registrant of the same
address can neither rewrite its topics nor remove it by disconnecting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rocketflow.protocol.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from rocketflow.protocol.names import PermName

logger = logging.getLogger(__name__)

MASTER_ID = 0


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class BrokerLiveInfo:
    """When a broker address last registered, with what topic-table version, over which channels."""

    last_update_timestamp: int
    data_version: DataVersion
    #: the open connections the address registered over, the owner first (more than one after a restart
    #: whose old connection the name server has not seen close yet)
    channel_ids: list[object]
    ha_server_addr: str

    def is_live(self, now: int, expired_ms: int) -> bool:
        return bool(self.channel_ids) and self.last_update_timestamp + expired_ms >= now

    def is_owner(self, channel_id: object) -> bool:
        return bool(self.channel_ids) and self.channel_ids[0] == channel_id


@dataclass(slots=True)
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class RouteInfoManager:
    """Topic -> queues per broker, broker name -> addresses, cluster -> broker names, and liveness."""

    clock: Callable[[], int] = _now_ms
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    # ------------------------------------------------------------------ registration

    def address_conflict(self, *, broker_name: str, broker_id: int, broker_addr: str, channel_id: object,
                         expired_ms: int) -> str | None:
        """Why a registration of ``broker_addr`` as (``broker_name``, ``broker_id``) over ``channel_id``
        would take the place of a live broker at another address, or None if it would not."""
        broker_data = self.broker_addr_table.get(broker_name)
        old_addr = broker_data.broker_addrs.get(broker_id) if broker_data is not None else None
        if old_addr is None or old_addr == broker_addr:
            return None
        live = self.broker_live_table.get(old_addr)
        if live is None or not live.is_live(self.clock(), expired_ms) or live.is_owner(channel_id):
            return None
        return (f"broker {broker_name} id {broker_id} is registered at {old_addr}, which is alive on another "
                f"connection: refusing to move it to {broker_addr} (it moves once that broker is gone, or "
                "register with an admin account on a name server with ACL)")

    def unregister_conflict(self, *, broker_addr: str, channel_id: object, expired_ms: int) -> str | None:
        """Why an UNREGISTER_BROKER of ``broker_addr`` over ``channel_id`` may not remove it, or None."""
        live = self.broker_live_table.get(broker_addr)
        if live is None or not live.is_live(self.clock(), expired_ms) or live.is_owner(channel_id):
            return None
        return (f"broker {broker_addr} is alive on another connection: only its own connection (or an admin "
                "account on a name server with ACL) may unregister it")

    def registered_over(self, broker_addr: str, channel_id: object) -> bool:
        """Whether ``broker_addr`` registered over ``channel_id`` (its owner or a stand-by)."""
        live = self.broker_live_table.get(broker_addr)
        return live is not None and channel_id in live.channel_ids

    def register_broker(
        self,
        *,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: list[str],
        channel_id: object,
        expired_ms: int | None = None,
    ) -> RegisterBrokerResult:
        """Record a broker's (re-)registration; returns the master's addresses for a slave.

        The caller checks `address_conflict` first (this moves the address whatever it is). With
        ``expired_ms``, a registration of a live address over another connection than its owner's only
        adds that connection as a stand-by (and keeps the address alive): the tables stay the owner's."""
        previous = self.broker_live_table.get(broker_addr)
        if expired_ms is not None and previous is not None and not previous.is_owner(channel_id) \
                and previous.is_live(self.clock(), expired_ms):
            if channel_id not in previous.channel_ids:
                previous.channel_ids.append(channel_id)
                logger.info("broker %s registered again over another connection: kept as a stand-by of the "
                            "connection it registered over first", broker_addr)
            previous.last_update_timestamp = self.clock()
            return self._master_of(broker_name, broker_id)
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        register_first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster=cluster_name, broker_name=broker_name)
            self.broker_addr_table[broker_name] = broker_data
        # A slave promoted to master (or the reverse) keeps its address under a new id: drop the old id.
        for other_id, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del broker_data.broker_addrs[other_id]
        old_addr = broker_data.broker_addrs.get(broker_id)
        broker_data.broker_addrs[broker_id] = broker_addr
        register_first = register_first or old_addr is None

        if topic_config_wrapper is not None and broker_id == MASTER_ID and (
            register_first or self.is_broker_topic_config_changed(broker_addr, topic_config_wrapper.data_version)
        ):
            for topic_config in topic_config_wrapper.topic_config_table.values():
                self._create_and_update_queue_data(broker_name, topic_config)

        data_version = topic_config_wrapper.data_version if topic_config_wrapper else DataVersion(0, 0)
        channel_ids = list(previous.channel_ids) if previous is not None else []
        if channel_id not in channel_ids:
            channel_ids.append(channel_id)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            last_update_timestamp=self.clock(),
            data_version=DataVersion(data_version.timestamp, data_version.counter),
            channel_ids=channel_ids,
            ha_server_addr=ha_server_addr,
        )
        if previous is None:
            logger.info("new broker registered: %s %s (id %d) in %s", broker_name, broker_addr, broker_id,
                        cluster_name)
        if filter_server_list:
            self.filter_server_table[broker_addr] = list(filter_server_list)
        else:
            self.filter_server_table.pop(broker_addr, None)

        return self._master_of(broker_name, broker_id)

    def _master_of(self, broker_name: str, broker_id: int) -> RegisterBrokerResult:
        """A slave's answer: its master's address and HA address (empty for a master, or none live)."""
        result = RegisterBrokerResult()
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_id != MASTER_ID and broker_data is not None:
            master_addr = broker_data.broker_addrs.get(MASTER_ID)
            master_live = self.broker_live_table.get(master_addr) if master_addr else None
            if master_addr and master_live:
                result.ha_server_addr = master_live.ha_server_addr
                result.master_addr = master_addr
        return result

    def _create_and_update_queue_data(self, broker_name: str, topic_config: TopicConfig) -> None:
        queue_data = QueueData(
            broker_name=broker_name,
            read_queue_nums=topic_config.read_queue_nums,
            write_queue_nums=topic_config.write_queue_nums,
            perm=topic_config.perm,
            topic_sys_flag=topic_config.topic_sys_flag,
        )
        by_broker = self.topic_queue_table.setdefault(topic_config.topic_name, {})
        existing = by_broker.get(broker_name)
        if existing != queue_data:
            if existing is None:
                logger.info("new topic registered: %s on %s", topic_config.topic_name, broker_name)
            by_broker[broker_name] = queue_data

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        live = self.broker_live_table.get(broker_addr)
        return live is None or (live.data_version.timestamp, live.data_version.counter) != (
            data_version.timestamp,
            data_version.counter,
        )

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live else None

    def update_broker_info_update_timestamp(self, broker_addr: str) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_timestamp = self.clock()

    def unregister_broker(self, *, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """A broker leaving cleanly (UNREGISTER_BROKER)."""
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        remove_broker_name = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None:
            broker_data.broker_addrs.pop(broker_id, None)
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                remove_broker_name = True
        if remove_broker_name:
            names = self.cluster_addr_table.get(cluster_name)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster_name]
            self._remove_topics_of_brokers([broker_name])
        logger.info("broker unregistered: %s %s (id %d)", broker_name, broker_addr, broker_id)

    # ------------------------------------------------------------------ liveness

    def scan_not_active_brokers(self, expired_ms: int) -> list[BrokerLiveInfo]:
        """Drop brokers silent for longer than ``expired_ms``; returns what was dropped (to close channels)."""
        now = self.clock()
        expired = [
            (addr, live)
            for addr, live in self.broker_live_table.items()
            if live.last_update_timestamp + expired_ms < now
        ]
        for addr, live in expired:
            logger.warning("broker %s expired: silent for %d ms", addr, now - live.last_update_timestamp)
            self._remove_broker_addr(addr)
        return [live for _, live in expired]

    def on_channel_destroy(self, remote_addr: str | None, channel_id: object) -> None:
        """A connection is gone: remove the broker addresses registered only through it.

        An address that also registered over another open connection (its broker restarted, or
        someone registered the same address) stays, owned by the oldest of those."""
        gone = []
        for addr, live in self.broker_live_table.items():
            if channel_id in live.channel_ids:
                was_owner = live.is_owner(channel_id)
                live.channel_ids.remove(channel_id)
                if not live.channel_ids:
                    gone.append(addr)
                elif was_owner:
                    # a stand-by owns it now: its next registration's topic table is taken whatever its version
                    live.data_version = DataVersion(-1, -1)
                    logger.info("broker %s: its connection closed, another it registered over takes over", addr)
        for addr in gone:
            self._remove_broker_addr(addr)

    def _remove_broker_addr(self, broker_addr: str) -> None:
        """Remove a broker address and whatever only it served."""
        if self.broker_live_table.pop(broker_addr, None) is None:
            return
        self.filter_server_table.pop(broker_addr, None)
        removed_names: list[str] = []
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            for broker_id, addr in list(broker_data.broker_addrs.items()):
                if addr == broker_addr:
                    del broker_data.broker_addrs[broker_id]
                    logger.info("removed broker address %s (%s id %d)", addr, broker_name, broker_id)
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                removed_names.append(broker_name)
        for cluster, names in list(self.cluster_addr_table.items()):
            names.difference_update(removed_names)
            if not names:
                del self.cluster_addr_table[cluster]
        self._remove_topics_of_brokers(removed_names)

    def _remove_topics_of_brokers(self, broker_names: Iterable[str]) -> None:
        names = set(broker_names)
        if not names:
            return
        for topic, by_broker in list(self.topic_queue_table.items()):
            for name in names:
                by_broker.pop(name, None)
            if not by_broker:
                del self.topic_queue_table[topic]
                logger.info("topic %s has no brokers left; removed", topic)

    # ------------------------------------------------------------------ queries

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The topic's route, or None unless it has queue data and at least one broker."""
        by_broker = self.topic_queue_table.get(topic)
        if not by_broker:
            return None
        queue_datas = [
            QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
            for _, q in sorted(by_broker.items())
        ]
        broker_datas: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for broker_name in sorted(by_broker):
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is None:
                continue
            broker_datas.append(
                BrokerData(broker_data.cluster, broker_data.broker_name, dict(broker_data.broker_addrs))
            )
            for addr in broker_data.broker_addrs.values():
                servers = self.filter_server_table.get(addr)
                if servers:
                    filter_servers[addr] = list(servers)
        if not broker_datas:
            return None
        return TopicRouteData(queue_datas=queue_datas, broker_datas=broker_datas,
                              filter_server_table=filter_servers)

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={
                name: BrokerData(data.cluster, data.broker_name, dict(data.broker_addrs))
                for name, data in self.broker_addr_table.items()
            },
            cluster_addr_table={cluster: set(names) for cluster, names in self.cluster_addr_table.items()},
        )

    def all_topics(self) -> TopicList:
        return TopicList(topic_list=set(self.topic_queue_table))

    def topics_by_cluster(self, cluster: str) -> TopicList:
        names = self.cluster_addr_table.get(cluster, set())
        return TopicList(
            topic_list={topic for topic, by_broker in self.topic_queue_table.items() if names & by_broker.keys()}
        )

    def system_topics(self) -> TopicList:
        """Cluster names and broker names are system topics too (as RocketMQ reports them)."""
        topics = set(self.cluster_addr_table)
        for names in self.cluster_addr_table.values():
            topics.update(names)
        broker_addr = None
        for data in self.broker_addr_table.values():
            broker_addr = data.select_broker_addr()
            if broker_addr:
                break
        return TopicList(topic_list=topics, broker_addr=broker_addr)

    def topics_with_sys_flag(self, predicate: Callable[[int], bool]) -> TopicList:
        return TopicList(
            topic_list={
                topic
                for topic, by_broker in self.topic_queue_table.items()
                if by_broker and all(predicate(q.topic_sys_flag) for q in by_broker.values())
            }
        )

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        if cluster_name is None:
            self.topic_queue_table.pop(topic, None)
            return
        by_broker = self.topic_queue_table.get(topic)
        if by_broker is None:
            return
        for broker_name in self.cluster_addr_table.get(cluster_name, set()):
            by_broker.pop(broker_name, None)
        if not by_broker:
            del self.topic_queue_table[topic]

    def change_write_perm_of_broker(self, broker_name: str, *, writable: bool) -> int:
        """WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER; returns the number of topics changed."""
        changed = 0
        for by_broker in self.topic_queue_table.values():
            queue_data = by_broker.get(broker_name)
            if queue_data is None:
                continue
            perm = queue_data.perm | PermName.WRITE if writable else queue_data.perm & ~int(PermName.WRITE)
            queue_data.perm = int(perm)
            changed += 1
        return changed
