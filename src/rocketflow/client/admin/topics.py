"""`TopicAdmin`: creating, changing, inspecting and deleting topics (and the name servers' KV config)."""

from __future__ import annotations

import logging
import time
from typing import Any

from rocketflow.client.admin.core import AdminCore
from rocketflow.client.admin.results import (
    DEFAULT_PERM,
    DEFAULT_QUEUE_NUMS,
    MESSAGE_TYPES,
    ORDER_TOPIC_CONFIG_NAMESPACE,
    QueueStats,
    check_topic,
    warn_queue_layout,
)
from rocketflow.client.errors import MQBrokerError, MQClientError, MQRemotingError
from rocketflow.protocol.bodies import (
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicFilterType,
    TopicRouteData,
)
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import (
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    PutKVConfigRequestHeader,
)

logger = logging.getLogger(__name__)

class TopicAdmin(AdminCore):
    """Topic operations."""

    # ------------------------------------------------------------------ topics

    def topic_list(self) -> list[str]:
        """Every topic the name server knows, sorted."""
        return sorted(self._run(self.instance.api.get_all_topic_list(self.timeout)))

    def topic_route(self, topic: str) -> TopicRouteData:
        """The topic's route; `MQClientError` (TOPIC_NOT_EXIST) when the name server has none."""
        check_topic(topic)
        return self._run(self._route(topic))

    def create_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                     read_queue_nums: int = DEFAULT_QUEUE_NUMS, write_queue_nums: int = DEFAULT_QUEUE_NUMS,
                     perm: int = DEFAULT_PERM, order: bool = False, message_type: str | None = None) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on ``broker_addr`` or every master of ``cluster`` (default: the only
        cluster); an ordered topic's queue layout is also put in the name servers' KV config. Returns the
        broker addresses. ``message_type`` (NORMAL, FIFO, DELAY or TRANSACTION) is the one kind of message
        RocketMQ 5.x clients may send to the topic (its ``message.type`` attribute); None: any kind."""
        check_topic(topic)
        for name, value in (("read_queue_nums", read_queue_nums), ("write_queue_nums", write_queue_nums)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise MQClientError(f"{name} must be a positive int, got {value!r}")
        if isinstance(perm, bool) or not isinstance(perm, int) or not 0 <= perm <= 15:
            raise MQClientError(f"perm must be PermName bits 0..15 (6 = read+write), got {perm!r}")
        attributes: dict[str, str] = {}
        if message_type is not None:
            if message_type.upper() not in MESSAGE_TYPES:
                raise MQClientError(f"message_type must be one of {', '.join(MESSAGE_TYPES)}, got {message_type!r}")
            attributes["message.type"] = message_type.upper()
        config = TopicConfig(topic, read_queue_nums, write_queue_nums, perm, TopicFilterType.SINGLE_TAG, 0, order,
                             attributes)
        addrs = self._run(self._create_topic(config, cluster, broker_addr))
        warn_queue_layout(topic, read_queue_nums, write_queue_nums)
        return addrs

    def ensure_topic(self, topic: str, *, queues: int = DEFAULT_QUEUE_NUMS, timeout: float = 15.0,
                     **create_options: Any) -> TopicRouteData:
        """The topic's route, creating the topic first (``queues`` read and write queues, other
        `create_topic` options as keywords) when the name server does not route it yet; waits up to
        ``timeout`` seconds for the brokers to register it."""
        try:
            return self.topic_route(topic)
        except MQClientError:
            self.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues, **create_options)
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.topic_route(topic)
            except MQClientError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def update_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                     read_queue_nums: int | None = None, write_queue_nums: int | None = None,
                     perm: int | None = None, order: bool | None = None) -> list[str]:
        """Change an existing topic's settings on its brokers (or ``broker_addr`` / ``cluster``'s masters),
        keeping each broker's current value of every setting not given."""
        check_topic(topic)
        changes: dict[str, Any] = {}
        for name, value in (("read_queue_nums", read_queue_nums), ("write_queue_nums", write_queue_nums)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise MQClientError(f"{name} must be a positive int, got {value!r}")
                changes[name] = value
        if perm is not None:
            if isinstance(perm, bool) or not isinstance(perm, int) or not 0 <= perm <= 15:
                raise MQClientError(f"perm must be PermName bits 0..15 (6 = read+write), got {perm!r}")
            changes["perm"] = perm
        if order is not None:
            changes["order"] = bool(order)
        if not changes:
            raise MQClientError("nothing to update: give at least one of the queue numbers, perm or order")
        configs = self._run(self._update_topic(topic, cluster, broker_addr, changes))
        for addr, config in configs.items():
            warn_queue_layout(topic, config.read_queue_nums, config.write_queue_nums, f" on {addr}")
        return list(configs)

    async def _update_topic(self, topic: str, cluster: str | None, broker_addr: str | None,
                            changes: dict[str, Any]) -> dict[str, TopicConfig]:
        if cluster is None and broker_addr is None:
            addrs = list(self._route_masters(await self._route(topic)).values())
        else:
            addrs = await self._target_masters(cluster, broker_addr)
        updated: dict[str, TopicConfig] = {}
        for addr in addrs:
            response = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            current = self._decode(TopicConfigSerializeWrapper, response, addr).topic_config_table.get(topic)
            if current is None:
                raise MQClientError(f"topic {topic!r} does not exist on broker {addr}; create it first")
            config = TopicConfig(topic, changes.get("read_queue_nums", current.read_queue_nums),
                                 changes.get("write_queue_nums", current.write_queue_nums),
                                 changes.get("perm", current.perm), current.topic_filter_type,
                                 current.topic_sys_flag, changes.get("order", current.order), dict(current.attributes))
            await self.instance.api.create_topic(addr, config, timeout=self.timeout)
            updated[addr] = config
        if "order" in changes or "write_queue_nums" in changes:
            await self._put_order_conf(topic, addrs, changes.get("order"))
        return updated

    async def _create_topic(self, config: TopicConfig, cluster: str | None, broker_addr: str | None) -> list[str]:
        addrs = await self._target_masters(cluster, broker_addr)
        for addr in addrs:
            await self.instance.api.create_topic(addr, config, timeout=self.timeout)
        if config.order:
            await self._put_order_conf(config.topic_name, addrs, True)
        return addrs

    async def _put_order_conf(self, topic: str, addrs: list[str], order: bool | None) -> None:
        """Keep the name servers' ORDER_TOPIC_CONFIG entry (``brokerName:writeQueueNums;...``) in step."""
        if order is False:
            for namesrv in self.namesrv_addresses:
                await self._invoke(namesrv, RequestCode.DELETE_KV_CONFIG, DeleteKVConfigRequestHeader(
                    namespace=ORDER_TOPIC_CONFIG_NAMESPACE, key=topic))
            return
        parts: list[str] = []
        for addr in addrs:
            response = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            current = self._decode(TopicConfigSerializeWrapper, response, addr).topic_config_table.get(topic)
            runtime = await self._runtime_info(addr)
            if current is not None and (order or current.order):
                parts.append(f"{runtime.get('brokerName', addr)}:{current.write_queue_nums}")
        if not parts:
            return
        for namesrv in self.namesrv_addresses:
            await self._invoke(namesrv, RequestCode.PUT_KV_CONFIG, PutKVConfigRequestHeader(
                namespace=ORDER_TOPIC_CONFIG_NAMESPACE, key=topic, value=";".join(sorted(parts))))

    def topic_configs(self, topic: str) -> dict[str, TopicConfig]:
        """The topic's config on each master that routes it (broker address -> config): queues, permission,
        and RocketMQ 5's attributes (``message.type``)."""
        check_topic(topic)
        return self._run(self._topic_configs(topic))

    async def _topic_configs(self, topic: str) -> dict[str, TopicConfig]:
        found: dict[str, TopicConfig] = {}
        for addr in self._route_masters(await self._route(topic)).values():
            response = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            config = self._decode(TopicConfigSerializeWrapper, response, addr).topic_config_table.get(topic)
            if config is not None:
                found[addr] = config
        return found

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG from the name server (None when it has no such item)."""
        return self._run(self._get_kv_config(namespace, key))

    async def _get_kv_config(self, namespace: str, key: str) -> str | None:
        api = self.instance.api
        request = RemotingCommand.request(RequestCode.GET_KV_CONFIG, GetKVConfigRequestHeader(
            namespace=namespace, key=key).to_ext_fields(), language=api.language)
        response = await api.invoke_namesrv(request, self.timeout)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, "name server")
        try:
            return GetKVConfigResponseHeader.from_command(response).value
        except ProtocolError as exc:
            raise MQRemotingError(f"malformed GET_KV_CONFIG response: {exc}") from exc

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """DELETE_TOPIC_IN_BROKER on the masters holding it (of ``cluster`` when given), then
        DELETE_TOPIC_IN_NAMESRV on every name server. Returns the broker addresses."""
        check_topic(topic)
        return self._run(self._delete_topic(topic, cluster))

    async def _delete_topic(self, topic: str, cluster: str | None) -> list[str]:
        api = self.instance.api
        route = await api.get_topic_route(topic, self.timeout)
        if cluster is not None:
            addrs = await self._target_masters(cluster, None)
        elif route is not None:
            addrs = list(self._route_masters(route).values())
        else:
            raise MQClientError(f"topic {topic!r} does not exist (the name server has no route for it)",
                                ResponseCode.TOPIC_NOT_EXIST)
        for addr in addrs:
            await self._invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic=topic))
        for namesrv in self.namesrv_addresses:
            await self._invoke(namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                               DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster))
        return addrs

    def topic_stats(self, topic: str) -> list[QueueStats]:
        """Min/max offset and last store time of every queue of the topic, from its brokers."""
        check_topic(topic)
        return self._run(self._topic_stats(topic))

    async def _topic_stats(self, topic: str) -> list[QueueStats]:
        route = await self._route(topic)
        rows: list[QueueStats] = []
        for _, addr in sorted(self._route_masters(route).items()):
            table = await self.instance.api.get_topic_stats(addr, topic, self.timeout)
            rows.extend(QueueStats(mq.topic, mq.broker_name, mq.queue_id, offset.min_offset, offset.max_offset,
                                   offset.last_update_timestamp) for mq, offset in table.offset_table.items())
        return sorted(rows, key=lambda row: (row.broker_name, row.queue_id))


__all__ = ["TopicAdmin"]
