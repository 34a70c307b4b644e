"""Rejected requests change nothing: no auto-created topic or group, no offset or lock entry for bad input."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from broker_helpers import decoded, message_properties, pull, run, send, send_request, wait_for

from rocketflow.broker import BrokerController
from rocketflow.broker.config import build_broker_config
from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import (
    ConsumerOffsetTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.store.config_file import TopicConfigTable


async def topic_table(client: RemotingClient, addr: str) -> TopicConfigSerializeWrapper:
    response = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 5)
    return TopicConfigSerializeWrapper.decode(response.body)


async def group_names(client: RemotingClient, addr: str) -> set[str]:
    response = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 5)
    return set(SubscriptionGroupWrapper.decode(response.body).subscription_group_table)


async def routed(client: RemotingClient, namesrv: str, topic: str) -> bool:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return (await client.invoke(namesrv, request, 5)).code == ResponseCode.SUCCESS


def send_back_request(offset: int, group: str, delay_level: int = 0) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                   {"offset": str(offset), "group": group, "delayLevel": str(delay_level)})


async def pull_all(client: RemotingClient, addr: str, topic: str, queue_id: int = 0) -> list[MessageExt]:
    response = await pull(client, addr, "inspector", topic, queue_id, 0)
    return decoded(response) if response.code == ResponseCode.SUCCESS else []


def test_rejected_sends_to_new_topics_create_nothing() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        before = await topic_table(client, addr)
        oversized = await send(client, addr, "NewOversized", b"x" * (4 * 1024 * 1024 + 1), message_properties())
        assert oversized.code == ResponseCode.MESSAGE_ILLEGAL
        bad_delay = await send(client, addr, "NewBadDelay", b"x", message_properties(extra={"DELAY": "abc"}))
        assert bad_delay.code == ResponseCode.MESSAGE_ILLEGAL and "DELAY" in (bad_delay.remark or "")
        bad_batch = send_request("NewBadBatch", b"\x00\x00\x00\x30garbage", None,
                                 code=RequestCode.SEND_BATCH_MESSAGE)
        assert (await client.invoke(addr, bad_batch, 5)).code == ResponseCode.MESSAGE_ILLEGAL
        after = await topic_table(client, addr)
        assert set(after.topic_config_table) == set(before.topic_config_table)
        assert after.data_version.counter == before.data_version.counter
        # a rejected plain send to a new group's retry topic past the max: no retry or DLQ topic, no group
        transactional = await send(client, addr, "%RETRY%fresh_rg", b"t",
                                   message_properties(extra={"TRAN_MSG": "true"}), reconsume_times=16,
                                   max_reconsume_times=16, code=RequestCode.SEND_MESSAGE)
        assert transactional.code == ResponseCode.NO_PERMISSION
        assert set((await topic_table(client, addr)).topic_config_table) == set(before.topic_config_table)
        assert "fresh_rg" not in await group_names(client, addr)
        # an accepted send to a new topic re-registers; the rejected topics never reach the name server
        assert (await send(client, addr, "NewProbe", b"ok", message_properties())).code == ResponseCode.SUCCESS

        async def probe_routed() -> bool:
            return await routed(client, cluster.namesrv_addr, "NewProbe")

        await wait_for(probe_routed)
        for topic in ("NewOversized", "NewBadDelay", "NewBadBatch", "%RETRY%fresh_rg", "%DLQ%fresh_rg"):
            assert not await routed(client, cluster.namesrv_addr, topic), topic
        assert cluster.broker is not None
        await asyncio.wrap_future(cluster.broker.topics.written())
        on_disk = TopicConfigTable(cluster.store_dir / "config")  # topics.json and its journal
        on_disk.load()
        assert "NewProbe" in on_disk.topics
        assert "NewOversized" not in on_disk.topics

    run(scenario, reject_transaction_message=True)


def test_send_back_with_a_bad_offset_creates_no_retry_topic_or_group() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        missing = await client.invoke(addr, send_back_request(10**12, "fresh_sb"), 5)
        assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {10**12}")
        negative = await client.invoke(addr, send_back_request(-5, "fresh_sb"), 5)
        assert negative.code == ResponseCode.SYSTEM_ERROR
        topics = (await topic_table(client, addr)).topic_config_table
        assert "%RETRY%fresh_sb" not in topics and "%DLQ%fresh_sb" not in topics
        assert "fresh_sb" not in await group_names(client, addr)
        bad_group = await client.invoke(addr, send_back_request(0, "bad@group"), 5)
        assert bad_group.code == ResponseCode.SYSTEM_ERROR and "group" in (bad_group.remark or "")
        assert "bad@group" not in await group_names(client, addr)
        # the same with a real message: both are created
        await send(client, addr, "SendBackSrc", b"m", message_properties())
        original = (await pull_all(client, addr, "SendBackSrc"))[0]
        ok = await client.invoke(addr, send_back_request(original.commit_log_offset, "fresh_sb"), 5)
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert "%RETRY%fresh_sb" in (await topic_table(client, addr)).topic_config_table
        assert "fresh_sb" in await group_names(client, addr)

    run(scenario)


def test_send_back_of_a_retried_message_uses_delay_level_3_plus_reconsume_times() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        response = await send(client, addr, "%RETRY%dl_g", b"again", message_properties("T"), reconsume_times=2,
                              code=RequestCode.SEND_MESSAGE)
        assert response.code == ResponseCode.SUCCESS, response.remark
        retried = (await pull_all(client, addr, "%RETRY%dl_g"))[0]
        assert retried.reconsume_times == 2
        back = await client.invoke(addr, send_back_request(retried.commit_log_offset, "dl_g"), 5)
        assert back.code == ResponseCode.SUCCESS, back.remark
        # level 3 + 2 = 5 waits in SCHEDULE_TOPIC_XXXX queue 4
        scheduled = await pull_all(client, addr, "SCHEDULE_TOPIC_XXXX", 4)
        assert len(scheduled) == 1
        assert scheduled[0].properties["DELAY"] == "5" and scheduled[0].reconsume_times == 3
        assert scheduled[0].properties["REAL_TOPIC"] == "%RETRY%dl_g"
        assert await pull_all(client, addr, "SCHEDULE_TOPIC_XXXX", 2) == []

    run(scenario)


def test_get_earliest_msg_storetime() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr

        async def earliest(topic: str, queue_id: int) -> RemotingCommand:
            return await client.invoke(addr, RemotingCommand.request(RequestCode.GET_EARLIEST_MSG_STORETIME, {
                "topic": topic, "queueId": str(queue_id)}), 5)

        started = time.time() * 1000
        await send(client, addr, "Earliest", b"first", message_properties(), default_topic_queue_nums=1)
        await asyncio.sleep(0.05)
        await send(client, addr, "Earliest", b"second", message_properties(), default_topic_queue_nums=1)
        first = (await pull_all(client, addr, "Earliest"))[0]
        response = await earliest("Earliest", 0)
        assert response.code == ResponseCode.SUCCESS
        assert int(response.ext_fields["timestamp"]) == first.store_timestamp
        assert started - 1000 <= first.store_timestamp <= time.time() * 1000
        assert (await earliest("NoSuchTopic", 0)).ext_fields["timestamp"] == "-1"

    run(scenario)


def _offset_request(code: int, group: str, topic: str, queue_id: int | str, offset: int | None = None
                    ) -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
    if offset is not None:
        fields["commitOffset"] = str(offset)
    return RemotingCommand.request(code, fields)


def test_offset_handlers_reject_bad_queue_ids_and_names() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        cases = [("vg", "ValidT", -7, "queueId"), ("vg", "bad@topic", 0, "topic"), ("bad@group", "ValidT", 0,
                                                                                    "consumerGroup")]
        for group, topic, queue_id, field in cases:
            for code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
                offset = 3 if code == RequestCode.UPDATE_CONSUMER_OFFSET else None
                response = await client.invoke(addr, _offset_request(code, group, topic, queue_id, offset), 5)
                assert response.code == ResponseCode.SYSTEM_ERROR, (code, field)
                assert (response.remark or "").startswith(f"invalid request header field {field}: "), response.remark
        table = ConsumerOffsetTable.decode((await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET), 5)).body).offset_table
        assert table == {}
        good = await client.invoke(addr, _offset_request(RequestCode.UPDATE_CONSUMER_OFFSET, "vg", "ValidT", 0, 3), 5)
        assert good.code == ResponseCode.SUCCESS
        for code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET, RequestCode.GET_EARLIEST_MSG_STORETIME,
                     RequestCode.SEARCH_OFFSET_BY_TIMESTAMP):
            fields = {"topic": "ValidT", "queueId": "-1", "timestamp": "0"}
            response = await client.invoke(addr, RemotingCommand.request(code, fields), 5)
            assert response.code == ResponseCode.SYSTEM_ERROR, code
            assert "queueId" in (response.remark or "") and "-1" in (response.remark or "")
            fields = {"topic": "bad@topic", "queueId": "0", "timestamp": "0"}
            response = await client.invoke(addr, RemotingCommand.request(code, fields), 5)
            assert response.code == ResponseCode.SYSTEM_ERROR and "topic" in (response.remark or ""), code
        reset = await client.invoke(addr, RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
            "topic": "ValidT", "group": "bad@group", "timestamp": "-1", "isForce": "true"}), 5)
        assert reset.code == ResponseCode.SYSTEM_ERROR and "group" in (reset.remark or "")
        # a pull under an illegal group name is refused before the group is auto-created
        await send(client, addr, "ValidT", b"m", message_properties())
        bad_pull = await pull(client, addr, "bad@group", "ValidT", 0, 0)
        assert bad_pull.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (bad_pull.remark or "")
        assert "bad@group" not in await group_names(client, addr)
        # a pull of an unknown topic does not auto-create its group either
        assert (await pull(client, addr, "pull_g", "NoSuchTopic", 0, 0)).code == ResponseCode.TOPIC_NOT_EXIST
        assert "pull_g" not in await group_names(client, addr)
        table = ConsumerOffsetTable.decode((await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET), 5)).body).offset_table
        assert table == {"ValidT@vg": {0: 3}}

    run(scenario)


def test_lock_batch_rejects_malformed_bodies() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        good_mq = {"brokerName": "broker-a", "queueId": 0, "topic": "Locked"}
        bad_bodies = [
            ({"consumerGroup": "lg", "clientId": "c1", "mqSet": [{"topic": 1}]}, "mqSet[0].topic"),
            ({"consumerGroup": "lg", "clientId": "c1", "mqSet": [{**good_mq, "topic": "bad@t"}]}, "mqSet[0].topic"),
            ({"consumerGroup": "lg", "clientId": "c1", "mqSet": [good_mq, {**good_mq, "queueId": -1}]},
             "mqSet[1].queueId"),
            ({"consumerGroup": "lg", "clientId": "c1", "mqSet": [{**good_mq, "queueId": "0"}]}, "mqSet[0].queueId"),
            ({"consumerGroup": "lg", "clientId": "c1", "mqSet": [{"topic": "Locked", "queueId": 0}]},
             "mqSet[0].brokerName"),
            ({"consumerGroup": "lg", "clientId": "c1", "mqSet": [7]}, "mqSet[0]"),
            ({"consumerGroup": "lg", "clientId": "c1", "mqSet": {"a": 1}}, "mqSet"),
            ({"consumerGroup": "bad@g", "clientId": "c1", "mqSet": [good_mq]}, "consumerGroup"),
            ({"consumerGroup": "lg", "clientId": "", "mqSet": [good_mq]}, "clientId"),
            ({"clientId": "c1", "mqSet": [good_mq]}, "consumerGroup"),
            ([good_mq], "expected an object"),
        ]
        for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
            for body, named in bad_bodies:
                response = await client.invoke(addr, RemotingCommand.request(code, body=json.dumps(body).encode()), 5)
                assert response.code == ResponseCode.SYSTEM_ERROR, (code, body)
                assert (response.remark or "").startswith("invalid request body:"), response.remark
                assert named in (response.remark or ""), (named, response.remark)
        assert cluster.broker is not None and cluster.broker.locks.entry_counts() == {}
        queue = MessageQueue("Locked", "broker-a", 0)
        body = LockBatchRequestBody("lg", "c1", {queue}).encode()
        locked = await client.invoke(addr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body), 5)
        assert locked.code == ResponseCode.SUCCESS
        assert LockBatchResponseBody.decode(locked.body).lock_ok_mq_set == {queue}

    run(scenario)


def test_broker_conf_alias_of_the_lock_max_live_time(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"rocketmq.broker.rebalance.lockMaxLiveTime=1234\nstorePathRootDir={tmp_path / 'store'}\n")
    config = build_broker_config({"listen_port": 0}, conf_file=conf)
    assert config.rebalance_lock_max_live_time_ms == 1234
    assert BrokerController(config).locks.max_live_time_ms == 1234
