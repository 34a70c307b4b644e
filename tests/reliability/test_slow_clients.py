"""Slow and vanishing clients of a `rocketflow broker` subprocess.

* A client that sends a burst of big pulls and never reads its socket does not stall the broker:
  another client's send and pull latencies stay low, the broker's memory stays bounded (the server
  stops reading from a peer whose write buffer is over its high-water mark and drops a connection
  whose buffered responses pass the hard limit, or stay above the high-water mark for
  ``WRITE_STALL_TIMEOUT``).
* A client that disconnects while its pull is held by long polling frees that slot at once (the
  broker's ``pullRequestsHeld`` drops long before the pull's suspend timeout).
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from pathlib import Path

import pytest
from reliability_helpers import (
    RawConnection,
    ServerProcess,
    broker_args,
    pull_request,
    scaled,
    send_request,
    wait_until,
)

from rocketflow.net import RemotingClient
from rocketflow.net.connection import WRITE_STALL_TIMEOUT
from rocketflow.protocol.bodies import KVTable
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.frame import encode_frame

pytestmark = pytest.mark.reliability

TOPIC = "SlowT"
PRELOAD = 600
BODY = b"s" * 8000
STALLED_PULLS = scaled(3000, 30000)
PROBES = scaled(100, 1000)


def runtime_info(address: str) -> dict[str, str]:
    connection = RawConnection(address)
    try:
        response = connection.request(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10)
        assert response is not None and response.code == ResponseCode.SUCCESS
        return KVTable.decode(response.body).table
    finally:
        connection.close()


async def preload(address: str, count: int) -> None:
    """``count`` messages of `BODY` into queue 0 of `TOPIC`, each acknowledged."""
    client = RemotingClient()
    try:
        for index in range(count):
            response = await client.invoke(address, send_request(
                TOPIC, BODY, {"UNIQ_KEY": f"B{index}"}, queue_id=0, default_topic_queue_nums=2), 10)
            assert response.code == ResponseCode.SUCCESS
    finally:
        await client.close()


async def latencies(address: str, count: int) -> tuple[list[float], list[float]]:
    """Send-then-pull round trips of a well-behaved client: (send latencies, pull latencies) in ms."""
    client = RemotingClient()
    sends: list[float] = []
    pulls: list[float] = []
    try:
        for index in range(count):
            started = time.perf_counter()
            response = await client.invoke(address, send_request(TOPIC, b"probe-%d" % index, {"UNIQ_KEY": f"P{index}"},
                                                                 queue_id=1, default_topic_queue_nums=2), 10)
            sends.append((time.perf_counter() - started) * 1000)
            assert response.code == ResponseCode.SUCCESS, response
            started = time.perf_counter()
            response = await client.invoke(address, pull_request("probe_cg", TOPIC, 1, index, max_nums=1), 10)
            pulls.append((time.perf_counter() - started) * 1000)
            assert response.code == ResponseCode.SUCCESS, response
    finally:
        await client.close()
    return sends, pulls


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
            "max_ms": round(ordered[-1], 2)}


def test_a_client_that_never_reads_does_not_stall_others(tmp_path: Path) -> None:
    broker = ServerProcess(broker_args(tmp_path / "store", "maxTransferCountOnMessageInMemory=64",
                                       "maxTransferBytesOnMessageInMemory=524288"), tmp_path / "broker.log")
    stalled: socket.socket | None = None
    try:
        asyncio.run(preload(broker.address, PRELOAD))
        baseline_sends, baseline_pulls = asyncio.run(latencies(broker.address, PROBES))
        rss_before = broker.rss_kb()
        host, _, port = broker.address.rpartition(":")
        stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect((host, int(port)))
        stalled.setblocking(False)
        burst = b"".join(encode_frame(pull_request("stall_cg", TOPIC, 0, (index * 7) % PRELOAD, max_nums=64))
                         for index in range(STALLED_PULLS))
        sent = 0
        deadline = time.monotonic() + 10
        while sent < len(burst) and time.monotonic() < deadline:
            try:
                sent += stalled.send(burst[sent:])
            except BlockingIOError:
                time.sleep(0.01)  # the broker stopped reading from us: that is the backpressure we expect
            except (ConnectionResetError, BrokenPipeError):
                break  # the broker dropped us for buffering too much: the policy under test
        stalled_sends, stalled_pulls = asyncio.run(latencies(broker.address, PROBES))
        rss_after = broker.rss_kb()
        info = runtime_info(broker.address)
        print(f"slow client: sent {sent} of {len(burst)} request bytes without reading; "
              f"baseline send {summary(baseline_sends)} pull {summary(baseline_pulls)}; "
              f"while stalled send {summary(stalled_sends)} pull {summary(stalled_pulls)}; "
              f"broker RSS {rss_before} -> {rss_after} KiB; connections {info['connections']}")
        assert broker.alive()
        assert summary(stalled_sends)["median_ms"] < 250 and summary(stalled_pulls)["median_ms"] < 250
        assert max(stalled_sends + stalled_pulls) < 5000
        # the write buffer is capped (64 MiB, then the connection is dropped): RSS must not follow the burst
        assert rss_after - rss_before < 128 * 1024, "the broker buffered without bound for a client that never reads"
        wait_until(lambda: runtime_info(broker.address)["connections"] == "1", 10,
                   what="the broker dropping the connection that never reads")
    finally:
        if stalled is not None:
            stalled.close()
        broker.stop()


def test_a_client_that_stops_reading_below_the_hard_limit_is_dropped_after_the_stall_timeout(
        tmp_path: Path) -> None:
    """A few MiB of responses, far below the hard limit: the broker pauses reading from the peer, and
    drops it once its responses have sat above the high-water mark for `WRITE_STALL_TIMEOUT`."""
    broker = ServerProcess(broker_args(tmp_path / "store", "maxTransferCountOnMessageInMemory=64",
                                       "maxTransferBytesOnMessageInMemory=524288"), tmp_path / "broker.log")
    stalled: socket.socket | None = None
    try:
        asyncio.run(preload(broker.address, 64))
        host, _, port = broker.address.rpartition(":")
        stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect((host, int(port)))
        # 8 pulls of 64 x 8 KB: ~4 MiB of responses, over the 1 MiB high-water mark, under the 64 MiB limit
        stalled.sendall(b"".join(encode_frame(pull_request("stall_cg", TOPIC, 0, 0, max_nums=64)) for _ in range(8)))
        wait_until(lambda: runtime_info(broker.address)["connections"] == "2", 5, what="the stalled peer counted")
        started = time.monotonic()
        wait_until(lambda: runtime_info(broker.address)["connections"] == "1", WRITE_STALL_TIMEOUT + 10,
                   what="the broker dropping the peer that stopped reading")
        assert time.monotonic() - started > WRITE_STALL_TIMEOUT - 2  # the timeout, not the hard limit
        assert "has not read its responses for 5 s" in (tmp_path / "broker.log").read_text()
        assert broker.alive()
    finally:
        if stalled is not None:
            stalled.close()
        broker.stop()


def test_a_client_gone_mid_long_poll_frees_its_slot(tmp_path: Path) -> None:
    broker = ServerProcess(broker_args(tmp_path / "store"), tmp_path / "broker.log")
    try:
        async def create_topic() -> None:
            client = RemotingClient()
            try:
                response = await client.invoke(broker.address, send_request(
                    TOPIC, b"first", {"UNIQ_KEY": "F"}, queue_id=0, default_topic_queue_nums=2), 10)
                assert response.code == ResponseCode.SUCCESS
            finally:
                await client.close()

        asyncio.run(create_topic())
        holders = [RawConnection(broker.address) for _ in range(3)]
        for connection in holders:
            # queue 1 is empty: the pull is held for up to 60 s
            assert connection.send(pull_request("poll_cg", TOPIC, 1, 0, suspend=True, suspend_ms=60_000,
                                                commit_offset=0))
        wait_until(lambda: runtime_info(broker.address)["pullRequestsHeld"] == "3", 10, what="3 held pulls")
        started = time.monotonic()
        holders[0].close()
        holders[1].close()
        wait_until(lambda: runtime_info(broker.address)["pullRequestsHeld"] == "1", 10,
                   what="held pulls of closed connections released")
        released_after = time.monotonic() - started
        print(f"long poll: slots of 2 vanished clients released after {released_after * 1000:.0f} ms")
        assert released_after < 10
        holders[2].close()
        wait_until(lambda: runtime_info(broker.address)["pullRequestsHeld"] == "0", 10)
    finally:
        broker.stop()
