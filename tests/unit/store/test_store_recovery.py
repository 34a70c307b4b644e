"""Restart, crash recovery (abort marker), torn tails, bit flips, consume-queue rebuild, lock file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import request, small_config
from rocketflow.protocol.codec import decode_records
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.store import MessageStore, StoreConfig, StoreLockedError
from rocketflow.store.checkpoint import Checkpoint
from rocketflow.store.consume_queue import CQ_UNIT_SIZE, UNIT
from rocketflow.store.put_request import PutMessageRequest


def read_all(store: MessageStore, topic: str = "T", queue_id: int = 0) -> list[bytes]:
    bodies: list[bytes] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while True:
        got = store.get_messages("g", topic, queue_id, offset, 32)
        if not got.buffers and got.next_begin_offset == offset:
            return bodies
        bodies.extend(m.body for m in decode_records(got.body()))
        offset = got.next_begin_offset


def consume_queue_units(config: StoreConfig) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for path in sorted(config.consume_queue_dir.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(config.consume_queue_dir))] = path.read_bytes()
    return out


def put_many(store: MessageStore, count: int, queues: int = 3) -> list[PutMessageRequest]:
    reqs = [request(queue_id=i % queues, body=f"message-{i}".encode() * 20, KEYS=f"key{i}", UNIQ_KEY=f"U{i}")
            for i in range(count)]
    for i in range(0, count, 7):
        assert store.put_messages(reqs[i:i + 7]).status.is_ok
    return reqs


def simulate_crash(store: MessageStore) -> None:
    """Stop threads and release the lock, but leave the abort marker and skip the final flush logic."""
    store._running = False
    for service in (store.clean_service, store._flush_service, store._cq_flush_service):
        if service is not None:
            # no final flush, and the thread is gone before the test touches the files (or the checkpoint)
            service.on_shutdown = lambda: None  # type: ignore[method-assign]
            service._stopped.set()
            service._wakeup.set()
            if service._thread is not None:
                service._thread.join(timeout=30)
    store._close_files()
    store._lock_file.release()


def test_clean_restart_keeps_everything(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        reqs = put_many(store, 60)
        before = {q: read_all(store, "T", q) for q in range(3)}
    assert not config.abort_path.exists()
    with MessageStore(config) as store:
        assert store.last_exit_ok
        assert {q: read_all(store, "T", q) for q in range(3)} == before
        assert store.put_message(request(queue_id=1)).queue_offset == 20
        assert sum(len(v) for v in before.values()) == len(reqs)


def put_delayed(store: MessageStore, level: int, body: bytes) -> tuple[int, int]:
    """Put a message as the broker stores a DELAY one; returns (store timestamp, queue offset)."""
    put = store.put_message(PutMessageRequest(
        SCHEDULE_TOPIC, min(level, 18) - 1, body, born_timestamp=1_700_000_000_000,
        properties={"DELAY": str(level), "REAL_TOPIC": "T", "REAL_QID": "0", "TAGS": "TagA"},
        tags_code=1_900_000_000_000))  # the broker's own guess: the store uses its store timestamp instead
    assert put.status.is_ok
    return put.store_timestamp, put.queue_offset


def test_consume_queue_rebuilt_from_commit_log_equals_original(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        put_many(store, 80)
        delayed = [(level, *put_delayed(store, level, b"later-%d" % i))
                   for i, level in enumerate((1, 3, 3, 18, 25))]
        for level, store_timestamp, queue_offset in delayed:
            # tags code of a delayed message = store time + the delay of its level (25 clamps to 18 = 2h)
            delay_ms = {1: 1000, 3: 10_000, 18: 7_200_000, 25: 7_200_000}[level]
            queue = store.consume_queues.find(SCHEDULE_TOPIC, min(level, 18) - 1)
            assert queue is not None
            unit = queue.unit_at(queue_offset)
            assert unit is not None and unit[2] == store_timestamp + delay_ms
    original = consume_queue_units(config)
    assert len(original) > 6
    assert any(name.startswith(SCHEDULE_TOPIC) for name in original)
    shutil.rmtree(config.consume_queue_dir)
    with MessageStore(config) as store:
        assert store.get_max_offset_in_queue("T", 2) == 26
        assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 2) == 2
    assert consume_queue_units(config) == original


def test_crash_recovery_rebuilds_consume_queues(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    store = MessageStore(config)
    store.start()
    put_many(store, 50)
    expected = {q: read_all(store, "T", q) for q in range(3)}
    # lose the consume queue's latest units, as if their pages never reached disk
    queue = store.consume_queues.find("T", 0)
    assert queue is not None
    simulate_crash(store)
    last = sorted((config.consume_queue_dir / "T" / "0").iterdir())[-1]
    with open(last, "r+b") as handle:
        handle.truncate(0)
        handle.truncate(os.path.getsize(sorted((config.consume_queue_dir / "T" / "1").iterdir())[-1]))
    # lost pages were never flushed, so no checkpoint can cover them (the flush thread may have written one)
    checkpoint = Checkpoint.load(config.checkpoint_path)
    checkpoint.logics_phys_offset = 0
    checkpoint.save(config.checkpoint_path)
    assert config.abort_path.exists()
    with MessageStore(config) as store:
        assert not store.last_exit_ok
        assert {q: read_all(store, "T", q) for q in range(3)} == expected
        assert store.put_message(request(queue_id=0)).queue_offset == 17


def last_record_offset(store: MessageStore) -> tuple[int, int]:
    queue = store.consume_queues.find("T", 0)
    assert queue is not None
    unit = queue.unit_at(queue.max_offset - 1)
    assert unit is not None
    return unit[0], unit[1]


@pytest.mark.parametrize("damage", ["torn", "bitflip"])
def test_damaged_tail_is_cut_and_never_served(tmp_path: Path, damage: str) -> None:
    config = small_config(tmp_path)
    store = MessageStore(config)
    store.start()
    reqs = [request(body=f"m{i}".encode() * 30, KEYS=f"k{i}", UNIQ_KEY=f"U{i}") for i in range(25)]
    for req in reqs:
        store.put_message(req)
    phys, size = last_record_offset(store)
    simulate_crash(store)
    segment = config.commit_log_dir / f"{phys - phys % config.commit_log_segment_size:020d}"
    position = phys % config.commit_log_segment_size
    with open(segment, "r+b") as handle:
        if damage == "torn":  # power loss: the record's second half never reached the disk
            handle.seek(position + size // 2)
            handle.write(bytes(size - size // 2))
        else:  # a flipped bit inside the body
            handle.seek(position + 100)
            byte = handle.read(1)
            handle.seek(position + 100)
            handle.write(bytes([byte[0] ^ 0x10]))
    with MessageStore(config) as store:
        bodies = read_all(store)
        assert bodies == [r.body for r in reqs[:-1]]
        assert store.max_phy_offset == phys
        assert store.look_message_by_offset(phys) is None
        assert store.query_message("T", "U24", 10, 0, 2**62).buffers == []
        assert len(store.query_message("T", "U23", 10, 0, 2**62).buffers) == 1
        # the log continues cleanly where it was cut, and what lands at the cut is indexed
        again = store.put_message(request(body=b"after", KEYS="newkey", UNIQ_KEY="UNEW"))
        assert again.wrote_offset == phys and again.queue_offset == 24
        for key in ("newkey", "UNEW"):
            assert store.query_message("T", key, 10, 0, 2**62).commit_log_offsets == [phys]
    with MessageStore(config) as store:
        assert read_all(store)[-1] == b"after"
        assert store.query_message("T", "newkey", 10, 0, 2**62).commit_log_offsets == [phys]


def test_bit_flip_found_by_clean_restart_too(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        for i in range(5):
            store.put_message(request(body=b"abc" * 50 + bytes([i])))
        phys, _size = last_record_offset(store)
    segment = config.commit_log_dir / f"{0:020d}"
    with open(segment, "r+b") as handle:
        handle.seek(phys + 120)
        handle.write(b"\xff")
    with MessageStore(config) as store:
        assert len(read_all(store)) == 4


def test_lock_file_prevents_two_stores(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config), pytest.raises(StoreLockedError):
        MessageStore(config).start()


def test_wrong_segment_size_is_a_clear_error(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        store.put_message(request())
    from rocketflow.store import StoreCorruptError

    with pytest.raises(StoreCorruptError, match="size"):
        MessageStore(small_config(tmp_path, commit_log_segment_size=8192)).start()
    with MessageStore(config) as store:  # the failed start released the lock
        assert store.get_max_offset_in_queue("T", 0) == 1


def test_empty_last_segment_left_by_a_crash_is_dropped(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        put_many(store, 30)
        end = store.max_phy_offset
        queue = store.consume_queues.find("T", 0)
        assert queue is not None
        queue_end = queue.max_offset
    # a crash between creating the next segment and sizing it leaves zero-length files
    segment_size = config.commit_log_segment_size
    next_segment = config.commit_log_dir / f"{end - end % segment_size + segment_size:020d}"
    next_segment.touch()
    cq_dir = config.consume_queue_dir / "T" / "0"
    next_cq = cq_dir / f"{int(sorted(cq_dir.iterdir())[-1].name) + config.consume_queue_segment_size:020d}"
    next_cq.touch()
    index_dir = config.index_dir
    (index_dir / "99991231235959999").touch()
    with MessageStore(config) as store:
        assert not next_segment.exists() and not next_cq.exists()
        assert not (index_dir / "99991231235959999").exists()
        assert store.max_phy_offset == end and store.get_max_offset_in_queue("T", 0) == queue_end
        assert len(read_all(store)) == queue_end
        assert store.put_message(request(body=b"next", KEYS="nk")).status.is_ok
        assert len(store.query_message("T", "nk", 10, 0, 2**62).buffers) == 1


def test_empty_segment_before_the_last_is_still_an_error(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        put_many(store, 10)
    first = config.commit_log_dir / f"{0:020d}"
    first.write_bytes(b"")
    (config.commit_log_dir / f"{config.commit_log_segment_size:020d}").write_bytes(
        bytes(config.commit_log_segment_size))
    from rocketflow.store import StoreCorruptError

    with pytest.raises(StoreCorruptError, match="size 0"):
        MessageStore(config).start()


def test_crash_recovery_cuts_consume_queue_at_a_zeroed_unit(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    store = MessageStore(config)
    store.start()
    put_many(store, 60, queues=1)
    expected = read_all(store)
    queue = store.consume_queues.find("T", 0)
    assert queue is not None and queue.max_offset == 60
    units = [queue.unit_at(offset) for offset in range(60)]
    per_file = config.consume_queue_segment_units
    # a unit in the second-last consume-queue file whose record opens a commit-log segment
    hole = next(offset for offset in range(60 - 2 * per_file, 60 // per_file * per_file)
                if (unit := units[offset]) is not None and unit[0] % config.commit_log_segment_size == 0)
    hole_unit = units[hole]
    assert hole_unit is not None
    simulate_crash(store)
    # power loss: the page holding that unit never reached the disk, the units after it did
    cq_file = config.consume_queue_dir / "T" / "0" / f"{hole // per_file * per_file * CQ_UNIT_SIZE:020d}"
    with open(cq_file, "r+b") as handle:
        handle.seek(hole % per_file * CQ_UNIT_SIZE)
        handle.write(bytes(CQ_UNIT_SIZE))
    checkpoint = Checkpoint.load(config.checkpoint_path)
    checkpoint.logics_phys_offset = hole_unit[0]  # the unit was written after the last checkpoint
    checkpoint.save(config.checkpoint_path)
    with MessageStore(config) as store:
        assert not store.last_exit_ok
        queue = store.consume_queues.find("T", 0)
        assert queue is not None and queue.max_offset == 60
        assert [queue.unit_at(offset) for offset in range(60)] == units
        assert read_all(store) == expected
        assert store.put_message(request()).queue_offset == 60


def test_consume_queue_crash_check_stops_at_first_invalid_unit(tmp_path: Path) -> None:
    from rocketflow.store.consume_queue import ConsumeQueue

    directory = tmp_path / "cq"
    queue = ConsumeQueue("T", 0, directory, 8)
    queue.put_units(0, b"".join(UNIT.pack(100 * i, 100, 7) for i in range(12)), 12, 1200)
    queue.close()
    # units 0..7 fill the first file; in the second, unit 9 is zeroed (units 10 and 11 look valid)
    second = directory / f"{8 * CQ_UNIT_SIZE:020d}"
    with open(second, "r+b") as handle:
        handle.seek(CQ_UNIT_SIZE)
        handle.write(bytes(CQ_UNIT_SIZE))
    for check_units, expected_max in ((False, 12), (True, 9)):
        queue = ConsumeQueue("T", 0, directory, 8)
        queue.load()
        queue.recover(check_units=check_units)
        assert queue.max_offset == expected_max
        assert queue.max_physic_offset == (expected_max - 1) * 100 + 100
        queue.close()
    # the cut is on disk: the tail after the hole is gone for a later clean restart too
    assert second.read_bytes()[CQ_UNIT_SIZE:].strip(b"\0") == b""
    with open(second, "r+b") as handle:
        handle.seek(2 * CQ_UNIT_SIZE)
        handle.write(UNIT.pack(1000, -5, 0) + UNIT.pack(1100, 100, 0))
        handle.seek(CQ_UNIT_SIZE)
        handle.write(UNIT.pack(900, 100, 0))
    queue = ConsumeQueue("T", 0, directory, 8)
    queue.load()
    queue.recover(check_units=True)
    assert queue.max_offset == 10
    queue.close()
