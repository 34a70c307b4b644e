"""The servers and the client on either event loop (uvloop, asyncio's own), mixed both ways: the
choice changes speed only, so sends, orderly delivery and committed offsets come out the same."""

from __future__ import annotations

import asyncio

import pytest
import uvloop
from push_helpers import Recorder, make_topic, new_consumer, send

from rocketflow import Producer
from rocketflow.client import ConsumeFromWhere, ConsumeOrderlyContext, ConsumeOrderlyStatus
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt
from testkit import wait_until


def running_loop(cluster: DevCluster) -> asyncio.AbstractEventLoop:
    loop = cluster._loop
    assert loop is not None
    return loop


@pytest.mark.parametrize(("server_loop", "client_loop"), [("asyncio", "uvloop"), ("uvloop", "asyncio")])
def test_orderly_delivery_is_the_same_on_either_loop(server_loop: str, client_loop: str) -> None:
    cluster = DevCluster.start_in_thread(event_loop=server_loop)
    try:
        assert isinstance(running_loop(cluster), uvloop.Loop) == (server_loop == "uvloop")
        make_topic(cluster, "LoopsT", 4)
        producer = Producer("loops_pg", namesrv=cluster.namesrv_addr, instance_name=f"loops-p-{client_loop}",
                            event_loop=client_loop)
        producer.start()
        try:
            instance = producer._instance
            assert instance is not None and instance._loop is not None
            assert isinstance(instance._loop, uvloop.Loop) == (client_loop == "uvloop")
            keys = send(producer, "LoopsT", 400, sharding=lambda index: f"order-{index % 10}")
        finally:
            producer.shutdown()

        recorder = Recorder()

        def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
            recorder.record(msgs, context.message_queue)
            return ConsumeOrderlyStatus.SUCCESS

        consumer = new_consumer(cluster, "loops_cg", f"loops-c-{client_loop}", event_loop=client_loop,
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("LoopsT", "*")
        consumer.register_orderly_listener(listener)
        consumer.start()
        try:
            recorder.wait_for(400)
            received = recorder.keys()
            assert sorted(received) == sorted(keys)
            for order in range(10):  # each sharding key's messages arrive in the order they were sent
                sequence = [int(key[1:]) for key in received if int(key[1:]) % 10 == order]
                assert sequence == sorted(sequence)
            wait_until(lambda: sum(consumer.committed_offsets("LoopsT").values()) == 400)
        finally:
            consumer.shutdown()
    finally:
        cluster.close()
