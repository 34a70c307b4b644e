"""A full disk fails puts cleanly (nothing half written, reads keep working) and puts work again after."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import request, small_config
from rocketflow.protocol.bodies import SubscriptionGroupConfig, TopicConfig
from rocketflow.protocol.codec import decode_records, encode_batch_body
from rocketflow.protocol.message import Message
from rocketflow.store import MessageStore, PutMessageStatus
from rocketflow.store import mapped_file as mapped_file_module
from rocketflow.store.config_file import SubscriptionGroupTable, TopicConfigTable
from rocketflow.store.put_request import AppendResult, EncodedBatchRequest


class FakeFullDisk:
    """Makes block allocation fail with ENOSPC for files whose path contains `where` while `full`."""

    def __init__(self) -> None:
        self.full = False
        self.where = ""
        self.refused = 0
        self._real = os.posix_fallocate

    def __call__(self, fd: int, offset: int, length: int) -> None:
        if self.full and self.where in os.readlink(f"/proc/self/fd/{fd}"):
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._real(fd, offset, length)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeFullDisk]:
    fake = FakeFullDisk()
    monkeypatch.setattr(mapped_file_module.os, "posix_fallocate", fake)
    yield fake


def read_queue(store: MessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    bodies: list[bytes] = []
    offset = 0
    while True:
        got = store.get_messages("g", topic, queue_id, offset, 32)
        if not got.buffers:
            return bodies
        for msg in decode_records(got.body()):
            assert msg.queue_offset == len(bodies)
            bodies.append(msg.body)
        offset = got.next_begin_offset


def put_until_refused(store: MessageStore, prefix: str, limit: int = 500) -> tuple[list[bytes], PutMessageStatus, str]:
    acked: list[bytes] = []
    for index in range(limit):
        body = f"{prefix}-{index}".encode() * 8
        result = store.put_message(request("Full", 0, body, KEYS=f"{prefix}{index}"))
        if not result.status.is_ok:
            return acked, result.status, result.error
        acked.append(body)
    raise AssertionError("the full disk never refused a put")


def test_commit_log_disk_full_refuses_puts_then_recovers(make_store: Callable[..., MessageStore],
                                                         disk: FakeFullDisk, tmp_path: Path) -> None:
    store = make_store()
    before: list[bytes] = []
    for index in range(5):
        body = f"warm-{index}".encode()
        assert store.put_message(request("Full", 0, body)).status.is_ok
        before.append(body)
    disk.full = True
    disk.where = "/store/commitlog/"
    acked, status, error = put_until_refused(store, "a")
    assert status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "cannot write the commit log" in error and "No space left on device" in error
    # a second refusal leaves no extra empty segment behind
    assert not store.put_message(request("Full", 0, b"refused")).status.is_ok
    segments = store.commit_log.files.files
    assert segments[-1].wrote_position > 0
    # reads keep working and show exactly what was acknowledged
    assert read_queue(store, "Full") == before + acked
    disk.full = False
    after = [f"b-{index}".encode() for index in range(40)]
    for body in after:
        assert store.put_message(request("Full", 0, body)).status.is_ok
    assert read_queue(store, "Full") == before + acked + after
    store.shutdown()
    with MessageStore(small_config(tmp_path / "store")) as reopened:
        assert read_queue(reopened, "Full") == before + acked + after


def test_consume_queue_disk_full_holds_puts_until_dispatch_succeeds(make_store: Callable[..., MessageStore],
                                                                    disk: FakeFullDisk, tmp_path: Path) -> None:
    store = make_store()
    disk.full = True
    disk.where = "/store/consumequeue/"
    acked, status, error = put_until_refused(store, "c")
    assert status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "consume queue" in error
    # the refused put's record is in the commit log; further puts are refused while dispatch fails
    second = store.put_message(request("Full", 0, b"while-full"))
    assert second.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert read_queue(store, "Full") == acked
    disk.full = False
    assert store.put_message(request("Full", 0, b"after")).status.is_ok
    bodies = read_queue(store, "Full")
    # the unacknowledged record becomes consumable (at-least-once), nothing acknowledged is missing
    assert bodies[: len(acked)] == acked
    assert len(bodies) == len(acked) + 2
    assert bodies[-1] == b"after"
    store.shutdown()
    with MessageStore(small_config(tmp_path / "store")) as reopened:
        assert read_queue(reopened, "Full") == bodies


@pytest.mark.parametrize("build_batch", [1, 4096])
def test_index_disk_full_is_a_put_failure_not_a_crash(make_store: Callable[..., MessageStore],
                                                      disk: FakeFullDisk, build_batch: int) -> None:
    # keys wait for the index in runs of `build_batch`: a put fails once a run cannot be written
    store = make_store(index_build_batch=build_batch)
    disk.full = True
    disk.where = "/store/index/"
    acked, status, _error = put_until_refused(store, "i", limit=3 * build_batch + 500)
    assert status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    # while the keys cannot be written, later puts are refused and no refused message is readable
    for attempt in range(3):
        assert not store.put_message(request("Full", 0, b"refused-%d" % attempt, KEYS="refused")).status.is_ok
        assert read_queue(store, "Full") == acked
    disk.full = False
    assert store.put_message(request("Full", 0, b"after", KEYS="after")).status.is_ok
    assert len(store.query_message("Full", "after", 4, 0, 2**62).buffers) == 1
    # the put refused first is stored once the retry dispatches it (not acknowledged: at least once)
    assert read_queue(store, "Full")[: len(acked)] == acked
    assert read_queue(store, "Full")[-1] == b"after"


@pytest.mark.parametrize("usage, refused", [(95.0, True), (89.0, False)])
def test_disk_warning_level_ratio(tmp_path: Path, usage: float, refused: bool) -> None:
    level = {"value": usage}
    store = MessageStore(small_config(tmp_path / "store"), disk_usage=lambda _path: level["value"])
    with store:
        store.clean_expired()
        result = store.put_message(request("Full", 0, b"x"))
        if refused:
            assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert "disk is full" in result.error and "95.0%" in result.error
            assert store.get_messages("g", "Full", 0, 0, 1).buffers == []
            level["value"] = 50.0
            store.clean_expired()
            assert store.put_message(request("Full", 0, b"x")).status.is_ok
        else:
            assert result.status.is_ok


def test_a_config_change_stays_in_memory_when_its_file_cannot_be_written(tmp_path: Path) -> None:
    blocked = tmp_path / "config"
    blocked.write_text("a file where the config directory should be")  # every write below it fails
    groups = SubscriptionGroupTable(blocked)
    groups.put(SubscriptionGroupConfig(group_name="g"))  # logged, not raised
    assert groups.get("g") == SubscriptionGroupConfig(group_name="g")
    topics = TopicConfigTable(blocked)
    topics.put(TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=4))
    assert topics.get("T") is not None
    with pytest.raises(OSError):
        groups.persist()  # an explicit persist still reports the failure to its caller
    blocked.unlink()
    groups.persist()
    reloaded = SubscriptionGroupTable(blocked)
    reloaded.load()
    assert reloaded.get("g") == SubscriptionGroupConfig(group_name="g")


def _one_size_batch(prefix: str, count: int) -> bytes:
    """A SEND_BATCH_MESSAGE body of `count` same-size messages (the grouped put's one-write path)."""
    return encode_batch_body([Message("Full", f"{prefix}-{index:04d}".encode()) for index in range(count)])


@pytest.mark.parametrize("where", ["/store/commitlog/", "/store/consumequeue/"])
def test_batches_put_together_on_a_full_disk(make_store: Callable[..., MessageStore], disk: FakeFullDisk,
                                             where: str) -> None:
    """Grouped batches on a full disk: every batch of the group is refused and none acknowledged; after the disk
    frees, a group is stored whole, and what was acknowledged is exactly what reads back first."""
    store = make_store(commit_log_segment_size=64 * 1024)

    def group(prefix: str) -> list[EncodedBatchRequest]:
        return [EncodedBatchRequest("Full", 0, _one_size_batch(f"{prefix}{n}", 8)) for n in range(4)]

    def bodies(prefix: str) -> list[bytes]:
        return [f"{prefix}{n}-{index:04d}".encode() for n in range(4) for index in range(8)]

    first = store.put_encoded_batches(group("a"))
    assert all(isinstance(r, AppendResult) and r.status.is_ok for r in first)
    disk.full = True
    disk.where = where
    refused: list[object] = []
    for attempt in range(200):  # until the space reserved ahead runs out
        failed_before = int(store.runtime_info()["putMessageFailedTimes"])
        outcome = store.put_encoded_batches(group(f"x{attempt}-"))
        if not all(isinstance(r, AppendResult) and r.status.is_ok for r in outcome):
            refused = list(outcome)
            break
        first += outcome
    assert refused and all(isinstance(r, AppendResult) and r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
                           for r in refused)
    # each refused batch counts as a failed put, as when sent one by one
    assert int(store.runtime_info()["putMessageFailedTimes"]) == failed_before + len(refused)
    acked = [body for attempt in range(-1, len(first) // 4 - 1)
             for body in bodies("a" if attempt < 0 else f"x{attempt}-")]
    disk.full = False
    after = store.put_encoded_batches(group("z"))
    assert all(isinstance(r, AppendResult) and r.status.is_ok for r in after)
    stored = read_queue(store, "Full")
    assert stored[: len(acked)] == acked and stored[-32:] == bodies("z")
    if where == "/store/commitlog/":  # nothing of the refused group was written
        assert len(stored) == len(acked) + 32


def test_a_full_disk_at_start_leaves_the_index_file_to_the_first_keys(disk: FakeFullDisk, tmp_path: Path) -> None:
    disk.full = True
    disk.where = "/index/"
    with MessageStore(small_config(tmp_path / "store")) as store:  # starts: making the index file ahead failed
        assert store.index.files == [] and disk.refused == 1
        disk.full = False
        assert store.put_message(request("Full", 0, b"after", KEYS="later")).status.is_ok
        found = store.query_message("Full", "later", 4, 0, 2**62).buffers
        assert [msg.body for buffer in found for msg in decode_records(buffer)] == [b"after"]
