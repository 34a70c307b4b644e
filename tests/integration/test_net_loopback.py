"""Loopback tests of rocketflow.net: a real RemotingServer and RemotingClient (or raw sockets), 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest

from rocketflow.net import (
    OVERLOAD_REMARK,
    Channel,
    GroupResult,
    RemotingClient,
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingServer,
    RemotingTimeoutError,
    RequestContext,
)
from rocketflow.remoting.codes import RequestCode, ResponseCode, SerializeType
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.frame import decode_frame, encode_frame

ECHO = 1001
SLOW = 1002
FAIL = 1003
HOLD = 1004
RELEASE = 1005

NET_LOGGERS = "rocketflow.net"


def run(scenario: Callable[[], Coroutine[Any, Any, None]], timeout: float = 10.0) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(scenario(), timeout)

    asyncio.run(bounded())


async def echo(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
    await asyncio.sleep(0)
    return request.make_response(ext_fields=dict(request.ext_fields), body=request.body,
                                 remark=request.remark)


def echo_sync(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
    return request.make_response(ext_fields=dict(request.ext_fields), body=request.body)


async def fail(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
    raise ValueError("boom in processor")


def new_server(**kwargs: Any) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0, **kwargs)
    server.register(ECHO, echo)
    server.register(FAIL, fail)
    return server


class RawConnection:
    """A plain TCP connection for sending exact bytes and reading frames one by one."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, server: RemotingServer) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        return cls(reader, writer)

    async def send(self, *parts: RemotingCommand | bytes) -> None:
        self.writer.write(b"".join(part if isinstance(part, bytes) else encode_frame(part) for part in parts))
        await self.writer.drain()

    async def read_frame(self, timeout: float = 3.0) -> tuple[int, RemotingCommand]:
        """(serialize type byte, command) of the next frame."""
        async with asyncio.timeout(timeout):
            prefix = await self.reader.readexactly(4)
            (length,) = struct.unpack(">i", prefix)
            payload = await self.reader.readexactly(length)
        return payload[0], decode_frame(prefix + payload)

    async def expect_eof(self, timeout: float = 3.0) -> None:
        async with asyncio.timeout(timeout):
            data = await self.reader.read()
        assert data == b"", f"expected EOF, got {len(data)} more bytes"

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def wait_until(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------------------------------------- basics


def test_invoke_round_trip_async_and_sync_processors() -> None:
    async def scenario() -> None:
        server = new_server()
        server.register(RequestCode.SEND_MESSAGE, echo_sync)
        async with server, RemotingClient() as client:
            assert server.address == f"127.0.0.1:{server.port}"
            for code in (ECHO, RequestCode.SEND_MESSAGE):
                request = RemotingCommand.request(code, {"topic": "TopicTest", "n": "7"},
                                                  body=b"\x00payload\xff")
                response = await client.invoke(server.address, request, timeout=3.0)
                assert response.is_response
                assert response.opaque == request.opaque
                assert response.code == ResponseCode.SUCCESS
                assert response.ext_fields == {"topic": "TopicTest", "n": "7"}
                assert response.body == b"\x00payload\xff"
            assert client.connected_addresses() == [server.address]
            assert len(server.channels) == 1
            channel = server.channels[0]
            assert channel.remote_address.startswith("127.0.0.1:")
            assert channel.local_address == server.address

    run(scenario)


def test_unknown_code_gets_request_code_not_supported_with_exact_remark() -> None:
    async def scenario() -> None:
        async with new_server() as server, RemotingClient() as client:
            response = await client.invoke(server.address, RemotingCommand.request(9999), timeout=3.0)
            assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert response.remark == " request type 9999 not supported"

            seen: list[int] = []

            def default(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
                seen.append(request.code)
                return request.make_response(remark="by default")

            server.register_default(default)
            response = await client.invoke(server.address, RemotingCommand.request(9999), timeout=3.0)
            assert (response.code, response.remark, seen) == (ResponseCode.SUCCESS, "by default", [9999])

    run(scenario)


@pytest.mark.parametrize("asynchronous", [True, False])
def test_processor_exception_becomes_system_error(
    asynchronous: bool, caplog: pytest.LogCaptureFixture
) -> None:
    def sync_fail(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        raise KeyError("no such queue")

    async def scenario() -> None:
        server = new_server()
        server.register(FAIL + 1, sync_fail)
        server.register(FAIL + 2, lambda ctx, request: 42)  # type: ignore[arg-type,return-value]
        async with server, RemotingClient() as client:
            code = FAIL if asynchronous else FAIL + 1
            response = await client.invoke(server.address, RemotingCommand.request(code), timeout=3.0)
            assert response.code == ResponseCode.SYSTEM_ERROR
            if asynchronous:
                assert response.remark == "ValueError: boom in processor"
            else:
                assert response.remark == "KeyError: 'no such queue'"
            wrong = await client.invoke(server.address, RemotingCommand.request(FAIL + 2), timeout=3.0)
            assert wrong.code == ResponseCode.SYSTEM_ERROR
            assert wrong.remark is not None and "int" in wrong.remark
            # the connection survives a failing processor
            ok = await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            assert ok.code == ResponseCode.SUCCESS

    with caplog.at_level(logging.ERROR, logger=NET_LOGGERS):
        run(scenario)
    assert any("processor failed" in record.getMessage() for record in caplog.records)


def test_oneway_requests_are_never_answered() -> None:
    received: list[RemotingCommand] = []

    async def record_and_answer(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        received.append(request)
        return request.make_response(remark="must not be sent")

    async def scenario() -> None:
        server = new_server()
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, record_and_answer)
        async with server:
            raw = await RawConnection.open(server)
            oneway = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"offset": "5"}, oneway=True)
            unknown_oneway = RemotingCommand.request(4242, oneway=True)
            failing_oneway = RemotingCommand.request(FAIL, oneway=True)
            probe = RemotingCommand.request(ECHO, {"probe": "1"})
            await raw.send(oneway, unknown_oneway, failing_oneway, probe)
            _, first = await raw.read_frame()
            assert first.opaque == probe.opaque and first.ext_fields == {"probe": "1"}
            assert [command.opaque for command in received] == [oneway.opaque]
            assert received[0].is_oneway and received[0].ext_fields == {"offset": "5"}
            await raw.close()

            async with RemotingClient() as client:
                request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"offset": "6"})
                await client.invoke_oneway(server.address, request)
                assert request.is_oneway
                await wait_until(lambda: len(received) == 2)
                assert received[1].ext_fields == {"offset": "6"}

    run(scenario)


def test_invoke_timeout_then_connection_still_usable() -> None:
    async def slow(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0.5)
        return request.make_response()

    async def scenario() -> None:
        server = new_server()
        server.register(SLOW, slow)
        async with server, RemotingClient() as client:
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(RemotingTimeoutError, match="within 100 ms"):
                await client.invoke(server.address, RemotingCommand.request(SLOW), timeout=0.1)
            assert 0.09 <= loop.time() - started < 0.4
            response = await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            assert response.code == ResponseCode.SUCCESS
            await asyncio.sleep(0.5)  # the late response arrives and is dropped quietly
            channel = await client.get_channel(server.address)
            assert channel.pending_requests == 0 and not channel.closed
            with pytest.raises(ValueError, match="timeout must be positive"):
                await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=0)

    run(scenario)


def test_each_pending_request_times_out_at_its_own_deadline() -> None:
    """One timer serves all pending requests of a channel: each still fails at its own deadline, whatever the
    order they were sent in, and an answered or cancelled request leaves nothing behind."""
    held: list[RequestContext] = []

    def hold(ctx: RequestContext, request: RemotingCommand) -> None:
        held.append(ctx)
        return None

    async def scenario() -> None:
        server = new_server()
        server.register(SLOW, hold)
        async with server, RemotingClient() as client:
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)  # connected first
            loop = asyncio.get_running_loop()
            started = loop.time()
            failed_at: dict[float, float] = {}

            async def timed(timeout: float) -> None:
                with pytest.raises(RemotingTimeoutError, match=f"within {timeout * 1000:.0f} ms"):
                    await client.invoke(server.address, RemotingCommand.request(SLOW), timeout=timeout)
                failed_at[timeout] = loop.time() - started

            async def answered() -> RemotingCommand:
                return await client.invoke(server.address, RemotingCommand.request(SLOW), timeout=0.5)

            # the longest first: the timer armed for it must be moved earlier by each shorter one
            tasks = [asyncio.ensure_future(timed(timeout)) for timeout in (0.6, 0.3, 0.1)]
            answer = asyncio.ensure_future(answered())
            cancelled = asyncio.ensure_future(client.invoke(server.address, RemotingCommand.request(SLOW),
                                                            timeout=0.2))
            await wait_until(lambda: len(held) == 5)
            cancelled.cancel()
            held[3].respond(held[3].request.make_response())  # the 0.5 s request, answered in time
            assert (await answer).code == ResponseCode.SUCCESS
            await asyncio.gather(*tasks)
            for timeout, at in failed_at.items():
                assert timeout - 0.01 <= at < timeout + 0.2, (timeout, at)
            channel = await client.get_channel(server.address)
            assert channel.pending_requests == 0 and not channel.closed
            response = await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            assert response.code == ResponseCode.SUCCESS

    run(scenario)


def test_deferred_response_via_context_respond() -> None:
    held: list[RequestContext] = []
    results: list[bool] = []

    def hold(ctx: RequestContext, request: RemotingCommand) -> None:
        held.append(ctx)
        return None

    def release(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        for waiting in held:
            results.append(waiting.respond(waiting.request.make_response(remark="FOUND", body=b"late")))
            results.append(waiting.respond(waiting.request.make_response(remark="twice")))
        return request.make_response(ext_fields={"released": str(len(held))})

    async def scenario() -> None:
        server = new_server()
        server.register(HOLD, hold)
        server.register(RELEASE, release)
        async with server, RemotingClient() as client:
            pull = RemotingCommand.request(HOLD)
            waiting = asyncio.create_task(client.invoke(server.address, pull, timeout=3.0))
            await wait_until(lambda: len(held) == 1)
            assert not waiting.done()
            released = await client.invoke(server.address, RemotingCommand.request(RELEASE), timeout=3.0)
            assert released.ext_fields == {"released": "1"}
            answer = await waiting
            assert (answer.opaque, answer.remark, answer.body) == (pull.opaque, "FOUND", b"late")
            assert results == [True, False]

    run(scenario)


def test_binary_serialized_request_is_decoded_and_answered_in_json() -> None:
    async def scenario() -> None:
        async with new_server() as server:
            raw = await RawConnection.open(server)
            request = RemotingCommand.request(ECHO, {"topic": "T", "queueId": "3"}, body=b"binary body")
            request.remark = "Sample Remark"
            await raw.send(encode_frame(request, SerializeType.ROCKETMQ))
            serialize_type, response = await raw.read_frame()
            assert serialize_type == SerializeType.JSON
            assert response.opaque == request.opaque and response.is_response
            assert response.ext_fields == {"topic": "T", "queueId": "3"}
            assert (response.remark, response.body) == ("Sample Remark", b"binary body")
            await raw.close()

    run(scenario)


# ------------------------------------------------------------------------------------------ server -> client


def test_server_initiated_request_and_response() -> None:
    client_saw: list[tuple[int, str]] = []

    async def running_info(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        client_saw.append((request.code, request.ext_fields.get("consumerGroup", "")))
        return request.make_response(body=b'{"properties":{}}')

    async def heartbeat(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        # a processor calling back into the client while the client's own request is in flight
        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g1"})
        answer = await ctx.invoke(ask, timeout=2.0)
        return request.make_response(ext_fields={"clientCode": str(answer.code)}, body=answer.body)

    async def scenario() -> None:
        server = new_server()
        server.register(RequestCode.HEART_BEAT, heartbeat)
        client = RemotingClient()
        client.register(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
        async with server, client:
            response = await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT),
                                           timeout=3.0)
            assert response.ext_fields == {"clientCode": "0"} and response.body == b'{"properties":{}}'
            (channel,) = server.channels
            direct = await channel.invoke(
                RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g2"}), 2.0
            )
            assert direct.code == ResponseCode.SUCCESS
            assert client_saw == [(307, "g1"), (307, "g2")]
            unknown = await channel.invoke(RemotingCommand.request(7777), 2.0)
            assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert unknown.remark == " request type 7777 not supported"

    run(scenario)


def test_server_initiated_oneway_notify_reaches_client_handler(caplog: pytest.LogCaptureFixture) -> None:
    notified: list[dict[str, str]] = []
    connected: list[Channel] = []

    def on_notify(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        notified.append(dict(request.ext_fields))
        return request.make_response()  # must be suppressed: the request is oneway

    async def scenario() -> None:
        server = new_server(on_connect=connected.append)
        client = RemotingClient()
        client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
        async with server, client:
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            assert len(connected) == 1
            notify = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g"})
            await connected[0].send_oneway(notify)
            await wait_until(lambda: len(notified) == 1)
            # a round trip after the notify proves anything the client sent back would have arrived by now
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            assert notified == [{"consumerGroup": "g"}]

    with caplog.at_level(logging.DEBUG, logger=NET_LOGGERS):
        run(scenario)
    assert not any("late or unsolicited" in record.getMessage() for record in caplog.records)
    assert any("not answering oneway" in record.getMessage() for record in caplog.records)


# ---------------------------------------------------------------------------------------------- bad input


GOOD_THEN_BAD = {
    "garbage": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "oversized": struct.pack(">i", 1 << 20) + b"\x00" * 64,
    "length-too-small": struct.pack(">ii", 2, 0),
    "bad-json-header": struct.pack(">ii", 4 + 9, 9) + b"{not json",
    "header-longer-than-frame": struct.pack(">ii", 4 + 2, 100) + b"{}",
    "unknown-serialize-type": struct.pack(">ii", 4 + 2, (7 << 24) | 2) + b"{}",
}


@pytest.mark.parametrize("bad", list(GOOD_THEN_BAD), ids=list(GOOD_THEN_BAD))
def test_bad_frame_closes_only_that_connection_after_answering_earlier_frames(
    bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def slowish_echo(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0.05)
        return request.make_response(ext_fields=dict(request.ext_fields))

    async def scenario() -> None:
        closed: list[Channel] = []
        server = new_server(max_frame_size=64 * 1024, on_close=closed.append)
        server.register(SLOW, slowish_echo)
        async with server, RemotingClient() as client:
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            raw = await RawConnection.open(server)
            first = RemotingCommand.request(SLOW, {"n": "1"})
            second = RemotingCommand.request(ECHO, {"n": "2"})
            await raw.send(first, second, GOOD_THEN_BAD[bad])
            answers = {}
            for _ in range(2):
                _, answer = await raw.read_frame()
                answers[answer.opaque] = answer.ext_fields["n"]
            assert answers == {first.opaque: "1", second.opaque: "2"}
            await raw.expect_eof()
            await raw.close()
            await wait_until(lambda: len(closed) == 1)
            after = RemotingCommand.request(ECHO, {"k": "v"})
            response = await client.invoke(server.address, after, timeout=3.0)
            assert response.ext_fields == {"k": "v"}
            assert len(server.channels) == 1

    with caplog.at_level(logging.WARNING, logger=NET_LOGGERS):
        run(scenario)
    assert any("malformed frame" in record.getMessage() for record in caplog.records)


def test_bad_frame_alone_closes_connection() -> None:
    async def scenario() -> None:
        async with new_server() as server:
            raw = await RawConnection.open(server)
            await raw.send(b"\xff\xff\xff\xff")
            await raw.expect_eof()
            await raw.close()
            await wait_until(lambda: not server.channels)

    run(scenario)


def test_connect_errors() -> None:
    async def scenario() -> None:
        async with RemotingClient(connect_timeout=1.0) as client:
            for address in ("no-port", "127.0.0.1:", "127.0.0.1:99999", ":80", "127.0.0.1:http"):
                with pytest.raises(RemotingConnectError, match="invalid address"):
                    await client.invoke(address, RemotingCommand.request(ECHO), timeout=1.0)
            with pytest.raises(RemotingConnectError, match="cannot connect"):
                await client.invoke(f"127.0.0.1:{free_port()}", RemotingCommand.request(ECHO), timeout=1.0)
            assert client.connected_addresses() == []

    run(scenario)


# ---------------------------------------------------------------------------------------------- lifecycle


def test_client_disconnecting_mid_request_does_not_disturb_server(caplog: pytest.LogCaptureFixture) -> None:
    finished = []

    async def slow(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0.2)
        finished.append(ctx.channel.closed)
        return request.make_response()

    async def scenario() -> None:
        closed: list[Channel] = []
        server = new_server(on_close=closed.append)
        server.register(SLOW, slow)
        async with server:
            raw = await RawConnection.open(server)
            await raw.send(RemotingCommand.request(SLOW))
            await wait_until(lambda: server.inflight_requests == 1)
            await raw.close()
            await wait_until(lambda: len(closed) == 1)
            await wait_until(lambda: finished == [True])
            async with RemotingClient() as client:
                response = await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
                assert response.code == ResponseCode.SUCCESS

    with caplog.at_level(logging.DEBUG, logger=NET_LOGGERS):
        run(scenario)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert any("channel closed" in record.getMessage() for record in caplog.records)


def test_pending_invokes_fail_fast_when_server_goes_away() -> None:
    async def forever(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(60)
        return request.make_response()

    async def scenario() -> None:
        disconnected: list[str] = []
        server = new_server()
        server.register(SLOW, forever)
        await server.start()
        address = server.address
        async with RemotingClient(on_disconnect=disconnected.append) as client:
            calls = [asyncio.create_task(client.invoke(address, RemotingCommand.request(SLOW), timeout=30.0))
                     for _ in range(3)]
            await wait_until(lambda: server.inflight_requests == 3)
            loop = asyncio.get_running_loop()
            started = loop.time()
            await server.stop(grace_seconds=0.05)
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert loop.time() - started < 1.0
            assert all(isinstance(result, RemotingConnectionClosedError) for result in results), results
            await wait_until(lambda: disconnected == [address])
            assert client.connected_addresses() == []
            with pytest.raises(RemotingConnectError):
                await client.invoke(address, RemotingCommand.request(ECHO), timeout=1.0)

    run(scenario)


def test_stop_lets_running_handlers_answer_within_grace() -> None:
    async def brief(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0.1)
        return request.make_response(remark="finished")

    async def scenario() -> None:
        server = new_server()
        server.register(SLOW, brief)
        await server.start()
        async with RemotingClient() as client:
            request = RemotingCommand.request(SLOW)
            call = asyncio.create_task(client.invoke(server.address, request, timeout=3.0))
            await wait_until(lambda: server.inflight_requests == 1)
            await server.stop(grace_seconds=2.0)
            assert (await call).remark == "finished"
            assert not server.is_serving and not server.channels

    run(scenario)


def test_idle_timeout_closes_silent_channels_only() -> None:
    async def scenario() -> None:
        closed: list[Channel] = []
        async with new_server(channel_max_idle_seconds=0.3, on_close=closed.append) as server, \
                RemotingClient() as client:
            raw = await RawConnection.open(server)
            loop = asyncio.get_running_loop()
            started = loop.time()
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            busy = await client.get_channel(server.address)
            while loop.time() - started < 0.8:
                await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
                await asyncio.sleep(0.05)
            await raw.expect_eof(timeout=1.0)
            assert loop.time() - started >= 0.3
            await raw.close()
            raw_host, raw_port = raw.writer.get_extra_info("sockname")[:2]
            assert [channel.remote_address for channel in closed] == [f"{raw_host}:{raw_port}"]
            assert await client.get_channel(server.address) is busy and not busy.closed

    run(scenario)


def test_client_idle_timeout_and_reconnect() -> None:
    async def scenario() -> None:
        disconnected: list[str] = []
        async with new_server() as server, \
                RemotingClient(channel_max_idle_seconds=0.2, on_disconnect=disconnected.append) as client:
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            first = await client.get_channel(server.address)
            await wait_until(lambda: disconnected == [server.address])
            assert first.closed and client.connected_addresses() == []
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            second = await client.get_channel(server.address)
            assert second is not first and second.local_address != first.local_address

            await client.close_connection(server.address)
            assert client.connected_addresses() == []
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            assert client.connected_addresses() == [server.address]

            # the server dropping the connection: the next invoke reconnects
            (server_side,) = server.channels
            server_side.close()
            await wait_until(lambda: len(disconnected) == 3)
            response = await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            assert response.code == ResponseCode.SUCCESS

    run(scenario)


# ---------------------------------------------------------------------------------------------- load


def test_two_thousand_pipelined_invokes_are_matched() -> None:
    async def jittery_echo(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(random.random() * 0.01)  # answers leave out of order
        return request.make_response(ext_fields={"i": request.ext_fields["i"]}, body=request.body)

    async def scenario() -> None:
        server = new_server()
        server.register(SLOW, jittery_echo)
        async with server, RemotingClient() as client:
            requests = [RemotingCommand.request(SLOW if i % 2 else ECHO, {"i": str(i)}, body=str(i).encode())
                        for i in range(2000)]
            responses = await asyncio.gather(*(client.invoke(server.address, request, timeout=10.0)
                                               for request in requests))
            for i, (request, response) in enumerate(zip(requests, responses, strict=True)):
                assert response.opaque == request.opaque
                assert response.ext_fields["i"] == str(i) and response.body == str(i).encode()
            assert len(server.channels) == 1

    run(scenario)


def test_slow_reader_backpressure_pauses_reading_and_loses_nothing() -> None:
    big = b"x" * (64 * 1024)

    def big_answer(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ext_fields=dict(request.ext_fields), body=big)

    async def scenario() -> None:
        server = new_server()
        server.register(SLOW, big_answer)
        async with server, RemotingClient() as client:
            raw = await RawConnection.open(server)
            count = 300  # ~19 MiB of answers, far beyond socket buffers and the write high-water mark
            await raw.send(*(RemotingCommand.request(SLOW, {"i": str(i)}) for i in range(count)))
            await wait_until(lambda: any(channel.reading_paused for channel in server.channels))
            # others are still served while that connection is throttled
            response = await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
            assert response.code == ResponseCode.SUCCESS
            seen = []
            for _ in range(count):
                _, answer = await raw.read_frame()
                assert len(answer.body) == len(big)
                seen.append(int(answer.ext_fields["i"]))
            assert seen == list(range(count))
            await raw.close()

    run(scenario, timeout=15.0)


def test_overload_answers_system_busy() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def blocked(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
            await release.wait()
            return request.make_response()

        server = new_server(max_inflight_requests=2)
        server.register(SLOW, blocked)
        async with server, RemotingClient() as client:
            calls = [
                asyncio.create_task(client.invoke(server.address, RemotingCommand.request(SLOW), timeout=3.0))
                for _ in range(2)
            ]
            await wait_until(lambda: server.inflight_requests == 2)
            busy = await client.invoke(server.address, RemotingCommand.request(SLOW), timeout=3.0)
            assert (busy.code, busy.remark) == (ResponseCode.SYSTEM_BUSY, OVERLOAD_REMARK)
            release.set()
            assert [response.code for response in await asyncio.gather(*calls)] == [0, 0]

    run(scenario)


def test_channel_rejects_misuse() -> None:
    async def scenario() -> None:
        async with new_server() as server, RemotingClient() as client:
            channel = await client.get_channel(server.address)
            with pytest.raises(ValueError, match="two-way request"):
                await channel.invoke(RemotingCommand.request(ECHO, oneway=True), 1.0)
            with pytest.raises(ValueError, match="needs a request"):
                await channel.send_oneway(RemotingCommand.request(ECHO).make_response())
            await client.close_connection(server.address)
            with pytest.raises(RemotingConnectionClosedError):
                await channel.invoke(RemotingCommand.request(ECHO), 1.0)
        with pytest.raises(RemotingConnectError, match="client is closed"):
            await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=1.0)

    run(scenario)


def test_random_complete_frames_never_crash_the_server(caplog: pytest.LogCaptureFixture) -> None:
    generator = random.Random(20240611)

    async def scenario() -> None:
        async with new_server() as server:
            for _ in range(40):
                serialize_type = generator.choice([0, 1, generator.randrange(256)])
                payload = bytes(generator.randrange(256) for _ in range(generator.randrange(0, 80)))
                header_length = generator.randrange(0, len(payload) + 5)
                word = (serialize_type << 24) | header_length
                frame = struct.pack(">iI", 4 + len(payload), word) + payload
                raw = await RawConnection.open(server)
                probe = RemotingCommand.request(ECHO)
                await raw.send(frame, probe)
                try:
                    while True:  # the junk may decode (answered or not); the probe is then answered
                        _, answer = await raw.read_frame()
                        if answer.opaque == probe.opaque and answer.is_response:
                            break
                except asyncio.IncompleteReadError:
                    pass  # closed as malformed
                await raw.close()
            async with RemotingClient() as client:
                response = await client.invoke(server.address, RemotingCommand.request(ECHO), timeout=3.0)
                assert response.code == ResponseCode.SUCCESS

    with caplog.at_level(logging.WARNING):
        run(scenario)
    assert not [record for record in caplog.records if record.name == "asyncio"]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


# ---------------------------------------------------------------------------------------------- group processors

GROUPED = 1006


def test_requests_arriving_together_reach_the_group_processor_in_order() -> None:
    """Neighbouring requests of a grouped code that arrive in one read go to its group processor in one call;
    a request of another code splits the group, the hook refuses one on its own, and each is answered."""
    groups: list[list[str]] = []

    def one(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        groups.append([request.ext_fields["n"]])
        return request.make_response(ext_fields={"n": request.ext_fields["n"], "via": "one"})

    def many(contexts: Sequence[RequestContext]) -> list[GroupResult]:
        groups.append([ctx.request.ext_fields["n"] for ctx in contexts])
        out: list[GroupResult] = []
        for ctx in contexts:
            n = ctx.request.ext_fields["n"]
            if n == "boom":
                out.append(ValueError("this one failed"))
            elif n == "later":
                async def answer_later(request: RemotingCommand = ctx.request) -> RemotingCommand:
                    await asyncio.sleep(0.01)
                    return request.make_response(ext_fields={"n": "later", "via": "group"})
                out.append(answer_later())
            else:
                out.append(ctx.request.make_response(ext_fields={"n": n, "via": "group"}))
        return out

    def hook(channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        if request.ext_fields.get("n") == "refused":
            return request.make_response(ResponseCode.NO_PERMISSION, remark="refused by the hook")
        return None

    async def scenario() -> None:
        server = new_server()
        server.register(GROUPED, one, group=many)
        server.set_request_hook(hook)
        async with server:
            raw = await RawConnection.open(server)
            names = ["a", "b", "refused", "boom", "later", "c", "echo", "d", "e"]
            requests = [RemotingCommand.request(ECHO if n == "echo" else GROUPED, {"n": n}) for n in names]
            await raw.send(*requests)  # one write: one read on the server's side
            answers = {}
            for _ in names:
                _, answer = await raw.read_frame()
                answers[answer.opaque] = answer
            by_name = {n: answers[request.opaque] for n, request in zip(names, requests, strict=True)}
            assert groups == [["a", "b", "boom", "later", "c"], ["d", "e"]]
            assert {n: by_name[n].ext_fields.get("via") for n in ("a", "b", "later", "c", "d", "e")} == \
                dict.fromkeys(("a", "b", "later", "c", "d", "e"), "group")
            assert (by_name["refused"].code, by_name["refused"].remark) == (ResponseCode.NO_PERMISSION,
                                                                            "refused by the hook")
            assert by_name["boom"].code == ResponseCode.SYSTEM_ERROR and "this one failed" in by_name["boom"].remark
            assert by_name["echo"].ext_fields == {"n": "echo"}
            # alone in its read, a request goes to the plain processor
            single = RemotingCommand.request(GROUPED, {"n": "solo"})
            await raw.send(single)
            _, answer = await raw.read_frame()
            assert answer.ext_fields == {"n": "solo", "via": "one"} and groups[-1] == ["solo"]
            await raw.close()

    run(scenario)


def test_a_failing_group_processor_answers_each_request() -> None:
    def one(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response()

    def broken(contexts: Sequence[RequestContext]) -> list[GroupResult]:
        raise RuntimeError("group processor bug")

    async def scenario() -> None:
        server = new_server()
        server.register(GROUPED, one, group=broken)
        async with server:
            raw = await RawConnection.open(server)
            requests = [RemotingCommand.request(GROUPED, {"n": str(i)}) for i in range(3)]
            await raw.send(*requests)
            codes = {}
            for _ in requests:
                _, answer = await raw.read_frame()
                codes[answer.opaque] = (answer.code, "group processor bug" in (answer.remark or ""))
            assert codes == {request.opaque: (ResponseCode.SYSTEM_ERROR, True) for request in requests}
            await raw.close()

    run(scenario)
