"""Sending (V1, V2, batch) and pulling over TCP: byte-exact round trips, filters, status mapping, errors."""

from __future__ import annotations

import asyncio
import zlib

import pytest
from broker_helpers import (
    batch_request,
    decoded,
    message_properties,
    pull,
    pull_request,
    run,
    send,
    send_request,
)

from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import TopicConfigSerializeWrapper
from rocketflow.protocol.codec import decode_record
from rocketflow.protocol.ids import decode_offset_msg_id
from rocketflow.protocol.message import Message, MessageExt
from rocketflow.protocol.tags import tags_code
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.frame import FrameDecoder, encode_frame
from rocketflow.remoting.headers import CreateTopicRequestHeader
from rocketflow.store.config import FlushDiskType


async def create_topic(client: RemotingClient, addr: str, topic: str, queues: int = 4, perm: int = 6) -> None:
    header = CreateTopicRequestHeader(topic=topic, default_topic="TBW102", read_queue_nums=queues,
                                      write_queue_nums=queues, perm=perm, topic_filter_type="SINGLE_TAG")
    response = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                                                 header.to_ext_fields()), 5)
    assert response.code == ResponseCode.SUCCESS, response.remark


def test_send_v1_v2_batch_and_pull_back_byte_exact() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        await create_topic(client, addr, "RoundTrip")
        sent: list[tuple[bytes, dict[str, str]]] = []
        for index, code in enumerate((RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)):
            props = message_properties("TagA", f"key-{index} other", {"custom": "välue\x01x"})
            body = bytes(range(256)) * (index + 1)
            response = await send(client, addr, "RoundTrip", body, props, code=code, flag=7)
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert response.ext_fields["queueId"] == "0"
            assert response.ext_fields["queueOffset"] == str(index)
            assert response.ext_fields["MSG_REGION"] == "DefaultRegion"
            assert response.ext_fields["TRACE_ON"] == "true"
            _host, port, _offset = decode_offset_msg_id(response.ext_fields["msgId"])
            assert port == cluster.broker.port if cluster.broker else False
            sent.append((body, props))
        batch = [Message("RoundTrip", f"batch-{i}".encode(), flag=i,
                         properties=message_properties(f"Tag{i % 2}", f"bk{i}")) for i in range(5)]
        response = await client.invoke(addr, batch_request("RoundTrip", batch), 5)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert response.ext_fields["queueOffset"] == "2"
        assert len(response.ext_fields["msgId"].split(",")) == 5
        pulled = await pull(client, addr, "rt_group", "RoundTrip", 0, 0)
        assert pulled.code == ResponseCode.SUCCESS and pulled.remark == "FOUND"
        assert pulled.ext_fields["nextBeginOffset"] == "7"
        assert pulled.ext_fields["maxOffset"] == "7" and pulled.ext_fields["minOffset"] == "0"
        messages = decoded(pulled)
        assert [m.queue_offset for m in messages] == list(range(7))
        for message, (body, props) in zip(messages[:2], sent, strict=True):
            assert message.body == body
            assert message.flag == 7
            expected = {k: v for k, v in props.items() if k != "WAIT"}
            assert {k: v for k, v in message.properties.items() if k != "CLUSTER"} == expected
            assert message.properties["CLUSTER"] == "DefaultCluster"
            assert message.born_timestamp == 1_700_000_000_000
        for message, original in zip(messages[2:], batch, strict=True):
            assert message.body == original.body
            assert message.flag == original.flag
            assert message.uniq_key == original.uniq_key
            assert message.tags == original.tags and message.keys == original.keys
        # the offset msg id of the response finds the same record
        view = await client.invoke(addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {
            "offset": str(messages[1].commit_log_offset)}), 5)
        assert view.code == ResponseCode.SUCCESS
        assert decode_record(view.body)[0].body == sent[1][0]
        # query by key
        query = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
            "topic": "RoundTrip", "key": "other", "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(2**62)}), 5)
        assert query.code == ResponseCode.SUCCESS
        assert sorted(m.body for m in decoded(query)) == sorted([sent[0][0], sent[1][0]])
        missing = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
            "topic": "RoundTrip", "key": "nope", "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(2**62)}), 5)
        assert missing.code == ResponseCode.QUERY_NOT_FOUND

    run(scenario)


def test_compressed_body_is_stored_and_served_as_sent() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        original = b"compress me " * 1000
        compressed = zlib.compress(original, 5)
        response = await send(client, addr, "Zipped", compressed, message_properties("T"), sys_flag=1)
        assert response.code == ResponseCode.SUCCESS, response.remark
        pulled = await pull(client, addr, "zg", "Zipped", 0, 0)
        raw = decoded(pulled, decompress=False)[0]
        assert raw.body == compressed and raw.sys_flag & 1
        assert decoded(pulled)[0].body == original

    run(scenario)


def test_tag_filtering() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        await create_topic(client, addr, "Tagged", 1)
        for index in range(9):
            tag = ("TagA", "TagB", "TagC")[index % 3]
            assert (await send(client, addr, "Tagged", str(index).encode(), message_properties(tag))).code == 0
        only_a = decoded(await pull(client, addr, "tg", "Tagged", 0, 0, subscription="TagA"))
        assert [m.body for m in only_a] == [b"0", b"3", b"6"]
        a_or_c = decoded(await pull(client, addr, "tg", "Tagged", 0, 0, subscription="TagA || TagC"))
        assert [m.tags for m in a_or_c] == ["TagA", "TagC"] * 3
        none = await pull(client, addr, "tg", "Tagged", 0, 0, subscription="TagZ")
        assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.remark == "NO_MATCHED_MESSAGE"
        assert none.ext_fields["nextBeginOffset"] == "9"
        bad = await pull(client, addr, "tg", "Tagged", 0, 0, subscription="||")
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert tags_code("TagA") == 2598919

    run(scenario)


def test_pull_status_mapping() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        await create_topic(client, addr, "Status", 2)
        for index in range(3):
            await send(client, addr, "Status", b"x%d" % index, message_properties())

        async def check(queue_id: int, offset: int, code: int, remark: str, next_offset: int) -> None:
            response = await pull(client, addr, "sg", "Status", queue_id, offset)
            assert (response.code, response.remark) == (code, remark), (queue_id, offset, response.describe())
            assert response.ext_fields["nextBeginOffset"] == str(next_offset)

        await check(0, 1, ResponseCode.SUCCESS, "FOUND", 3)
        await check(0, 3, ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", 3)
        await check(0, 10, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", 0)
        await check(0, -5, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", 0)
        await check(1, 0, ResponseCode.PULL_NOT_FOUND, "NO_MATCHED_LOGIC_QUEUE", 0)
        await check(1, 4, ResponseCode.PULL_OFFSET_MOVED, "NO_MATCHED_LOGIC_QUEUE", 0)
        illegal = await pull(client, addr, "sg", "Status", 2, 0)
        assert illegal.code == ResponseCode.SYSTEM_ERROR and "queueId[2] is illegal" in (illegal.remark or "")
        unknown = await pull(client, addr, "sg", "NoSuchTopic", 0, 0)
        assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
        no_sub = await pull(client, addr, "sg", "Status", 0, 0, subscription=None)
        assert no_sub.code == ResponseCode.SUBSCRIPTION_NOT_EXIST

    run(scenario)


def test_auto_create_permissions_and_illegal_messages() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        response = await send(client, addr, "AutoCreated", b"a", message_properties(), default_topic_queue_nums=3)
        assert response.code == ResponseCode.SUCCESS, response.remark
        topics = TopicConfigSerializeWrapper.decode((await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 5)).body).topic_config_table
        assert (topics["AutoCreated"].read_queue_nums, topics["AutoCreated"].perm) == (3, 6)
        assert topics["TBW102"].perm == 7 and topics["TBW102"].write_queue_nums == 8
        # a negative queue id picks one of the topic's queues
        random_queue = await send(client, addr, "AutoCreated", b"b", message_properties(), queue_id=-1)
        assert 0 <= int(random_queue.ext_fields["queueId"]) < 3
        await create_topic(client, addr, "ReadOnly", 2, perm=4)
        read_only = await send(client, addr, "ReadOnly", b"x", message_properties())
        assert read_only.code == ResponseCode.NO_PERMISSION
        oversized = await send(client, addr, "AutoCreated", b"x" * (4 * 1024 * 1024 + 1), message_properties())
        assert oversized.code == ResponseCode.MESSAGE_ILLEGAL
        illegal_topic = await send(client, addr, "bad topic!", b"x", message_properties())
        assert illegal_topic.code == ResponseCode.MESSAGE_ILLEGAL
        bad_queue = await send(client, addr, "AutoCreated", b"x", message_properties(), queue_id=99)
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[99] is illegal" in (bad_queue.remark or "")
        forbidden = await send(client, addr, "SCHEDULE_TOPIC_XXXX", b"x", message_properties())
        assert forbidden.code == ResponseCode.NO_PERMISSION
        # bad headers: clear error, nothing stored
        request = send_request("AutoCreated", b"x", message_properties())
        del request.ext_fields["b"]
        missing = await client.invoke(addr, request, 5)
        assert missing.code == ResponseCode.SYSTEM_ERROR and "b" in (missing.remark or "")
        request = send_request("AutoCreated", b"x", message_properties())
        request.ext_fields["e"] = "zero"
        not_int = await client.invoke(addr, request, 5)
        assert not_int.code == ResponseCode.SYSTEM_ERROR and "integer" in (not_int.remark or "")
        bad_batch = send_request("AutoCreated", b"\x00\x00\x00\x30garbage", None, code=RequestCode.SEND_BATCH_MESSAGE)
        assert (await client.invoke(addr, bad_batch, 5)).code == ResponseCode.MESSAGE_ILLEGAL
        bad_pull = pull_request("g", "AutoCreated", 0, 0)
        bad_pull.ext_fields["queueOffset"] = "x"
        assert (await client.invoke(addr, bad_pull, 5)).code == ResponseCode.SYSTEM_ERROR
        total = 0
        for queue_id in range(3):
            response = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {
                "topic": "AutoCreated", "queueId": str(queue_id)}), 5)
            total += int(response.ext_fields["offset"])
        assert total == 2
        unknown = await client.invoke(addr, RemotingCommand.request(9999), 5)
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert unknown.remark == " request type 9999 not supported"

    run(scenario)


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_batches_arriving_together_are_each_stored_and_answered(flush: FlushDiskType) -> None:
    """SEND_BATCH_MESSAGE requests written at once reach the broker in one read and are stored together (one
    write for the run of one-size batches): each is answered as if sent alone (after its flush under
    SYNC_FLUSH), a bad one fails alone, and the messages pull back in order from each queue."""
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        host, port = addr.rsplit(":", 1)
        sent: dict[int, list[bytes]] = {0: [], 1: []}
        requests, expect = [], []
        for i in range(10):
            queue_id = i % 2
            if i == 4:  # malformed: fails alone, stores nothing
                requests.append(send_request("Together", b"\x00\x00\x00\x30garbage", None, queue_id=queue_id,
                                             code=RequestCode.SEND_BATCH_MESSAGE))
                expect.append(ResponseCode.MESSAGE_ILLEGAL)
                continue
            if i == 6:  # refused by the topic checks before the store
                requests.append(batch_request("SCHEDULE_TOPIC_XXXX", [Message("SCHEDULE_TOPIC_XXXX", b"x")]))
                expect.append(ResponseCode.NO_PERMISSION)
                continue
            size = 30 if i != 7 else 31  # batch 7's size differs from the others' (it is stored on its own)
            bodies = [bytes([65 + i]) * size + f"{n:02d}".encode() for n in range(3 + i)]
            messages = [Message("Together", body, properties=message_properties(tags=f"t{i}")) for body in bodies]
            requests.append(batch_request("Together", messages, queue_id=queue_id, queue_nums=2))
            expect.append(ResponseCode.SUCCESS)
            sent[queue_id].extend(bodies)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(b"".join(encode_frame(request) for request in requests))
            await writer.drain()
            answers: dict[int, RemotingCommand] = {}
            decoder = FrameDecoder()
            while len(answers) < len(requests):
                data = await asyncio.wait_for(reader.read(65536), 5)
                assert data, "the broker closed the connection"
                answers.update((answer.opaque, answer) for answer in decoder.feed(data))
        finally:
            writer.close()
        responses = [answers[request.opaque] for request in requests]
        assert [response.code for response in responses] == expect, [r.remark for r in responses]
        assert "batch message 0" in (responses[4].remark or "")
        ids: dict[int, list[str]] = {0: [], 1: []}
        for response in responses:
            if response.code == ResponseCode.SUCCESS:
                queue_id = int(response.ext_fields["queueId"])
                assert int(response.ext_fields["queueOffset"]) == len(ids[queue_id])
                ids[queue_id].extend(response.ext_fields["msgId"].split(","))
        for queue_id in (0, 1):
            got: list[MessageExt] = []
            while len(got) < len(sent[queue_id]):
                response = await pull(client, addr, "g_together", "Together", queue_id, len(got))
                assert response.code == ResponseCode.SUCCESS, response.remark
                got.extend(decoded(response))
            assert [message.body for message in got] == sent[queue_id]
            assert [message.offset_msg_id for message in got] == ids[queue_id]

    run(scenario, **{"store.flush_disk_type": flush})


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
def test_a_send_flagged_batch_is_stored_as_a_batch(code: RequestCode) -> None:
    """The C++ client's `send_batch` uses SEND_MESSAGE with the header's batch flag (`m` in V2), not
    SEND_BATCH_MESSAGE: as RocketMQ's broker, the flag decides, so each message is stored on its own."""
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        await create_topic(client, addr, "FlaggedBatch")
        batch = [Message("FlaggedBatch", f"flagged-{i}".encode(), properties=message_properties("T", f"k{i}"))
                 for i in range(4)]
        request = batch_request("FlaggedBatch", batch)
        flagged = send_request("FlaggedBatch", request.body, None, code=code)
        flagged.ext_fields["m" if code == RequestCode.SEND_MESSAGE_V2 else "batch"] = "true"
        response = await client.invoke(addr, flagged, 5)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert len(response.ext_fields["msgId"].split(",")) == 4
        pulled = await pull(client, addr, "flagged_group", "FlaggedBatch", 0, 0)
        assert [m.body for m in decoded(pulled)] == [f"flagged-{i}".encode() for i in range(4)]

    run(scenario)
