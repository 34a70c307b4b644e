"""CONSUMER_SEND_MSG_BACK through SCHEDULE_TOPIC_XXXX into %RETRY%, the dead-letter queue, delay levels."""

from __future__ import annotations

import asyncio

from broker_helpers import decoded, message_properties, pull, run, send, wait_for

from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import DelayOffsetTable
from rocketflow.protocol.message import MessageExt
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

FAST_LEVELS = "1s 2s 1s 1s 1s 1s"


def send_back_request(offset: int, group: str, delay_level: int = 0, max_times: int | None = None,
                      origin: str | None = None) -> RemotingCommand:
    fields = {"offset": str(offset), "group": group, "delayLevel": str(delay_level)}
    if max_times is not None:
        fields["maxReconsumeTimes"] = str(max_times)
    if origin is not None:
        fields["originMsgId"] = origin
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields)


async def pull_all(client: RemotingClient, addr: str, topic: str, queue_id: int = 0) -> list[MessageExt]:
    response = await pull(client, addr, "inspector", topic, queue_id, 0)
    return decoded(response) if response.code == ResponseCode.SUCCESS else []


def test_send_back_goes_to_retry_after_its_delay_then_to_the_dlq() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        props = message_properties("TagR", "rk")
        await send(client, addr, "Work", b"payload", props)
        original = (await pull_all(client, addr, "Work"))[0]
        response = await client.invoke(addr, send_back_request(original.commit_log_offset, "rg",
                                                                origin=original.uniq_key), 5)
        assert response.code == ResponseCode.SUCCESS, response.remark
        # waiting in SCHEDULE_TOPIC_XXXX, queue level-1 = 2 (3 + reconsumeTimes 0)
        scheduled = await pull_all(client, addr, "SCHEDULE_TOPIC_XXXX", 2)
        assert len(scheduled) == 1
        assert scheduled[0].properties["REAL_TOPIC"] == "%RETRY%rg"
        assert scheduled[0].properties["DELAY"] == "3"
        assert await pull_all(client, addr, "%RETRY%rg") == []

        async def retried() -> bool:
            return len(await pull_all(client, addr, "%RETRY%rg")) == 1

        await wait_for(retried, 5)
        retry = (await pull_all(client, addr, "%RETRY%rg"))[0]
        assert retry.body == b"payload"
        assert retry.reconsume_times == 1
        assert retry.uniq_key == original.uniq_key
        assert retry.properties["ORIGIN_MESSAGE_ID"] == original.msg_id  # the offset msg id
        assert retry.properties["RETRY_TOPIC"] == "Work"
        assert retry.tags == "TagR" and retry.keys == "rk"
        assert "DELAY" not in retry.properties and "REAL_TOPIC" not in retry.properties
        delay_offsets = DelayOffsetTable.decode((await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET), 5)).body)
        assert delay_offsets.offset_table[3] == 1
        # past the max reconsume times: straight to the dead-letter queue, origin kept
        response = await client.invoke(addr, send_back_request(retry.commit_log_offset, "rg", max_times=1), 5)
        assert response.code == ResponseCode.SUCCESS
        dead = await pull_all(client, addr, "%DLQ%rg")
        assert len(dead) == 1
        assert dead[0].reconsume_times == 2 and dead[0].properties["ORIGIN_MESSAGE_ID"] == original.msg_id
        # delay level < 0: straight to the dead-letter queue
        await client.invoke(addr, send_back_request(original.commit_log_offset, "rg2", delay_level=-1), 5)
        dead2 = await pull_all(client, addr, "%DLQ%rg2")
        assert dead2[0].properties["ORIGIN_MESSAGE_ID"] == original.msg_id and dead2[0].reconsume_times == 1
        missing = await client.invoke(addr, send_back_request(10**12, "rg"), 5)
        assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {10**12}")

    run(scenario, message_delay_level=FAST_LEVELS)


def test_plain_send_to_retry_topic_past_max_goes_to_dlq() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        response = await send(client, addr, "%RETRY%pg", b"again", message_properties(), reconsume_times=16,
                              max_reconsume_times=16, code=RequestCode.SEND_MESSAGE)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert [m.body for m in await pull_all(client, addr, "%DLQ%pg")] == [b"again"]
        below = await send(client, addr, "%RETRY%pg", b"retry", message_properties(), reconsume_times=2,
                           max_reconsume_times=16, code=RequestCode.SEND_MESSAGE)
        assert below.code == ResponseCode.SUCCESS
        assert [m.body for m in await pull_all(client, addr, "%RETRY%pg")] == [b"retry"]

    run(scenario)


def test_delay_level_message_is_delivered_after_its_delay_not_before() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        loop = asyncio.get_running_loop()
        started = loop.time()
        response = await send(client, addr, "Later", b"delayed", message_properties("D", extra={"DELAY": "2"}))
        assert response.code == ResponseCode.SUCCESS
        await asyncio.sleep(1.2)
        assert await pull_all(client, addr, "Later") == []

        async def arrived() -> bool:
            return len(await pull_all(client, addr, "Later")) == 1

        await wait_for(arrived, 5, 0.05)
        elapsed = loop.time() - started
        assert 1.9 <= elapsed < 3.5, elapsed
        message = (await pull_all(client, addr, "Later"))[0]
        assert message.body == b"delayed" and message.tags == "D"
        assert "DELAY" not in message.properties and "REAL_QID" not in message.properties

    run(scenario, message_delay_level=FAST_LEVELS)
