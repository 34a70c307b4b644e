"""A broker's processors on a `BrokerContext` built from real parts, without a server or TCP.

`run_unit` makes the parts as the controller does (a `MessageStore` on a temporary directory, the
topic and group tables, the offset tables, the client and lock registries), wires the processors and
services to them, and runs a scenario on an event loop. Requests are handed to the processors
directly, on a `Channel` with no transport: what a processor sends to the client is dropped.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketflow.broker.config import build_broker_config
from rocketflow.broker.context import BrokerParts
from rocketflow.broker.message_filter import FilterCompiler
from rocketflow.broker.message_put import MessagePut
from rocketflow.broker.processors.admin import AdminBrokerProcessor
from rocketflow.broker.processors.client_manage import ClientManageProcessor
from rocketflow.broker.processors.consumer_manage import ConsumerManageProcessor
from rocketflow.broker.processors.end_transaction import EndTransactionProcessor
from rocketflow.broker.processors.pull import PullMessageProcessor
from rocketflow.broker.processors.query import QueryMessageProcessor
from rocketflow.broker.processors.send import SendMessageProcessor
from rocketflow.broker.processors.send_back import SendBackProcessor
from rocketflow.broker.replication import BrokerReplication
from rocketflow.broker.schedule_message_service import ScheduleMessageService
from rocketflow.broker.transaction import TransactionalMessageService
from rocketflow.net import Channel, Processor, RequestContext
from rocketflow.net.connection import RequestDispatcher
from rocketflow.protocol.codec import decode_records
from rocketflow.protocol.ids import UniqueIdGenerator
from rocketflow.protocol.message import MessageExt
from rocketflow.protocol.properties import encode_properties
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.remoting.codes import RequestCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2

CLIENT_ADDRESS = "10.0.0.7:40000"
_ids = UniqueIdGenerator()


@dataclass
class UnitBroker:
    """The parts, the put path, the processors and services of one broker, and a client channel."""

    parts: BrokerParts
    put_path: MessagePut
    send: SendMessageProcessor
    send_back: SendBackProcessor
    pull: PullMessageProcessor
    query: QueryMessageProcessor
    clients: ClientManageProcessor
    consumers: ConsumerManageProcessor
    end_transaction: EndTransactionProcessor
    admin: AdminBrokerProcessor
    schedule: ScheduleMessageService
    transactions: TransactionalMessageService
    channel: Channel
    #: times the admin processor reported a permission change
    permission_changes: list[int] = field(default_factory=list)

    def request_ctx(self, request: RemotingCommand) -> RequestContext:
        return RequestContext(self.channel, request)

    async def call(self, handler: Processor, request: RemotingCommand) -> RemotingCommand | None:
        """``handler``'s answer to ``request``, awaited if it is not ready at once."""
        answer = handler(self.request_ctx(request), request)
        if inspect.isawaitable(answer):
            return await answer
        return answer

    async def answer(self, handler: Processor, request: RemotingCommand) -> RemotingCommand:
        response = await self.call(handler, request)
        assert response is not None, f"no answer to {request.describe()}"
        return response

    def stored(self, topic: str, queue_id: int, offset: int = 0, count: int = 32) -> list[MessageExt]:
        """Messages of a queue, read from the store."""
        result = self.parts.store.get_messages("unit-reader", topic, queue_id, offset, count, None)
        body = result.body()
        return decode_records(body) if body else []


Scenario = Callable[[UnitBroker], Awaitable[None]]


def run_unit(root: Path, scenario: Scenario, **settings: Any) -> None:
    """Run ``scenario`` on a broker whose store lives under ``root`` (broker settings as keywords)."""
    config = build_broker_config({"store.store_root": root, "listen_port": 0, **settings})
    parts = BrokerParts.create(config)
    for table in (parts.topics, parts.groups, parts.offsets, parts.delay_offsets):
        table.load()
    parts.store.start()

    async def main() -> None:
        replication = BrokerReplication(config, parts.store, parts, parts.identity)
        put_path = MessagePut(parts, replication)
        filters = FilterCompiler()
        transactions = TransactionalMessageService(parts, put_path)
        changes: list[int] = []
        unit = UnitBroker(
            parts=parts, put_path=put_path, send=SendMessageProcessor(parts, put_path),
            send_back=SendBackProcessor(parts, put_path), pull=PullMessageProcessor(parts, filters),
            query=QueryMessageProcessor(parts), clients=ClientManageProcessor(parts, filters),
            consumers=ConsumerManageProcessor(parts), end_transaction=EndTransactionProcessor(parts, transactions),
            admin=AdminBrokerProcessor(parts, runtime_info=lambda: {"brokerName": config.broker_name},
                                       permission_changed=lambda: changes.append(1)),
            schedule=ScheduleMessageService(parts, put_path), transactions=transactions,
            channel=Channel(RequestDispatcher("unit")), permission_changes=changes)
        unit.channel.remote_address = CLIENT_ADDRESS
        parts.store.add_dispatch_run_listener(unit.pull.hold_service.notify_messages_arriving)
        unit.pull.hold_service.start()
        try:
            await scenario(unit)
        finally:
            await unit.pull.hold_service.stop()

    try:
        asyncio.run(main())
    finally:
        parts.store.shutdown()


def properties(tags: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    found = {"UNIQ_KEY": _ids.next_id(), "WAIT": "true"}
    if tags is not None:
        found["TAGS"] = tags
    found.update(extra or {})
    return found


def send_request(topic: str, body: bytes, props: Mapping[str, str] | None = None, *, queue_id: int = 0,
                 code: int = RequestCode.SEND_MESSAGE_V2, sys_flag: int = 0, reconsume_times: int | None = None,
                 producer_group: str = "unit_pg") -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group=producer_group, topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=queue_id, sys_flag=sys_flag, born_timestamp=1_700_000_000_000, flag=0,
        properties=encode_properties(props) if props else None, reconsume_times=reconsume_times,
        batch=code == RequestCode.SEND_BATCH_MESSAGE)
    fields = header.to_ext_fields() if code == RequestCode.SEND_MESSAGE else \
        SendMessageRequestHeaderV2.from_v1(header).to_ext_fields()
    return RemotingCommand.request(code, fields, body)


def pull_request(group: str, topic: str, queue_id: int, offset: int, *, suspend: bool = False,
                 suspend_ms: int = 15_000) -> RemotingCommand:
    sys_flag = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend else 0)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": str(int(sys_flag)), "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms), "subVersion": "0", "subscription": "*"})


__all__ = ["CLIENT_ADDRESS", "UnitBroker", "properties", "pull_request", "run_unit", "send_request"]
