"""Index queries, sync-flush group commit, retention, dispatch listeners."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import request, small_config
from rocketflow.protocol.codec import decode_record
from rocketflow.store import FlushDiskType, MessageStore, PutMessageStatus, StoreConfig
from rocketflow.store.put_request import AppendResult

FOREVER = 2**62


def test_query_by_key_and_uniq_key_across_index_files(make_store: Callable[..., MessageStore]) -> None:
    # 64 entries per index file: several files; no periodic flush, which would write pending keys too
    store = make_store(flush_interval_consume_queue_ms=600_000, index_build_batch=4096)
    for i in range(100):
        store.put_message(request(queue_id=i % 4, body=str(i).encode(), KEYS=f"order{i % 10} all", UNIQ_KEY=f"U{i}"))
    assert store.index.pending_count == 300  # keys wait for a run of index_build_batch ...
    one = store.query_message("T", "U42", 32, 0, FOREVER)
    assert store.index.pending_count == 0  # ... or a query, which writes them first
    assert len(store.index.files) > 2
    assert [decode_record(b)[0].body for b in one.buffers] == [b"42"]
    assert one.index_last_update_phy_offset == store.query_message("T", "x", 1, 0, FOREVER).index_last_update_phy_offset
    order3 = store.query_message("T", "order3", 32, 0, FOREVER)
    assert sorted(int(decode_record(b)[0].body) for b in order3.buffers) == list(range(3, 100, 10))
    assert len(store.query_message("T", "all", 20, 0, FOREVER).buffers) == 20
    assert store.query_message("Other", "U42", 32, 0, FOREVER).buffers == []
    assert store.query_message("T", "missing", 32, 0, FOREVER).buffers == []


def test_single_puts_write_the_index_in_short_runs(make_store: Callable[..., MessageStore]) -> None:
    # a run is written on the broker's event loop by the put that completes it: every message in
    # flight waits for it, so the default run is short (4,096 keys held the loop ~6 ms)
    run = StoreConfig().index_build_batch
    assert 1 < run <= 256
    store = make_store(flush_interval_consume_queue_ms=600_000, max_hash_slot_num=4096, max_index_num=8192)
    most = 0
    for i in range(3 * run + 5):
        store.put_message(request(queue_id=i % 4, body=b"x", UNIQ_KEY=f"U{i}"))
        most = max(most, store.index.pending_count)
    assert most == run - 1
    assert store.index.pending_count == 5
    assert store.index.end_phy_offset >= 0  # written runs are in the files, before any query or flush
    found = store.query_message("T", f"U{run}", 4, 0, FOREVER)
    assert [decode_record(b)[0].properties["UNIQ_KEY"] for b in found.buffers] == [f"U{run}"]


def test_query_time_range(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    with MessageStore(small_config(tmp_path, max_index_num=1000), clock_ms=lambda: now[0]) as store:
        for i in range(10):
            now[0] = 1_700_000_000_000 + i * 5000
            store.put_message(request(body=str(i).encode(), KEYS="k"))
        found = store.query_message("T", "k", 32, 1_700_000_010_000, 1_700_000_020_000)
        assert sorted(int(decode_record(b)[0].body) for b in found.buffers) == [2, 3, 4]


def test_sync_flush_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    config = small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, commit_log_segment_size=1 << 20,
                          consume_queue_segment_units=10_000)
    calls = [0]
    real_fdatasync = os.fdatasync

    def counting_fdatasync(fd: int) -> None:
        calls[0] += 1
        real_fdatasync(fd)

    with MessageStore(config) as store:
        os.fdatasync = counting_fdatasync  # count real fsyncs issued by the group-commit thread
        try:
            results: list[PutMessageStatus] = []
            lock = threading.Lock()

            def putter(n: int) -> None:
                for i in range(25):
                    status = store.put_message(request(queue_id=n, body=f"{n}-{i}".encode())).status
                    with lock:
                        results.append(status)

            threads = [threading.Thread(target=putter, args=(n,)) for n in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            os.fdatasync = real_fdatasync
        assert results == [PutMessageStatus.PUT_OK] * 200
        assert store.flush_stats.group_commit_requests == 200
        assert 0 < calls[0] < 200
        assert store.commit_log.files.flushed_offset == store.max_phy_offset


def test_sync_flush_future_and_no_wait(tmp_path: Path) -> None:
    config = small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    with MessageStore(config) as store:
        future = store.put_message_async(request())
        result = future.result(timeout=5)
        assert result.status is PutMessageStatus.PUT_OK
        assert store.commit_log.files.flushed_offset >= result.end_offset
        no_wait = request()
        no_wait.wait_store_msg_ok = False
        assert store.put_messages_async([no_wait]).done()
        # without a future when nothing waits: the result itself, else the group commit's future
        again = request()
        again.wait_store_msg_ok = False
        immediate = store.put_messages_or_wait([again])
        assert isinstance(immediate, AppendResult) and immediate.status is PutMessageStatus.PUT_OK
        waiting = store.put_messages_or_wait([request()])
        assert not isinstance(waiting, AppendResult)
        flushed = waiting.result(timeout=5)
        assert store.commit_log.files.flushed_offset >= flushed.end_offset > immediate.end_offset


def test_async_flush_puts_answer_without_a_future(tmp_path: Path) -> None:
    with MessageStore(small_config(tmp_path)) as store:
        outcome = store.put_messages_or_wait([request(), request()])
        assert isinstance(outcome, AppendResult) and outcome.status is PutMessageStatus.PUT_OK
        assert outcome.message_count == 2


def test_sync_flush_timeout(tmp_path: Path) -> None:
    config = small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=50)
    with MessageStore(config) as store:
        gate = threading.Event()
        real_fdatasync = os.fdatasync

        def slow_fdatasync(fd: int) -> None:
            gate.wait(5)
            real_fdatasync(fd)

        os.fdatasync = slow_fdatasync
        try:
            result = store.put_message(request())
        finally:
            os.fdatasync = real_fdatasync
            gate.set()
        assert result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT


def test_async_flush_reaches_disk_in_background(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(flush_commit_log_least_pages=0)
    result = store.put_message(request())
    for _ in range(100):
        if store.commit_log.files.flushed_offset >= result.end_offset:
            break
        threading.Event().wait(0.02)
    assert store.commit_log.files.flushed_offset >= result.end_offset


def test_retention_by_age_at_delete_hour_and_by_disk_use(tmp_path: Path) -> None:
    usage = [10.0]
    store = MessageStore(small_config(tmp_path, delete_when="99"), disk_usage=lambda _path: usage[0])
    store.start()
    try:
        for i in range(60):
            store.put_message(request(queue_id=i % 2, body=b"r" * 300, KEYS=f"k{i}"))
        segments = len(store.commit_log.files.files)
        assert store.clean_expired(now_ms=10**13) == 0  # not the delete hour, disk not full
        usage[0] = 80.0  # above disk_max_used_space_ratio: expired files go at any hour
        assert store.clean_expired() == 0  # ... but nothing is expired yet
        deleted = store.clean_expired(now_ms=10**13)
        assert deleted == min(segments - 1, store.config.delete_files_batch_max)
        assert store.min_phy_offset > 0
        for queue_id in (0, 1):
            min_offset = store.get_min_offset_in_queue("T", queue_id)
            assert min_offset > 0
            got = store.get_messages("g", "T", queue_id, min_offset, 1)
            assert got.status.name == "FOUND"
            assert decode_record(got.buffers[0])[0].commit_log_offset >= store.min_phy_offset
        assert store.query_message("T", "k0", 10, 0, FOREVER).buffers == []
        assert len(store.query_message("T", "k59", 10, 0, FOREVER).buffers) == 1
    finally:
        store.shutdown()


def test_forced_clean_when_disk_nearly_full(tmp_path: Path) -> None:
    with MessageStore(small_config(tmp_path, delete_when="99"), disk_usage=lambda _path: 90.0) as store:
        for _ in range(30):
            store.put_message(request(body=b"f" * 300))
        assert store.clean_expired() > 0  # not expired, but disk use is past the forcible ratio
        assert store.get_min_offset_in_queue("T", 0) > 0


def test_dispatch_listener_sees_every_message(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    seen: list[tuple[str, int, int, int]] = []
    store.add_dispatch_listener(lambda topic, queue_id, offset, tags, ts: seen.append((topic, queue_id, offset, tags)))
    store.put_messages([request(queue_id=1, TAGS="TagA"), request(queue_id=1), request(queue_id=2)])
    assert seen == [("T", 1, 0, 2598919), ("T", 1, 1, 0), ("T", 2, 0, 0)]


def test_store_not_running_get_raises(make_store: Callable[..., MessageStore]) -> None:
    from rocketflow.store import StoreNotRunningError

    store = make_store()
    store.shutdown()
    with pytest.raises(StoreNotRunningError):
        store.get_messages("g", "T", 0, 0, 1)


@pytest.mark.parametrize("safe", [False, True])
def test_the_open_index_file_is_fsynced_only_when_index_safe_or_on_flush_and_shutdown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, safe: bool) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    # 64 entries an index file; no periodic flush thread: the test runs the periodic step itself
    store = MessageStore(small_config(tmp_path, flush_interval_consume_queue_ms=600_000, message_index_safe=safe))
    store.start()
    synced.clear()  # start-up fsyncs other files, whose descriptor numbers the index file may take after them
    try:
        for i in range(40):
            store.put_message(request(body=str(i).encode(), UNIQ_KEY=f"U{i}"))
        store._flush_logics_and_checkpoint()  # what the consume-queue flush service does every second
        (open_file,) = store.index.files
        assert store.index.pending_count == 0  # the keys are written either way ...
        assert (open_file.fd in synced) is safe  # ... and fsynced only when index-safe
        assert (store.checkpoint.index_msg_timestamp > 0) is safe
        synced.clear()
        for i in range(40, 100):  # fills the first file: a full file is fsynced either way
            store.put_message(request(body=str(i).encode(), UNIQ_KEY=f"U{i}"))
        store._flush_logics_and_checkpoint()
        first, second = store.index.files
        assert first.fd in synced and (second.fd in synced) is safe
        assert store.checkpoint.index_msg_timestamp >= first.end_timestamp > 0
        assert [decode_record(b)[0].body for b in store.query_message("T", "U77", 4, 0, FOREVER).buffers] == [b"77"]
        synced.clear()
        store.put_message(request(body=b"last", UNIQ_KEY="U100"))
        store.flush()  # the public flush covers everything
        assert second.fd in synced
        synced.clear()
        store.put_message(request(body=b"after", UNIQ_KEY="U101"))
        fd = second.fd
    finally:
        store.shutdown()
    assert fd in synced  # and so does shutdown


def test_consume_queues_flush_as_rocketmq_least_pages_then_thoroughly(make_store: Callable[..., MessageStore]) -> None:
    """flushConsumeQueueLeastPages (2) / flushConsumeQueueThoroughInterval (60 s): a queue file with fewer dirty
    pages waits for a later round; the checkpoint's consume-queue offset advances only when none was left."""
    store = make_store(flush_interval_consume_queue_ms=600_000, consume_queue_segment_units=4096,
                       commit_log_segment_size=1 << 20)
    service = store._cq_flush_service
    assert service is not None
    flush_round = service.run_once                                        # the service's round, run here
    store.put_messages([request(queue_id=0) for _ in range(10)])          # 200 bytes: one dirty page
    queue = store.consume_queues.find("T", 0)
    assert queue is not None
    segment = queue.files.files[0]
    flush_round()
    assert segment.flushed_position == 0 and store.checkpoint.logics_phys_offset == 0
    store.put_messages([request(queue_id=0) for _ in range(400)])         # 8,200 bytes: pages 0..2 dirty
    flush_round()
    assert segment.flushed_position == 410 * 20
    assert store.checkpoint.logics_phys_offset == store.dispatcher.dispatched_offset > 0
    advanced = store.checkpoint.logics_phys_offset
    store.put_messages([request(queue_id=0) for _ in range(5)])           # within one page again
    flush_round()
    assert segment.flushed_position == 410 * 20 and store.checkpoint.logics_phys_offset == advanced
    service._last_thorough -= service.thorough_interval_s
    flush_round()                                                         # the thorough round flushes it all
    assert segment.flushed_position == 415 * 20
    assert store.checkpoint.logics_phys_offset == store.dispatcher.dispatched_offset > advanced


def test_a_full_consume_queue_file_is_flushed_whatever_its_dirty_pages(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(flush_interval_consume_queue_ms=600_000)           # 8 units (160 bytes) a file
    assert store._cq_flush_service is not None
    flush_round = store._cq_flush_service.run_once
    store.put_messages([request(queue_id=1) for _ in range(10)])
    queue = store.consume_queues.find("T", 1)
    assert queue is not None
    full, partial = queue.files.files
    flush_round()
    assert full.flushed_position == 160 and partial.flushed_position == 0
