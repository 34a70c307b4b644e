"""kill -9 a process appending to the store, restart, check every acknowledged message is there once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocketflow.protocol.codec import decode_records
from rocketflow.store import FlushDiskType, MessageStore, PutMessageRequest, StoreConfig

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rocketflow.store import FlushDiskType, MessageStore, PutMessageRequest, StoreConfig

    root, mode = Path(sys.argv[1]), sys.argv[2]
    config = StoreConfig(store_root=root, commit_log_segment_size=64 * 1024, consume_queue_segment_units=256,
                         max_hash_slot_num=512, max_index_num=2048, flush_interval_consume_queue_ms=20,
                         flush_disk_type=FlushDiskType[mode])
    store = MessageStore(config)
    store.start()
    seq = 0
    while True:
        batch = [PutMessageRequest("Crash", seq % 4, (f"msg-{seq + i}-" * 7).encode(),
                                   properties={"UNIQ_KEY": f"U{seq + i}"}) for i in range(3)]
        result = store.put_messages(batch)
        if not result.status.is_ok:
            print("FAIL", result.status.name, flush=True)
            break
        for i in range(3):
            print("ACK", seq + i, flush=True)
        seq += 3
    """
)


def run_and_kill(root: Path, mode: str, acks_before_kill: int) -> list[int]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), mode], stdout=subprocess.PIPE, text=True,
                             env=env)
    acked: list[int] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            parts = line.split()
            assert parts[0] == "ACK", line
            acked.append(int(parts[1]))
            if len(acked) >= acks_before_kill:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        if child.stdout is not None:
            # acknowledgements printed before the kill landed still count
            for line in child.stdout:
                parts = line.split()
                if len(parts) == 2 and parts[0] == "ACK":
                    acked.append(int(parts[1]))
            child.stdout.close()
    return acked


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_acknowledged_messages_survive_kill_9(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "store"
    acked = run_and_kill(root, mode, 1500)
    assert (root / "abort").exists()
    config = StoreConfig(store_root=root, commit_log_segment_size=64 * 1024, consume_queue_segment_units=256,
                         max_hash_slot_num=512, max_index_num=2048, flush_disk_type=FlushDiskType[mode])
    with MessageStore(config) as store:
        assert not store.last_exit_ok
        stored: dict[int, list[int]] = {}
        for queue_id in range(4):
            offset = 0
            seqs: list[int] = []
            while True:
                got = store.get_messages("check", "Crash", queue_id, offset, 32)
                if not got.buffers:
                    break
                for msg in decode_records(got.body()):
                    seq = int(msg.body.split(b"-")[1])
                    assert msg.body == (f"msg-{seq}-" * 7).encode()
                    assert msg.queue_offset == len(seqs)
                    seqs.append(seq)
                offset = got.next_begin_offset
            stored[queue_id] = seqs
        everything = [seq for seqs in stored.values() for seq in seqs]
        assert len(everything) == len(set(everything)), "a message was stored twice"
        for queue_id, seqs in stored.items():
            assert seqs == sorted(seqs), f"queue {queue_id} out of order"
        missing = set(acked) - set(everything)
        assert not missing, f"acknowledged messages lost: {sorted(missing)[:10]}"
        # every stored message is a whole batch (batches are written atomically) and queryable, also
        # those whose index keys were still waiting for a run of index_build_batch at the kill
        assert len(everything) % 3 == 0
        not_found = [seq for seq in everything
                     if len(store.query_message("Crash", f"U{seq}", 4, 0, 2**62).buffers) != 1]
        assert not not_found, f"stored but not found by key: {not_found[:10]}"
        # the store keeps working after recovery
        assert store.put_message(PutMessageRequest("Crash", 0, b"after-recovery")).status.is_ok
