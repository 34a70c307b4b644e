"""Helpers of the broker integration tests: a dev cluster per scenario and thin request builders."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import ConsumerData, HeartbeatData, MessageModel, ProducerData, SubscriptionData
from rocketflow.protocol.codec import decode_records, encode_batch_body
from rocketflow.protocol.ids import UniqueIdGenerator
from rocketflow.protocol.message import Message, MessageExt
from rocketflow.protocol.properties import encode_properties
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.protocol.tags import parse_subscription
from rocketflow.remoting.codes import RequestCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2

Scenario = Callable[[DevCluster, RemotingClient], Awaitable[None]]
TIMEOUT = 5.0
_ids = UniqueIdGenerator()


def run(scenario: Scenario, *, timeout: float = 30.0, **settings: Any) -> None:
    """Run ``scenario(cluster, client)`` against a fresh dev cluster (broker settings as keywords)."""

    async def main() -> None:
        async with DevCluster(broker_settings=settings) as cluster:
            client = RemotingClient()
            try:
                await asyncio.wait_for(scenario(cluster, client), timeout)
            finally:
                await client.close()

    asyncio.run(main())


def new_uniq_key() -> str:
    return _ids.next_id()


def message_properties(tags: str | None = None, keys: str | None = None,
                       extra: Mapping[str, str] | None = None, *, uniq: bool = True) -> dict[str, str]:
    props: dict[str, str] = {}
    if tags is not None:
        props["TAGS"] = tags
    if keys is not None:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = new_uniq_key()
    props["WAIT"] = "true"
    props.update(extra or {})
    return props


def send_request(topic: str, body: bytes, properties: Mapping[str, str] | None = None, *, queue_id: int = 0,
                 code: int = RequestCode.SEND_MESSAGE_V2, sys_flag: int = 0, flag: int = 0,
                 producer_group: str = "test_pg", reconsume_times: int | None = None,
                 max_reconsume_times: int | None = None, default_topic_queue_nums: int = 4) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group=producer_group, topic=topic, default_topic="TBW102",
        default_topic_queue_nums=default_topic_queue_nums, queue_id=queue_id, sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000, flag=flag,
        properties=encode_properties(properties) if properties else None,
        reconsume_times=reconsume_times, max_reconsume_times=max_reconsume_times,
        batch=code == RequestCode.SEND_BATCH_MESSAGE,
    )
    fields = header.to_ext_fields() if code == RequestCode.SEND_MESSAGE else \
        SendMessageRequestHeaderV2.from_v1(header).to_ext_fields()
    return RemotingCommand.request(code, fields, body)


def batch_request(topic: str, messages: list[Message], *, queue_id: int = 0, queue_nums: int = 4) -> RemotingCommand:
    return send_request(topic, encode_batch_body(messages), None, queue_id=queue_id,
                        code=RequestCode.SEND_BATCH_MESSAGE, default_topic_queue_nums=queue_nums)


async def send(client: RemotingClient, addr: str, topic: str, body: bytes,
               properties: Mapping[str, str] | None = None, **kwargs: Any) -> RemotingCommand:
    return await client.invoke(addr, send_request(topic, body, properties, **kwargs), TIMEOUT)


def pull_request(group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32,
                 subscription: str | None = "*", suspend: bool = False, suspend_ms: int = 15_000,
                 commit_offset: int | None = None, sub_version: int = 0) -> RemotingCommand:
    sys_flag = 0
    if commit_offset is not None:
        sys_flag |= PullSysFlag.COMMIT_OFFSET
    if suspend:
        sys_flag |= PullSysFlag.SUSPEND
    fields = {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": str(max_nums), "commitOffset": str(commit_offset or 0),
        "suspendTimeoutMillis": str(suspend_ms), "subVersion": str(sub_version),
    }
    if subscription is not None:
        sys_flag |= PullSysFlag.SUBSCRIPTION
        fields["subscription"] = subscription
        fields["expressionType"] = "TAG"
    fields["sysFlag"] = str(int(sys_flag))
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)


async def pull(client: RemotingClient, addr: str, group: str, topic: str, queue_id: int, offset: int,
               timeout: float = TIMEOUT, **kwargs: Any) -> RemotingCommand:
    return await client.invoke(addr, pull_request(group, topic, queue_id, offset, **kwargs), timeout)


def decoded(response: RemotingCommand, *, decompress: bool = True) -> list[MessageExt]:
    return decode_records(response.body, decompress=decompress) if response.body else []


def heartbeat_request(client_id: str, group: str, topics: Mapping[str, str], *,
                      model: MessageModel = MessageModel.CLUSTERING, sub_version: int = 1) -> RemotingCommand:
    subs = []
    for topic, expression in topics.items():
        parsed = parse_subscription(expression)
        subs.append(SubscriptionData(topic, parsed.sub_string, set(parsed.tags_set), set(parsed.code_set),
                                     sub_version))
    data = HeartbeatData(client_id, [ProducerData("CLIENT_INNER_PRODUCER")],
                         [ConsumerData(group, message_model=model, subscription_data_set=subs)])
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=data.encode())


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0, interval: float = 0.05) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)
