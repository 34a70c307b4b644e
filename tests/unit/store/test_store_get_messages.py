"""get_messages statuses and offsets, filters, transfer caps, timestamp search."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import request, small_config
from rocketflow.protocol.codec import decode_records
from rocketflow.protocol.tags import tags_code
from rocketflow.store import GetMessageStatus, MessageStore, TagsCodeFilter
from rocketflow.store.message_store import GetMessageResult

S = GetMessageStatus


def fill(store: MessageStore, count: int, queue_id: int = 0, size: int = 200) -> None:
    for i in range(count):
        tag = "TagA" if i % 2 == 0 else "TagB"
        assert store.put_message(request(queue_id=queue_id, body=bytes([i % 256]) * size, TAGS=tag)).status.is_ok


def test_found_walks_a_queue_across_segments(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    fill(store, 50)
    bodies: list[bytes] = []
    offset = 0
    while True:
        got = store.get_messages("g", "T", 0, offset, 32)
        if got.status is not S.FOUND:
            assert got.status is S.OFFSET_OVERFLOW_ONE and got.next_begin_offset == 50
            break
        assert got.min_offset == 0 and got.max_offset == 50
        msgs = decode_records(got.body())
        assert [m.queue_offset for m in msgs] == got.queue_offsets == list(range(offset, got.next_begin_offset))
        bodies.extend(m.body for m in msgs)
        offset = got.next_begin_offset
    assert bodies == [bytes([i]) * 200 for i in range(50)]
    assert len(store.commit_log.files.files) > 2


def test_statuses_for_offsets(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    fill(store, 10)
    unknown = store.get_messages("g", "Nope", 0, 5, 32)
    assert (unknown.status, unknown.next_begin_offset) == (S.NO_MATCHED_LOGIC_QUEUE, 0)
    store.consume_queues.find_or_create("T", 7)
    empty = store.get_messages("g", "T", 7, 3, 32)
    assert (empty.status, empty.next_begin_offset, empty.max_offset) == (S.NO_MESSAGE_IN_QUEUE, 0, 0)
    one = store.get_messages("g", "T", 0, 10, 32)
    assert (one.status, one.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, 10)
    badly = store.get_messages("g", "T", 0, 99, 32)
    assert (badly.status, badly.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 0)  # min == 0 -> min


def test_offset_too_small_and_overflow_badly_after_retention(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    fill(store, 60)
    deleted = store.clean_expired(now_ms=10**13, manual=True)  # far future: every segment but the last expired
    assert deleted > 0
    min_offset = store.get_min_offset_in_queue("T", 0)
    assert 0 < min_offset < 60
    small = store.get_messages("g", "T", 0, 0, 32)
    assert (small.status, small.next_begin_offset, small.min_offset) == (S.OFFSET_TOO_SMALL, min_offset, min_offset)
    badly = store.get_messages("g", "T", 0, 100, 32)
    assert (badly.status, badly.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 60)  # min > 0 -> max
    got = store.get_messages("g", "T", 0, min_offset, 32)
    assert got.status is S.FOUND
    assert decode_records(got.body())[0].body == bytes([min_offset]) * 200


def test_message_was_removing_and_offset_found_null(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    fill(store, 30)
    # the window between a commit-log deletion and the consume-queue clean-up
    store.commit_log.files.delete_first(1)
    removing = store.get_messages("g", "T", 0, 0, 4)
    assert removing.status is S.MESSAGE_WAS_REMOVING
    assert removing.next_begin_offset > 0 and not removing.buffers
    queue = store.consume_queues.find("T", 0)
    assert queue is not None
    queue.files.delete_first(1)  # consume-queue segment gone, min offset not yet moved
    null = store.get_messages("g", "T", 0, 0, 4)
    assert (null.status, null.next_begin_offset) == (S.OFFSET_FOUND_NULL, 8)


def test_tag_filter_and_no_matched_message(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    fill(store, 8)
    only_b = TagsCodeFilter(frozenset({tags_code("TagB")}))
    got = store.get_messages("g", "T", 0, 0, 32, only_b)
    assert got.status is S.FOUND
    assert [m.tags for m in decode_records(got.body())] == ["TagB"] * 4
    assert got.next_begin_offset == 8
    none = store.get_messages("g", "T", 0, 0, 32, TagsCodeFilter(frozenset({tags_code("TagC")})))
    assert (none.status, none.next_begin_offset, none.buffers) == (S.NO_MATCHED_MESSAGE, 8, [])
    assert store.get_messages("g", "T", 0, 0, 32, TagsCodeFilter()).message_count == 8


def test_scan_limit_is_16000_bytes_of_consume_queue(tmp_path: Path) -> None:
    with MessageStore(small_config(tmp_path, commit_log_segment_size=1 << 20,
                                   consume_queue_segment_units=5000)) as store:
        store.put_messages([request(body=b"x", TAGS="TagB") for _ in range(1000)])
        got = store.get_messages("g", "T", 0, 0, 32, TagsCodeFilter(frozenset({tags_code("TagA")})))
        assert (got.status, got.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 800)
        got = store.get_messages("g", "T", 0, 0, 1000, TagsCodeFilter(frozenset({tags_code("TagA")})))
        assert got.next_begin_offset == 1000  # max(16000, 1000 * 20) bytes
        store.put_messages([request(body=b"x", TAGS="TagB") for _ in range(2000)])
        # a huge maxMsgNums does not make one pull scan the whole queue: 1024 units at most
        got = store.get_messages("g", "T", 0, 0, 2**31 - 1, TagsCodeFilter(frozenset({tags_code("TagA")})))
        assert (got.status, got.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 1024)


def test_transfer_caps(tmp_path: Path) -> None:
    config = small_config(tmp_path, commit_log_segment_size=1 << 20, consume_queue_segment_units=1000,
                          max_transfer_count_on_message_in_memory=5, max_transfer_bytes_on_message_in_memory=5000)
    with MessageStore(config) as store:
        fill(store, 20, size=100)
        assert store.get_messages("g", "T", 0, 0, 32).message_count == 5
        got = store.get_messages("g", "T", 0, 0, 3)
        assert (got.message_count, got.next_begin_offset) == (3, 3)
        capped = store.get_messages("g", "T", 0, 0, 32, max_bytes=500)
        assert capped.message_count == 2  # each record is 201 bytes
    disk = small_config(tmp_path / "disk", commit_log_segment_size=1 << 20, consume_queue_segment_units=1000,
                        total_physical_memory=100, max_transfer_count_on_message_in_disk=3)
    with MessageStore(disk) as store:
        fill(store, 20, size=100)
        got = store.get_messages("g", "T", 0, 0, 32)
        assert got.message_count == 3 and got.suggest_pulling_from_slave


class Clock:
    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def timed_store(tmp_path: Path) -> Iterator[tuple[MessageStore, Clock]]:
    clock = Clock(1_000_000)
    store = MessageStore(small_config(tmp_path), clock_ms=clock)
    store.start()
    yield store, clock
    store.shutdown()


def test_offset_by_timestamp(timed_store: tuple[MessageStore, Clock]) -> None:
    store, clock = timed_store
    assert store.get_offset_by_timestamp("T", 0, 5) == 0  # no queue
    for i in range(30):  # store times 1_000_000, 1_000_010, ... crossing segments
        clock.now = 1_000_000 + 10 * i
        store.put_message(request(body=b"y" * 300))
    assert store.get_offset_by_timestamp("T", 0, 1_000_100) == 10  # exact
    assert store.get_offset_by_timestamp("T", 0, 1_000_102) == 10  # nearer to the left
    assert store.get_offset_by_timestamp("T", 0, 1_000_108) == 11  # nearer to the right
    assert store.get_offset_by_timestamp("T", 0, 1_000_105) == 10  # tie -> earlier
    assert store.get_offset_by_timestamp("T", 0, 0) == 0  # before the first -> min
    assert store.get_offset_by_timestamp("T", 0, 9_999_999) == 29  # after the last -> last message
    assert store.get_message_store_timestamp("T", 0, 7) == 1_000_070
    assert store.get_message_store_timestamp("T", 0, 70) == -1
    assert store.get_earliest_message_time("T", 0) == 1_000_000
    assert store.get_earliest_message_time("T", 3) == -1
    assert store.get_earliest_message_time() == 1_000_000


def test_offset_by_timestamp_equal_times_gives_first(timed_store: tuple[MessageStore, Clock]) -> None:
    store, clock = timed_store
    for i in range(12):
        clock.now = 5000 if 3 <= i <= 8 else 4000 + i if i < 3 else 6000 + i
        store.put_message(request())
    assert store.get_offset_by_timestamp("T", 0, 5000) == 3


def test_offset_by_timestamp_after_retention(timed_store: tuple[MessageStore, Clock]) -> None:
    store, clock = timed_store
    for i in range(40):
        clock.now = 1_000_000 + i
        store.put_message(request(body=b"z" * 300))
    store.clean_expired(now_ms=10**13, manual=True)
    min_offset = store.get_min_offset_in_queue("T", 0)
    assert min_offset > 0
    assert store.get_offset_by_timestamp("T", 0, 0) == min_offset


class _Answering:
    """Wraps a store method that answers a pull or returns None, counting the pulls it answered."""

    def __init__(self, method: Callable[..., GetMessageResult | None]) -> None:
        self.method = method
        self.answered = 0

    def __call__(self, *args: Any) -> GetMessageResult | None:
        result = self.method(*args)
        self.answered += result is not None
        return result


def _no_run(*args: Any) -> None:
    """Stands in for `MessageStore._read_run` so that a pull takes the per-unit walk."""
    return None


def _assert_same_pull(fast: GetMessageResult, reference: GetMessageResult) -> None:
    assert (fast.status, fast.next_begin_offset, fast.min_offset, fast.max_offset, fast.queue_offsets,
            fast.buffer_total_size, fast.suggest_pulling_from_slave) == \
        (reference.status, reference.next_begin_offset, reference.min_offset, reference.max_offset,
         reference.queue_offsets, reference.buffer_total_size, reference.suggest_pulling_from_slave)
    assert fast.buffers == reference.buffers and fast.body() == reference.body()


def test_big_pulls_scanned_with_numpy_match_the_loop(make_store: Callable[..., MessageStore]) -> None:
    """Pulls of >= `vectorized_pull_min` messages scan the consume queue with numpy; every status, offset,
    record and flag equals the per-unit loop's, across segment ends, tag filters and transfer caps."""
    import itertools
    import random

    store = make_store(commit_log_segment_size=131072, consume_queue_segment_units=512,
                       max_transfer_bytes_on_message_in_memory=120_000, max_transfer_count_on_message_in_memory=200,
                       max_transfer_bytes_on_message_in_disk=30_000, max_transfer_count_on_message_in_disk=150)
    rng = random.Random(5)
    for index in range(1200):
        batch = [request(queue_id=0 if rng.random() < 0.7 else 1, body=bytes([index % 256]) * rng.choice([10, 90, 300]),
                         TAGS=rng.choice(["A", "B", "C"])) for _ in range(rng.choice([1, 1, 4]))]
        for queue_id in (0, 1):
            part = [item for item in batch if item.queue_id == queue_id]
            if part:
                assert store.put_messages(part).status.is_ok
    memory_limit = store.read_service._memory_limit
    scan_with_numpy = _Answering(store.read_service._read_queue_vectorized)
    store.read_service._read_queue_vectorized = scan_with_numpy  # type: ignore[method-assign]
    try:
        for queue_id, offset, max_count, tags, max_bytes, limit in itertools.product(
                (0, 1), range(0, 1500, 83), (128, 201, 400, 1500), ((), ("A",), ("A", "C"), ("Z",)),
                (None, 9_000), (memory_limit, 0, 40_000)):
            message_filter = TagsCodeFilter(frozenset(tags_code(tag) for tag in tags)) if tags else None
            store.read_service._memory_limit = limit
            store.read_service.vectorized_pull_min = 1
            fast = store.get_messages("g", "T", queue_id, offset, max_count, message_filter, max_bytes)
            store.read_service.vectorized_pull_min = 10**9
            store.read_service._read_run = _no_run  # type: ignore[method-assign]
            loop = store.get_messages("g", "T", queue_id, offset, max_count, message_filter, max_bytes)
            del store.read_service._read_run
            _assert_same_pull(fast, loop)
    finally:
        store.read_service._memory_limit = memory_limit
    assert scan_with_numpy.answered > 500     # most of these pulls were answered by the numpy scan
    assert len(store.commit_log.files.files) > 2


def _expected_records(store: MessageStore, queue_id: int, offset: int, count: int,
                      codes: frozenset[int] | None = None) -> list[bytes]:
    """The records of a queue read one by one through the consume-queue units (the reference)."""
    queue = store.consume_queues.find("T", queue_id)
    assert queue is not None
    records: list[bytes] = []
    for logic in range(offset, queue.max_offset):
        unit = queue.unit_at(logic)
        assert unit is not None
        phys, size, code = unit
        if codes is None or code in codes:
            record = store.commit_log.read(phys, size)
            assert record is not None
            records.append(record)
        if len(records) == count:
            break
    return records


@pytest.mark.parametrize("tags", [None, "TagA"])
def test_back_to_back_records_are_copied_as_one_chunk(make_store: Callable[..., MessageStore],
                                                      tags: str | None) -> None:
    store = make_store()
    # batches of two queues alternate, so each queue's records lie back to back only within a batch,
    # and the small segments end mid-queue
    for batch in range(12):
        store.put_messages([request(queue_id=batch % 2, body=bytes([batch, i]) * (20 + 37 * i),
                                    TAGS="TagA" if i % 3 else "TagB") for i in range(5)])
    codes = frozenset({tags_code(tags)}) if tags else None
    message_filter = TagsCodeFilter(codes) if codes else None
    for queue_id in (0, 1):
        offset = 0
        while True:
            got = store.get_messages("g", "T", queue_id, offset, 8, message_filter)
            if got.status is not S.FOUND:
                break
            assert got.buffers == _expected_records(store, queue_id, offset, got.message_count, codes)
            assert len(got.chunks) < got.message_count or got.message_count == 1
            assert sum(map(len, got.chunks)) == got.buffer_total_size
            offset = got.next_begin_offset
        assert offset == 30


def test_a_segment_closed_under_a_read_is_never_served(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    fill(store, 30)
    first = store.commit_log.files.files[0]
    # the window in which retention has closed the mapping but not yet dropped it from the list
    first.close()
    got = store.get_messages("g", "T", 0, 0, 4)
    assert got.status is S.MESSAGE_WAS_REMOVING and not got.chunks and got.next_begin_offset > 0
    offset = got.next_begin_offset
    while (later := store.get_messages("g", "T", 0, offset, 32)).status is S.MESSAGE_WAS_REMOVING:
        offset = later.next_begin_offset
    assert later.status is S.FOUND
    assert store.get_commit_log_offset_in_queue("T", 0, later.queue_offsets[0]) >= first.file_size  # past it
    assert later.buffers == _expected_records(store, 0, later.queue_offsets[0], later.message_count)


def test_small_pulls_answered_without_the_walk_match_it(make_store: Callable[..., MessageStore]) -> None:
    """Pulls below `vectorized_pull_min` whose records follow one another in a segment and all pass the
    filter are answered without the per-unit walk (`_read_run`); every status, offset, record and flag
    equals the walk's, across segment ends, tag filters, transfer caps and the memory limit, for records
    back to back (queue 0's batches) and apart (queue 1's single records between them)."""
    import itertools
    import random

    store = make_store(commit_log_segment_size=65536, consume_queue_segment_units=256,
                       max_transfer_bytes_on_message_in_memory=6_000, max_transfer_count_on_message_in_memory=24,
                       max_transfer_bytes_on_message_in_disk=2_000, max_transfer_count_on_message_in_disk=8)
    rng = random.Random(11)
    for index in range(400):
        # queue 0 gets runs of back-to-back records, queue 1 single records between queue 0's
        queue_id = 0 if rng.random() < 0.6 else 1
        tag = rng.choice(["A", "A", "A", "B"])
        batch = [request(queue_id=queue_id, body=bytes([index % 256]) * rng.choice([10, 90, 700]), TAGS=tag)
                 for _ in range(rng.choice([1, 3, 8, 40]) if queue_id == 0 else 1)]
        assert store.put_messages(batch).status.is_ok
    memory_limit = store.read_service._memory_limit
    read_run = _Answering(store.read_service._read_run)
    # the last unit of each queue too: a long-polled pull woken by one message reads just that one
    last_units = [store.get_max_offset_in_queue("T", queue_id) - back for queue_id in (0, 1) for back in (1, 2)]
    try:
        for queue_id, offset, max_count, tags, max_bytes, limit in itertools.product(
                (0, 1), [*range(0, 1600, 37), *last_units], (1, 2, 7, 32, 127), ((), ("A",), ("A", "B"), ("B",)),
                (None, 1_500), (memory_limit, 0, 20_000)):
            message_filter = TagsCodeFilter(frozenset(tags_code(tag) for tag in tags)) if tags else None
            store.read_service._memory_limit = limit
            store.read_service._read_run = read_run  # type: ignore[method-assign]
            fast = store.get_messages("g", "T", queue_id, offset, max_count, message_filter, max_bytes)
            store.read_service._read_run = _no_run  # type: ignore[method-assign]
            walk = store.get_messages("g", "T", queue_id, offset, max_count, message_filter, max_bytes)
            _assert_same_pull(fast, walk)
    finally:
        store.read_service._memory_limit = memory_limit
        del store.read_service._read_run
    assert read_run.answered > 1000   # many of these pulls were answered without the walk
    assert len(store.commit_log.files.files) > 2


@pytest.mark.parametrize("bad_size", [-50, 0, 0x7FFFFFFF])
def test_the_walk_free_pull_leaves_damaged_or_blank_units_to_the_walk(make_store: Callable[..., MessageStore],
                                                                      bad_size: int) -> None:
    """A unit of no size, a negative one or a blank one anywhere the pull may take declines the walk-free
    path (the walk then decides), even past the records the byte limit would take."""
    import struct

    store = make_store(max_transfer_bytes_on_message_in_memory=600, commit_log_segment_size=65536,
                       consume_queue_segment_units=64)
    assert store.put_messages([request(queue_id=0, body=bytes([i]) * 100) for i in range(12)]).status.is_ok
    queue = store.consume_queues.find("T", 0)
    assert queue is not None
    found = queue.segment_for(0)
    assert found is not None
    units = bytearray(found[0].read(found[1], 12 * 20) or b"")
    assert len(units) == 12 * 20
    max_phys = store.commit_log.files.max_offset
    intact = store.read_service._read_run(bytes(units), 0, 32, None, None, queue.min_offset, queue.max_offset, max_phys)
    assert intact is not None and intact.message_count < 12  # the byte limit stops it early
    struct.pack_into(">i", units, 9 * 20 + 8, bad_size)      # a unit past the ones it takes
    assert store.read_service._read_run(bytes(units), 0, 32, None, None, queue.min_offset, queue.max_offset,
                                        max_phys) is None
