"""Offsets, long polling, heartbeats and NOTIFY_CONSUMER_IDS_CHANGED, broker locks, admin views."""

from __future__ import annotations

import asyncio
import time

from broker_helpers import decoded, heartbeat_request, message_properties, pull, run, send, send_request, wait_for

from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient, RequestContext
from rocketflow.protocol.bodies import (
    ConsumerConnection,
    ConsumerListBody,
    ConsumerOffsetTable,
    ConsumeStats,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    TopicStatsTable,
    UnlockBatchRequestBody,
)
from rocketflow.protocol.codec import encode_batch_body
from rocketflow.protocol.message import Message, MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand


def offset_request(code: int, group: str, topic: str, queue_id: int, offset: int | None = None,
                   *, oneway: bool = False) -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
    if offset is not None:
        fields["commitOffset"] = str(offset)
    return RemotingCommand.request(code, fields, oneway=oneway)


async def query_offset(client: RemotingClient, addr: str, group: str, topic: str, queue_id: int) -> RemotingCommand:
    return await client.invoke(addr, offset_request(RequestCode.QUERY_CONSUMER_OFFSET, group, topic, queue_id), 5)


def test_consumer_offsets_query_and_update() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        await send(client, addr, "Offsets", b"m", message_properties())
        first = await query_offset(client, addr, "og", "Offsets", 0)
        assert (first.code, first.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
        # ali-ons' form: flag 0, expects a reply
        reply = await client.invoke(addr, offset_request(RequestCode.UPDATE_CONSUMER_OFFSET, "og", "Offsets", 0, 1), 5)
        assert reply.code == ResponseCode.SUCCESS
        assert (await query_offset(client, addr, "og", "Offsets", 0)).ext_fields["offset"] == "1"
        # the Java client's periodic form: oneway
        await client.invoke_oneway(addr, offset_request(RequestCode.UPDATE_CONSUMER_OFFSET, "og", "Offsets", 0, 5,
                                                        oneway=True))

        async def updated() -> bool:
            return (await query_offset(client, addr, "og", "Offsets", 0)).ext_fields["offset"] == "5"

        await wait_for(updated)
        # piggy-backed commit offset on a pull
        await pull(client, addr, "og", "Offsets", 0, 0, commit_offset=3)
        assert (await query_offset(client, addr, "og", "Offsets", 0)).ext_fields["offset"] == "3"
        table = ConsumerOffsetTable.decode((await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET), 5)).body)
        assert table.offset_table["Offsets@og"] == {0: 3}
        missing = offset_request(RequestCode.UPDATE_CONSUMER_OFFSET, "og", "Offsets", 0)
        assert (await client.invoke(addr, missing, 5)).code == ResponseCode.SYSTEM_ERROR
        assert (await query_offset(client, addr, "og", "Offsets", 0)).ext_fields["offset"] == "3"

    run(scenario)


async def send_tagged_batch(client: RemotingClient, addr: str, tags: list[str]) -> None:
    """One SEND_BATCH_MESSAGE to queue 0 of Polled: a message per tag, its body the tag."""
    body = encode_batch_body([Message("Polled", tag.encode(), tags=tag) for tag in tags])
    response = await client.invoke(addr, send_request("Polled", body, code=RequestCode.SEND_BATCH_MESSAGE), 5)
    assert response.code == ResponseCode.SUCCESS, response.remark


def test_long_polling_answers_on_arrival_and_on_timeout() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        await send(client, addr, "Polled", b"first", message_properties())
        loop = asyncio.get_running_loop()
        # held at the end of queue 0, answered right after a send to that queue
        held = asyncio.ensure_future(pull(client, addr, "pg", "Polled", 0, 1, suspend=True, suspend_ms=15_000,
                                          timeout=20))
        await asyncio.sleep(0.3)
        assert not held.done()
        other = RemotingClient()
        try:
            # a message to another queue does not wake it
            await send(other, addr, "Polled", b"elsewhere", message_properties(), queue_id=1)
            await asyncio.sleep(0.2)
            assert not held.done()
            sent_at = loop.time()
            await send(other, addr, "Polled", b"second", message_properties())
            response = await held
            latency = loop.time() - sent_at
        finally:
            await other.close()
        assert response.code == ResponseCode.SUCCESS
        assert [m.body for m in decoded(response)] == [b"second"]
        assert latency < 0.1, f"held pull answered {latency * 1000:.0f} ms after the send"
        # a short suspend timeout gives PULL_NOT_FOUND on time
        started = loop.time()
        timed_out = await pull(client, addr, "pg", "Polled", 0, 2, suspend=True, suspend_ms=300)
        elapsed = loop.time() - started
        assert timed_out.code == ResponseCode.PULL_NOT_FOUND
        assert 0.25 <= elapsed < 0.8, elapsed
        # a held pull with a tag filter is not woken by other tags
        tagged = asyncio.ensure_future(pull(client, addr, "pg", "Polled", 0, 2, suspend=True, suspend_ms=1000,
                                            subscription="Wanted"))
        await asyncio.sleep(0.1)
        await send(client, addr, "Polled", b"unwanted", message_properties("Other"))
        await asyncio.sleep(0.2)
        assert not tagged.done()
        await send(client, addr, "Polled", b"wanted", message_properties("Wanted"))
        answer = await asyncio.wait_for(tagged, 0.5)
        assert [m.body for m in decoded(answer)] == [b"wanted"]
        # a batch wakes it only when one of its messages has a wanted tag, wherever that message is
        tagged = asyncio.ensure_future(pull(client, addr, "pg", "Polled", 0, 4, suspend=True, suspend_ms=2000,
                                            subscription="Wanted"))
        await asyncio.sleep(0.1)
        await send_tagged_batch(client, addr, ["Other", "Other"])
        await asyncio.sleep(0.2)
        assert not tagged.done()
        await send_tagged_batch(client, addr, ["Other", "Other", "Wanted"])
        answer = await asyncio.wait_for(tagged, 0.5)
        assert [m.body for m in decoded(answer)] == [b"Wanted"]
        # the runtime info counts the four pulls held: three woken by a message, one by its timeout
        info = KVTable.decode((await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5)).body).table
        assert (info["pullRequestsSuspended"], info["pullRequestsWokenByMessage"],
                info["pullRequestsWokenByTimeout"], info["pullRequestsHeld"]) == ("4", "3", "1", "0")

    run(scenario)


def test_short_polling_when_long_polling_disabled() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        await send(client, addr, "Short", b"a", message_properties())
        loop = asyncio.get_running_loop()
        started = loop.time()
        response = await pull(client, addr, "sg", "Short", 0, 1, suspend=True, suspend_ms=15_000)
        elapsed = loop.time() - started
        assert response.code == ResponseCode.PULL_NOT_FOUND
        assert 0.15 <= elapsed < 1.0, elapsed

    run(scenario, long_polling_enable=False, short_polling_time_ms=200)


def test_heartbeat_consumer_list_and_notifications() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        notified: list[str] = []

        def on_notify(ctx: RequestContext, request: RemotingCommand) -> None:
            notified.append(request.ext_fields["consumerGroup"])

        client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
        response = await client.invoke(addr, heartbeat_request("10.0.0.1@1", "cg", {"Members": "TagA || TagB"}), 5)
        assert response.code == ResponseCode.SUCCESS and response.version == 399
        await send(client, addr, "Members", b"x", message_properties("TagB"))
        listing = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                                    {"consumerGroup": "cg"}), 5)
        assert ConsumerListBody.decode(listing.body).consumer_id_list == ["10.0.0.1@1"]
        # pulls without a subscription header use the heartbeat's subscription (and its tag filter)
        pulled = await pull(client, addr, "cg", "Members", 0, 0, subscription=None)
        assert pulled.code == ResponseCode.SUCCESS and decoded(pulled)[0].tags == "TagB"
        not_latest = await pull(client, addr, "cg", "Members", 0, 0, subscription=None, sub_version=5)
        assert not_latest.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
        # the retry topic was created for the group
        stats = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO,
                                                                  {"topic": "%RETRY%cg"}), 5)
        assert stats.code == ResponseCode.SUCCESS
        assert len(TopicStatsTable.decode(stats.body).offset_table) == 1
        await asyncio.sleep(0.1)
        notified.clear()
        second = RemotingClient()
        try:
            await second.invoke(addr, heartbeat_request("10.0.0.2@2", "cg", {"Members": "TagA || TagB"}), 5)

            async def notified_once() -> bool:
                return notified == ["cg"]

            await wait_for(notified_once, 3)
            listing = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                                        {"consumerGroup": "cg"}), 5)
            assert sorted(ConsumerListBody.decode(listing.body).consumer_id_list) == ["10.0.0.1@1", "10.0.0.2@2"]
            connections = await client.invoke(addr, RemotingCommand.request(
                RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "cg"}), 5)
            body = ConsumerConnection.decode(connections.body)
            assert {c.client_id for c in body.connection_set} == {"10.0.0.1@1", "10.0.0.2@2"}
            assert body.subscription_table["Members"].sub_string == "TagA || TagB"
            # the same heartbeat again changes nothing: no notification
            await second.invoke(addr, heartbeat_request("10.0.0.2@2", "cg", {"Members": "TagA || TagB"}), 5)
            await asyncio.sleep(0.2)
            assert notified == ["cg"]
        finally:
            await second.close()

        async def notified_twice() -> bool:
            return notified == ["cg", "cg"]

        await wait_for(notified_twice, 3)
        listing = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                                    {"consumerGroup": "cg"}), 5)
        assert ConsumerListBody.decode(listing.body).consumer_id_list == ["10.0.0.1@1"]
        unregister = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT,
                                             {"clientID": "10.0.0.1@1", "consumerGroup": "cg"})
        assert (await client.invoke(addr, unregister, 5)).code == ResponseCode.SUCCESS
        gone = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                                 {"consumerGroup": "cg"}), 5)
        assert (gone.code, gone.remark) == (ResponseCode.SYSTEM_ERROR, "no consumer for this group, cg")
        offline = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                                    {"consumerGroup": "cg"}), 5)
        assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
        bad = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{not json")
        assert (await client.invoke(addr, bad, 5)).code == ResponseCode.SYSTEM_ERROR

    run(scenario)


def test_broker_locks() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        queues = {MessageQueue("Ordered", "broker-a", queue_id) for queue_id in range(4)}

        async def lock(client_id: str, mqs: set[MessageQueue]) -> set[MessageQueue]:
            body = LockBatchRequestBody("og", client_id, mqs).encode()
            response = await client.invoke(addr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body), 5)
            assert response.code == ResponseCode.SUCCESS
            return LockBatchResponseBody.decode(response.body).lock_ok_mq_set

        async def unlock(client_id: str, mqs: set[MessageQueue]) -> None:
            body = UnlockBatchRequestBody("og", client_id, mqs).encode()
            response = await client.invoke(addr, RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body), 5)
            assert response.code == ResponseCode.SUCCESS

        first_half = {mq for mq in queues if mq.queue_id < 2}
        assert await lock("c1", first_half) == first_half
        assert await lock("c2", queues) == queues - first_half
        assert await lock("c1", queues) == first_half
        await unlock("c2", first_half)  # not the owner: nothing happens
        assert await lock("c2", first_half) == set()
        await unlock("c1", first_half)
        assert await lock("c2", first_half) == first_half
        # expiry (short setting): another client takes over
        await asyncio.sleep(0.4)
        assert await lock("c1", queues) == queues

    run(scenario, rebalance_lock_max_live_time_ms=300)


def test_consume_stats_and_runtime_info() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        for _ in range(3):
            await send(client, addr, "Stats", b"m", message_properties())
        await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "stg", "topic": "Stats", "queueId": "0", "commitOffset": "2"}), 5)
        stats = ConsumeStats.decode((await client.invoke(addr, RemotingCommand.request(
            RequestCode.GET_CONSUME_STATS, {"consumerGroup": "stg", "topic": "Stats"}), 5)).body)
        wrapper = stats.offset_table[MessageQueue("Stats", "broker-a", 0)]
        assert (wrapper.broker_offset, wrapper.consumer_offset) == (3, 2)
        assert abs(wrapper.last_timestamp - time.time() * 1000) < 60_000
        assert stats.compute_total_diff() == 1
        info = KVTable.decode((await client.invoke(addr, RemotingCommand.request(
            RequestCode.GET_BROKER_RUNTIME_INFO), 5)).body).table
        assert info["brokerVersionDesc"] == "V4_9_3" and int(info["msgPutTotalTodayNow"]) == 3

    run(scenario)


def test_running_info_relay_and_offset_reset_push() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        resets: list[RemotingCommand] = []

        def running_info(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
            return request.make_response(ResponseCode.SUCCESS, body=b'{"properties":{"k":"v"}}')

        def on_reset(ctx: RequestContext, request: RemotingCommand) -> None:
            resets.append(request)

        consumer = RemotingClient()
        consumer.register(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
        consumer.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, on_reset)
        try:
            await consumer.invoke(addr, heartbeat_request("10.0.0.9@9", "rig", {"Resettable": "*"}), 5)
            for _ in range(4):
                await send(client, addr, "Resettable", b"r", message_properties(), queue_id=0,
                           default_topic_queue_nums=1)
            relayed = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {
                "consumerGroup": "rig", "clientId": "10.0.0.9@9"}), 5)
            assert (relayed.code, relayed.body) == (ResponseCode.SUCCESS, b'{"properties":{"k":"v"}}')
            offline = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {
                "consumerGroup": "rig", "clientId": "nobody"}), 5)
            assert offline.code == ResponseCode.SYSTEM_ERROR
            reset = await client.invoke(addr, RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
                "topic": "Resettable", "group": "rig", "timestamp": "-1", "isForce": "true"}), 5)
            assert reset.code == ResponseCode.SUCCESS

            async def pushed() -> bool:
                return len(resets) == 1

            await wait_for(pushed, 3)
            assert resets[0].ext_fields["group"] == "rig" and b"Resettable" in resets[0].body
            offset = await query_offset(client, addr, "rig", "Resettable", 0)
            assert offset.ext_fields["offset"] == "4"
        finally:
            await consumer.close()

    run(scenario)


def test_dev_cluster_from_synchronous_code() -> None:
    cluster = DevCluster.start_in_thread()
    try:
        async def use() -> None:
            client = RemotingClient()
            try:
                response = await send(client, cluster.broker_addr, "SyncUse", b"x", message_properties())
                assert response.code == ResponseCode.SUCCESS
            finally:
                await client.close()

        asyncio.run(use())
        store_dir = cluster.store_dir
        assert store_dir.is_dir()
    finally:
        cluster.close()
    assert not store_dir.exists()
