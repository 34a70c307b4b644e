"""`GroupAdmin`: subscription groups and consumer groups: their members, progress and offsets."""

from __future__ import annotations

import logging
from typing import Any

from rocketflow.client.admin.core import AdminCore
from rocketflow.client.admin.results import (
    LATEST,
    ConsumerProgress,
    QueueProgress,
    check_group,
    check_topic,
)
from rocketflow.client.errors import MQBrokerError, MQClientError, MQError
from rocketflow.protocol.bodies import (
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStats,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicRouteData,
)
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)

logger = logging.getLogger(__name__)

class GroupAdmin(AdminCore):
    """Subscription and consumer group operations."""

    # ------------------------------------------------------------------ subscription groups

    def group_list(self, *, cluster: str | None = None,
                   broker_addr: str | None = None) -> list[SubscriptionGroupConfig]:
        """The subscription groups of the targeted masters (merged by name, sorted)."""
        return self._run(self._group_list(cluster, broker_addr))

    async def _group_list(self, cluster: str | None, broker_addr: str | None) -> list[SubscriptionGroupConfig]:
        groups: dict[str, SubscriptionGroupConfig] = {}
        for addr in await self._target_masters(cluster, broker_addr):
            response = await self._invoke(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            table = self._decode(SubscriptionGroupWrapper, response, addr).subscription_group_table
            for name, config in table.items():
                groups.setdefault(name, config)
        return [groups[name] for name in sorted(groups)]

    def create_group(self, config: SubscriptionGroupConfig | str, *, cluster: str | None = None,
                     broker_addr: str | None = None, **settings: Any) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (a config, or a group name plus `SubscriptionGroupConfig`
        fields such as ``retry_max_times``) on the targeted masters. Returns their addresses."""
        if isinstance(config, str):
            try:
                config = SubscriptionGroupConfig(config, **settings)
            except TypeError as exc:
                raise MQClientError(f"invalid group settings: {exc}") from None
        elif settings:
            raise MQClientError("pass settings either in the SubscriptionGroupConfig or as keywords, not both")
        check_group(config.group_name)
        if config.retry_queue_nums < 0 or config.retry_max_times < -1:
            raise MQClientError("retry_queue_nums must be >= 0 and retry_max_times >= -1")
        return self._run(self._create_group(config, cluster, broker_addr))

    async def _create_group(self, config: SubscriptionGroupConfig, cluster: str | None,
                            broker_addr: str | None) -> list[str]:
        addrs = await self._target_masters(cluster, broker_addr)
        for addr in addrs:
            await self._invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
        return addrs

    def delete_group(self, group: str, *, cluster: str | None = None, broker_addr: str | None = None,
                     remove_offset: bool = False) -> list[str]:
        """DELETE_SUBSCRIPTIONGROUP on the targeted masters (and its offsets with ``remove_offset``)."""
        check_group(group)
        return self._run(self._delete_group(group, cluster, broker_addr, remove_offset))

    async def _delete_group(self, group: str, cluster: str | None, broker_addr: str | None,
                            remove_offset: bool) -> list[str]:
        addrs = await self._target_masters(cluster, broker_addr)
        header = DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offset)
        for addr in addrs:
            await self._invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)
        return addrs

    def clone_group_offsets(self, source_group: str, target_group: str, *, topic: str | None = None,
                            offline: bool = False) -> list[str]:
        """CLONE_GROUP_OFFSET on every broker that may hold ``source_group``'s offsets (``mqadmin
        cloneGroupOffset``): ``target_group`` then starts where ``source_group`` is. Returns the brokers."""
        check_group(source_group)
        check_group(target_group)
        if topic is not None:
            check_topic(topic)
        return self._run(self._clone_group_offsets(source_group, target_group, topic, offline))

    async def _clone_group_offsets(self, source_group: str, target_group: str, topic: str | None,
                                   offline: bool) -> list[str]:
        addrs = await self._group_brokers(source_group, topic)
        header = CloneGroupOffsetRequestHeader(src_group=source_group, dest_group=target_group, topic=topic,
                                               offline=offline)
        for addr in addrs:
            await self._invoke(addr, RequestCode.CLONE_GROUP_OFFSET, header)
        return addrs

    # ------------------------------------------------------------------ consumers

    def consumer_connections(self, group: str) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST; `MQBrokerError` CONSUMER_NOT_ONLINE when no member is connected."""
        check_group(group)
        return self._run(self._consumer_connections(group))

    def consumer_running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO of one client, relayed by a broker it is connected to."""
        check_group(group)
        return self._run(self._running_info(group, client_id))

    async def _running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        last_error: MQError | None = None
        header = GetConsumerRunningInfoRequestHeader(consumer_group=group, client_id=client_id, jstack_enable=False)
        for addr in await self._group_brokers(group, None):
            try:
                response = await self._invoke(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, header)
            except MQError as exc:
                last_error = exc
                continue
            return self._decode(ConsumerRunningInfo, response, addr)
        if last_error is not None:
            raise last_error
        raise MQClientError("no broker online to ask")

    def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        """Per queue: broker offset, consumer offset, lag, owning client ("" if none), last consumed
        message's store time; plus the group's consume TPS (GET_CONSUME_STATS on every broker)."""
        check_group(group)
        if topic is not None:
            check_topic(topic)
        return self._run(self._consumer_progress(group, topic))

    async def _consumer_progress(self, group: str, topic: str | None) -> ConsumerProgress:
        api = self.instance.api
        addrs = await self._group_brokers(group, topic)
        stats: list[ConsumeStats] = []
        for addr in addrs:
            stats.append(await api.get_consume_stats(addr, group, topic, self.timeout))
        owners = await self._queue_owners(group, addrs)
        queues = [QueueProgress(mq.topic, mq.broker_name, mq.queue_id, wrapper.broker_offset,
                                wrapper.consumer_offset, owners.get(mq, ""), wrapper.last_timestamp)
                  for table in stats for mq, wrapper in table.offset_table.items()]
        queues.sort(key=lambda row: (row.topic, row.broker_name, row.queue_id))
        return ConsumerProgress(group, queues, sum(table.consume_tps for table in stats))

    async def _queue_owners(self, group: str, addrs: list[str]) -> dict[MessageQueue, str]:
        """Queue -> client id(s) from every connected member's running info (best effort)."""
        api = self.instance.api
        connection: ConsumerConnection | None = None
        for addr in addrs:
            try:
                connection = await api.get_consumer_connection_list(addr, group, self.timeout)
                break
            except MQError:
                continue
        if connection is None:
            return {}
        owners: dict[MessageQueue, list[str]] = {}
        for member in sorted(connection.connection_set, key=lambda item: item.client_id):
            try:
                info = await self._running_info(group, member.client_id)
            except MQError as exc:
                logger.info("running info of %s/%s failed: %s", group, member.client_id, exc)
                continue
            for mq, process_queue in info.mq_table.items():
                if not process_queue.droped:
                    owners.setdefault(mq, []).append(member.client_id)
        return {mq: ",".join(clients) for mq, clients in owners.items()}

    def reset_offset(self, group: str, topic: str, timestamp_ms: int, *,
                     force: bool = False) -> dict[MessageQueue, int]:
        """Reset ``group``'s offsets of ``topic`` to the first message stored at or after ``timestamp_ms``
        (`EARLIEST`: the first retained one, `LATEST`: the end of each queue), through the brokers
        (INVOKE_BROKER_TO_RESET_OFFSET), which tell the group's running clients. Without ``force`` an
        offset only moves back. A broker that answers CONSUMER_NOT_ONLINE gets the offsets committed
        directly (what mqadmin does for groups with no live member). Returns queue -> new offset."""
        check_group(group)
        check_topic(topic)
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < LATEST:
            raise MQClientError(f"timestamp_ms must be epoch ms, EARLIEST (0) or LATEST (-1), got {timestamp_ms!r}")
        return self._run(self._reset_offset(group, topic, timestamp_ms, force))

    async def _reset_offset(self, group: str, topic: str, timestamp_ms: int, force: bool) -> dict[MessageQueue, int]:
        api = self.instance.api
        route = await self._route(topic)
        result: dict[MessageQueue, int] = {}
        for broker_name, addr in sorted(self._route_masters(route).items()):
            try:
                table = await api.invoke_broker_to_reset_offset(addr, topic, group, timestamp_ms, force, self.timeout)
            except MQBrokerError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
                table = await self._reset_offset_directly(addr, broker_name, route, group, topic, timestamp_ms, force)
            result.update(table)
        return dict(sorted(result.items()))

    async def _reset_offset_directly(self, addr: str, broker_name: str, route: TopicRouteData, group: str,
                                     topic: str, timestamp_ms: int, force: bool) -> dict[MessageQueue, int]:
        api = self.instance.api
        queue_nums = max((data.write_queue_nums for data in route.queue_datas if data.broker_name == broker_name),
                         default=0)
        table: dict[MessageQueue, int] = {}
        for queue_id in range(queue_nums):
            mq = MessageQueue(topic, broker_name, queue_id)
            if timestamp_ms == LATEST:
                target = await api.get_max_offset(addr, topic, queue_id, self.timeout)
            else:
                target = await api.search_offset(addr, topic, queue_id, timestamp_ms, self.timeout)
            try:
                current = await api.query_consumer_offset(addr, group, mq, self.timeout)
            except MQBrokerError:
                current = -1
            if not force and 0 <= current <= target:
                target = current
            await api.update_consumer_offset(addr, group, mq, target, self.timeout)
            table[mq] = target
        return table


__all__ = ["GroupAdmin"]
