"""`MessageAdmin`: finding, tracing, following and sending messages."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from rocketflow.client.admin.core import AdminCore
from rocketflow.client.admin.results import (
    ADMIN_PRODUCER_GROUP,
    DEFAULT_QUERY_MAX_NUM,
    check_topic,
    topic_kind,
)
from rocketflow.client.admin.tail import MessageTail
from rocketflow.client.api import SendResult
from rocketflow.client.errors import MQClientError
from rocketflow.client.producer.producer import Producer
from rocketflow.client.trace import TraceRecord, decode_trace_data
from rocketflow.protocol.ids import InvalidMessageIdError, decode_offset_msg_id
from rocketflow.protocol.message import Message, MessageExt, MessageQueue
from rocketflow.protocol.names import (
    TRACE_TOPIC,
    PermName,
)
from rocketflow.remoting.codes import ResponseCode

logger = logging.getLogger(__name__)

class MessageAdmin(AdminCore):
    """Message operations."""

    # ------------------------------------------------------------------ messages

    def view_message(self, msg_id: str, *, topic: str | None = None) -> MessageExt:
        """A message by its offset msg id (VIEW_MESSAGE_BY_ID) or by its UNIQ_KEY id (QUERY_MESSAGE of the
        unique key in ``topic``, or in every non-system topic when not given)."""
        msg_id = msg_id.strip()
        if not msg_id:
            raise MQClientError("the message id is empty")
        if topic is not None:
            check_topic(topic)
        return self._run(self._view_message(msg_id, topic))

    async def _view_message(self, msg_id: str, topic: str | None) -> MessageExt:
        api = self.instance.api
        info = await api.get_broker_cluster_info(self.timeout)
        known: dict[str, str] = {addr: name for name, broker in info.broker_addr_table.items()
                                 for addr in broker.broker_addrs.values()}
        try:
            host, port, offset = decode_offset_msg_id(msg_id)
        except InvalidMessageIdError:
            host, port, offset = "", 0, -1
        addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if addr in known:
            msg = await api.view_message(addr, offset, self.timeout)
            msg.broker_name = msg.broker_name or known[addr]
            return msg
        topics = [topic] if topic is not None else sorted(
            name for name in await api.get_all_topic_list(self.timeout) if topic_kind(name) != "system")
        for name in topics:
            found = await self._query(name, msg_id, 0, time.time_ns() // 1_000_000 + 60_000, 32, unique_key=True)
            matching = [msg for msg in found if msg.uniq_key == msg_id or msg.msg_id == msg_id]
            if matching:
                return matching[0]
        where = f"topic {topic!r}" if topic is not None else "any topic"
        raise MQClientError(f"message {msg_id!r} not found: not an offset msg id of a known broker and no "
                            f"message with that UNIQ_KEY in {where}", ResponseCode.QUERY_NOT_FOUND)

    def query_messages(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int | None = None,
                       max_num: int = DEFAULT_QUERY_MAX_NUM) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS, stored in [begin_ms, end_ms], from every broker."""
        check_topic(topic)
        if not key or not key.strip():
            raise MQClientError("the message key is empty")
        if isinstance(max_num, bool) or not isinstance(max_num, int) or max_num <= 0:
            raise MQClientError(f"max_num must be a positive int, got {max_num!r}")
        end = end_ms if end_ms is not None else time.time_ns() // 1_000_000 + 60_000
        if begin_ms < 0 or end < begin_ms:
            raise MQClientError(f"invalid time range: begin {begin_ms} .. end {end}")
        messages = self._run(self._query(topic, key, begin_ms, end, max_num))
        keyed = [msg for msg in messages if key in msg.key_list]
        return sorted(keyed, key=lambda msg: (msg.store_timestamp, msg.broker_name, msg.queue_id,
                                              msg.queue_offset))[:max_num]

    def message_trace(self, msg_id: str, *, trace_topic: str = TRACE_TOPIC,
                      max_num: int = DEFAULT_QUERY_MAX_NUM) -> list[TraceRecord]:
        """The trace records of ``msg_id`` (its UNIQ_KEY) in ``trace_topic``, oldest first (RocketMQ's
        ``queryMsgTraceById``): the Pub of each send, SubBefore / SubAfter of each consume."""
        records: list[TraceRecord] = []
        for trace in self.query_messages(trace_topic, msg_id, max_num=max_num):
            records.extend(record for record in decode_trace_data(trace.body.decode("utf-8", "replace"))
                           if record.msg_id == msg_id)
        return sorted(records, key=lambda record: record.timestamp)

    async def _query(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int, *,
                     unique_key: bool = False) -> list[MessageExt]:
        api = self.instance.api
        route = await api.get_topic_route(topic, self.timeout)
        if route is None:
            if unique_key:
                return []
            raise MQClientError(f"topic {topic!r} does not exist (the name server has no route for it)",
                                ResponseCode.TOPIC_NOT_EXIST)
        messages: list[MessageExt] = []
        for broker_name, addr in sorted(self._route_masters(route).items()):
            found = await api.query_message(addr, topic, key, max_num, begin_ms, end_ms, unique_key=unique_key,
                                            timeout=self.timeout)
            for msg in found:
                msg.broker_name = msg.broker_name or broker_name
            messages.extend(found)
        return messages

    def open_tail(self, topic: str, *, from_now: bool = True, batch_size: int = 32,
                  hold_seconds: float = 2.0) -> MessageTail:
        """Follow ``topic`` on every readable queue from its end (``from_now``) or its first retained message."""
        check_topic(topic)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 0 < batch_size <= 1024:
            raise MQClientError(f"batch_size must be an int in 1..1024, got {batch_size!r}")
        positions, addrs = self._run(self._tail_positions(topic, from_now))
        return MessageTail(self, topic, positions, addrs, batch_size, hold_seconds)

    async def _tail_positions(self, topic: str, from_now: bool) -> tuple[dict[MessageQueue, int], dict[str, str]]:
        api = self.instance.api
        route = await self._route(topic)
        addrs = self._route_masters(route)
        positions: dict[MessageQueue, int] = {}
        for data in route.queue_datas:
            addr = addrs.get(data.broker_name)
            if addr is None or not data.perm & PermName.READ:
                continue
            for queue_id in range(data.read_queue_nums):
                if from_now:
                    offset = await api.get_max_offset(addr, topic, queue_id, self.timeout)
                else:
                    offset = await api.get_min_offset(addr, topic, queue_id, self.timeout)
                positions[MessageQueue(topic, data.broker_name, queue_id)] = max(0, offset)
        if not positions:
            raise MQClientError(f"topic {topic!r} has no readable queue")
        return positions, addrs

    def send(self, topic: str, body: bytes | str, *, keys: str | Iterable[str] | None = None,
             tags: str | None = None, sharding_key: str | None = None,
             properties: Mapping[str, str] | None = None, group: str = ADMIN_PRODUCER_GROUP) -> SendResult:
        """Send one message with a producer of ``group`` on the admin's client instance."""
        data = body.encode() if isinstance(body, str) else bytes(body)
        msg = Message(topic, data, tags=tags, keys=keys, properties=properties)
        producer = Producer(group, client_config=self.instance.config)
        producer.start()
        try:
            return producer.send(msg, sharding_key=sharding_key)
        finally:
            producer.shutdown()


__all__ = ["MessageAdmin"]
