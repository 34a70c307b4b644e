"""Power loss tears the last record at any byte: recovery must drop it whole, wherever the tear lies.

A segment is written through a mapping, so after a power loss the bytes past the last fsync that
the kernel had not written back read as zeros (the file is sparse / preallocated). The body CRC
covers only the body: a tear in the topic or properties leaves it valid, so those positions are the
interesting ones. Every byte of the record's tail is tried, and a sample of the head and body.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import request, small_config
from rocketflow.protocol.codec import decode_records
from rocketflow.store import MessageStore, StoreConfig


def read_queue(store: MessageStore, topic: str = "T", queue_id: int = 0) -> list[bytes]:
    records: list[bytes] = []
    offset = 0
    while True:
        got = store.get_messages("g", topic, queue_id, offset, 32)
        if not got.buffers:
            return records
        records.extend(got.buffers)
        offset = got.next_begin_offset


def tear_positions(record: bytes, tail: int) -> list[int]:
    """Every byte of the last `tail` bytes, every 7th byte before them (never 0: that is a clean cut).

    A tear that only zeroes bytes that were zeros (a zero properties length) leaves the record whole.
    """
    size = len(record)
    positions = {*range(1, size - tail, 7), *range(max(1, size - tail), size)}
    return sorted(tear for tear in positions if any(record[tear:]))


@pytest.mark.parametrize("with_properties", [True, False], ids=["properties", "no-properties"])
def test_a_record_torn_anywhere_is_dropped_whole(tmp_path: Path, with_properties: bool) -> None:
    pristine = tmp_path / "pristine"
    config = small_config(pristine)
    properties = {"KEYS": "k-last", "UNIQ_KEY": "U-last", "TAGS": "TagA"} if with_properties else {}
    with MessageStore(config) as store:
        for i in range(5):
            assert store.put_message(request(body=f"m{i}-".encode() * 9, KEYS=f"k{i}", UNIQ_KEY=f"U{i}")).status.is_ok
        earlier = read_queue(store)
        body = b"last-body-" * 6
        last = store.put_message(request(body=body, **properties))
        assert last.status.is_ok
        phys = last.wrote_offset
        record = store.select_one_message_by_offset(phys)
        assert record is not None
    segment_size = config.commit_log_segment_size
    segment_name = f"{phys - phys % segment_size:020d}"
    position = phys % segment_size
    # the tail past the body: topic length, topic, properties length, properties
    tail = len(record) - (record.index(body) + len(body))
    survivors: list[int] = []
    for tear in tear_positions(record, tail):
        root = tmp_path / "torn"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(pristine, root)
        (root / "abort").touch()  # the run that lost power never shut down cleanly
        with open(root / "commitlog" / segment_name, "r+b") as handle:
            handle.seek(position + tear)
            handle.write(bytes(len(record) - tear))
        torn_config = StoreConfig(**{**_fields(config), "store_root": root})
        with MessageStore(torn_config) as store:
            assert not store.last_exit_ok
            served = read_queue(store)
            if served != earlier or store.max_phy_offset != phys:
                survivors.append(tear)
                continue
            assert store.look_message_by_offset(phys) is None
            assert store.query_message("T", "U-last", 4, 0, 2**62).buffers == []
            again = store.put_message(request(body=b"after-the-cut"))
            assert again.status.is_ok and again.wrote_offset == phys
            assert decode_records(read_queue(store)[-1])[0].body == b"after-the-cut"
    assert not survivors, (
        f"a record torn at these byte positions (of {len(record)}) was served after recovery: {survivors}")


def _fields(config: StoreConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in StoreConfig.__dataclass_fields__}


def test_properties_ending_in_nul_are_kept_unless_the_crash_left_them_last(tmp_path: Path) -> None:
    """The torn-properties rule is narrow: a record followed by another one, or any record after a clean
    shutdown, is kept even if its last property value ends in NUL."""
    config = small_config(tmp_path / "store")
    with MessageStore(config) as store:
        odd = store.put_message(request(body=b"odd", ODD="ends-in-nul\x00"))
        assert store.put_message(request(body=b"next", KEYS="k-next")).status.is_ok
    (config.abort_path).touch()
    with MessageStore(config) as store:
        assert not store.last_exit_ok
        assert [m.body for m in decode_records(b"".join(read_queue(store)))] == [b"odd", b"next"]
        message = store.look_message_by_offset(odd.wrote_offset)
        assert message is not None and message.properties["ODD"] == "ends-in-nul\x00"
        assert store.put_message(request(body=b"odd-last", ODD="\x00")).status.is_ok
    with MessageStore(config) as store:  # a clean restart trusts every whole record
        assert store.last_exit_ok
        assert decode_records(read_queue(store)[-1])[0].body == b"odd-last"
