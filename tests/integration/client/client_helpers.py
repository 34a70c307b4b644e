"""Helpers of the client integration tests: read messages back with `ClientAPI.pull_message`."""

from __future__ import annotations

from rocketflow.client import ClientInstance, PullStatus
from rocketflow.protocol.codec import decode_records
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.remoting.headers import PullMessageRequestHeader

READER_GROUP = "client_test_reader"


def pull_messages(instance: ClientInstance, mq: MessageQueue, offset: int = 0, *, max_nums: int = 32,
                  decompress: bool = True) -> list[MessageExt]:
    """Messages of ``mq`` from ``offset`` (raw PULL_MESSAGE with a ``*`` subscription, no suspend)."""
    addr = instance.find_broker_address_in_publish(mq.broker_name)
    assert addr is not None, f"no address for {mq.broker_name}"
    header = PullMessageRequestHeader(
        consumer_group=READER_GROUP, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset, max_msg_nums=max_nums,
        sys_flag=int(PullSysFlag.SUBSCRIPTION), commit_offset=0, suspend_timeout_millis=0, sub_version=0,
        subscription="*", expression_type="TAG")
    result = instance.run(instance.api.pull_message(addr, header, 5.0))
    if result.status is not PullStatus.FOUND:
        return []
    return decode_records(result.body, decompress=decompress)
