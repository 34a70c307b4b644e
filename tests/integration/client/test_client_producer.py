"""The producer against a real dev cluster: every send mode, read back with PULL_MESSAGE."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from client_helpers import pull_messages

from rocketflow import Message, Producer
from rocketflow.client import ClientInstance, MQClientError, SendStatus
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageConst, MessageQueue
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.protocol.tags import java_string_hash
from testkit import client_threads, create_topic, wait_until

SRC_DIR = Path(__file__).resolve().parents[3] / "src"


def make_producer(cluster: DevCluster, group: str = "pg", **settings: object) -> Producer:
    producer = Producer(group, namesrv=cluster.namesrv_addr, **settings)
    producer.start()
    return producer


def test_sync_send_round_trips_body_tags_keys_and_properties(cluster: DevCluster) -> None:
    with make_producer(cluster) as producer:
        msg = Message("ClientSync", b"hello", tags="pay", keys=["o-1", "o-2"], properties={"color": "blue"})
        result = producer.send(msg)
        assert result.send_status is SendStatus.SEND_OK
        assert result.message_queue.topic == "ClientSync"
        assert result.msg_id == msg.uniq_key and len(result.msg_id) == 32
        stored = pull_messages(producer.instance, result.message_queue, result.queue_offset)[0]
        assert stored.body == b"hello"
        assert stored.tags == "pay"
        assert stored.key_list == ["o-1", "o-2"]
        assert stored.properties["color"] == "blue"
        assert stored.uniq_key == result.msg_id
        assert stored.msg_id == result.offset_msg_id
        assert stored.queue_offset == result.queue_offset
        assert stored.properties[MessageConst.CLUSTER] == cluster.broker_config.cluster

        second = producer.send(Message("ClientSync", b"again"))
        assert second.msg_id != result.msg_id


def test_large_bodies_are_compressed_and_come_back_intact(cluster: DevCluster) -> None:
    body = bytes(range(256)) * 40  # 10 KiB, compressible
    with make_producer(cluster) as producer:
        result = producer.send(Message("ClientCompress", body))
        small = producer.send(Message("ClientCompress", b"x" * 4095))
        raw = pull_messages(producer.instance, result.message_queue, result.queue_offset, decompress=False)[0]
        assert raw.sys_flag & MessageSysFlag.COMPRESSED
        assert len(raw.body) < len(body)
        assert pull_messages(producer.instance, result.message_queue, result.queue_offset)[0].body == body
        raw_small = pull_messages(producer.instance, small.message_queue, small.queue_offset, decompress=False)[0]
        assert not raw_small.sys_flag & MessageSysFlag.COMPRESSED
        assert raw_small.body == b"x" * 4095


def test_oneway_async_and_awaitable_sends(cluster: DevCluster) -> None:
    with make_producer(cluster) as producer:
        first = producer.send(Message("ClientModes", b"first"))
        producer.send_oneway(Message("ClientModes", b"oneway"))
        future = producer.send_async(Message("ClientModes", b"async"))
        async_result = future.result(5)
        assert async_result.send_status is SendStatus.SEND_OK

        async def from_another_loop() -> str:
            result = await producer.send_async_await(Message("ClientModes", b"awaited"))
            return result.msg_id

        awaited_id = asyncio.run(from_another_loop())
        queues = {first.message_queue, async_result.message_queue}
        queues.update(MessageQueue("ClientModes", first.message_queue.broker_name, queue_id) for queue_id in range(4))

        def all_bodies() -> set[bytes]:
            return {msg.body for mq in queues for msg in pull_messages(producer.instance, mq)}

        wait_until(lambda: {b"first", b"oneway", b"async", b"awaited"} <= all_bodies())
        ids = {msg.uniq_key for mq in queues for msg in pull_messages(producer.instance, mq)}
        assert awaited_id in ids and async_result.msg_id in ids


def test_batch_messages_each_get_a_unique_key(cluster: DevCluster) -> None:
    with make_producer(cluster) as producer:
        msgs = [Message("ClientBatch", b"b%d" % index, tags=f"t{index}") for index in range(3)]
        result = producer.send_batch(msgs)
        ids = result.msg_id.split(",")
        assert ids == [msg.uniq_key for msg in msgs] and len(set(ids)) == 3
        assert len(result.offset_msg_id.split(",")) == 3
        stored = pull_messages(producer.instance, result.message_queue, result.queue_offset)
        assert [msg.body for msg in stored[:3]] == [b"b0", b"b1", b"b2"]
        assert [msg.uniq_key for msg in stored[:3]] == ids
        assert [msg.tags for msg in stored[:3]] == ["t0", "t1", "t2"]
        assert [msg.queue_offset for msg in stored[:3]] == [result.queue_offset + index for index in range(3)]


def test_new_topic_is_auto_created_through_the_default_topic_route(cluster: DevCluster) -> None:
    with make_producer(cluster) as producer:
        instance = producer.instance
        assert instance.run(instance.api.get_topic_route("ClientAutoNew")) is None
        result = producer.send(Message("ClientAutoNew", b"created"))
        assert result.send_status is SendStatus.SEND_OK
        # default_topic_queue_nums = 4 (TBW102 has 8 on the broker): the route the producer used is shrunk
        assert {mq.queue_id for mq in instance.topic_publish_info("ClientAutoNew").message_queues} == {0, 1, 2, 3}
        assert result.message_queue.queue_id < 4

        def registered() -> bool:
            route = instance.run(instance.api.get_topic_route("ClientAutoNew"))
            return route is not None and route.queue_datas[0].write_queue_nums == 4

        wait_until(registered)
        assert pull_messages(instance, result.message_queue, result.queue_offset)[0].body == b"created"


def test_sharding_key_picks_the_same_queue_as_java_everywhere(cluster: DevCluster) -> None:
    with make_producer(cluster) as producer:
        create_topic(producer.instance, cluster.broker_addr, "ClientSharded", 8)
        results = [producer.send(Message("ClientSharded", b"m%d" % index), sharding_key="TagA") for index in range(6)]
        # Java: "TagA".hashCode() = 2598919; 2598919 % 8 = 7
        assert {result.message_queue.queue_id for result in results} == {7}
        stored = pull_messages(producer.instance, results[0].message_queue)
        assert [msg.properties[MessageConst.SHARDING_KEY] for msg in stored] == ["TagA"] * 6
        assert [msg.body for msg in stored] == [b"m%d" % index for index in range(6)]

        key = "order-42"
        local_queue = producer.send(Message("ClientSharded", b"local"), sharding_key=key).message_queue.queue_id
        assert local_queue == abs(java_string_hash(key)) % 8
        script = textwrap.dedent(f"""
            from rocketflow import Message, Producer
            with Producer("pg_subprocess", namesrv={cluster.namesrv_addr!r}) as producer:
                ids = {{producer.send(Message("ClientSharded", b"remote"), sharding_key={key!r}).message_queue.queue_id
                       for _ in range(3)}}
            print(sorted(ids))
        """)
        env = dict(os.environ, PYTHONPATH=str(SRC_DIR), PYTHONHASHSEED="random")
        completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                                   timeout=30, check=False)
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.strip() == f"[{local_queue}]"


def test_selector_gets_the_queues_the_message_and_the_argument(cluster: DevCluster) -> None:
    seen: list[tuple[int, bytes, object]] = []

    def selector(queues: list[MessageQueue], msg: Message, arg: object) -> MessageQueue:
        seen.append((len(queues), msg.body, arg))
        assert isinstance(arg, int)
        return queues[arg % len(queues)]

    with make_producer(cluster) as producer:
        create_topic(producer.instance, cluster.broker_addr, "ClientSelected", 8)
        result = producer.send(Message("ClientSelected", b"sel"), selector=selector, arg=13)
        assert result.message_queue.queue_id == 13 % 8
        assert seen == [(8, b"sel", 13)]
        with pytest.raises(MQClientError, match="selector returned"):
            producer.send(Message("ClientSelected", b"bad"), selector=lambda queues, msg, arg: "nope")
        with pytest.raises(MQClientError, match="selector failed"):
            producer.send(Message("ClientSelected", b"bad"), selector=lambda queues, msg, arg: 1 / 0)


def test_invalid_messages_and_settings_get_clear_errors(cluster: DevCluster) -> None:
    with pytest.raises(MQClientError, match="unknown producer settings"):
        Producer("pg", namesrv=cluster.namesrv_addr, send_msg_timout=1)
    with pytest.raises(MQClientError, match="group"):
        Producer("bad group", namesrv=cluster.namesrv_addr)
    with pytest.raises(MQClientError, match="DEFAULT_PRODUCER"):
        Producer("DEFAULT_PRODUCER", namesrv=cluster.namesrv_addr)
    with pytest.raises(MQClientError, match="retry_times_when_send_failed"):
        Producer("pg", namesrv=cluster.namesrv_addr, retry_times_when_send_failed=-1)
    with pytest.raises(MQClientError, match="not running"):
        Producer("pg", namesrv=cluster.namesrv_addr).send(Message("T", b"x"))
    with make_producer(cluster, max_message_size=16) as producer:
        cases = {
            "empty": Message("ClientValid", b""),
            "over the maximum": Message("ClientValid", b"x" * 17),
            "illegal characters": Message("bad topic", b"x"),
            "blank": Message("", b"x"),
            "auto-create template": Message("TBW102", b"x"),
            "system topic": Message("SCHEDULE_TOPIC_XXXX", b"x"),
        }
        for _ in range(2):  # twice: topics that passed the check are remembered, refused ones are not
            for expected, msg in cases.items():
                with pytest.raises(MQClientError, match=expected):
                    producer.send(msg)
        with pytest.raises(MQClientError, match="either sharding_key or selector"):
            producer.send(Message("ClientValid", b"x"), sharding_key="k", selector=lambda q, m, a: q[0])
        with pytest.raises(MQClientError, match="one topic"):
            producer.send_batch([Message("ClientValid", b"a"), Message("ClientOther", b"b")])
        with pytest.raises(MQClientError, match="delay level"):
            producer.send_batch([Message("ClientValid", b"a", delay_level=2)])
        with pytest.raises(MQClientError, match="at least one"):
            producer.send_batch([])
        with pytest.raises(MQClientError, match="already running"):
            producer.start()
        with pytest.raises(MQClientError, match="already registered"):
            Producer("pg", namesrv=cluster.namesrv_addr).start()


def test_producers_share_one_instance_and_shutdown_leaves_no_thread(cluster: DevCluster) -> None:
    first = make_producer(cluster, "pg_one")
    second = make_producer(cluster, "pg_two")
    try:
        assert first.instance is second.instance
        assert len(client_threads()) == 1
        assert first.send(Message("ClientShared", b"1")).send_status is SendStatus.SEND_OK
        assert second.send(Message("ClientShared", b"2")).send_status is SendStatus.SEND_OK
        first.shutdown()
        assert len(client_threads()) == 1  # still referenced by the second producer
        assert second.send(Message("ClientShared", b"3")).send_status is SendStatus.SEND_OK
    finally:
        first.shutdown()
        second.shutdown()
    assert not client_threads()
    assert not ClientInstance.live_instances()


def test_blocking_send_on_the_client_loop_raises_instead_of_deadlocking(cluster: DevCluster) -> None:
    with make_producer(cluster) as producer:

        async def inside_loop() -> str:
            try:
                producer.send(Message("ClientLoop", b"x"))
            except MQClientError as exc:
                return str(exc)
            return "no error"

        assert "deadlock" in producer.instance.submit(inside_loop()).result(5)

        async def awaiting_inside_loop() -> SendStatus:
            return (await producer.send_async_await(Message("ClientLoop", b"y"))).send_status

        assert producer.instance.submit(awaiting_inside_loop()).result(5) is SendStatus.SEND_OK
