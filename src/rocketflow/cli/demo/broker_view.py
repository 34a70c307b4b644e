"""The admin calls of a demo run: create its topic, read max offsets and group lag, commit offsets."""

from __future__ import annotations

import time

from rocketflow.cli.demo.settings import DemoError
from rocketflow.client import ClientInstance, MQBrokerError
from rocketflow.protocol.bodies import TopicConfig
from rocketflow.protocol.message import MessageQueue


class BrokerView:
    """The admin calls the demo makes: topic creation, max offsets, group lag, offset commits."""

    def __init__(self, instance: ClientInstance, topic: str) -> None:
        self.instance = instance
        self.topic = topic

    def create_topic(self, queues: int, timeout: float = 15.0) -> None:
        """Create the topic on every master of the cluster and wait for its route."""
        api = self.instance.api
        cluster = self.instance.run(api.get_broker_cluster_info())
        masters = sorted(data.master_addr for data in cluster.broker_addr_table.values() if data.master_addr)
        if not masters:
            raise DemoError("the name server knows no broker master; start one (rocketflow broker -n ...)")
        for addr in masters:
            self.instance.run(api.create_topic(addr, TopicConfig(self.topic, queues, queues)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            route = self.instance.run(api.get_topic_route(self.topic))
            if route is not None and sum(queue.read_queue_nums for queue in route.queue_datas) >= queues * len(masters):
                self.instance.run(self.instance.update_topic_route(self.topic))
                return
            time.sleep(0.1)
        raise DemoError(f"topic {self.topic} got no route from the name server within {timeout:.0f} s")

    def _masters(self) -> list[tuple[str, str]]:
        route = self.instance.topic_route(self.topic)
        if route is None:
            return []
        return [(data.broker_name, data.master_addr) for data in route.broker_datas if data.master_addr]

    def max_offsets(self) -> dict[tuple[str, int], int]:
        """Each queue's max offset (messages stored) by (broker name, queue id)."""
        offsets = {}
        for _, addr in self._masters():
            stats = self.instance.run(self.instance.api.get_topic_stats(addr, self.topic))
            for queue, offset in stats.offset_table.items():
                offsets[(queue.broker_name, queue.queue_id)] = offset.max_offset
        return offsets

    def group_lag(self, group: str) -> int | None:
        """The group's total lag on the topic as the broker sees it (None if it committed nothing)."""
        total = 0
        found = False
        for _, addr in self._masters():
            try:
                stats = self.instance.run(self.instance.api.get_consume_stats(addr, group, self.topic))
            except MQBrokerError:
                continue
            if stats.offset_table:
                found = True
                total += stats.compute_total_diff()
        return total if found else None

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        masters = dict(self._masters())
        for (broker_name, queue_id), offset in offsets.items():
            addr = masters.get(broker_name)
            if addr is not None:
                queue = MessageQueue(self.topic, broker_name, queue_id)
                self.instance.run(self.instance.api.update_consumer_offset(addr, group, queue, offset))

