"""The index service's batched (numpy) build writes exactly the files a key-by-key build would, with
RocketMQ's key hash (Java's `String.hashCode`, made non-negative)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocketflow.store.index import (
    ENTRY,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    IndexService,
    index_key_hash,
    index_key_hashes,
)

SLOTS = 16
ENTRIES = 40
#: (header, slots, entries) of one index file
FileContent = tuple[tuple[int, ...], list[int], list[tuple[int, ...]]]


def java_index_hash(key: bytes) -> int:
    """RocketMQ's `IndexFile.indexKeyHashMethod` written out: `String.hashCode` over UTF-16 units, then abs."""
    text = key.decode("utf-8", "replace")
    h = 0
    for unit in struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    positive = abs(signed)
    return 0 if positive > 0x7FFFFFFF else positive  # Math.abs(Integer.MIN_VALUE) is negative: RocketMQ uses 0


@pytest.mark.parametrize(("key", "expected"), [
    ("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", 0),  # hashCode() == Integer.MIN_VALUE
    ("\u00e9", 233), ("\u4e2d", 20013), ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair
])
def test_index_key_hash_is_rocketmqs(key: str, expected: int) -> None:
    raw = key.encode("utf-8")
    assert index_key_hash(raw) == expected == java_index_hash(raw)
    assert index_key_hashes([raw]).tolist() == [expected]


ascii_or_not = st.one_of(st.text(alphabet="abcXYZ#_019", max_size=300), st.text(max_size=40))


@settings(max_examples=150, deadline=None)
@given(st.lists(ascii_or_not.map(lambda text: text.encode("utf-8")) | st.binary(max_size=20), min_size=1,
                max_size=40))
@example([b"T#" + b"k" * 256, b"T#" + b"k" * 254, b"x"])  # around the matrix width limit
@example([b"\xff\xfe", b"ab"])  # invalid UTF-8 hashes as Java's decoder reads it (U+FFFD)
def test_batched_hashes_equal_one_by_one(keys: list[bytes]) -> None:
    assert index_key_hashes(keys).tolist() == [java_index_hash(key) for key in keys]


def reference_files(items: list[tuple[bytes, int, int]]) -> list[FileContent]:
    """(header, slots, entries) of each file after inserting `items` one by one, RocketMQ's way."""
    files = []
    pos = 0
    while pos < len(items):
        chunk = items[pos:pos + ENTRIES - 1]  # entry numbers start at 1
        pos += len(chunk)
        slots = [0] * SLOTS
        entries: list[tuple[int, ...]] = []
        begin_ts = chunk[0][2]
        used = 0
        for number, (key, phys, ts) in enumerate(chunk, start=1):
            key_hash = java_index_hash(key)
            slot = key_hash % SLOTS
            if slots[slot] == 0:
                used += 1
            entries.append((key_hash, phys, max(0, (ts - begin_ts) // 1000), slots[slot]))
            slots[slot] = number
        header = (begin_ts, chunk[-1][2], chunk[0][1], chunk[-1][1], used, len(chunk) + 1)
        files.append((header, slots, entries))
    return files


def written_files(service: IndexService) -> list[FileContent]:
    out = []
    for index_file in service.files:
        mm = index_file.mm
        header = HEADER.unpack_from(mm, 0)
        slots = list(struct.unpack_from(f">{SLOTS}i", mm, HEADER_SIZE))
        entries = [ENTRY.unpack_from(mm, index_file.entries_start + n * ENTRY_SIZE) for n in range(1, header[5])]
        out.append((header, slots, entries))
    return out


keys = st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=120)


@settings(max_examples=60, deadline=None)
@given(keys=keys, build_batch=st.integers(1, 50), chunk=st.integers(1, 30), data=st.data())
def test_batched_build_equals_key_by_key(tmp_path_factory, keys: list[bytes], build_batch: int, chunk: int,
                                         data: st.DataObject) -> None:
    # few slots and short files: slots collide inside one run and runs spill over into new files
    gaps = data.draw(st.lists(st.integers(0, 3000), min_size=len(keys), max_size=len(keys)))
    items = []
    phys, ts = 100, 1_700_000_000_000
    for key, gap in zip(keys, gaps, strict=True):
        phys += 50
        ts += gap
        items.append((key, phys, ts))
    service = IndexService(tmp_path_factory.mktemp("index"), SLOTS, ENTRIES, build_batch=build_batch)
    try:
        for start in range(0, len(items), chunk):
            part = items[start:start + chunk]
            service.build([k for k, _, _ in part], [p for _, p, _ in part], [t for _, _, t in part])
            assert service.pending_count < build_batch
            # handing a run over again (a retried dispatch) adds nothing
            service.build([k for k, _, _ in part], [p for _, p, _ in part], [t for _, _, t in part])
        service.drain()
        assert service.pending_count == 0
        assert written_files(service) == reference_files(items)
        for key in set(keys):
            expected = sorted((p for k, p, _ in items if k == key), reverse=True)
            found = service.query([key], 1000, 0, 2**62)
            # a query may also return offsets of other keys with the same hash (the store re-checks them)
            assert [p for p in found if p in expected] == expected
    finally:
        service.destroy()


def test_keys_wait_until_a_run_is_full_or_a_query_flush_or_close(tmp_path: Path) -> None:
    service = IndexService(tmp_path / "index", 64, 1000, build_batch=10)
    service.build([b"T#a", b"T#b"], [10, 20], [1_700_000_000_000] * 2)
    assert service.pending_count == 2 and service.files == []
    assert service.query([b"T#a"], 4, 0, 2**62) == [10]
    assert service.pending_count == 0
    service.build([b"T#c"], [30], [1_700_000_000_000])
    service.flush()
    assert service.pending_count == 0 and service.end_phy_offset == 30
    service.build([b"T#d"] * 10, list(range(40, 140, 10)), [1_700_000_000_000] * 10)
    assert service.pending_count == 0  # a full run is written at once
    service.build([b"T#e"], [200], [1_700_000_000_000])
    service.close()
    reopened = IndexService(tmp_path / "index", 64, 1000)
    reopened.load()
    assert reopened.query([b"T#e"], 4, 0, 2**62) == [200]
    assert reopened.end_phy_offset == 200
    reopened.close()


class _Killed(Exception):
    """Stands for the process being killed at a chosen point of an insert."""


@settings(max_examples=40, deadline=None)
@given(first=st.integers(1, 30), second=st.integers(1, 30), kept=st.lists(st.booleans(), min_size=SLOTS,
                                                                          max_size=SLOTS))
def test_keys_survive_an_insert_killed_before_its_header(tmp_path_factory, first: int, second: int,
                                                         kept: list[bool]) -> None:
    """A run killed after its entries and some of its slots were written, before the header: on load the
    file answers for every counted key, and the run inserted again (as recovery re-dispatches it) joins
    the chains instead of cutting them off."""
    directory = tmp_path_factory.mktemp("index")
    keys = [f"T#k{i % 23}".encode() for i in range(first + second)]
    offsets = [100 * (i + 1) for i in range(first + second)]
    stamps = [1_700_000_000_000 + i for i in range(first + second)]
    service = IndexService(directory, SLOTS, ENTRIES + 20, build_batch=1000)
    service.build(keys[:first], offsets[:first], stamps[:first])
    service.drain()
    index_file = service.files[-1]
    slots_before = struct.unpack_from(f">{SLOTS}i", index_file.mm, HEADER_SIZE)

    def killed(_self: object) -> None:
        raise _Killed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(index_file), "_write_header", killed)
        service.build(keys[first:], offsets[first:], stamps[first:])
        with pytest.raises(_Killed):
            service.drain()
    # the slot writes are cut short too: some slots still hold what they held before the run
    for slot, keep_old in enumerate(kept):
        if keep_old:
            struct.pack_into(">i", index_file.mm, HEADER_SIZE + 4 * slot, slots_before[slot])
    for opened in service.files:
        opened.close()

    reopened = IndexService(directory, SLOTS, ENTRIES + 20, build_batch=1000)
    reopened.load(after_crash=True)
    try:
        assert reopened.end_phy_offset == offsets[first - 1]
        slots_after = struct.unpack_from(f">{SLOTS}i", reopened.files[-1].mm, HEADER_SIZE)
        assert slots_after == slots_before  # every slot the killed run touched points back where it did
        reopened.build(keys, offsets, stamps)  # re-dispatch: the counted keys are skipped
        for key in set(keys):
            expected = [offsets[i] for i in reversed(range(len(keys))) if keys[i] == key]
            assert reopened.query([key], 1000, 0, 2**62) == expected
    finally:
        reopened.destroy()
