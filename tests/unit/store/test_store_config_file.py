"""Config files: RocketMQ shapes, pretty format, atomic write with .bak, fallback on damage."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rocketflow.protocol.bodies import SubscriptionGroupConfig, TopicConfig
from rocketflow.store import config_file
from rocketflow.store.config_file import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupTable,
    TopicConfigTable,
)


def test_consumer_offsets_have_unquoted_int_keys_and_round_trip(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit_offset("g", "T", 0, 123)
    offsets.commit_offset("g", "T", 1, 98)
    offsets.persist()
    text = (tmp_path / "consumerOffset.json").read_text()
    assert '"T@g":{' in text.replace("\t", "").replace("\n", "")
    assert "0:123" in text.replace(" ", "") and '"0"' not in text
    assert "\t" in text  # pretty printed with tabs
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert again.query_offset("g", "T", 1) == 98 and again.query_offset("g", "T", 5) == -1


def test_damaged_main_file_falls_back_to_bak(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit_offset("g", "T", 0, 1)
    offsets.persist()
    offsets.commit_offset("g", "T", 0, 2)
    offsets.persist()  # .bak now holds offset 1
    main = tmp_path / "consumerOffset.json"
    assert (tmp_path / "consumerOffset.json.bak").exists()
    assert not (tmp_path / "consumerOffset.json.tmp").exists()
    for damage in (b'{"offsetTable":{"T@g":{0:', b"", None):
        if damage is None:
            main.unlink()
        else:
            main.write_bytes(damage)
        loaded = ConsumerOffsetManager(tmp_path)
        loaded.load()
        assert loaded.file.loaded_from == "bak"
        assert loaded.query_offset("g", "T", 0) == 1


def test_both_files_damaged_gives_defaults(tmp_path: Path) -> None:
    (tmp_path / "delayOffset.json").write_text("not json")
    (tmp_path / "delayOffset.json.bak").write_text("[1,2")
    delays = DelayOffsetManager(tmp_path)
    delays.load()
    assert delays.table == {} and delays.file.loaded_from == "default"


def test_delay_offsets_shape(tmp_path: Path) -> None:
    delays = DelayOffsetManager(tmp_path)
    delays.update(1, 0)
    delays.update(3, 27)
    delays.persist()
    compact = (tmp_path / "delayOffset.json").read_text().replace("\t", "").replace("\n", "")
    assert compact == '{"offsetTable":{1:0,3:27}}'
    again = DelayOffsetManager(tmp_path)
    again.load()
    assert again.table == {1: 0, 3: 27}


def test_topics_and_subscription_groups(tmp_path: Path) -> None:
    topics = TopicConfigTable(tmp_path)
    topics.put(TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=4))
    version = topics.data_version.counter
    groups = SubscriptionGroupTable(tmp_path)
    groups.put(SubscriptionGroupConfig(group_name="g"))
    text = (tmp_path / "topics.json").read_text()
    assert '"topicConfigTable"' in text and '"readQueueNums":4' in text.replace(" ", "")
    assert '"retryMaxTimes":16' in (tmp_path / "subscriptionGroup.json").read_text().replace(" ", "")
    loaded_topics = TopicConfigTable(tmp_path)
    loaded_topics.load()
    assert loaded_topics.get("T") == topics.get("T")
    assert loaded_topics.data_version.counter == version
    loaded_groups = SubscriptionGroupTable(tmp_path)
    loaded_groups.load()
    assert loaded_groups.get("g") == SubscriptionGroupConfig(group_name="g")
    assert loaded_topics.remove("T") is not None
    reloaded = TopicConfigTable(tmp_path)
    reloaded.load()
    assert reloaded.get("T") is None


def test_writers_take_turns_and_commits_never_wait_for_a_write(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit_offset("g", "T", 0, 1)
    real_write = config_file.write_atomically
    first_writing = threading.Event()
    release_first = threading.Event()
    written: list[bytes] = []

    def slow_first_write(path: Path, data: bytes) -> None:
        if path != offsets.file.path:  # another test's broker, still running in this process
            real_write(path, data)
            return
        written.append(data)
        if len(written) == 1:
            first_writing.set()
            assert release_first.wait(5)
        real_write(path, data)

    monkeypatch.setattr(config_file, "write_atomically", slow_first_write)
    first = threading.Thread(target=offsets.persist)
    first.start()
    assert first_writing.wait(5)
    offsets.commit_offset("g", "T", 0, 2)  # the table lock is free while the first write is stuck
    second = threading.Thread(target=offsets.persist)
    second.start()
    second.join(0.2)
    assert second.is_alive() and len(written) == 1  # the second writer waits its turn ...
    release_first.set()
    first.join(5)
    second.join(5)
    assert len(written) == 2  # ... and then snapshots the newer table, so the file ends up newest
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert again.query_offset("g", "T", 0) == 2
