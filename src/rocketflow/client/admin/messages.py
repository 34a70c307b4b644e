"""`MessageAdmin`: finding, reading, tracing, following, sending and re-consuming messages."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from rocketflow.client.admin.core import AdminCore
from rocketflow.client.admin.results import (
    ADMIN_PRODUCER_GROUP,
    DEFAULT_QUERY_MAX_NUM,
    EARLIEST,
    MASTER_ID,
    TOOLS_CONSUMER_GROUP,
    check_group,
    check_topic,
    topic_kind,
)
from rocketflow.client.admin.tail import MessageTail
from rocketflow.client.api import PullStatus, SendResult, process_pull_result
from rocketflow.client.consumer.consume.context import ConsumeMessageDirectlyResult
from rocketflow.client.errors import MQClientError
from rocketflow.client.producer.producer import Producer
from rocketflow.client.trace import TraceRecord, decode_trace_data
from rocketflow.protocol.ids import InvalidMessageIdError, decode_offset_msg_id
from rocketflow.protocol.message import Message, MessageExt, MessageQueue
from rocketflow.protocol.names import (
    TRACE_TOPIC,
    PermName,
)
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.headers import ConsumeMessageDirectlyResultRequestHeader, PullMessageRequestHeader

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

    def messages_by_time(self, topic: str, begin_ms: int, end_ms: int, *, broker_name: str | None = None,
                         queue_id: int | None = None, max_num: int = DEFAULT_QUERY_MAX_NUM) -> list[MessageExt]:
        """Messages of ``topic`` stored in [begin_ms, end_ms] (epoch ms; `EARLIEST` for the first retained
        one), read from the readable queues (only ``broker_name`` / ``queue_id`` when given) without
        committing offsets: at most ``max_num``, the oldest first (each queue is read from where its
        messages reach ``begin_ms``)."""
        check_topic(topic)
        if isinstance(max_num, bool) or not isinstance(max_num, int) or not 0 < max_num <= 1024:
            raise MQClientError(f"max_num must be an int in 1..1024, got {max_num!r}")
        if begin_ms < 0 or end_ms < begin_ms:
            raise MQClientError(f"invalid time range: begin {begin_ms} .. end {end_ms}")
        if queue_id is not None and (isinstance(queue_id, bool) or not isinstance(queue_id, int) or queue_id < 0):
            raise MQClientError(f"queue_id must be an int >= 0, got {queue_id!r}")
        return self._run(self._messages_by_time(topic, begin_ms, end_ms, broker_name, queue_id, max_num))

    async def _messages_by_time(self, topic: str, begin_ms: int, end_ms: int, broker_name: str | None,
                                queue_id: int | None, max_num: int) -> list[MessageExt]:
        route = await self._route(topic)
        addrs = self._route_masters(route)
        queues = [MessageQueue(topic, data.broker_name, qid) for data in route.queue_datas
                  if data.broker_name in addrs and data.perm & PermName.READ
                  and (broker_name is None or data.broker_name == broker_name)
                  for qid in range(data.read_queue_nums) if queue_id is None or qid == queue_id]
        if not queues:
            where = "" if broker_name is None and queue_id is None else \
                f" matching broker {broker_name or 'any'} / queue {'any' if queue_id is None else queue_id}"
            raise MQClientError(f"topic {topic!r} has no readable queue{where}")
        found: list[MessageExt] = []
        for mq in sorted(queues):
            found.extend(await self._queue_messages(addrs[mq.broker_name], mq, begin_ms, end_ms, max_num))
        found.sort(key=lambda msg: (msg.store_timestamp, msg.broker_name, msg.queue_id, msg.queue_offset))
        return found[:max_num]

    async def _queue_messages(self, addr: str, mq: MessageQueue, begin_ms: int, end_ms: int,
                              max_num: int) -> list[MessageExt]:
        api = self.instance.api
        max_offset = await api.get_max_offset(addr, mq.topic, mq.queue_id, self.timeout)
        if begin_ms <= EARLIEST:
            offset = await api.get_min_offset(addr, mq.topic, mq.queue_id, self.timeout)
        else:
            offset = await api.search_offset(addr, mq.topic, mq.queue_id, begin_ms, self.timeout)
        messages: list[MessageExt] = []
        while offset < max_offset and len(messages) < max_num:
            header = PullMessageRequestHeader(
                consumer_group=TOOLS_CONSUMER_GROUP, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
                max_msg_nums=min(32, max_num - len(messages)), sys_flag=int(PullSysFlag.SUBSCRIPTION),
                commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription="*", expression_type="TAG")
            result = await api.pull_message(addr, header, self.timeout)
            if result.status is PullStatus.FOUND:
                for msg in process_pull_result(result, mq):
                    if msg.store_timestamp > end_ms:
                        return messages
                    if msg.store_timestamp >= begin_ms:
                        messages.append(msg)
                for bad in result.undecodable:
                    logger.warning("%s: the record at offset %d cannot be decoded (%s); skipped", mq,
                                   bad.queue_offset, bad.reason)
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        return messages[:max_num]

    def consume_message_directly(self, group: str, msg_id: str, *, client_id: str | None = None,
                                 topic: str | None = None) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: have a running client of ``group`` (``client_id``, default the first
        connected one) consume the stored message ``msg_id`` (found as `view_message` does) once, relayed
        by the broker that stores it: no offset moves, a failure is not retried (RocketMQ Dashboard's
        "resend"). Returns the client's report; `MQBrokerError` when the broker or the client refuses."""
        check_group(group)
        msg_id = msg_id.strip()
        if not msg_id:
            raise MQClientError("the message id is empty")
        if topic is not None:
            check_topic(topic)
        return self._run(self._consume_message_directly(group, msg_id, client_id, topic))

    async def _consume_message_directly(self, group: str, msg_id: str, client_id: str | None,
                                        topic: str | None) -> ConsumeMessageDirectlyResult:
        msg = await self._view_message(msg_id, topic)
        info = await self.instance.api.get_broker_cluster_info(self.timeout)
        broker = info.broker_addr_table.get(msg.broker_name)
        addr = broker.broker_addrs.get(MASTER_ID) if broker is not None else None
        if not addr:
            host, port = msg.store_host
            addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if client_id is None:
            connection = await self._consumer_connections(group)
            members = sorted(member.client_id for member in connection.connection_set)
            if not members:
                raise MQClientError(f"no client of group {group!r} is connected", ResponseCode.CONSUMER_NOT_ONLINE)
            client_id = members[0]
        header = ConsumeMessageDirectlyResultRequestHeader(consumer_group=group, client_id=client_id,
                                                           msg_id=msg.offset_msg_id, broker_name=msg.broker_name)
        response = await self._invoke(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, header)
        return self._decode(ConsumeMessageDirectlyResult, response, addr)

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
