"""Request-reply end to end: `Producer.request` against a consumer answering with `create_reply_message`."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from rocketflow import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, Producer, PushConsumer
from rocketflow.client import MQClientError, MQTimeoutError, create_reply_message
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.names import reply_topic
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2
from testkit import create_topic


@pytest.fixture()
def responder(cluster: DevCluster) -> Iterator[tuple[str, list[MessageExt]]]:
    """A topic with a consumer that answers every request with ``b"re:" + body`` (upper-cased)."""
    topic = f"Rpc_{uuid.uuid4().hex[:8]}"
    seen: list[MessageExt] = []
    with Producer("rpc_setup", namesrv=cluster.namesrv_addr) as setup:
        create_topic(setup.instance, cluster.broker_addr, topic, 4)
    reply_producer = Producer("rpc_replier", namesrv=cluster.namesrv_addr)
    reply_producer.start()

    def listener(msgs: list[MessageExt], _context: object) -> ConsumeConcurrentlyStatus:
        for msg in msgs:
            seen.append(msg)
            reply_producer.send(create_reply_message(msg, b"re:" + msg.body.upper()))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"rpc_server_{uuid.uuid4().hex[:6]}", namesrv=cluster.namesrv_addr,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, "*")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    try:
        yield topic, seen
    finally:
        consumer.shutdown()
        reply_producer.shutdown()


def test_a_request_gets_its_reply(cluster: DevCluster, responder: tuple[str, list[MessageExt]]) -> None:
    topic, seen = responder
    with Producer("rpc_client", namesrv=cluster.namesrv_addr) as client:
        request = Message(topic, b"ping", keys="rpc-1")
        reply = client.request(request, timeout=10)
        assert reply.body == b"re:PING"
        assert reply.topic == reply_topic(cluster.broker_config.cluster)
        correlation_id = request.properties[MessageConst.CORRELATION_ID]
        assert reply.properties[MessageConst.CORRELATION_ID] == correlation_id
        assert reply.properties[MessageConst.REPLY_TO_CLIENT] == client.client_id
        assert MessageConst.PUSH_REPLY_TIME in reply.properties
        assert reply.store_timestamp > 0 and reply.store_host[1] == int(cluster.broker_addr.rsplit(":", 1)[1])
        assert seen[-1].properties[MessageConst.TTL] == "10000"
        # big replies travel compressed and come back whole
        big = client.request(Message(topic, b"x" * 10_000), timeout=10)
        assert big.body == b"re:" + b"X" * 10_000


def test_concurrent_requests_each_get_their_own_reply(cluster: DevCluster,
                                                      responder: tuple[str, list[MessageExt]]) -> None:
    topic, _seen = responder
    with Producer("rpc_many", namesrv=cluster.namesrv_addr) as client:
        client.request(Message(topic, b"warm-up"), timeout=10)
        futures = {n: client.request_async(Message(topic, f"call-{n}".encode()), timeout=10) for n in range(30)}
        replies = {n: future.result(15).body for n, future in futures.items()}
    assert replies == {n: f"re:CALL-{n}".encode() for n in range(30)}


def test_no_reply_times_out(cluster: DevCluster) -> None:
    topic = f"RpcNobody_{uuid.uuid4().hex[:8]}"
    with Producer("rpc_lonely", namesrv=cluster.namesrv_addr) as client:
        create_topic(client.instance, cluster.broker_addr, topic, 1)
        began = time.monotonic()
        with pytest.raises(MQTimeoutError, match="no reply came within 500 ms"):
            client.request(Message(topic, b"anyone?"), timeout=0.5)
        assert time.monotonic() - began < 5
        assert client.instance._reply_futures == {}  # nothing left waiting
        with pytest.raises(MQClientError, match="timeout must be"):
            client.request(Message(topic, b"x"), timeout=0)


def test_replies_need_a_request() -> None:
    with pytest.raises(MQClientError, match="CLUSTER"):
        create_reply_message(Message("T", b"x"), b"y")
    with pytest.raises(MQClientError, match="REPLY_TO_CLIENT"):
        create_reply_message(Message("T", b"x", properties={"CLUSTER": "c"}), b"y")


def send_reply(client: Producer, addr: str, topic: str, properties: str) -> RemotingCommand:
    header = SendMessageRequestHeader(producer_group="rpc_raw", topic=topic, default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                      born_timestamp=int(time.time() * 1000), flag=0, properties=properties)
    request = RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE_V2,
                                      SendMessageRequestHeaderV2.from_v1(header).to_ext_fields(), b"late")
    return client.instance.run(client.instance.api.invoke(addr, request, 5.0))


def test_the_broker_refuses_replies_it_cannot_deliver_but_stores_them(cluster: DevCluster) -> None:
    topic = reply_topic(cluster.broker_config.cluster)
    assert cluster.broker is not None
    store = cluster.broker.store
    with Producer("rpc_raw_pg", namesrv=cluster.namesrv_addr) as client:
        client.instance.run(client.instance.update_topic_route("TBW102"))
        before = store.get_max_offset_in_queue(topic, 0)
        missing = send_reply(client, cluster.broker_addr, topic, "CORRELATION_ID\x01abc")
        assert missing.code == ResponseCode.SYSTEM_ERROR and "REPLY_TO_CLIENT" in (missing.remark or "")
        gone = send_reply(client, cluster.broker_addr, topic, "CORRELATION_ID\x01abc\x02REPLY_TO_CLIENT\x01nobody@1")
        assert gone.code == ResponseCode.SYSTEM_ERROR and "channel of <nobody@1> not found" in (gone.remark or "")
        assert store.get_max_offset_in_queue(topic, 0) == before + 2  # stored all the same (storeReplyMessageEnable)
        # an answer to a request nobody waits for any more: the client takes it, logs it, the push succeeds
        late = send_reply(client, cluster.broker_addr, topic,
                          f"CORRELATION_ID\x01expired\x02REPLY_TO_CLIENT\x01{client.client_id}")
        assert late.code == ResponseCode.SUCCESS
        assert late.ext_fields["queueOffset"] == str(before + 2)


def test_a_request_from_another_thread_while_requests_are_pending(cluster: DevCluster,
                                                                  responder: tuple[str, list[MessageExt]]) -> None:
    topic, _seen = responder
    errors: list[BaseException] = []
    with Producer("rpc_threads", namesrv=cluster.namesrv_addr) as client:
        def call(n: int) -> None:
            try:
                assert client.request(Message(topic, f"t{n}".encode()), timeout=10).body == f"re:T{n}".encode()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
    assert errors == []
