"""`LocalFileOffsetStore`: fastjson file shape, atomic writes, .bak fallback, merging, instance-name keying."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rocketflow.client import ClientConfig, LocalFileOffsetStore, MQClientError, ReadOffsetType
from rocketflow.protocol.message import MessageQueue

Q0 = MessageQueue("Broadcast", "broker-a", 0)
Q1 = MessageQueue("Broadcast", "broker-a", 1)
Q2 = MessageQueue("Broadcast", "broker-b", 0)


def read(store: LocalFileOffsetStore, mq: MessageQueue,
         read_type: ReadOffsetType = ReadOffsetType.READ_FROM_STORE) -> int:
    return asyncio.run(store.read_offset(mq, read_type))


def persist_all(store: LocalFileOffsetStore, *mqs: MessageQueue) -> None:
    asyncio.run(store.persist_all(mqs))


def test_file_has_the_fastjson_offset_wrapper_shape(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    store.update_offset(Q0, 12, False)
    store.update_offset(Q2, 3, False)
    persist_all(store, Q0, Q2)
    assert store.store_path == tmp_path / "inst" / "bg" / "offsets.json"
    text = "".join(store.store_path.read_text().split())  # the TAB-indented pretty form, compacted
    assert '{"brokerName":"broker-a","queueId":0,"topic":"Broadcast"}:12' in text
    assert not store.temp_path.exists()
    fresh = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    fresh.load()
    assert fresh.clone_offset_table() == {Q0: 12, Q2: 3}


def test_every_write_keeps_the_previous_content_as_bak(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    store.update_offset(Q0, 1, True)
    persist_all(store, Q0)
    assert not store.backup_path.exists()
    first = store.store_path.read_bytes()
    store.update_offset(Q0, 2, True)
    persist_all(store, Q0)
    assert store.backup_path.read_bytes() == first
    assert read(store, Q0) == 2


def test_a_corrupt_or_missing_file_falls_back_to_the_bak(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    store.update_offset(Q0, 5, True)
    persist_all(store, Q0)
    store.update_offset(Q0, 6, True)
    persist_all(store, Q0)
    store.store_path.write_text('{"offsetTable":{{"brokerName":"broker-a",')  # torn write
    assert read(LocalFileOffsetStore("bg", "inst", store_dir=tmp_path), Q0) == 5
    store.store_path.unlink()
    assert read(LocalFileOffsetStore("bg", "inst", store_dir=tmp_path), Q0) == 5
    store.backup_path.unlink()
    assert read(LocalFileOffsetStore("bg", "inst", store_dir=tmp_path), Q0) == -1


def test_persist_merges_with_the_file(tmp_path: Path) -> None:
    first = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    second = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    first.update_offset(Q0, 10, True)
    first.update_offset(Q1, 11, True)
    persist_all(first, Q0)  # Q1 is not assigned: not written
    second.update_offset(Q2, 20, True)
    asyncio.run(second.persist(Q2))
    loaded = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    loaded.load()
    assert loaded.clone_offset_table() == {Q0: 10, Q2: 20}
    persist_all(first)  # nothing to persist: the file is left alone
    assert read(loaded, Q2) == 20


def test_memory_reads_and_removal(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    assert read(store, Q0, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert read(store, Q0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == -1
    store.update_offset(Q0, 4, True)
    store.update_offset(Q0, 2, True)
    assert read(store, Q0, ReadOffsetType.READ_FROM_MEMORY) == 4
    persist_all(store, Q0)
    store.remove_offset(Q0)
    assert read(store, Q0, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert read(store, Q0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 4
    asyncio.run(store.update_consume_offset_to_broker(Q0, 99))  # no broker involved
    assert read(store, Q0, ReadOffsetType.READ_FROM_STORE) == 4


def test_offsets_survive_a_changed_client_id(tmp_path: Path) -> None:
    before = ClientConfig(namesrv_addr="127.0.0.1:9876", client_ip="10.0.0.1", instance_name="edge-7")
    after = ClientConfig(namesrv_addr="127.0.0.1:9876", client_ip="10.0.0.2", instance_name="edge-7")
    assert before.build_client_id() != after.build_client_id()
    store = LocalFileOffsetStore("bg", before.instance_name, store_dir=tmp_path)
    store.update_offset(Q1, 77, True)
    persist_all(store, Q1)
    restarted = LocalFileOffsetStore("bg", after.instance_name, store_dir=tmp_path)
    restarted.load()
    assert restarted.clone_offset_table() == {Q1: 77}
    other_unit = LocalFileOffsetStore("bg", after.instance_name, store_dir=tmp_path, unit_name="u1")
    assert other_unit.store_path != restarted.store_path


def test_names_that_cannot_be_directories_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(MQClientError, match="instance_name"):
        LocalFileOffsetStore("bg", "../up", store_dir=tmp_path)
    with pytest.raises(MQClientError, match="group"):
        LocalFileOffsetStore("..", "inst", store_dir=tmp_path)
    with pytest.raises(MQClientError, match="offset must be an int"):
        LocalFileOffsetStore("bg", "inst", store_dir=tmp_path).update_offset(Q0, "1", True)  # type: ignore[arg-type]


def test_file_is_json_readable_after_key_normalisation(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("bg", "inst", store_dir=tmp_path)
    store.update_offset(Q0, 1, True)
    persist_all(store, Q0)
    # fastjson's object keys are not JSON; everything else is
    text = "".join(store.store_path.read_text().split())
    text = text.replace('{"brokerName":"broker-a","queueId":0,"topic":"Broadcast"}', '"q0"')
    assert json.loads(text) == {"offsetTable": {"q0": 1}}
