"""`RouteTables`: a client instance's topic routes and broker addresses.

Routes come from the name servers (`update_topic_route`, every ``poll_name_server_interval`` for the
topics in use); each one is kept normalized, with the publish queues a producer picks from and the
readable queues a consumer rebalances over (`rocketflow.client.route`). The broker address table
answers "which address serves this broker name" for sends (the master), pulls (the suggested broker
id) and admin lookups (any address, the master first).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random

from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.instance.runtime import InstanceRuntime, maybe_await
from rocketflow.client.route import (
    MASTER_ID,
    FindBrokerResult,
    TopicPublishInfo,
    normalized_route,
    route_to_publish_info,
    route_to_subscribe_info,
    shrink_default_route,
)
from rocketflow.protocol.bodies import ConsumerData, TopicRouteData
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import DEFAULT_TOPIC

logger = logging.getLogger(__name__)


class RouteTables(InstanceRuntime):
    """The route and broker address tables of a client instance, and the lookups over them."""

    def __init__(self, config: ClientConfig, client_id: str | None = None) -> None:
        super().__init__(config, client_id)
        self._route_lock: asyncio.Lock | None = None
        #: topic -> the (normalized) route last fetched
        self.topic_route_table: dict[str, TopicRouteData] = {}
        #: broker name -> {broker id: address}
        self.broker_addr_table: dict[str, dict[int, str]] = {}
        #: broker name -> {address: version reported in heartbeat responses}
        self.broker_version_table: dict[str, dict[str, int]] = {}
        self._publish_table: dict[str, TopicPublishInfo] = {}
        self._subscribe_table: dict[str, list[MessageQueue]] = {}

    # ------------------------------------------------------------------ routes

    def _topics_in_use(self) -> set[str]:
        topics = set(self._publish_table)
        for consumer in self.consumers().values():
            try:
                data = consumer.consumer_data()
            except Exception:
                logger.exception("%s: consumer_data() failed", self.client_id)
                continue
            if isinstance(data, ConsumerData):
                topics.update(sub.topic for sub in data.subscription_data_set)
        return topics

    async def update_all_topic_routes(self) -> None:
        """Refresh the route of every topic a producer published to or a consumer subscribes."""
        for topic in sorted(self._topics_in_use()):
            await self.update_topic_route(topic)

    async def update_topic_route(self, topic: str, *, is_default: bool = False, default_topic_queue_nums: int = 4,
                                 create_topic_key: str = DEFAULT_TOPIC, raise_errors: bool = False) -> bool:
        """Fetch ``topic``'s route (or, with ``is_default``, the route of ``create_topic_key`` shrunk to
        ``default_topic_queue_nums`` queues per broker) and apply it if it changed. False if no route.

        A failed lookup (no name server answers, or one refuses) is logged and gives False, or with
        ``raise_errors`` is raised (`MQError`) for the caller to report."""
        lock = self._route_lock
        if lock is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        async with lock:
            try:
                if is_default:
                    route = await self.api.get_topic_route(create_topic_key)
                    if route is not None:
                        route = shrink_default_route(route, default_topic_queue_nums)
                else:
                    route = await self.api.get_topic_route(topic)
            except MQError as exc:
                if raise_errors:
                    raise
                logger.warning("%s: route lookup of %s failed: %s", self.client_id,
                               create_topic_key if is_default else topic, exc)
                return False
            if route is None:
                logger.debug("%s: no route for %s", self.client_id, create_topic_key if is_default else topic)
                return False
            route = normalized_route(route)
            if self.topic_route_table.get(topic) != route or self._route_needs_update(topic):
                self._apply_route(topic, route)
            return True

    def _route_needs_update(self, topic: str) -> bool:
        info = self._publish_table.get(topic)
        if info is None or not info.ok():
            return True
        return topic not in self._subscribe_table

    def _apply_route(self, topic: str, route: TopicRouteData) -> None:
        known = {addr for addrs in self.broker_addr_table.values() for addr in addrs.values()}
        new_broker = False
        for broker in route.broker_datas:
            self.broker_addr_table[broker.broker_name] = dict(broker.broker_addrs)
            new_broker = new_broker or any(addr not in known for addr in broker.broker_addrs.values())
        if new_broker and self.producers():
            self._broker_joined()
        self._publish_table[topic] = route_to_publish_info(topic, route)
        subscribe = route_to_subscribe_info(topic, route)
        self._subscribe_table[topic] = subscribe
        self.topic_route_table[topic] = route
        logger.info("%s: route of %s is now %s", self.client_id, topic, route.encode().decode())
        for consumer in self.consumers().values():
            hook = getattr(consumer, "update_topic_subscribe_info", None)
            if callable(hook):
                try:
                    result = hook(topic, list(subscribe))
                    if inspect.isawaitable(result):
                        self._spawn(maybe_await(result))
                except Exception:
                    logger.exception("%s: update_topic_subscribe_info(%s) failed", self.client_id, topic)

    def _broker_joined(self) -> None:
        """A route named a broker address not seen before while producers are registered (a hook:
        `Heartbeats` introduces the client to the new broker)."""

    def clean_offline_brokers(self) -> None:
        """Drop broker addresses no route mentions any more."""
        known = {addr for route in self.topic_route_table.values() for broker in route.broker_datas
                 for addr in broker.broker_addrs.values()}
        for broker_name in list(self.broker_addr_table):
            addrs = {broker_id: addr for broker_id, addr in self.broker_addr_table[broker_name].items()
                     if addr in known}
            if addrs:
                self.broker_addr_table[broker_name] = addrs
            else:
                del self.broker_addr_table[broker_name]
                self.broker_version_table.pop(broker_name, None)
                logger.info("%s: broker %s is offline, removed", self.client_id, broker_name)


    def topic_route(self, topic: str) -> TopicRouteData | None:
        return self.topic_route_table.get(topic)

    def topic_publish_info(self, topic: str) -> TopicPublishInfo:
        """The topic's publish queues from the last route (an empty, not-ok info if none yet)."""
        return self._publish_table.get(topic) or TopicPublishInfo()

    def topic_subscribe_info(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues from the last route, sorted ([] if no route yet)."""
        return list(self._subscribe_table.get(topic, ()))

    # ------------------------------------------------------------------ broker addresses

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        """The master's address of ``broker_name``."""
        addrs = self.broker_addr_table.get(broker_name)
        return addrs.get(MASTER_ID) if addrs else None

    def find_broker_address_in_subscribe(self, broker_name: str, broker_id: int = MASTER_ID,
                                         only_this_broker: bool = False) -> FindBrokerResult | None:
        """``broker_name``'s address with ``broker_id``; for a slave id also id + 1; unless
        ``only_this_broker``, any address of it (lowest id) as a last resort."""
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        slave = broker_id != MASTER_ID
        if addr is None and slave:
            addr = addrs.get(broker_id + 1)
        if addr is None and not only_this_broker:
            first_id = min(addrs)
            addr, slave = addrs[first_id], first_id != MASTER_ID
        if addr is None:
            return None
        return FindBrokerResult(addr, slave, self.find_broker_version(broker_name, addr))

    def find_broker_address_in_admin(self, broker_name: str) -> FindBrokerResult | None:
        """Any address of ``broker_name``, the master's if it has one."""
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        broker_id = min(addrs)
        addr = addrs[broker_id]
        return FindBrokerResult(addr, broker_id != MASTER_ID, self.find_broker_version(broker_name, addr))

    def find_broker_version(self, broker_name: str, addr: str) -> int:
        return self.broker_version_table.get(broker_name, {}).get(addr, 0)

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        """The master (else a slave) of a random broker of ``topic``'s route."""
        route = self.topic_route_table.get(topic)
        if route is None or not route.broker_datas:
            return None
        broker = random.choice(route.broker_datas)
        return broker.select_broker_addr()

    def vip_address(self, addr: str) -> str:
        """``addr`` on the VIP channel (port - 2) when `ClientConfig.vip_channel_enabled`."""
        if not self.config.vip_channel_enabled:
            return addr
        host, _, port = addr.rpartition(":")
        return f"{host}:{int(port) - 2}" if port.isdigit() else addr

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP to a broker of ``topic``; [] when unknown (no route, RPC failure)."""
        addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            await self.update_topic_route(topic)
            addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            return []
        try:
            return await self.api.get_consumer_id_list(addr, group, self.config.mq_client_api_timeout)
        except MQError as exc:
            logger.warning("%s: consumer list of %s from %s failed: %s", self.client_id, group, addr, exc)
            return []


__all__ = ["RouteTables"]
