"""The gRPC endpoint against a real in-process broker, called with a plain gRPC client: statuses, receive /
ack / invisibility, FIFO holds, dead-lettering, timers, bad input, and messages crossing to and from
rocketflow's 4.x-protocol clients."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from v5_helpers import DevCluster, RawClient

from rocketflow import ConsumeFromWhere, Message, Producer, PullConsumer, PushConsumer, SimpleConsumer
from rocketflow.client import ConsumeConcurrentlyStatus, MQBrokerError, ReceivedMessage
from rocketflow.client.admin import Admin
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from testkit import wait_until


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster.start_in_thread(broker_settings={"grpc_port": 0, "grpc_long_polling_timeout_ms": 2000}) as dev:
        yield dev


@pytest.fixture(scope="module")
def admin(cluster: DevCluster) -> Iterator[Admin]:
    with Admin(cluster.namesrv_addr) as session:
        yield session


@pytest.fixture
def client(cluster: DevCluster) -> Iterator[RawClient]:
    assert cluster.broker is not None and cluster.broker.grpc is not None
    raw = RawClient(cluster.broker.grpc.address)
    yield raw
    raw.close()


_names = iter(range(1_000_000))


def fresh(admin: Admin, *, queues: int = 4, message_type: str | None = None, fifo: bool = False,
          retry_max_times: int = 16) -> tuple[str, str]:
    n = next(_names)
    topic, group = f"grpc-topic-{n}", f"grpc-group-{n}"
    admin.ensure_topic(topic, queues=queues, message_type=message_type)
    admin.create_group(group, consume_message_orderly=fifo, retry_max_times=retry_max_times)
    return topic, group


def test_route_of_unknown_and_known_topics(client: RawClient, admin: Admin) -> None:
    assert client.route("no-such-topic").status.code == pb.TOPIC_NOT_FOUND
    topic, _ = fresh(admin, queues=3, message_type="FIFO")
    route = client.route(topic)
    assert route.status.code == pb.OK
    assert [queue.id for queue in route.message_queues] == [0, 1, 2]
    assert {queue.permission for queue in route.message_queues} == {pb.READ_WRITE}
    assert all(list(queue.accept_message_types) == [pb.FIFO] for queue in route.message_queues)
    port = int(client.address.rsplit(":", 1)[1])
    assert route.message_queues[0].broker.endpoints.addresses[0].port == port


def test_settings_answer_has_what_clients_need(client: RawClient, admin: Admin) -> None:
    topic, group = fresh(admin, fifo=True, retry_max_times=3)
    producer = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)]))
    answer = next(client.settings(producer))
    assert answer.status.code == pb.OK
    assert answer.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert answer.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    consumer = pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name=group)))
    answer = next(client.settings(consumer))
    subscription = answer.settings.subscription
    assert answer.status.code == pb.OK and subscription.fifo and subscription.receive_batch_size == 32
    assert subscription.long_polling_timeout.seconds == 2
    assert answer.settings.backoff_policy.max_attempts == 4
    assert len(answer.settings.backoff_policy.customized_backoff.next) > 0


def test_receive_ack_redelivery_and_change_invisible(client: RawClient, admin: Admin) -> None:
    topic, group = fresh(admin)
    for i in range(3):
        assert client.send(topic, f"m{i}".encode(), tag="T").status.code == pb.OK
    first = client.receive_all(group, topic, 3, invisible_ms=1000)
    assert sorted(m.body for m in first) == [b"m0", b"m1", b"m2"]
    assert {m.system_properties.delivery_attempt for m in first} == {1}
    by_body = {m.body: m.system_properties.receipt_handle for m in first}
    assert client.ack(group, topic, by_body[b"m0"]).status.code == pb.OK
    changed = client.change(group, topic, by_body[b"m1"], 60_000)
    assert changed.status.code == pb.OK and changed.receipt_handle != by_body[b"m1"]
    # the old handle of m1 is stale now; m0's handle was used up
    assert client.ack(group, topic, by_body[b"m1"]).status.code == pb.INVALID_RECEIPT_HANDLE
    assert client.ack(group, topic, by_body[b"m0"]).status.code == pb.INVALID_RECEIPT_HANDLE
    # m2 was not acked: visible again after 1 s, attempt 2; m1 stays hidden for a minute
    again = client.receive_all(group, topic, 1, invisible_ms=1000, polling_ms=3000)
    assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"m2", 2)]
    assert client.ack(group, topic, again[0].system_properties.receipt_handle).status.code == pb.OK
    assert client.ack(group, topic, changed.receipt_handle).status.code == pb.OK
    assert client.receive(group, topic, polling_ms=300).status.code == pb.MESSAGE_NOT_FOUND


def test_filters_by_tag(client: RawClient, admin: Admin) -> None:
    topic, group = fresh(admin, queues=1)
    for tag in ("A", "B", "A", "C"):
        client.send(topic, tag.encode(), tag=tag)
    got = client.receive_all(group, topic, 3, expression="A || C")
    assert sorted(m.body for m in got) == [b"A", b"A", b"C"]


def test_fifo_group_holds_a_message_group_until_acked(client: RawClient, admin: Admin) -> None:
    topic, group = fresh(admin, queues=4, message_type="FIFO", fifo=True)
    for i in range(4):
        assert client.send(topic, f"g1-{i}".encode(), group="g1").status.code == pb.OK
    first = client.receive(group, topic, batch=2, invisible_ms=3000)
    assert [m.body for m in first.messages] == [b"g1-0", b"g1-1"]
    # nothing more from that queue (all of g1) while they are out
    assert client.receive(group, topic, polling_ms=300).status.code == pb.MESSAGE_NOT_FOUND
    client.ack(group, topic, *(m.system_properties.receipt_handle for m in first.messages))
    rest = client.receive(group, topic, batch=8, invisible_ms=3000)
    assert [m.body for m in rest.messages] == [b"g1-2", b"g1-3"]
    assert all(m.system_properties.message_group == "g1" for m in rest.messages)


def test_topic_type_is_enforced(client: RawClient, admin: Admin) -> None:
    topic, _ = fresh(admin, message_type="FIFO")
    response = client.send(topic, b"x")
    assert response.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_dead_letter_after_max_attempts(client: RawClient, admin: Admin, cluster: DevCluster) -> None:
    topic, group = fresh(admin, queues=1, retry_max_times=1)  # two deliveries, then %DLQ%
    client.send(topic, b"doomed", keys=("k-doomed",))
    attempts = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(attempts) < 2:
        for message in client.receive(group, topic, invisible_ms=1000, polling_ms=1500).messages:
            attempts.append(message.system_properties.delivery_attempt)
    assert attempts == [1, 2]
    assert client.receive(group, topic, invisible_ms=1000, polling_ms=2500).status.code == pb.MESSAGE_NOT_FOUND
    dead = _pull_all(cluster, f"%DLQ%{group}", 1)
    assert [m.body for m in dead] == [b"doomed"] and dead[0].keys == "k-doomed"


def test_delivery_time(client: RawClient, admin: Admin) -> None:
    topic, group = fresh(admin, message_type="DELAY")
    sent_at = time.time()
    client.send(topic, b"later", deliver_ms=int((sent_at + 1.5) * 1000))
    assert client.receive(group, topic, polling_ms=500).status.code == pb.MESSAGE_NOT_FOUND
    got = client.receive_all(group, topic, 1, polling_ms=2000)
    assert [m.body for m in got] == [b"later"]
    assert time.time() - sent_at >= 1.4
    # seconds-as-milliseconds (the Python client's way) is read as milliseconds
    quirk = pb.Message()
    quirk.system_properties.delivery_timestamp.seconds = int((time.time() + 0.5) * 1000)
    from rocketflow.proxy.convert import timestamp_ms
    assert abs(timestamp_ms(quirk.system_properties.delivery_timestamp) - (time.time() + 0.5) * 1000) < 1000


# ---------------------------------------------------------------------------- bad input


def test_bad_receives_are_refused(client: RawClient, admin: Admin) -> None:
    topic, group = fresh(admin)
    client.send(topic, b"keep")
    assert client.receive(group, topic, batch=100_000).status.code == pb.BAD_REQUEST
    assert client.receive(group, topic, batch=0).status.code == pb.BAD_REQUEST
    assert client.receive(group, topic, invisible_ms=10).status.code == pb.ILLEGAL_INVISIBLE_TIME
    assert client.receive(group, topic, invisible_ms=10**12).status.code == pb.ILLEGAL_INVISIBLE_TIME
    assert client.receive(group, topic, invisible_ms=None).status.code == pb.ILLEGAL_INVISIBLE_TIME
    assert client.receive(group, topic, expression="||").status.code == pb.ILLEGAL_FILTER_EXPRESSION
    assert client.receive(group, "no-such-topic").status.code == pb.TOPIC_NOT_FOUND
    assert client.receive("bad group!", topic).status.code == pb.ILLEGAL_CONSUMER_GROUP
    # none of those took the message
    assert [m.body for m in client.receive_all(group, topic, 1)] == [b"keep"]


def test_forged_and_stale_handles_ack_nothing(client: RawClient, admin: Admin) -> None:
    topic, group = fresh(admin, queues=1)
    client.send(topic, b"one")
    [message] = client.receive_all(group, topic, 1, invisible_ms=1000)
    handle = message.system_properties.receipt_handle
    queue_id, offset, seq, mac = handle.split(".")
    forged = [f"{queue_id}.{offset}.{seq}.{'f' * len(mac)}", f"{queue_id}.{offset}.{int(seq) + 1}.{mac}", "junk", ""]
    response = client.ack(group, topic, *forged)
    assert response.status.code == pb.MULTIPLE_RESULTS
    assert {entry.status.code for entry in response.entries} == {pb.INVALID_RECEIPT_HANDLE}
    assert client.ack("other-group", topic, handle).status.code == pb.INVALID_RECEIPT_HANDLE
    assert client.change(group, topic, forged[0], 1000).status.code == pb.INVALID_RECEIPT_HANDLE
    # the message was not acked by any of them: it comes back
    again = client.receive_all(group, topic, 1, invisible_ms=1000, polling_ms=3000)
    assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"one", 2)]


def test_malformed_protobuf_and_unknown_method(client: RawClient) -> None:
    garbage = client.channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                                         request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw)
    with pytest.raises(grpc.RpcError) as caught:
        garbage(b"\xff\xff\xff\xff\x0f\x01", metadata=client.metadata, timeout=5)
    # grpcio answers a request it cannot decode itself, before any RPC code runs
    assert caught.value.code() in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
    assert "corrupt" in (caught.value.details() or "") or "deserializ" in (caught.value.details() or "")
    unknown = client.channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchMethod",
                                         request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw)
    with pytest.raises(grpc.RpcError) as caught:
        unknown(b"", metadata=client.metadata, timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # the endpoint still serves
    assert client.route("no-such-topic").status.code == pb.TOPIC_NOT_FOUND


def test_bad_messages_are_refused(client: RawClient, admin: Admin) -> None:
    topic, _ = fresh(admin)
    reserved = client.send(topic, b"x", properties={"UNIQ_KEY": "mine"})
    assert reserved.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    too_big = client.send(topic, b"x" * (4 * 1024 * 1024 + 1))
    assert too_big.status.code == pb.MESSAGE_BODY_TOO_LARGE
    assert client.send(topic, b"x", group="g", message_type=pb.NORMAL).status.code == \
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert client.send("no-such-topic", b"x").status.code == pb.TOPIC_NOT_FOUND
    far = client.send(topic, b"x", deliver_ms=int((time.time() + 10 * 86400) * 1000))
    assert far.status.code == pb.ILLEGAL_DELIVERY_TIME


# ---------------------------------------------------------------------------- across protocols


def _pull_all(cluster: DevCluster, topic: str, count: int, timeout: float = 15.0) -> list[Any]:
    consumer = PullConsumer(f"pull-{next(_names)}", cluster.namesrv_addr)
    consumer.start()
    try:
        found: list[Any] = []
        deadline = time.monotonic() + timeout
        queues = consumer.fetch_message_queues(topic)
        consumer.assign(queues)
        for queue in queues:
            consumer.seek_to_begin(queue)
        while len(found) < count and time.monotonic() < deadline:
            found += consumer.poll(0.5)
        return found
    finally:
        consumer.shutdown()


def test_5x_producer_to_rocketflow_push_consumer(client: RawClient, admin: Admin, cluster: DevCluster) -> None:
    topic, group = fresh(admin)
    got: list[Any] = []
    done = threading.Event()

    def listener(messages: list[Any], context: Any) -> ConsumeConcurrentlyStatus:
        got.extend(messages)
        if len(got) >= 3:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group + "-push", cluster.namesrv_addr,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, "*")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    try:
        sent = [client.send(topic, f"b{i}".encode(), tag="TagX", keys=(f"key{i}", "common"),
                            properties={"color": "red", "n": str(i)}) for i in range(3)]
        assert done.wait(20), f"got {len(got)}"
    finally:
        consumer.shutdown()
    by_body = {m.body: m for m in got}
    for i, response in enumerate(sent):
        message = by_body[f"b{i}".encode()]
        assert message.tags == "TagX" and message.keys == f"key{i} common"
        assert message.properties["color"] == "red" and message.properties["n"] == str(i)
        assert message.client_msg_id == response.entries[0].message_id  # the 5.x id is the 4.x (client) msgId


def test_rocketflow_producer_to_5x_receive(client: RawClient, admin: Admin, cluster: DevCluster) -> None:
    topic, group = fresh(admin)
    producer = Producer(f"prod-{next(_names)}", cluster.namesrv_addr)
    producer.start()
    try:
        message = Message(topic, b"from 4.x", tags="T4", keys="a b", properties={"origin": "remoting"})
        result = producer.send(message)
    finally:
        producer.shutdown()
    [got] = client.receive_all(group, topic, 1)
    system = got.system_properties
    assert got.body == b"from 4.x" and system.tag == "T4" and list(system.keys) == ["a", "b"]
    assert got.user_properties["origin"] == "remoting" and system.message_id == result.msg_id
    assert system.message_type == pb.NORMAL and system.delivery_attempt == 1


def test_server_streams_status_messages_then_time(client: RawClient, admin: Admin) -> None:
    topic, group = fresh(admin, queues=1)
    client.send(topic, b"x")
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=4)
    request.invisible_duration.seconds = 5
    kinds = [response.WhichOneof("content") for response in
             client.stub.ReceiveMessage(request, metadata=client.metadata, timeout=10)]
    assert kinds == ["status", "message", "delivery_timestamp"]


def test_rocketflow_simple_consumer(admin: Admin, cluster: DevCluster) -> None:
    topic, group = fresh(admin, queues=2)
    assert cluster.broker is not None and cluster.broker.grpc is not None
    producer = Producer(f"prod-{next(_names)}", cluster.namesrv_addr)
    producer.start()
    try:
        for i in range(4):
            producer.send(Message(topic, f"s{i}".encode(), tags="T", keys=f"key{i}", properties={"i": str(i)}))
    finally:
        producer.shutdown()
    with SimpleConsumer(group, cluster.broker.grpc.address, {topic: "*"}, await_duration=1.0) as consumer:
        got: list[ReceivedMessage] = []
        deadline = time.monotonic() + 15
        while len(got) < 4 and time.monotonic() < deadline:
            got += consumer.receive(8, invisible_duration=1.0)
        assert sorted(m.body for m in got) == [b"s0", b"s1", b"s2", b"s3"]
        assert all(m.tags == "T" and m.delivery_attempt == 1 for m in got)
        by_body = {m.body: m for m in got}
        assert by_body[b"s2"].keys == ["key2"] and by_body[b"s2"].properties == {"i": "2"}
        consumer.ack(by_body[b"s0"])
        consumer.ack(by_body[b"s1"])
        old = by_body[b"s2"].receipt_handle
        consumer.change_invisible_duration(by_body[b"s2"], 30.0)
        assert by_body[b"s2"].receipt_handle != old
        consumer.ack(by_body[b"s2"])
        with pytest.raises(MQBrokerError, match="INVALID_RECEIPT_HANDLE"):
            consumer.ack(by_body[b"s0"])
        # s3 was not acked: it comes back, attempt 2
        again: list[ReceivedMessage] = []
        deadline = time.monotonic() + 10
        while not again and time.monotonic() < deadline:
            again = consumer.receive(8, invisible_duration=5.0)
        assert [(m.body, m.delivery_attempt) for m in again] == [(b"s3", 2)]
        consumer.ack(again[0])
        assert consumer.receive(8) == []


def test_admin_cli_sets_message_type_and_fifo(cluster: DevCluster) -> None:
    from click.testing import CliRunner

    from rocketflow.cli.main import cli

    runner = CliRunner()
    namesrv = ["-n", cluster.namesrv_addr]
    created = runner.invoke(cli, ["admin", "topic", "create", "cli-fifo-topic", "--message-type", "FIFO", *namesrv])
    assert created.exit_code == 0, created.output
    group = runner.invoke(cli, ["admin", "group", "create", "cli-fifo-group", "--fifo", "--json", *namesrv])
    assert group.exit_code == 0 and json.loads(group.output)["config"]["consumeMessageOrderly"] is True
    routes = []

    def routed() -> bool:
        routes.append(runner.invoke(cli, ["admin", "topic", "route", "cli-fifo-topic", "--json", *namesrv]))
        return routes[-1].exit_code == 0

    wait_until(routed, 10, "a route of cli-fifo-topic", interval=0.2)
    route = routes[-1]
    assert json.loads(route.output)["messageType"] == "FIFO", route.output
    groups = runner.invoke(cli, ["admin", "group", "list", "--json", *namesrv])
    assert any(g["groupName"] == "cli-fifo-group" and g.get("consumeMessageOrderly") for g in json.loads(groups.output))
