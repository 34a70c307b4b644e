"""Restart, crash recovery (abort marker), torn tails, bit flips, consume-queue rebuild, lock file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import request, small_config
from rocketflow.protocol.codec import decode_records
from rocketflow.store import MessageStore, StoreConfig, StoreLockedError
from rocketflow.store.commit_log import PutMessageRequest


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
            service._stopped.set()
            service._wakeup.set()
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


def test_consume_queue_rebuilt_from_commit_log_equals_original(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    with MessageStore(config) as store:
        put_many(store, 80)
    original = consume_queue_units(config)
    assert len(original) > 6
    shutil.rmtree(config.consume_queue_dir)
    with MessageStore(config) as store:
        assert store.get_max_offset_in_queue("T", 2) == 26
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
    reqs = [request(body=f"m{i}".encode() * 30) for i in range(25)]
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
        # the log continues cleanly where it was cut
        again = store.put_message(request(body=b"after"))
        assert again.wrote_offset == phys and again.queue_offset == 24
    with MessageStore(config) as store:
        assert read_all(store)[-1] == b"after"


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
