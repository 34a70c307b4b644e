"""ProcessQueue (see docs/design/consumer.md, "The process queue")."""

from __future__ import annotations

import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rocketflow.client.consumer.offset_map import OffsetMap
from rocketflow.client.consumer.process_queue import DEFAULT_CONSUME_TIMEOUT_MS, ProcessQueue, ProcessQueueInfo
from rocketflow.protocol.message import MessageConst, MessageExt

START_MS = 1_700_000_000_000
MIB = 1024 * 1024


class FakeClock:
    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def msg(offset: int, body: bytes = b"body", properties: dict[str, str] | None = None) -> MessageExt:
    return MessageExt("TopicTest", body, queue_offset=offset, properties=properties, broker_name="broker-a")


def msgs(*offsets: int) -> list[MessageExt]:
    return [msg(offset, body=b"x" * (offset + 1)) for offset in offsets]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pq(clock: FakeClock) -> ProcessQueue:
    return ProcessQueue(clock=clock)


# -- construction and settings ------------------------------------------------------------------------


def test_new_queue_state(pq: ProcessQueue) -> None:
    assert (pq.msg_count, pq.msg_size, pq.msg_acc_cnt, pq.queue_offset_max) == (0, 0, 0, 0)
    assert not pq.dropped and not pq.locked and not pq.consuming
    assert pq.try_unlock_times == 0
    assert pq.last_pull_timestamp == pq.last_consume_timestamp == pq.last_lock_timestamp == START_MS
    assert pq.max_span == 0 and not pq.has_temp_message
    assert (pq.pull_max_idle_ms, pq.lock_max_live_ms, pq.consume_timeout_ms) == (120_000, 30_000, 900_000)


def test_default_clock_is_wall_clock_milliseconds() -> None:
    import time

    before = int(time.time() * 1000)
    pq = ProcessQueue()
    after = int(time.time() * 1000)
    assert before <= pq.last_pull_timestamp <= after
    assert before <= pq.now_ms() <= after + 1000


@pytest.mark.parametrize("name", ["pull_max_idle_ms", "lock_max_live_ms", "consume_timeout_ms"])
def test_settings_are_validated(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        ProcessQueue(**{name: -1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=name):
        ProcessQueue(**{name: 1.5})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=name):
        ProcessQueue(**{name: True})  # type: ignore[arg-type]


def test_clock_must_be_callable() -> None:
    with pytest.raises(TypeError, match="clock"):
        ProcessQueue(clock=5)  # type: ignore[arg-type]


def test_non_messages_are_rejected_without_side_effects(pq: ProcessQueue) -> None:
    with pytest.raises(TypeError, match="expected MessageExt, got str"):
        pq.put_messages([msg(0), "not a message"])  # type: ignore[list-item]
    assert pq.msg_count == 0 and not pq.consuming
    with pytest.raises(TypeError, match="MessageExt"):
        pq.remove_messages([None])  # type: ignore[list-item]


# -- put ------------------------------------------------------------------------------------------------


def test_put_counts_messages_and_bytes(pq: ProcessQueue) -> None:
    pq.put_messages([msg(0, b"ab"), msg(1, b"cde"), msg(2, b"")])
    assert pq.msg_count == 3
    assert pq.msg_size == 5
    assert pq.queue_offset_max == 2
    assert list(pq.msg_tree_map) == [0, 1, 2]
    assert pq.has_temp_message


def test_duplicates_are_not_counted(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(0, 1, 2))
    pq.put_messages(msgs(1, 2, 3))
    assert pq.msg_count == 4
    assert pq.msg_size == 1 + 2 + 3 + 4
    assert pq.queue_offset_max == 3


def test_offsets_being_consumed_count_as_duplicates(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(0, 1))
    pq.take_messages(2)
    pq.put_messages(msgs(0, 1, 2))  # a re-pull after re-reading the broker offset
    assert pq.msg_count == 3
    assert list(pq.msg_tree_map) == [2]
    assert pq.commit() == 2
    assert pq.msg_count == 1


def test_dispatch_to_consume_only_once_while_consuming(pq: ProcessQueue) -> None:
    assert pq.put_messages([]) is False  # nothing held: nothing to dispatch
    assert not pq.consuming
    assert pq.put_messages(msgs(0)) is True
    assert pq.consuming
    assert pq.put_messages(msgs(1)) is False
    assert pq.put_messages(msgs(1)) is False
    # Orderly: the consume loop takes until nothing is left, which ends consumption.
    assert len(pq.take_messages(10)) == 2
    assert pq.take_messages(10) == []
    assert not pq.consuming
    assert pq.put_messages(msgs(2)) is True


def test_dispatch_when_only_duplicates_arrive_but_messages_are_held(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(0))
    pq.consuming = False
    assert pq.put_messages(msgs(0)) is True


def test_msg_acc_cnt_from_max_offset_of_the_last_message(pq: ProcessQueue) -> None:
    pq.put_messages(
        [msg(5, properties={MessageConst.MAX_OFFSET: "7"}), msg(9, properties={MessageConst.MAX_OFFSET: "100"})]
    )
    assert pq.msg_acc_cnt == 91
    pq.put_messages([msg(10)])  # no property: unchanged
    assert pq.msg_acc_cnt == 91
    pq.put_messages([msg(11, properties={MessageConst.MAX_OFFSET: "11"})])  # not ahead: unchanged
    assert pq.msg_acc_cnt == 91
    pq.put_messages([msg(12, properties={MessageConst.MAX_OFFSET: "junk"})])  # unparsable: ignored
    assert pq.msg_acc_cnt == 91
    pq.put_messages([msg(11, properties={MessageConst.MAX_OFFSET: "20"})])  # a duplicate still carries the property
    assert pq.msg_acc_cnt == 9


# -- remove (concurrent mode) ---------------------------------------------------------------------------


def test_m5_finishing_before_m4_keeps_the_commit_offset_at_m4(pq: ProcessQueue) -> None:
    """Seed 001: offsets never skip a message that is still being consumed."""
    m3, m4, m5 = msgs(3, 4, 5)
    pq.put_messages([m3, m4, m5])
    assert pq.remove_messages([m3]) == 4
    assert pq.remove_messages([m5]) == 4
    assert pq.msg_count == 1
    assert pq.remove_messages([m4]) == 6  # empty now: largest seen + 1
    assert pq.msg_count == 0 and pq.msg_size == 0


def test_remove_from_an_empty_queue_returns_minus_one(pq: ProcessQueue, clock: FakeClock) -> None:
    clock.now += 5
    assert pq.remove_messages(msgs(1)) == -1
    assert pq.last_consume_timestamp == START_MS + 5


def test_remove_of_unknown_offsets_changes_nothing(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(10, 11))
    assert pq.remove_messages(msgs(3, 12)) == 10
    assert (pq.msg_count, pq.msg_size) == (2, 11 + 12)


def test_remove_stamps_last_consume_timestamp(pq: ProcessQueue, clock: FakeClock) -> None:
    pq.put_messages(msgs(0, 1))
    clock.now += 1234
    pq.remove_messages(msgs(0))
    assert pq.last_consume_timestamp == START_MS + 1234


def test_remove_subtracts_the_held_body_size(pq: ProcessQueue) -> None:
    pq.put_messages([msg(0, b"12345"), msg(1, b"1")])
    pq.remove_messages([msg(0, b"")])  # same offset, different object
    assert (pq.msg_count, pq.msg_size) == (1, 1)


def test_empty_after_remove_uses_largest_offset_seen(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(5, 6))
    pq.put_messages(msgs(2))  # a lower offset arriving later does not lower the maximum
    assert pq.queue_offset_max == 6
    assert pq.remove_messages(msgs(2, 5, 6)) == 7


def test_max_span(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(3))
    assert pq.max_span == 0
    pq.put_messages(msgs(10, 2500))
    assert pq.max_span == 2497
    pq.remove_messages(msgs(3))
    assert pq.max_span == 2490


# -- orderly --------------------------------------------------------------------------------------------


def test_take_moves_the_smallest_into_the_consuming_map(pq: ProcessQueue, clock: FakeClock) -> None:
    pq.put_messages(msgs(4, 2, 3, 1))
    clock.now += 7
    taken = pq.take_messages(3)
    assert [m.queue_offset for m in taken] == [1, 2, 3]
    assert list(pq.consuming_msg_orderly_tree_map) == [1, 2, 3]
    assert list(pq.msg_tree_map) == [4]
    assert pq.msg_count == 4  # still held until committed
    assert pq.last_consume_timestamp == START_MS + 7
    assert [m.queue_offset for m in pq.take_messages(3)] == [4]


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "2"])
def test_take_rejects_bad_batch_sizes(pq: ProcessQueue, bad: object) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        pq.take_messages(bad)  # type: ignore[arg-type]


def test_commit_returns_largest_consumed_offset_plus_one(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(1, 2, 3))
    pq.take_messages(2)
    assert pq.commit() == 3
    assert (pq.msg_count, pq.msg_size) == (1, 4)
    assert pq.consuming_msg_orderly_tree_map == {}
    pq.take_messages(1)
    assert pq.commit() == 4
    assert (pq.msg_count, pq.msg_size) == (0, 0)


def test_commit_with_nothing_being_consumed_returns_minus_one(pq: ProcessQueue) -> None:
    assert pq.commit() == -1  # 4.9.3 throws NoSuchElementException here
    pq.put_messages(msgs(1))
    assert pq.commit() == -1
    assert pq.msg_count == 1


def test_rollback_puts_everything_back(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(1, 2, 3))
    pq.take_messages(2)
    pq.rollback()
    assert list(pq.msg_tree_map) == [1, 2, 3]
    assert pq.consuming_msg_orderly_tree_map == {}
    assert (pq.msg_count, pq.msg_size) == (3, 2 + 3 + 4)
    assert [m.queue_offset for m in pq.take_messages(1)] == [1]


def test_consume_again_moves_only_the_given_messages(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(1, 2, 3, 4))
    taken = pq.take_messages(3)
    taken[2].reconsume_times = 1
    pq.make_message_to_consume_again([taken[2], msg(99), msg(4)])  # 99 unknown, 4 not being consumed
    assert list(pq.consuming_msg_orderly_tree_map) == [1, 2]
    assert list(pq.msg_tree_map) == [3, 4]
    assert pq.msg_tree_map[3].reconsume_times == 1
    assert pq.msg_count == 4
    assert pq.commit() == 3
    assert [m.queue_offset for m in pq.take_messages(5)] == [3, 4]


def test_orderly_suspend_then_retry_in_place(pq: ProcessQueue) -> None:
    """SUSPEND_CURRENT_QUEUE_A_MOMENT: the batch goes back and is taken again, in order."""
    pq.put_messages(msgs(0, 1, 2))
    first = pq.take_messages(2)
    pq.make_message_to_consume_again(first)
    again = pq.take_messages(2)
    assert [m.queue_offset for m in again] == [0, 1]
    assert pq.commit() == 2
    assert [m.queue_offset for m in pq.take_messages(2)] == [2]
    assert pq.commit() == 3
    assert pq.msg_count == 0 and not pq.has_temp_message


def test_has_temp_message_ignores_the_consuming_map(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(1))
    pq.take_messages(1)
    assert not pq.has_temp_message
    assert pq.msg_count == 1


# -- clear, snapshots, expiry -------------------------------------------------------------------------


def test_clear_resets_messages_and_counters_but_keeps_flags(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(5, 6, 7))
    pq.take_messages(1)
    pq.locked = True
    pq.clear()
    assert (pq.msg_count, pq.msg_size, pq.queue_offset_max) == (0, 0, 0)
    assert pq.msg_tree_map == {} and pq.consuming_msg_orderly_tree_map == {}
    assert pq.locked and pq.consuming
    assert pq.remove_messages(msgs(5)) == -1


def test_map_views_are_snapshots(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(1))
    snapshot = pq.msg_tree_map
    snapshot.clear()
    assert list(pq.msg_tree_map) == [1]


def test_pull_and_lock_expiry(pq: ProcessQueue, clock: FakeClock) -> None:
    assert not pq.is_pull_expired(START_MS + 120_000)
    assert pq.is_pull_expired(START_MS + 120_001)
    assert not pq.is_lock_expired(START_MS + 30_000)
    assert pq.is_lock_expired(START_MS + 30_001)
    clock.now = START_MS + 200_000
    assert pq.is_pull_expired() and pq.is_lock_expired()
    pq.last_pull_timestamp = pq.last_lock_timestamp = clock.now
    assert not pq.is_pull_expired() and not pq.is_lock_expired()


def test_expiry_durations_are_settings(clock: FakeClock) -> None:
    pq = ProcessQueue(pull_max_idle_ms=10, lock_max_live_ms=20, clock=clock)
    assert pq.is_pull_expired(START_MS + 11) and not pq.is_lock_expired(START_MS + 11)
    assert pq.is_lock_expired(START_MS + 21)


def _started(offset: int, started_ms: int | None) -> MessageExt:
    if started_ms is None:
        return msg(offset)
    return msg(offset, properties={MessageConst.CONSUME_START_TIMESTAMP: str(started_ms)})


def test_expired_messages_are_the_leading_overdue_ones(pq: ProcessQueue) -> None:
    now = START_MS + 10 * DEFAULT_CONSUME_TIMEOUT_MS
    overdue = now - DEFAULT_CONSUME_TIMEOUT_MS - 1
    exactly = now - DEFAULT_CONSUME_TIMEOUT_MS
    pq.put_messages([_started(0, overdue), _started(1, overdue), _started(2, exactly), _started(3, overdue)])
    assert [m.queue_offset for m in pq.expired_messages(now)] == [0, 1]
    assert pq.msg_count == 4  # pure: nothing removed


def test_expired_scan_stops_at_a_message_not_yet_started(pq: ProcessQueue) -> None:
    pq.put_messages([_started(0, None), _started(1, 0)])
    assert pq.expired_messages(START_MS) == []


def test_expired_scan_is_limited(pq: ProcessQueue, clock: FakeClock) -> None:
    pq.put_messages([_started(i, 0) for i in range(20)])
    clock.now = DEFAULT_CONSUME_TIMEOUT_MS + 1
    assert len(pq.expired_messages()) == 16
    assert len(pq.expired_messages(max_count=3)) == 3
    with pytest.raises(ValueError, match="max_count"):
        pq.expired_messages(max_count=-1)


def test_consume_timeout_is_a_setting(clock: FakeClock) -> None:
    pq = ProcessQueue(consume_timeout_ms=1000, clock=clock)
    pq.put_messages([_started(0, START_MS)])
    assert pq.expired_messages(START_MS + 1000) == []
    assert len(pq.expired_messages(START_MS + 1001)) == 1


def test_remove_if_first(pq: ProcessQueue) -> None:
    m0, m1 = msgs(0, 1)
    pq.put_messages([m0, m1])
    assert not pq.remove_if_first(m1)
    assert pq.remove_if_first(m0)
    assert list(pq.msg_tree_map) == [1]
    assert pq.msg_count == 1
    assert pq.remove_if_first(m1)
    assert not pq.remove_if_first(m1)


# -- locks, counters, info ------------------------------------------------------------------------------


def test_consume_lock_is_reentrant_and_exclusive(pq: ProcessQueue) -> None:
    lock = pq.consume_lock
    assert lock is pq.consume_lock
    with lock, lock:
        results: list[bool] = []
        thread = threading.Thread(target=lambda: results.append(lock.acquire(timeout=0.05)))
        thread.start()
        thread.join()
        assert results == [False]
    assert lock.acquire(blocking=False)
    lock.release()


def test_try_unlock_times(pq: ProcessQueue) -> None:
    assert pq.inc_try_unlock_times() == 1
    assert pq.inc_try_unlock_times() == 2
    assert pq.try_unlock_times == 2


def test_info_snapshot(pq: ProcessQueue, clock: FakeClock) -> None:
    pq.put_messages([msg(10, b"a" * MIB), msg(11, b"b" * MIB), msg(12, b"c" * (MIB // 2)), msg(13)])
    pq.take_messages(1)
    clock.now += 50
    pq.take_messages(1)
    pq.locked = True
    pq.last_lock_timestamp = START_MS + 1
    pq.last_pull_timestamp = START_MS + 2
    pq.inc_try_unlock_times()
    info = pq.info(commit_offset=10)
    assert info == ProcessQueueInfo(
        commit_offset=10,
        cached_msg_min_offset=12,
        cached_msg_max_offset=13,
        cached_msg_count=2,
        cached_msg_size_in_mib=2,
        consuming_msg_min_offset=10,
        consuming_msg_max_offset=11,
        consuming_msg_count=2,
        locked=True,
        try_unlock_times=1,
        last_lock_timestamp=START_MS + 1,
        dropped=False,
        last_pull_timestamp=START_MS + 2,
        last_consume_timestamp=START_MS + 50,
    )
    body = info.to_json_dict()
    assert list(body) == sorted(body)
    assert body["droped"] is False and body["transactionMsgCount"] == 2 and body["cachedMsgSizeInMiB"] == 2


def test_info_of_an_empty_queue(pq: ProcessQueue) -> None:
    pq.dropped = True
    info = pq.info()
    assert (info.cached_msg_count, info.cached_msg_min_offset, info.cached_msg_max_offset) == (0, 0, 0)
    assert (info.consuming_msg_count, info.cached_msg_size_in_mib, info.dropped) == (0, 0, True)


def test_threads_putting_and_removing_keep_counters_consistent() -> None:
    pq = ProcessQueue()
    workers, per_worker, batch = 8, 400, 8
    errors: list[BaseException] = []
    start = threading.Barrier(workers + 2, timeout=10)  # workers, reader, this thread
    done = threading.Event()

    def worker(index: int) -> None:
        try:
            start.wait()
            offsets = range(index * per_worker, (index + 1) * per_worker)
            for first in range(0, per_worker, batch):
                chunk = msgs(*offsets[first : first + batch])
                pq.put_messages(chunk)
                pq.put_messages(chunk[:2])  # duplicates from a re-pull
                offset = pq.remove_messages(chunk)
                assert offset == -1 or offset >= 0
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        start.wait()
        while not done.is_set():
            info = pq.info()
            if pq.msg_count < 0 or info.cached_msg_count < 0 or pq.msg_size < 0:
                errors.append(AssertionError("negative counter"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    observer = threading.Thread(target=reader)
    for thread in [*threads, observer]:
        thread.start()
    start.wait()
    for thread in threads:
        thread.join(timeout=30)
    done.set()
    observer.join(timeout=30)
    assert not any(thread.is_alive() for thread in [*threads, observer])
    assert errors == []
    assert (pq.msg_count, pq.msg_size, pq.max_span) == (0, 0, 0)
    assert pq.queue_offset_max == workers * per_worker - 1


# -- state machines against a model -----------------------------------------------------------------------

OFFSETS = st.integers(0, 40)


class ConcurrentModel(RuleBasedStateMachine):
    """put/remove in any order: the commit offset never passes a held message; counters match the model."""

    def __init__(self) -> None:
        super().__init__()
        self.pq = ProcessQueue(clock=FakeClock())
        self.held: dict[int, int] = {}  # offset -> body length
        self.largest = -1

    @rule(offsets=st.lists(OFFSETS, max_size=6), size=st.integers(0, 9))
    def put(self, offsets: list[int], size: int) -> None:
        batch = [msg(offset, b"z" * size) for offset in offsets]
        was_consuming = self.pq.consuming
        dispatch = self.pq.put_messages(batch)
        for offset in offsets:
            self.held.setdefault(offset, size)
            self.largest = max(self.largest, offset)
        assert dispatch == (bool(self.held) and not was_consuming)

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        held_before = set(self.held)
        chosen = data.draw(st.lists(st.sampled_from(sorted(held_before)), unique=True)) if held_before else []
        unknown = data.draw(st.lists(OFFSETS.filter(lambda o: o not in held_before), max_size=2))
        offset = self.pq.remove_messages(msgs(*chosen, *unknown))
        for removed in chosen:
            del self.held[removed]
        if not held_before:
            assert offset == -1
        elif self.held:
            assert offset == min(self.held)
        else:
            assert offset == self.largest + 1
        if self.held:
            assert offset <= min(self.held)

    @invariant()
    def counters_match(self) -> None:
        assert self.pq.msg_count == len(self.held)
        assert self.pq.msg_size == sum(self.held.values())
        assert list(self.pq.msg_tree_map) == sorted(self.held)
        assert self.pq.max_span == (max(self.held) - min(self.held) if self.held else 0)
        assert self.pq.has_temp_message == bool(self.held)


class OrderlyModel(RuleBasedStateMachine):
    """Orderly: pulls arrive in offset order; take/commit/rollback/consume-again keep counts and order."""

    def __init__(self) -> None:
        super().__init__()
        self.pq = ProcessQueue(clock=FakeClock())
        self.next_offset = 0
        self.pulled: list[int] = []
        self.consuming: list[int] = []
        self.committed = -1

    @rule(count=st.integers(0, 5), redeliver=st.integers(0, 3))
    def pull(self, count: int, redeliver: int) -> None:
        # A re-pull restarts at the broker offset, so it may repeat held offsets, never committed ones.
        first = max(0, self.committed, self.next_offset - redeliver)
        self.pq.put_messages(msgs(*range(first, self.next_offset + count)))
        self.pulled.extend(range(self.next_offset, self.next_offset + count))
        self.next_offset += count

    @rule(batch_size=st.integers(1, 4))
    def take(self, batch_size: int) -> None:
        taken = [m.queue_offset for m in self.pq.take_messages(batch_size)]
        assert taken == self.pulled[:batch_size]
        self.consuming.extend(taken)
        del self.pulled[: len(taken)]
        if not taken:
            assert not self.pq.consuming

    @rule()
    def commit(self) -> None:
        offset = self.pq.commit()
        if not self.consuming:
            assert offset == -1
            return
        assert offset == max(self.consuming) + 1
        if self.pulled:
            assert offset <= min(self.pulled)
        assert offset > self.committed
        self.committed = offset
        self.consuming.clear()

    @precondition(lambda self: bool(self.consuming))
    @rule()
    def rollback(self) -> None:
        self.pq.rollback()
        self.pulled = sorted(self.pulled + self.consuming)
        self.consuming.clear()

    @precondition(lambda self: bool(self.consuming))
    @rule()
    def consume_again(self) -> None:
        batch = list(self.pq.consuming_msg_orderly_tree_map.values())
        self.pq.make_message_to_consume_again(batch)
        self.pulled = sorted(self.pulled + self.consuming)
        self.consuming.clear()

    @invariant()
    def matches_model(self) -> None:
        assert self.pq.msg_count == len(self.pulled) + len(self.consuming)
        assert list(self.pq.msg_tree_map) == self.pulled
        assert list(self.pq.consuming_msg_orderly_tree_map) == sorted(self.consuming)
        assert self.pq.msg_size == sum(o + 1 for o in self.pulled + self.consuming)


TestConcurrentModel = ConcurrentModel.TestCase
TestConcurrentModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestOrderlyModel = OrderlyModel.TestCase
TestOrderlyModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_commit_below_finishes_only_the_messages_before_an_offset(pq: ProcessQueue) -> None:
    pq.put_messages([msg(offset, b"x" * (offset + 1)) for offset in range(10, 16)])
    taken = pq.take_messages(6)
    assert [m.queue_offset for m in taken] == [10, 11, 12, 13, 14, 15]
    assert pq.commit_below(10) == -1                       # nothing below the first
    assert pq.commit_below(13) == 13                       # 10, 11, 12 finished
    assert pq.msg_count == 3 and pq.msg_size == 14 + 15 + 16
    pq.make_message_to_consume_again(taken[4:])            # 14, 15 go back untouched
    assert pq.commit() == 14                               # 13 alone was still being consumed
    assert [m.queue_offset for m in pq.take_messages(5)] == [14, 15]
    assert pq.commit() == 16 and pq.msg_count == 0 and pq.msg_size == 0


class OffsetMapMachine(RuleBasedStateMachine):
    """`OffsetMap` against a plain dict: adds in rising order and out of order, removals anywhere, re-adds of
    removed offsets, and enough steps for its heaps to be rebuilt; the heaps never grow unbounded."""

    def __init__(self) -> None:
        super().__init__()
        self.map = OffsetMap()
        self.model: dict[int, MessageExt] = {}
        self.next = 0

    @rule(count=st.integers(1, 40))
    def pull(self, count: int) -> None:
        batch = msgs(*range(self.next, self.next + count))
        absent = [msg for msg in batch if msg.queue_offset not in self.model]
        added, size, largest = self.map.add_absent(batch, set())
        assert (added, size) == (len(absent), sum(len(m.body) for m in absent))
        assert largest == (max(m.queue_offset for m in absent) if absent else -1)
        for msg in absent:
            self.model[msg.queue_offset] = msg
        self.next += count

    @rule(data=st.data())
    def add_back(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.next + 2))  # a removed offset, a held one, or one ahead
        msg = msgs(offset)[0]
        self.map.add(offset, msg)
        self.model[offset] = msg

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove_some(self, data: st.DataObject) -> None:
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.model)), unique=True, max_size=40))
        removed, size = self.map.remove([self.model[offset] for offset in chosen])
        assert (removed, size) == (len(chosen), sum(len(self.model[offset].body) for offset in chosen))
        for offset in chosen:
            del self.model[offset]

    @precondition(lambda self: self.model)
    @rule()
    def pop_first(self) -> None:
        smallest = min(self.model)
        assert self.map.pop_first() == (smallest, self.model.pop(smallest))

    @invariant()
    def same_as_the_model(self) -> None:
        assert len(self.map) == len(self.model) and bool(self.map) == bool(self.model)
        assert list(self.map) == sorted(self.model)
        if self.model:
            assert (self.map.first_offset(), self.map.last_offset()) == (min(self.model), max(self.model))
            assert list(self.map.values_in_order()) == [self.model[o] for o in sorted(self.model)]
        else:
            with pytest.raises(KeyError):
                self.map.first_offset()
            with pytest.raises(KeyError):
                self.map.last_offset()
        # after a lookup both heaps are within their rebuild bound
        assert len(self.map._low) <= 2 * len(self.model) + 64 and len(self.map._high) <= 2 * len(self.model) + 64


TestOffsetMap = OffsetMapMachine.TestCase
TestOffsetMap.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_offset_map_heaps_are_rebuilt_once_mostly_stale() -> None:
    offset_map = OffsetMap()
    batch = msgs(*range(300))
    offset_map.add_absent(batch, set())
    # removed from the top down: the low heap's stale entries sit under live ones until it is rebuilt
    offset_map.remove(batch[100:][::-1])
    offset_map.remove(batch[:99])
    assert (offset_map.first_offset(), offset_map.last_offset()) == (99, 99)
    assert len(offset_map._low) <= 66 and len(offset_map._high) <= 66
    offset_map.add_absent(msgs(*range(150, 160)), set())
    offset_map.add(5, msgs(5)[0])
    assert (offset_map.first_offset(), offset_map.last_offset()) == (5, 159)
    assert list(offset_map) == [5, 99, *range(150, 160)]
    assert [offset_map.pop_first()[0] for _ in range(3)] == [5, 99, 150]


# -- waiting for the cache to drain ----------------------------------------------------------------------


def test_call_when_drained_runs_at_once_when_the_cache_is_already_down(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(0, 1, 2))
    calls: list[str] = []
    pq.call_when_drained(lambda: calls.append("now"), 3, 1000)
    assert calls == ["now"]
    pq.remove_messages(msgs(0))
    assert calls == ["now"]  # called once only


def test_call_when_drained_waits_for_both_marks(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(*range(6)))  # bodies of 1..6 bytes: 21 bytes in all
    calls: list[int] = []
    pq.call_when_drained(lambda: calls.append(pq.msg_count), 3, 12)
    pq.remove_messages(msgs(0, 1))   # 4 messages, 18 bytes: over both marks
    assert calls == []
    pq.remove_messages(msgs(2))      # 3 messages but 15 bytes: still over the size mark
    assert calls == []
    pq.remove_messages(msgs(5))      # 2 messages, 9 bytes
    assert calls == [2]
    pq.remove_messages(msgs(3, 4))
    assert calls == [2]


def test_call_when_drained_fires_on_orderly_commits(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(*range(8)))
    calls: list[int] = []
    pq.call_when_drained(lambda: calls.append(pq.msg_count), 4, 10 * MIB)
    pq.take_messages(2)
    assert pq.commit_below(1) == 1 and calls == []   # 7 held
    pq.commit()                                        # 6 held
    assert calls == []
    pq.take_messages(2)
    pq.commit()
    assert calls == [4]


def test_a_later_registration_replaces_the_waiting_one(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(*range(4)))
    calls: list[str] = []
    pq.call_when_drained(lambda: calls.append("first"), 1, 10 * MIB)
    pq.call_when_drained(lambda: calls.append("second"), 2, 10 * MIB)
    pq.remove_messages(msgs(0, 1))
    assert calls == ["second"]
    pq.remove_messages(msgs(2, 3))
    assert calls == ["second"]


def test_call_when_drained_is_called_from_the_removing_thread_outside_the_lock(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(0, 1))
    seen: list[tuple[str, bool]] = []

    def callback() -> None:
        # another thread can take the queue's lock: the callback does not run under it
        locked_elsewhere = threading.Thread(target=pq.info)
        locked_elsewhere.start()
        locked_elsewhere.join(5)
        seen.append((threading.current_thread().name, not locked_elsewhere.is_alive()))

    pq.call_when_drained(callback, 0, 0)
    remover = threading.Thread(target=pq.remove_messages, args=(msgs(0, 1),), name="remover")
    remover.start()
    remover.join(5)
    assert seen == [("remover", True)]


# -- undecodable records held apart ------------------------------------------------------------------------


def test_an_undecodable_record_holds_back_the_concurrent_commit_offset_until_released(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(10, 11))
    assert [m.queue_offset for m in pq.hold_undecodable([msg(12, b"bad")])] == [12]
    pq.put_messages(msgs(13, 14))
    assert pq.msg_count == 5 and pq.undecodable_count == 1
    assert pq.remove_messages(msgs(13, 14)) == 10           # consumed after the bad one: stays at 10
    assert pq.remove_messages(msgs(10, 11)) == 12           # not past the record still being dead-lettered
    assert pq.release_undecodable([msg(12, b"bad")]) == 15  # nothing left: after the largest offset seen
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert pq.release_undecodable([msg(12, b"bad")]) == -1  # released already


def test_an_undecodable_record_is_held_once_and_never_taken_by_the_orderly_loop(pq: ProcessQueue) -> None:
    pq.put_messages(msgs(0, 1))
    pq.hold_undecodable([msg(2)])
    assert pq.hold_undecodable([msg(2), msg(1)]) == []      # pulled again, or a message held already
    pq.put_messages(msgs(3))
    assert [m.queue_offset for m in pq.take_messages(10)] == [0, 1, 3]
    assert pq.commit() == 2                                 # 3 is done, but 2 is not yet dead-lettered
    assert pq.release_undecodable([msg(2)]) == 4


def test_releasing_while_orderly_messages_are_being_consumed_stops_at_them(pq: ProcessQueue) -> None:
    pq.hold_undecodable([msg(5)])
    pq.put_messages(msgs(6, 7))
    taken = pq.take_messages(1)
    assert [m.queue_offset for m in taken] == [6]
    assert pq.release_undecodable([msg(5)]) == 6            # 6 is being consumed: not done
    assert pq.commit_below(7) == 7 and pq.commit() == -1
    assert [m.queue_offset for m in pq.take_messages(1)] == [7] and pq.commit() == 8


def test_clear_forgets_undecodable_records(pq: ProcessQueue) -> None:
    pq.hold_undecodable([msg(3)])
    pq.clear()
    assert pq.msg_count == 0 and pq.undecodable_count == 0 and pq.release_undecodable([msg(3)]) == -1
