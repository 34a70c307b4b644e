"""PopState on its own: handles, invisibility, FIFO holds, and its persistence (reopen, checkpoints,
torn lines, a process killed with SIGKILL mid-run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocketflow.pop import Handle, HandleError, PopState

G, T = "group-a", "topic-a"


def opened(path: Path) -> PopState:
    state = PopState(path)
    state.open()
    return state


def parse(state: PopState, text: str) -> Handle:
    handle = state.parse_handle(G, T, text)
    assert isinstance(handle, Handle), handle
    return handle


def test_receive_ack_and_stale_handles(tmp_path: Path) -> None:
    state = opened(tmp_path)
    handles = state.record_receive(G, T, 0, [(0, 1), (1, 1)], invisible_until=1_000, cursor=2)
    assert len(handles) == 2 and handles[0] != handles[1]
    queue = state.queue(G, T, 0)
    assert queue is not None and queue.cursor == 2 and queue.committed == 0
    acked = state.ack(G, T, parse(state, handles[0]))
    assert not isinstance(acked, HandleError) and acked.offset == 0
    assert queue.committed == 1
    # the same handle again: stale; nothing else changes
    assert state.ack(G, T, parse(state, handles[0])) is HandleError.STALE
    assert set(queue.inflight) == {1}


def test_forged_and_malformed_handles_are_refused(tmp_path: Path) -> None:
    state = opened(tmp_path)
    [handle] = state.record_receive(G, T, 3, [(7, 1)], invisible_until=1_000, cursor=8)
    queue_id, offset, seq, mac = handle.split(".")
    assert state.parse_handle(G, T, f"{queue_id}.{offset}.{seq}.{'0' * len(mac)}") is HandleError.FORGED
    assert state.parse_handle(G, T, f"{queue_id}.{int(offset) + 1}.{seq}.{mac}") is HandleError.FORGED
    assert state.parse_handle("other-group", T, handle) is HandleError.FORGED
    assert state.parse_handle(G, "other-topic", handle) is HandleError.FORGED
    for bad in ("", "x", "1.2.3", "a.b.c.d", "1.2.3.4.5", "9" * 200):
        assert state.parse_handle(G, T, bad) is HandleError.MALFORMED
    queue = state.queue(G, T, 3)
    assert queue is not None and set(queue.inflight) == {7}


def test_visible_again_after_the_invisible_time(tmp_path: Path) -> None:
    state = opened(tmp_path)
    state.record_receive(G, T, 0, [(0, 1), (1, 1)], invisible_until=1_000, cursor=2)
    assert state.visible_again(G, T, 0, 999, fifo=False) == ([], True)
    due, more = state.visible_again(G, T, 0, 1_000, fifo=False)
    assert [entry.offset for entry in due] == [0, 1] and more
    assert state.next_visible_ms(G, T) == 1_000


def test_change_invisible_makes_the_old_handle_stale(tmp_path: Path) -> None:
    state = opened(tmp_path)
    [old] = state.record_receive(G, T, 0, [(5, 1)], invisible_until=1_000, cursor=6)
    changed = state.change_invisible(G, T, parse(state, old), 5_000)
    assert not isinstance(changed, HandleError)
    entry, new = changed
    assert new != old and entry.invisible_until == 5_000
    assert state.visible_again(G, T, 0, 4_999, fifo=False) == ([], True)
    assert state.ack(G, T, parse(state, old)) is HandleError.STALE
    assert not isinstance(state.ack(G, T, parse(state, new)), HandleError)


def test_fifo_holds_a_queue_while_a_message_is_invisible(tmp_path: Path) -> None:
    state = opened(tmp_path)
    handles = state.record_receive(G, T, 0, [(0, 1), (1, 1)], invisible_until=1_000, cursor=2)
    state.change_invisible(G, T, parse(state, handles[1]), 3_000)
    # offset 0 is visible again at 1000 but offset 1 is still out: the queue gives nothing
    assert state.visible_again(G, T, 0, 1_500, fifo=True) == ([], False)
    due, more = state.visible_again(G, T, 0, 3_000, fifo=True)
    assert [entry.offset for entry in due] == [0, 1] and more
    # other queues are not held
    assert state.visible_again(G, T, 1, 1_500, fifo=True) == ([], True)


def test_state_survives_reopen_and_checkpoints(tmp_path: Path) -> None:
    state = opened(tmp_path)
    handles = state.record_receive(G, T, 0, [(0, 1), (1, 1), (2, 1)], invisible_until=1_000, cursor=3)
    state.ack(G, T, parse(state, handles[0]))
    state.checkpoint()
    _, changed = state.change_invisible(G, T, parse(state, handles[1]), 9_000)  # type: ignore[misc]
    state.move_cursor(G, T, 1, 40)
    state.close()

    again = opened(tmp_path)
    queue = again.queue(G, T, 0)
    assert queue is not None and queue.cursor == 3
    assert {offset: entry.invisible_until for offset, entry in queue.inflight.items()} == {1: 9_000, 2: 1_000}
    # handles issued before the restart still work, the stale ones still fail
    assert again.ack(G, T, parse(again, handles[1])) is HandleError.STALE
    assert not isinstance(again.ack(G, T, parse(again, changed)), HandleError)
    assert not isinstance(again.ack(G, T, parse(again, handles[2])), HandleError)
    queue1 = again.queue(G, T, 1)
    assert queue1 is not None and queue1.cursor == 40
    # new handles never repeat an old sequence number
    [fresh] = again.record_receive(G, T, 0, [(3, 1)], invisible_until=1, cursor=4)
    assert int(fresh.split(".")[2]) > int(changed.split(".")[2])
    again.close()
    assert len(list(tmp_path.glob("pop-*.log"))) <= 2


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    state = opened(tmp_path)
    state.record_receive(G, T, 0, [(0, 1)], invisible_until=1_000, cursor=1)
    state.close()
    [log] = tmp_path.glob("pop-*.log")
    with open(log, "ab") as file:
        file.write(b'["R","group-a","topic-a",0,9,[[1,1,')
    again = opened(tmp_path)
    queue = again.queue(G, T, 0)
    assert queue is not None and queue.cursor == 1 and set(queue.inflight) == {0}


KILLED_WRITER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from rocketflow.pop import PopState
    state = PopState(Path(sys.argv[1]))
    state.open()
    handles = state.record_receive("g", "t", 0, [(i, 1) for i in range(100)], invisible_until=5, cursor=100)
    for text in handles[:60]:
        state.ack("g", "t", state.parse_handle("g", "t", text))
    state.checkpoint()
    for text in handles[60:90]:
        state.ack("g", "t", state.parse_handle("g", "t", text))
    with state.batch():
        for text in handles[90:95]:
            state.ack("g", "t", state.parse_handle("g", "t", text))
    print("ready", flush=True)
    sys.stdin.read()
""")


def test_nothing_is_lost_when_the_process_is_killed(tmp_path: Path) -> None:
    """Every change is written before the call returns: SIGKILL right after loses none of them."""
    process = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE)
    assert process.stdout is not None
    try:
        assert process.stdout.readline().strip() == b"ready"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    state = opened(tmp_path)
    queue = state.queue("g", "t", 0)
    assert queue is not None and queue.cursor == 100
    assert sorted(queue.inflight) == list(range(95, 100))


def test_a_batch_writes_its_changes_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = opened(tmp_path)
    writes: list[bytes] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    with state.batch():
        handles = state.record_receive(G, T, 0, [(0, 1), (1, 1)], invisible_until=1_000, cursor=2)
        state.record_receive(G, T, 1, [(7, 1)], invisible_until=1_000, cursor=8)
        with state.batch():  # nested: the outer batch writes
            state.ack(G, T, parse(state, handles[0]))
        assert writes == []
    assert len(writes) == 1 and writes[0].count(b"\n") == 5  # S and R for each queue, then A
    with pytest.raises(RuntimeError), state.batch():  # what was changed is written even when the block raises
        state.ack(G, T, parse(state, handles[1]))
        raise RuntimeError("boom")
    assert len(writes) == 2
    monkeypatch.undo()
    state.close()
    again = opened(tmp_path)
    assert again.queue(G, T, 0) is not None and again.queue(G, T, 0).inflight == {}  # type: ignore[union-attr]
    queue1 = again.queue(G, T, 1)
    assert queue1 is not None and set(queue1.inflight) == {7} and queue1.cursor == 8


@pytest.mark.parametrize("checkpoint_first", [False, True])
def test_remove_is_persisted(tmp_path: Path, checkpoint_first: bool) -> None:
    state = opened(tmp_path)
    state.record_receive(G, T, 2, [(4, 3)], invisible_until=1, cursor=5)
    if checkpoint_first:
        state.checkpoint()
    state.remove(G, T, 2, 4)
    state.close()
    queue = opened(tmp_path).queue(G, T, 2)
    assert queue is not None and queue.inflight == {} and queue.committed == 5
