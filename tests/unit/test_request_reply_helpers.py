"""Request-reply helpers without a network: stamping requests, building replies, reading pushed replies."""

from __future__ import annotations

import pytest

from rocketflow.client import MQClientError, create_reply_message
from rocketflow.client.instance.server_requests import reply_from_push
from rocketflow.client.producer.request_reply import is_reply, stamp_request
from rocketflow.protocol.codec import compress_body
from rocketflow.protocol.message import Message, MessageConst
from rocketflow.protocol.properties import encode_properties
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.headers import ReplyMessageRequestHeader


def test_a_stamped_request_round_trips_into_a_reply() -> None:
    request = Message("Orders", b"q", properties={"CLUSTER": "DefaultCluster", "color": "red"})
    correlation_id = stamp_request(request, "10.0.0.1@4242", 2.5)
    assert request.properties[MessageConst.REPLY_TO_CLIENT] == "10.0.0.1@4242"
    assert request.properties[MessageConst.TTL] == "2500"
    assert len(correlation_id) == 36 and stamp_request(Message("T"), "c", 1) != correlation_id
    reply = create_reply_message(request, b"answer")
    assert reply.topic == "DefaultCluster_REPLY_TOPIC"
    assert reply.body == b"answer" and is_reply(reply) and not is_reply(request)
    assert {name: reply.properties[name] for name in (MessageConst.CORRELATION_ID, MessageConst.REPLY_TO_CLIENT,
                                                        MessageConst.TTL)} == {
        MessageConst.CORRELATION_ID: correlation_id, MessageConst.REPLY_TO_CLIENT: "10.0.0.1@4242",
        MessageConst.TTL: "2500"}
    assert "color" not in reply.properties


def test_reply_bodies_must_be_bytes() -> None:
    request = Message("T", properties={"CLUSTER": "c", "REPLY_TO_CLIENT": "x"})
    with pytest.raises(MQClientError, match="must be bytes"):
        create_reply_message(request, "text")  # type: ignore[arg-type]


@pytest.mark.parametrize(("born", "expected"), [
    ("/127.0.0.1:51234", ("127.0.0.1", 51234)),
    ("client-host/10.1.2.3:7", ("10.1.2.3", 7)),
    ("/0:0:0:0:0:0:0:1:9000", ("0:0:0:0:0:0:0:1", 9000)),
    ("garbage", ("127.0.0.1", 0)),
])
def test_pushed_replies_are_read_with_java_socket_addresses(born: str, expected: tuple[str, int]) -> None:
    body = b"z" * 5000
    header = ReplyMessageRequestHeader(
        producer_group="pg", topic="C_REPLY_TOPIC", default_topic="TBW102", default_topic_queue_nums=4, queue_id=0,
        sys_flag=int(MessageSysFlag.COMPRESSED), born_timestamp=1, flag=3,
        properties=encode_properties({"CORRELATION_ID": "abc", "MSG_TYPE": "reply"}), reconsume_times=None,
        born_host=born, store_host="/192.168.0.9:10911", store_timestamp=99)
    reply = reply_from_push(header, compress_body(body))
    assert reply.body == body and not reply.sys_flag & MessageSysFlag.COMPRESSED
    assert reply.born_host == expected and reply.store_host == ("192.168.0.9", 10911)
    assert (reply.flag, reply.store_timestamp, reply.reconsume_times) == (3, 99, 0)
    assert reply.properties["CORRELATION_ID"] == "abc"
