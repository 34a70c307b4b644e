"""The index has a file ready for inserts once the store has started, its hash slots mapped."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from conftest import request, small_config
from rocketflow.protocol.codec import decode_record
from rocketflow.store import MessageStore
from rocketflow.store.index import IndexService

FOREVER = 2**62


def _kernel_at_least(major: int, minor: int) -> bool:
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return found is not None and (int(found.group(1)), int(found.group(2))) >= (major, minor)


def _resident_kib(path: Path) -> int:
    """Resident KiB of this process's mapping of ``path`` (from /proc/self/smaps)."""
    resident = 0
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's first line
                inside = fields[-1] == str(path)
            elif inside and fields[0] == "Rss:":
                resident += int(fields[1])
    return resident


def test_a_started_store_has_an_index_file_ready_and_restarts_leave_no_empty_files(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    for _ in range(3):  # restarts without a message: the empty file is dropped and made again, not piled up
        with MessageStore(config) as store:
            (ready,) = store.index.files
            assert not ready.is_full and ready.entry_count == 0
    with MessageStore(config) as store:
        store.put_message(request(body=b"first", UNIQ_KEY="K1"))
        assert len(store.index.files) == 1  # the first key went into the file made at start
        found = store.query_message("T", "K1", 4, 0, FOREVER).buffers
        assert [decode_record(buffer)[0].body for buffer in found] == [b"first"]


def test_an_index_without_indexing_makes_no_file(tmp_path: Path) -> None:
    with MessageStore(small_config(tmp_path, message_index_enable=False)) as store:
        assert store.index.files == []


@pytest.mark.skipif(sys.platform != "linux" or not _kernel_at_least(5, 14),
                    reason="MADV_POPULATE_READ is Linux 5.14's (and /proc/self/smaps Linux's)")
def test_the_open_files_hash_slots_are_mapped_up_front(tmp_path: Path) -> None:
    slot_num = 256 * 1024  # a 1 MiB slot table
    index = IndexService(tmp_path / "index", slot_num, 1024)
    index.prepare()
    (ready,) = index.files
    try:
        # the whole slot table, before any insert touched it
        assert _resident_kib(ready.path) >= slot_num * 4 // 1024
    finally:
        index.close()
    reopened = IndexService(tmp_path / "index", slot_num, 1024)
    reopened.load()
    try:
        # an empty last file is dropped on load; prepare makes (and maps) a fresh one
        reopened.prepare()
        assert _resident_kib(reopened.files[-1].path) >= slot_num * 4 // 1024
        reopened.build([b"T#k1"], [100], [1_700_000_000_000])
        reopened.drain()
    finally:
        reopened.close()
    again = IndexService(tmp_path / "index", slot_num, 1024)
    again.load()
    try:
        (kept,) = again.files
        # loading maps nothing (a store that does not index never pays for it) ...
        assert _resident_kib(kept.path) < slot_num * 4 // 1024
        again.prepare()  # ... prepare maps the last file, which still takes inserts
        assert again.files == [kept] and _resident_kib(kept.path) >= slot_num * 4 // 1024
    finally:
        again.close()
