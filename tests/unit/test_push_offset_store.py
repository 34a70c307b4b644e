"""`RemoteBrokerOffsetStore.read_offset` against a fake API: only QUERY_NOT_FOUND means "the group has no
offset" (-1); any other broker error, a timeout or an unknown broker means "cannot tell" (-2), so that a
CONSUME_FROM_LAST_OFFSET queue is not started from its max offset after a transient error."""

from __future__ import annotations

import asyncio

import pytest

from rocketflow.client.consumer.offset_store import ReadOffsetType, RemoteBrokerOffsetStore
from rocketflow.client.errors import MQBrokerError, MQClientError, MQConnectError, MQTimeoutError
from rocketflow.client.route import FindBrokerResult
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import ResponseCode

MQ = MessageQueue("T", "b", 0)


class FakeApi:
    def __init__(self) -> None:
        self.answer: int | BaseException = 0
        self.queries = 0

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue, timeout: float) -> int:
        self.queries += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class FakeInstance:
    def __init__(self) -> None:
        self.api = FakeApi()
        self.known = True

    def find_broker_address_in_admin(self, name: str) -> FindBrokerResult | None:
        return FindBrokerResult("addr", False) if self.known else None

    async def update_topic_route(self, topic: str) -> bool:
        return False


def make() -> tuple[RemoteBrokerOffsetStore, FakeInstance]:
    instance = FakeInstance()
    return RemoteBrokerOffsetStore(instance, "cg"), instance  # type: ignore[arg-type]


def read(store: RemoteBrokerOffsetStore, read_type: ReadOffsetType = ReadOffsetType.READ_FROM_STORE) -> int:
    return asyncio.run(store.read_offset(MQ, read_type))


def test_a_stored_offset_is_returned_and_kept_in_memory() -> None:
    store, instance = make()
    instance.api.answer = 42
    assert read(store) == 42
    assert read(store, ReadOffsetType.READ_FROM_MEMORY) == 42
    assert read(store, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 42 and instance.api.queries == 1


def test_query_not_found_means_no_offset() -> None:
    store, instance = make()
    instance.api.answer = MQBrokerError(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group "
                                        "consumer boot first", "addr")
    assert read(store) == -1
    assert read(store, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == -1
    instance.api.answer = MQClientError("offset not found", ResponseCode.QUERY_NOT_FOUND)
    assert read(store) == -1
    assert read(store, ReadOffsetType.READ_FROM_MEMORY) == -1     # nothing was stored in memory


@pytest.mark.parametrize("error", [
    pytest.param(MQBrokerError(ResponseCode.SYSTEM_BUSY, "[PC_SYNCHRONIZED]broker busy", "addr"), id="busy"),
    pytest.param(MQBrokerError(ResponseCode.NO_PERMISSION, "no read permission", "addr"), id="permission"),
    pytest.param(MQBrokerError(ResponseCode.SYSTEM_ERROR, "boom", "addr"), id="system-error"),
    pytest.param(MQBrokerError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "no group", "addr"), id="no-group"),
    pytest.param(MQTimeoutError("timed out after 5.0s", "addr"), id="timeout"),
    pytest.param(MQConnectError("connection refused", "addr"), id="connect"),
    pytest.param(TimeoutError(), id="asyncio-timeout"),
])
def test_other_errors_mean_cannot_tell(error: BaseException) -> None:
    store, instance = make()
    instance.api.answer = error
    assert read(store) == -2
    assert read(store, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == -2
    instance.api.answer = 7                                        # the next round asks again
    assert read(store) == 7


def test_an_unknown_broker_means_cannot_tell() -> None:
    store, instance = make()
    instance.known = False
    assert read(store) == -2 and instance.api.queries == 0
