"""Topic routes as the client uses them: publish and subscribe queue lists."""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass

from rocketflow.protocol.bodies import BrokerData, QueueData, TopicRouteData
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import PermName

#: Broker id of a master.
MASTER_ID = 0


def _readable(perm: int) -> bool:
    return bool(perm & PermName.READ)


def _writeable(perm: int) -> bool:
    return bool(perm & PermName.WRITE)


class TopicPublishInfo:
    """The writable queues of a topic, on masters, sorted by broker name then queue id.

    `select_one_message_queue` round-robins over them (one counter per topic with a random
    start, like RocketMQ's ``ThreadLocalIndex`` without fault-latency tolerance), skipping the
    broker a failed attempt just went to when another one is available.
    """

    __slots__ = ("_counter", "_lock", "have_topic_router_info", "message_queues", "order_topic", "route")

    def __init__(self, message_queues: list[MessageQueue] | None = None, *, order_topic: bool = False,
                 have_topic_router_info: bool = False, route: TopicRouteData | None = None) -> None:
        self.message_queues: list[MessageQueue] = list(message_queues or [])
        self.order_topic = order_topic
        self.have_topic_router_info = have_topic_router_info
        self.route = route
        self._counter = itertools.count(random.randrange(1 << 16))
        self._lock = threading.Lock()

    def ok(self) -> bool:
        """Whether there is at least one queue to send to."""
        return bool(self.message_queues)

    def _next_index(self) -> int:
        with self._lock:
            return next(self._counter)

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue:
        """The next queue in round-robin order, avoiding ``last_broker_name`` if possible."""
        queues = self.message_queues
        if not queues:
            raise IndexError("the topic has no writable queue")
        if last_broker_name is not None:
            for _ in range(len(queues)):
                candidate = queues[self._next_index() % len(queues)]
                if candidate.broker_name != last_broker_name:
                    return candidate
        return queues[self._next_index() % len(queues)]

    def __repr__(self) -> str:
        return (f"TopicPublishInfo(order_topic={self.order_topic}, queues={len(self.message_queues)}, "
                f"have_topic_router_info={self.have_topic_router_info})")


def _broker_data(route: TopicRouteData, broker_name: str) -> BrokerData | None:
    for broker in route.broker_datas:
        if broker.broker_name == broker_name:
            return broker
    return None


def route_to_publish_info(topic: str, route: TopicRouteData) -> TopicPublishInfo:
    """RocketMQ's ``topicRouteData2TopicPublishInfo``.

    With an ``orderTopicConf`` (``"broker-a:4;broker-b:4"``) the queues come from it and the topic
    is ordered; otherwise every writable queue data whose broker has a master contributes ids
    ``0..writeQueueNums-1``, queue datas taken in broker-name order.
    """
    queues: list[MessageQueue] = []
    order_conf = route.order_topic_conf
    if order_conf:
        for item in order_conf.split(";"):
            name, _, count = item.partition(":")
            if name and count.strip().isdigit():
                queues.extend(MessageQueue(topic, name, queue_id) for queue_id in range(int(count)))
        return TopicPublishInfo(queues, order_topic=True, have_topic_router_info=True, route=route)
    for queue_data in sorted(route.queue_datas, key=lambda data: data.broker_name):
        if not _writeable(queue_data.perm):
            continue
        broker = _broker_data(route, queue_data.broker_name)
        if broker is None or broker.master_addr is None:
            continue
        queues.extend(MessageQueue(topic, queue_data.broker_name, queue_id)
                      for queue_id in range(queue_data.write_queue_nums))
    return TopicPublishInfo(queues, have_topic_router_info=True, route=route)


def route_to_subscribe_info(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """RocketMQ's ``topicRouteData2TopicSubscribeInfo``: ids ``0..readQueueNums-1`` of every
    readable queue data, sorted."""
    queues = {
        MessageQueue(topic, queue_data.broker_name, queue_id)
        for queue_data in route.queue_datas
        if _readable(queue_data.perm)
        for queue_id in range(queue_data.read_queue_nums)
    }
    return sorted(queues)


def normalized_route(route: TopicRouteData) -> TopicRouteData:
    """A deep copy with queue and broker data sorted by broker name (for change detection)."""
    return TopicRouteData(
        queue_datas=sorted((QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                            for q in route.queue_datas), key=lambda data: data.broker_name),
        broker_datas=sorted((BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs)) for b in route.broker_datas),
                            key=lambda data: data.broker_name),
        filter_server_table={addr: list(servers) for addr, servers in route.filter_server_table.items()},
        order_topic_conf=route.order_topic_conf,
    )


def shrink_default_route(route: TopicRouteData, default_topic_queue_nums: int) -> TopicRouteData:
    """The default topic's (TBW102) route with every queue data's read and write counts set to
    ``min(default_topic_queue_nums, readQueueNums)``, as a producer uses it for a new topic."""
    shrunk = normalized_route(route)
    for queue_data in shrunk.queue_datas:
        count = min(default_topic_queue_nums, queue_data.read_queue_nums)
        queue_data.read_queue_nums = count
        queue_data.write_queue_nums = count
    return shrunk


@dataclass(frozen=True, slots=True)
class FindBrokerResult:
    """A broker address found for a broker name: whether it is a slave and its version (0 if unknown)."""

    broker_addr: str
    slave: bool
    broker_version: int = 0


__all__ = [
    "MASTER_ID",
    "FindBrokerResult",
    "TopicPublishInfo",
    "normalized_route",
    "route_to_publish_info",
    "route_to_subscribe_info",
    "shrink_default_route",
]
