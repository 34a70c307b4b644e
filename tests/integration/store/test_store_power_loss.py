"""Power loss: only what an fsync covered survives. SYNC acks must be covered; ASYNC loses a bounded tail.

kill -9 (test_store_crash.py) keeps the page cache, so it cannot tell whether a SYNC ack waited for
its fsync. Here a child process appends under SYNC or ASYNC flush and reports, for every
acknowledged message, its commit-log offset, size and record digest, and the store's flushed offset
when the ack was given (read in the future's done callback: on the group-commit thread as it
acknowledges, or just after when the ack came before the callback was attached). The test checks
every ack against that flushed offset, then SIGKILLs the child and simulates the power loss on the
files it left: commit-log bytes past the flushed offset are lost, except that the kernel may have
written some of them back on its own, so a prefix of them survives and ends inside a record (a torn
record). Segments created past the tear lose their size (zero-length files). Consume queues and
index keep everything they had (the worst case: they point past the commit log's new end). The store
restarted on those files must serve every acknowledged message byte for byte, once, in order, and
exactly the whole records before the tear.
"""

from __future__ import annotations

import hashlib
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rocketflow.protocol.codec import BLANK_MAGIC_CODE, MAGIC_CODE, decode_record, decode_records
from rocketflow.store import FlushDiskType, MessageStore, PutMessageRequest, StoreConfig
from rocketflow.store.checkpoint import Checkpoint

SEGMENT_SIZE = 64 * 1024
TOPIC = "Power"

CHILD = textwrap.dedent(
    """
    import concurrent.futures
    import hashlib
    import sys
    import threading
    from pathlib import Path

    from rocketflow.store import FlushDiskType, MessageStore, PutMessageRequest, StoreConfig
    from rocketflow.store.flush import GroupCommitService

    root, mode, threads, behaviour = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    config = StoreConfig(store_root=root, commit_log_segment_size=__SEGMENT_SIZE__, consume_queue_segment_units=256,
                         max_hash_slot_num=512, max_index_num=4096, flush_interval_consume_queue_ms=20,
                         flush_interval_commit_log_ms=50, flush_disk_type=FlushDiskType[mode])
    if behaviour == "ack-before-fsync":  # the bug the ack-time check exists to catch
        def submit(self, result):
            future = concurrent.futures.Future()
            future.set_result(result)
            return future
        GroupCommitService.submit = submit
    store = MessageStore(config)
    store.start()
    files = store.commit_log.files
    out = threading.Lock()


    def body(seq):  # as body() in the test
        return (f"m{seq}:" * (2 + seq % 41)).encode()


    def putter(worker):
        sent = 0
        while True:
            seqs = [worker + threads * (sent + i) for i in range(1 + sent % 3)]
            batch = [PutMessageRequest(__TOPIC__, worker, body(seq),
                                       properties={"KEYS": f"K{seq}", "UNIQ_KEY": f"U{seq}"}) for seq in seqs]
            future = store.put_messages_async(batch)
            observed = []
            done = threading.Event()

            def on_ack(_future, observed=observed, done=done):
                observed.append(files.flushed_offset)  # on the acknowledging thread, as it acknowledges
                done.set()

            future.add_done_callback(on_ack)
            result = future.result(timeout=30)
            done.wait(30)
            if not result.status.is_ok:
                with out:
                    print("FAIL", result.status.name, flush=True)
                return
            lines = []
            for seq, offset in zip(seqs, result.commit_log_offsets, strict=True):
                record = store.select_one_message_by_offset(offset)
                digest = hashlib.blake2b(record, digest_size=8).hexdigest()
                lines.append(f"ACK {seq} {worker} {offset} {len(record)} {digest} {result.end_offset} {observed[0]}")
            with out:
                print("\\n".join(lines), flush=True)
            sent += len(seqs)


    def run(worker):
        try:
            putter(worker)
        except BaseException as exc:
            with out:
                print("FAIL", repr(exc), flush=True)


    workers = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    """
)


def body(seq: int) -> bytes:
    """The body of message `seq` (the child builds the same)."""
    return (f"m{seq}:" * (2 + seq % 41)).encode()


CHILD = CHILD.replace("__SEGMENT_SIZE__", str(SEGMENT_SIZE)).replace("__TOPIC__", repr(TOPIC))


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int
    queue_id: int
    offset: int
    size: int
    digest: str
    batch_end: int
    #: the store's flushed commit-log offset when the put was acknowledged
    flushed: int

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    data: bytes

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


def config_for(root: Path, mode: str) -> StoreConfig:
    return StoreConfig(store_root=root, commit_log_segment_size=SEGMENT_SIZE, consume_queue_segment_units=256,
                       max_hash_slot_num=512, max_index_num=4096, flush_disk_type=FlushDiskType[mode])


def run_until_kill(root: Path, mode: str, threads: int, acks_before_kill: int, behaviour: str = "ok") -> list[Ack]:
    """Acks the child printed (whole lines only) until it was SIGKILLed after `acks_before_kill` of them."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), mode, str(threads), behaviour],
                             stdout=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(60, child.kill)
    watchdog.start()
    acks: list[Ack] = []
    failures: list[str] = []

    def take(line: str) -> None:
        if not line.endswith("\n"):
            return  # cut by the kill: never seen by a producer
        parts = line.split()
        if parts[0] == "ACK":
            seq, queue_id, offset, size = map(int, parts[1:5])
            acks.append(Ack(seq, queue_id, offset, size, parts[5], int(parts[6]), int(parts[7])))
        else:
            failures.append(line)

    try:
        assert child.stdout is not None
        for line in child.stdout:
            take(line)
            if len(acks) >= acks_before_kill or failures:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        watchdog.cancel()
        if child.stdout is not None:
            for line in child.stdout:  # acknowledgements printed before the kill landed still count
                take(line)
            child.stdout.close()
    assert not failures, failures
    assert len(acks) >= acks_before_kill, f"the child acknowledged only {len(acks)} messages"
    return acks


def read_segments(root: Path) -> dict[int, bytes]:
    return {int(path.name): path.read_bytes() for path in sorted((root / "commitlog").iterdir())}


def records_from(segments: dict[int, bytes], start: int) -> list[Record]:
    """The records the page cache holds from `start` on (everything the killed child wrote)."""
    records: list[Record] = []
    offset = start
    while True:
        base = offset - offset % SEGMENT_SIZE
        data = segments.get(base)
        pos = offset - base
        if data is None or pos + 8 > SEGMENT_SIZE:
            return records
        size, magic = struct.unpack_from(">ii", data, pos)
        if magic == BLANK_MAGIC_CODE and size == SEGMENT_SIZE - pos:
            offset = base + SEGMENT_SIZE
            continue
        if magic != MAGIC_CODE or size <= 0 or pos + size > SEGMENT_SIZE:
            return records
        records.append(Record(offset, data[pos:pos + size]))
        offset += size


def lose_power(root: Path, tear: int) -> None:
    """Commit-log bytes from `tear` on never reached the disk; segments starting there lost their size too."""
    for path in sorted((root / "commitlog").iterdir()):
        start = int(path.name)
        if start + SEGMENT_SIZE <= tear:
            continue
        if start >= tear:
            os.truncate(path, 0)
            continue
        with open(path, "r+b") as handle:
            handle.seek(tear - start)
            handle.write(bytes(start + SEGMENT_SIZE - tear))


def served_records(store: MessageStore, queues: int) -> dict[int, list[tuple[int, bytes]]]:
    """Per queue, (queue offset, record) of everything a consumer gets, read from offset 0."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for queue_id in range(queues):
        offset = 0
        got_records: list[tuple[int, bytes]] = []
        while True:
            got = store.get_messages("check", TOPIC, queue_id, offset, 32)
            if not got.buffers:
                break
            got_records.extend(zip(got.queue_offsets, got.buffers, strict=True))
            offset = got.next_begin_offset
        out[queue_id] = got_records
    return out


@dataclass(slots=True)
class Outcome:
    acks: list[Ack]
    #: the highest flushed offset the child saw (or the checkpoint recorded): the power loss keeps that much
    cut: int
    #: where the surviving bytes end (inside a record when there were records past `cut`)
    tear: int
    lost: list[Ack]


def power_loss_round(tmp_path: Path, mode: str, threads: int, acks_before_kill: int,
                     tear_at: float) -> Outcome:
    root = tmp_path / "store"
    acks = run_until_kill(root, mode, threads, acks_before_kill)
    assert (root / "abort").exists()
    checkpoint = Checkpoint.load(root / "checkpoint")
    cut = max(max(ack.flushed for ack in acks), checkpoint.physic_offset)
    before = read_segments(root)
    first = min(before)
    written = records_from(before, first)
    by_offset = {record.offset: record for record in written}
    for ack in acks:  # the child's view of each acknowledged record is what the page cache holds
        record = by_offset[ack.offset]
        assert len(record.data) == ack.size
        assert hashlib.blake2b(record.data, digest_size=8).hexdigest() == ack.digest
    beyond = [record for record in written if record.offset >= cut]
    assert all(record.end <= cut for record in written if record.offset < cut), "the flushed offset is mid-record"
    if beyond:  # the kernel wrote part of the unflushed bytes back: keep them up to inside a record
        victim = beyond[len(beyond) // 2]
        tear = victim.offset + min(len(victim.data) - 1, max(1, int(len(victim.data) * tear_at)))
        victim_key = decode_record(victim.data)[0].properties["UNIQ_KEY"]
    else:
        tear, victim_key = cut, ""
    lose_power(root, tear)
    survivors = [record for record in written if record.end <= tear]
    survivor_end = survivors[-1].end if survivors else first

    with MessageStore(config_for(root, mode)) as store:
        assert not store.last_exit_ok
        assert store.max_phy_offset == survivor_end
        served = served_records(store, threads)
        seen: dict[int, int] = {}
        for queue_id, got_records in served.items():
            queue_seqs = []
            for index, (queue_offset, data) in enumerate(got_records):
                assert queue_offset == index, f"queue {queue_id}: hole or repeat at {queue_offset}"
                message = decode_records(data)[0]
                assert message.queue_id == queue_id and message.queue_offset == queue_offset
                seq = int(message.properties["UNIQ_KEY"][1:])
                assert message.body == body(seq)
                assert message.commit_log_offset + len(data) <= tear, "a record past the tear was served"
                assert data == by_offset[message.commit_log_offset].data, "served bytes differ from what was written"
                assert seq not in seen, f"message {seq} served twice"
                seen[seq] = message.commit_log_offset
                queue_seqs.append(seq)
            assert queue_seqs == sorted(queue_seqs), f"queue {queue_id} out of order"
        assert sorted(seen.values()) == [record.offset for record in survivors], \
            "the whole records before the tear are not exactly what is served"
        lost = [ack for ack in acks if ack.seq not in seen]
        for ack in acks:
            if ack.seq in seen:
                assert seen[ack.seq] == ack.offset
        if victim_key:
            assert store.query_message(TOPIC, victim_key, 4, 0, 2**62).buffers == []
        kept = [ack for ack in acks if ack.seq in seen]
        if kept:
            newest = max(kept, key=lambda ack: ack.offset)
            assert store.query_message(TOPIC, f"U{newest.seq}", 4, 0, 2**62).commit_log_offsets == [newest.offset]
        # the store goes on from the cut
        again = store.put_message(PutMessageRequest(TOPIC, 0, b"after-power-loss"))
        assert again.status.is_ok and again.wrote_offset == survivor_end
        assert decode_records(served_records(store, 1)[0][-1][1])[0].body == b"after-power-loss"
    return Outcome(acks, cut, tear, lost)


def test_sync_flush_acks_only_fsynced_messages_and_they_survive_power_loss(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome = power_loss_round(tmp_path, "SYNC_FLUSH", threads=4, acks_before_kill=2000, tear_at=0.97)
    late = [ack for ack in outcome.acks if ack.end > ack.flushed or ack.batch_end > ack.flushed]
    assert not late, f"{len(late)} SYNC acks came before their fsync, e.g. {late[:3]}"
    assert outcome.lost == [], f"acknowledged messages lost: {[ack.seq for ack in outcome.lost][:10]}"
    segments = max(ack.offset for ack in outcome.acks) // SEGMENT_SIZE + 1
    print(f"SYNC_FLUSH: {len(outcome.acks)} acks over {segments} segments, all covered by an fsync when given; "
          f"flushed {outcome.cut}, torn at {outcome.tear}, lost 0 ({time.monotonic() - started:.1f} s)")


def test_async_flush_loses_at_most_what_was_acked_after_the_last_flush(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome = power_loss_round(tmp_path, "ASYNC_FLUSH", threads=1, acks_before_kill=4000, tear_at=0.5)
    after_flush = [ack for ack in outcome.acks if ack.end > outcome.cut]
    after_tear = [ack for ack in outcome.acks if ack.end > outcome.tear]
    # exactly the acks whose bytes were not on disk are gone, a subset of those after the last flush seen
    assert outcome.lost == after_tear
    assert set(map(id, outcome.lost)) <= set(map(id, after_flush))
    print(f"ASYNC_FLUSH: {len(outcome.acks)} acks; {len(after_flush)} acked after the last flush the child saw "
          f"(offset {outcome.cut}); {len(outcome.lost)} lost by the power loss (torn at {outcome.tear}) "
          f"({time.monotonic() - started:.1f} s)")


def test_the_ack_time_check_catches_acks_given_before_the_fsync(tmp_path: Path) -> None:
    """Negative control: a group commit that acknowledges at once is caught by the check above."""
    acks = run_until_kill(tmp_path / "store", "SYNC_FLUSH", 1, 300, behaviour="ack-before-fsync")
    late = [ack for ack in acks if ack.end > ack.flushed]
    assert late, "acks given before their fsync went unnoticed"

