"""A broker whose store sits on a small tmpfs: a full disk refuses sends clearly, then recovers.

* A real ENOSPC (the file system is full): sends get SERVICE_NOT_AVAILABLE with a "disk is full" /
  "No space left on device" remark, the broker keeps running and serving pulls, and takes sends again
  once space is freed; after a clean restart every acknowledged message is there exactly once.
* RocketMQ's rule: once disk use passes ``diskSpaceWarningLevelRatio`` sends are refused (checked every
  ``cleanResourceInterval``), and accepted again when use drops below it.

Needs permission to mount a tmpfs (we run as root in the sandbox); skipped with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_helpers import ServerProcess, broker_args, pull_request, send_request, wait_until

from rocketflow.net import RemotingClient
from rocketflow.protocol.codec import decode_records
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import RemotingCommand

pytestmark = pytest.mark.reliability

TOPIC = "DiskFullT"
DISK_MB = 16
BODY = b"x" * 4000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A DISK_MB tmpfs mounted under tmp_path (skips when mounting is not permitted)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command to create a small tmpfs")
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount_point)],
                              capture_output=True, text=True, timeout=30)
    except OSError as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)


def fill(path: Path, leave_free_bytes: int) -> None:
    """Write a ballast file that leaves about `leave_free_bytes` free on the file system of `path`."""
    free = shutil.disk_usage(path.parent).free
    size = max(free - leave_free_bytes, 0)
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as ballast:
        while size > 0:
            try:
                ballast.write(chunk[: min(size, len(chunk))])
                ballast.flush()
            except OSError:
                break
            size -= len(chunk)
        os.fsync(ballast.fileno())


async def send(client: RemotingClient, address: str, seq: int) -> RemotingCommand:
    request = send_request(TOPIC, BODY + str(seq).encode(), {"UNIQ_KEY": f"D{seq}", "KEYS": f"d{seq}"},
                           queue_id=seq % 2, default_topic_queue_nums=2)
    return await client.invoke(address, request, 10.0)


async def read_all(client: RemotingClient, address: str) -> list[int]:
    seqs: list[int] = []
    for queue_id in range(2):
        offset = 0
        while True:
            response = await client.invoke(address, pull_request("disk_cg", TOPIC, queue_id, offset), 10.0)
            if response.code != ResponseCode.SUCCESS:
                break
            for msg in decode_records(response.body):
                assert msg.body.startswith(BODY)
                assert msg.queue_offset == offset
                seqs.append(int(msg.body[len(BODY):]))
                offset += 1
    return seqs


def test_real_enospc_refuses_sends_keeps_serving_and_recovers(small_disk: Path, tmp_path: Path) -> None:
    store = small_disk / "store"
    # the ratio rules stay out of the way: this is about the file system actually running out of space
    args = broker_args(store, "diskSpaceWarningLevelRatio=101", "diskSpaceCleanForciblyRatio=101",
                       "diskMaxUsedSpaceRatio=100")
    broker = ServerProcess(args, tmp_path / "broker.log")
    acked: list[int] = []
    refusals: list[RemotingCommand] = []

    async def scenario() -> None:
        client = RemotingClient()
        try:
            for seq in range(20):
                assert (await send(client, broker.address, seq)).code == ResponseCode.SUCCESS
                acked.append(seq)
            fill(small_disk / "ballast", 600 * 1024)
            seq = len(acked)
            while len(refusals) < 5:
                response = await send(client, broker.address, seq)
                if response.code == ResponseCode.SUCCESS:
                    acked.append(seq)
                    assert seq < 2000, "the full disk never refused a send"
                else:
                    refusals.append(response)
                seq += 1
            assert broker.alive()
            assert sorted(await read_all(client, broker.address)) == acked
            (small_disk / "ballast").unlink()
            response = await send(client, broker.address, seq)
            assert response.code == ResponseCode.SUCCESS, response
            acked.append(seq)
            for more in range(seq + 1, seq + 50):
                assert (await send(client, broker.address, more)).code == ResponseCode.SUCCESS
                acked.append(more)
        finally:
            await client.close()

    try:
        asyncio.run(scenario())
        for refusal in refusals:
            assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE, refusal
            assert refusal.remark is not None and "disk is full" in refusal.remark
        assert any("No space left on device" in (refusal.remark or "") for refusal in refusals)
        print(f"real ENOSPC: {len(acked)} acked, first refusal: {refusals[0].remark}")
        assert broker.stop() == 0
        broker = ServerProcess(args, tmp_path / "broker.log")

        async def check() -> list[int]:
            client = RemotingClient()
            try:
                return await read_all(client, broker.address)
            finally:
                await client.close()

        stored = asyncio.run(check())
        assert len(stored) == len(set(stored)), "a message is stored twice"
        assert set(acked) <= set(stored), f"acknowledged messages lost: {sorted(set(acked) - set(stored))[:10]}"
        # what is stored beyond the acks is a refused send whose record made the log (at-least-once)
        assert len(set(stored) - set(acked)) <= len(refusals)
    finally:
        broker.stop()


def test_disk_use_above_the_warning_level_refuses_sends(small_disk: Path, tmp_path: Path) -> None:
    args = broker_args(small_disk / "store", "diskSpaceWarningLevelRatio=50", "diskSpaceCleanForciblyRatio=101",
                       "diskMaxUsedSpaceRatio=100", "clean_resource_interval_ms=100")
    broker = ServerProcess(args, tmp_path / "broker.log")

    async def scenario() -> None:
        client = RemotingClient()
        seq = 0

        async def attempt() -> RemotingCommand:
            nonlocal seq
            seq += 1
            return await send(client, broker.address, seq)

        async def until(code: int) -> RemotingCommand:
            for _ in range(200):
                response = await attempt()
                if response.code == code:
                    return response
                await asyncio.sleep(0.05)
            raise AssertionError(f"no response with code {code} in time")

        try:
            assert (await attempt()).code == ResponseCode.SUCCESS
            fill(small_disk / "ballast", DISK_MB * 1024 * 1024 // 4)
            refused = await until(ResponseCode.SERVICE_NOT_AVAILABLE)
            assert refused.remark is not None and "diskSpaceWarningLevelRatio 50%" in refused.remark
            assert broker.alive()
            assert (await read_all(client, broker.address))
            (small_disk / "ballast").unlink()
            await until(ResponseCode.SUCCESS)
        finally:
            await client.close()

    try:
        asyncio.run(scenario())
        wait_until(broker.alive, 1)
    finally:
        broker.stop()
