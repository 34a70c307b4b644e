"""Raw frames the broker can cheaply prove malformed are refused with a clear remark, and it keeps serving.

What a consumer could not decode must never be stored (one such record once stopped its queue for
good): sysFlag bits the broker does not know, a body flagged compressed that is not zlib, batch
properties that are not UTF-8; nor what has no meaning: queue ids below -1 (-1 is RocketMQ's "any
queue") or past the topic's queues, committed offsets below -1. Every accepted record decodes.
"""

from __future__ import annotations

import zlib

from broker_helpers import message_properties, pull, run, send, send_request

from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient
from rocketflow.protocol.codec import UndecodableRecord, decode_records, encode_batch_body
from rocketflow.protocol.message import Message
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

TOPIC = "BadRecordT"
DEFLATED = zlib.compress(b"a real body " * 20)


def batch_body(props: list[bytes], bodies: list[bytes] | None = None) -> bytes:
    """A SEND_BATCH_MESSAGE body whose elements carry these raw properties bytes (UTF-8 or not)."""
    bodies = bodies or [b"b%d" % index for index in range(len(props))]
    placeholders = [Message(TOPIC, body, properties={"P": "x" * (len(raw) - 2)})
                    for body, raw in zip(bodies, props, strict=True)]
    encoded = bytearray(encode_batch_body(placeholders))
    pos = 0
    for raw in props:
        size = int.from_bytes(encoded[pos:pos + 4], "big")
        end = pos + size
        encoded[end - len(raw):end] = raw
        pos = end
    assert len(encoded) == pos
    return bytes(encoded)


def batch(body: bytes, sys_flag: int = 0) -> RemotingCommand:
    return send_request(TOPIC, body, {"WAIT": "true"}, code=RequestCode.SEND_BATCH_MESSAGE, sys_flag=sys_flag)


async def stored_records(client: RemotingClient, addr: str) -> tuple[int, list[UndecodableRecord]]:
    """How many records the topic's queues hold, and those of them a consumer could not decode."""
    count = 0
    bad: list[UndecodableRecord] = []
    for queue_id in range(4):
        offset = 0
        while True:
            response = await pull(client, addr, "bad_record_reader", TOPIC, queue_id, offset)
            if response.code != ResponseCode.SUCCESS:
                break
            messages = decode_records(response.body, undecodable=bad)
            count += len(messages)
            offset = int(response.ext_fields["nextBeginOffset"])
    return count + len(bad), bad


def test_sends_the_broker_can_prove_malformed_are_refused_and_it_keeps_serving() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        accepted = 0

        async def expect(request: RemotingCommand, code: int, *remark_parts: str, messages: int = 1) -> None:
            nonlocal accepted
            response = await client.invoke(addr, request, 5)
            remark = response.remark or ""
            assert response.code == code, (request.ext_fields, response.code, remark)
            assert all(part in remark for part in remark_parts), remark
            if code == ResponseCode.SUCCESS:
                accepted += messages

        ok, illegal = ResponseCode.SUCCESS, ResponseCode.MESSAGE_ILLEGAL
        assert (await send(client, addr, TOPIC, b"first", message_properties())).code == ok  # creates 4 queues
        accepted += 1
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            def single(body: bytes, sys_flag: int = 0, queue_id: int = 0, code: int = code) -> RemotingCommand:
                return send_request(TOPIC, body, message_properties(), sys_flag=sys_flag, queue_id=queue_id, code=code)

            # flagged compressed, but not zlib (what stopped a queue for good), or too short to be
            await expect(single(b"this was never deflated", 1), illegal, "compressed", "zlib")
            await expect(single(DEFLATED[:2], 1), illegal, "zlib")
            await expect(single(b"\x78\x20" + DEFLATED[2:], 1), illegal, "zlib")  # needs a preset dictionary
            # bits no RocketMQ 4.x client sets, or 5.x ones this broker does not implement
            for unknown in (0x40, 0x80, 0x1000, 1 << 30, -1):
                await expect(single(b"plain", unknown), illegal, "sysFlag")
            await expect(single(DEFLATED, 0x101), illegal, "compression type")   # 5.x LZ4
            await expect(single(DEFLATED, 0x300), illegal, "compression type")   # zlib type, not flagged compressed
            # accepted: zlib, flagged as 4.x clients do and as 5.x ones do
            await expect(single(DEFLATED, 1), ok)
            await expect(single(DEFLATED, 0x301), ok)
            # queue ids: -1 is RocketMQ's "any queue"; below, or past the topic's 4 queues, is illegal
            await expect(single(b"q", queue_id=-1), ok)
            await expect(single(b"q", queue_id=-5), ResponseCode.SYSTEM_ERROR, "queueId[-5] is illegal")
            await expect(single(b"q", queue_id=4), ResponseCode.SYSTEM_ERROR, "queueId[4] is illegal")
            await expect(single(b"q", queue_id=-(1 << 31)), ResponseCode.SYSTEM_ERROR, "is illegal")
        # a consumer's reply (stored in its topic, pushed to the requester) is held to the same rule
        reply = send_request(TOPIC, b"never deflated", message_properties(), sys_flag=1,
                             code=RequestCode.SEND_REPLY_MESSAGE_V2)
        await expect(reply, illegal, "zlib")
        # (a single send's properties come in the header, valid text by the time the frame is decoded)
        # batches: properties that are not UTF-8 (elements of one size and of several), unknown bits,
        # bodies flagged compressed that are not zlib
        await expect(batch(batch_body([b"KEYS\x01ok1", b"KEYS\x01\xff\xfe\xfd", b"KEYS\x01ok3"])), illegal,
                     "batch message 1", "UTF-8")
        await expect(batch(batch_body([b"KEYS\x01ok", b"KEYS\x01caf\xe9", b"KEYS\x01longer one"])), illegal,
                     "batch message 1", "UTF-8")
        # two halves of one character, one in each message: neither message's properties are UTF-8
        await expect(batch(batch_body([b"KEYS\x01a\xc3", b"\xa9EYS\x01bc"])), illegal, "batch message 0", "UTF-8")
        await expect(batch(batch_body([b"KEYS\x01b1"]), 0x80), illegal, "sysFlag")
        await expect(batch(batch_body([b"KEYS\x01b1", b"KEYS\x01b2"], [DEFLATED, b"plain"]), 1), illegal,
                     "batch message 1", "zlib")
        await expect(batch(batch_body([b"KEYS\x01b1", b"KEYS\x01b2"], [DEFLATED, DEFLATED]), 1), ok, messages=2)
        await expect(batch(batch_body([b"KEYS\x01b1", "KEYS\x01é".encode()])), ok, messages=2)
        # nothing a consumer cannot decode was stored, everything accepted was
        count, bad = await stored_records(client, addr)
        assert bad == [] and count == accepted
        assert (await send(client, addr, TOPIC, b"still serving", message_properties())).code == ok

    run(scenario)


def test_update_consumer_offset_refuses_offsets_below_minus_one() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        assert (await send(client, addr, TOPIC, b"x", message_properties())).code == ResponseCode.SUCCESS

        def update(offset: int) -> RemotingCommand:
            return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "offset_g", "topic": TOPIC, "queueId": "0", "commitOffset": str(offset)})

        async def committed() -> int:
            request = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                              {"consumerGroup": "offset_g", "topic": TOPIC, "queueId": "0"})
            response = await client.invoke(addr, request, 5)
            assert response.code == ResponseCode.SUCCESS
            return int(response.ext_fields["offset"])

        assert (await client.invoke(addr, update(1), 5)).code == ResponseCode.SUCCESS
        assert await committed() == 1
        for bad in (-2, -(1 << 63)):
            response = await client.invoke(addr, update(bad), 5)
            assert response.code == ResponseCode.SYSTEM_ERROR and "commitOffset" in (response.remark or "")
        await client.invoke_oneway(addr, update(-7))
        # -1 is what RocketMQ clients send for a queue whose offset they do not know yet: it erases nothing
        assert (await client.invoke(addr, update(-1), 5)).code == ResponseCode.SUCCESS
        assert await committed() == 1

    run(scenario)
