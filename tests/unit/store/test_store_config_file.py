"""Config files: RocketMQ shapes, pretty format, atomic write with .bak, fallback on damage."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketflow.protocol.bodies import (
    DataVersion,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
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


#: One change of each config table (every class of `config_file` with a `persist`), made from another thread.
TABLE_CHANGES: dict[str, tuple[type[Any], Callable[[Any], object]]] = {
    "topic put": (TopicConfigTable, lambda table: table.put(TopicConfig("T2", 4, 4))),
    "topic remove": (TopicConfigTable, lambda table: table.remove("T")),
    "topic replace": (TopicConfigTable, lambda table: table.replace(TopicConfigSerializeWrapper(
        {"T2": TopicConfig("T2", 2, 2)}, DataVersion(counter=7)))),
    "group put": (SubscriptionGroupTable, lambda table: table.put(SubscriptionGroupConfig("g2"))),
    "group remove": (SubscriptionGroupTable, lambda table: table.remove("g")),
    "group replace": (SubscriptionGroupTable, lambda table: table.replace(SubscriptionGroupWrapper(
        {"g2": SubscriptionGroupConfig("g2")}, DataVersion(counter=7)))),
    "consumer offset commit": (ConsumerOffsetManager, lambda table: table.commit_offset("g", "T", 0, 2)),
    "consumer offsets take over": (ConsumerOffsetManager, lambda table: table.take_over({"T@g2": {0: 5}})),
    "delay offset update": (DelayOffsetManager, lambda table: table.update(1, 2)),
}


def _seed(table: Any) -> None:
    if isinstance(table, TopicConfigTable):
        table.put(TopicConfig("T", 4, 4), persist=False)
    elif isinstance(table, SubscriptionGroupTable):
        table.put(SubscriptionGroupConfig("g"), persist=False)


def test_the_lock_order_check_covers_every_config_table() -> None:
    tables = {value for value in vars(config_file).values()
              if isinstance(value, type) and value.__module__ == config_file.__name__ and hasattr(value, "persist")
              and hasattr(value, "load") and value is not config_file.JournaledTable}
    assert tables == {table_type for table_type, _ in TABLE_CHANGES.values()}


@pytest.mark.parametrize("change", sorted(TABLE_CHANGES))
def test_a_change_never_waits_for_a_writer_of_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       change: str) -> None:
    """The broker's loop changes a table while the persister thread writes its file: the change must not
    wait for that write (the writer may be the one waiting for the table: a deadlock)."""
    table_type, make_change = TABLE_CHANGES[change]
    table = table_type(tmp_path)
    _seed(table)
    real_write = config_file.write_atomically
    writing = threading.Event()
    release = threading.Event()

    def parked_write(path: Path, data: bytes) -> None:
        if path == table.file.path and threading.current_thread().name == "parked-writer":
            writing.set()
            release.wait(10)
        real_write(path, data)

    monkeypatch.setattr(config_file, "write_atomically", parked_write)
    writer = threading.Thread(target=table.persist, name="parked-writer", daemon=True)
    changer = threading.Thread(target=make_change, args=(table,), name="changer", daemon=True)
    try:
        writer.start()
        assert writing.wait(5)
        changer.start()
        changer.join(2)
        assert not changer.is_alive(), f"{change} waited for the writer of {table.file.path.name}"
    finally:
        release.set()
        writer.join(10)
        changer.join(10)
    assert not writer.is_alive() and not changer.is_alive()
    table.persist()
    expected = table.file.body_type.decode(table.file.path.read_bytes())
    reloaded = table_type(tmp_path)
    reloaded.load()
    assert reloaded.file.body_type.decode(reloaded.file.path.read_bytes()) == expected


def test_changes_go_to_the_journal_and_a_persist_folds_it_into_the_file(tmp_path: Path) -> None:
    topics = TopicConfigTable(tmp_path)
    topics.persist()  # the (empty) snapshot
    for index in range(5):
        topics.put(TopicConfig(f"T{index}", 4, 4))
    topics.remove("T0")
    journal = tmp_path / "topics.json.journal"
    assert len(journal.read_bytes().splitlines()) == 6  # one line per change, appended
    assert b"T1" not in (tmp_path / "topics.json").read_bytes()
    replayed = TopicConfigTable(tmp_path)
    replayed.load()
    assert sorted(replayed.topics) == ["T1", "T2", "T3", "T4"]
    assert replayed.data_version == topics.data_version
    topics.persist()
    assert journal.read_bytes() == b""
    folded = TopicConfigTable(tmp_path)
    folded.load()
    assert folded.topics == topics.topics and folded.data_version == topics.data_version


def test_a_torn_journal_line_is_ignored_and_the_next_write_is_a_whole_file(tmp_path: Path) -> None:
    groups = SubscriptionGroupTable(tmp_path)
    groups.persist()
    groups.put(SubscriptionGroupConfig("g1"))
    groups.put(SubscriptionGroupConfig("g2"))
    journal = tmp_path / "subscriptionGroup.json.journal"
    journal.write_bytes(journal.read_bytes()[:-7])  # a crash in the middle of the second append
    loaded = SubscriptionGroupTable(tmp_path)
    loaded.load()
    assert sorted(loaded.groups) == ["g1"]
    loaded.put(SubscriptionGroupConfig("g3"))  # never appended after the torn line
    assert journal.read_bytes() == b""
    again = SubscriptionGroupTable(tmp_path)
    again.load()
    assert sorted(again.groups) == ["g1", "g3"]


def test_journal_lines_already_in_the_file_are_not_replayed(tmp_path: Path) -> None:
    """A crash between writing a new file and emptying the journal: replaying its lines again must not undo a
    later change the file holds (here: T changed twice, only the first change was in the journal)."""
    topics = TopicConfigTable(tmp_path)
    topics.persist()
    topics.put(TopicConfig("T", 1, 1))
    journal = tmp_path / "topics.json.journal"
    stale = journal.read_bytes()
    topics.put(TopicConfig("T", 8, 8), persist=False)
    topics.persist()
    journal.write_bytes(stale)
    loaded = TopicConfigTable(tmp_path)
    loaded.load()
    assert loaded.get("T") == TopicConfig("T", 8, 8)


def test_the_bytes_written_stay_linear_in_the_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[int] = []
    real_write, real_os_write = config_file.write_atomically, config_file.os.write

    def counting_write(path: Path, data: bytes) -> None:
        written.append(len(data))
        real_write(path, data)

    def counting_os_write(fd: int, data: Any) -> int:
        count = real_os_write(fd, data)
        written.append(count)
        return count

    monkeypatch.setattr(config_file, "write_atomically", counting_write)
    monkeypatch.setattr(config_file.os, "write", counting_os_write)
    topics = TopicConfigTable(tmp_path)
    count = 3000
    for index in range(count):
        topics.put(TopicConfig(f"Topic_{index:05d}", 8, 8))
    topics.persist()
    final = (tmp_path / "topics.json").stat().st_size
    # each change is one journal line; whole files are written when the journal outgrows the file
    assert sum(written) < 8 * final, (sum(written), final)


def test_the_persister_writes_changes_in_batches_off_the_changing_thread(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    topics = TopicConfigTable(tmp_path)
    topics.persist()
    persister = config_file.ConfigPersister()
    persister.attach(topics)
    appends: list[str] = []
    real_append = config_file.JournaledTable._append

    def slow_append(self: Any, lines: list[bytes], counter: int) -> None:
        appends.append(threading.current_thread().name)
        time.sleep(0.05)
        real_append(self, lines, counter)

    monkeypatch.setattr(config_file.JournaledTable, "_append", slow_append)
    persister.start()
    try:
        started = time.monotonic()
        for index in range(200):
            topics.put(TopicConfig(f"T{index}", 4, 4))
        assert time.monotonic() - started < 0.5  # the puts never wait for a write
        assert topics.when_written().result(10) is True
    finally:
        persister.stop()
    assert 1 <= len(appends) < 20 and set(appends) == {persister.name}
    loaded = TopicConfigTable(tmp_path)
    loaded.load()
    assert len(loaded.topics) == 200
