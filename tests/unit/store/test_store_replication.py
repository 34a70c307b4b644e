"""A slave store fed a master's commit-log bytes in arbitrary pieces ends up with the same log,
consume queues and index, survives a restart, and refuses bytes that do not continue its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import request, small_config
from rocketflow.store import BrokerRole, MessageStore
from rocketflow.store.dispatcher import DispatchBatch
from rocketflow.store.errors import StoreNotRunningError


def fill_master(store: MessageStore, count: int) -> None:
    for index in range(count):
        body = (b"m%d-" % index) * (1 + index % 13)  # varied sizes: segments end at different places
        assert store.put_message(request("Repl", index % 3, body, KEYS=f"k{index}", UNIQ_KEY=f"U{index}")).status.is_ok


def replicate(master: MessageStore, slave: MessageStore, start: int, piece: int) -> int:
    """What a master's HA connection does: transfers of at most `piece` bytes from `start` on."""
    offset = start
    while data := master.commit_log.data_from(offset, piece):
        assert slave.append_to_commit_log(offset, data) == offset + len(data)
        offset += len(data)
    return offset


def queue_contents(store: MessageStore) -> dict[tuple[str, int], list[bytes]]:
    out: dict[tuple[str, int], list[bytes]] = {}
    for topic, queue_id in sorted(store.topic_queues()):
        buffers: list[bytes] = []
        offset = 0
        while (got := store.get_messages("g", topic, queue_id, offset, 32)).buffers:
            buffers.extend(got.buffers)
            offset = got.next_begin_offset
        out[(topic, queue_id)] = buffers
    return out


@pytest.mark.parametrize("piece", [37, 1000, 4096])
def test_a_slave_rebuilds_the_masters_log_queues_and_index(tmp_path: Path, piece: int) -> None:
    master = MessageStore(small_config(tmp_path / "master"))
    slave = MessageStore(small_config(tmp_path / "slave", broker_role=BrokerRole.SLAVE))
    arrived: list[tuple[str, int, int]] = []
    with master, slave:
        slave.add_dispatch_listener(
            lambda topic, queue_id, offset, _tags, _ts: arrived.append((topic, queue_id, offset)))
        fill_master(master, 120)
        assert len(master.commit_log.files.files) > 3  # several segments, each ended by a blank record
        end = replicate(master, slave, 0, piece)
        assert end == master.commit_log.max_offset == slave.commit_log.max_offset
        for mapped in master.commit_log.files.files:
            other = slave.commit_log.files.find(mapped.file_from_offset)
            assert other is not None and other.read(0, mapped.wrote_position) == mapped.read(0, mapped.wrote_position)
        # pieces cut records anywhere, yet every record is dispatched once, when whole
        assert queue_contents(slave) == queue_contents(master)
        assert sorted(arrived) == sorted((topic, queue_id, offset) for (topic, queue_id), count
                                         in master.topic_queues().items() for offset in range(count))
        assert slave.dispatcher.dispatched_offset == end
        assert len(slave.query_message("Repl", "k77", 4, 0, 2**62).buffers) == 1
        assert len(slave.query_message("Repl", "U5", 4, 0, 2**62).buffers) == 1
        # a slave does not take puts of its own
        assert not slave.put_message(request("Repl", 0, b"x")).status.is_ok
    with MessageStore(small_config(tmp_path / "slave", broker_role=BrokerRole.SLAVE)) as reopened, \
            MessageStore(small_config(tmp_path / "master")) as master_again:
        assert reopened.commit_log.max_offset == end
        assert queue_contents(reopened) == queue_contents(master_again)


def test_a_partial_record_waits_for_its_rest(tmp_path: Path) -> None:
    master = MessageStore(small_config(tmp_path / "master"))
    slave = MessageStore(small_config(tmp_path / "slave", broker_role=BrokerRole.SLAVE))
    with master, slave:
        master.put_message(request("Repl", 0, b"a" * 50))
        master.put_message(request("Repl", 0, b"b" * 50))
        first_end = master.get_messages("g", "Repl", 0, 0, 1).buffers[0].__len__()
        data = master.commit_log.data_from(0, 10_000)
        assert data is not None
        slave.append_to_commit_log(0, data[:first_end + 20])
        assert slave.get_max_offset_in_queue("Repl", 0) == 1  # the second record is not whole yet
        slave.append_to_commit_log(first_end + 20, data[first_end + 20:])
        assert slave.get_max_offset_in_queue("Repl", 0) == 2


def test_bytes_that_do_not_continue_the_log_are_refused(tmp_path: Path) -> None:
    master = MessageStore(small_config(tmp_path / "master"))
    slave = MessageStore(small_config(tmp_path / "slave", broker_role=BrokerRole.SLAVE))
    with master, slave:
        fill_master(master, 10)
        data = master.commit_log.data_from(0, 4096)
        assert data is not None
        with pytest.raises(ValueError, match="not at a segment start"):
            slave.append_to_commit_log(100, data)  # an empty slave starts at a segment start
        slave.append_to_commit_log(0, data[:200])
        with pytest.raises(ValueError, match="ends at 200"):
            slave.append_to_commit_log(300, data[300:400])  # a gap
        with pytest.raises(ValueError, match="segment"):
            slave.append_to_commit_log(200, b"\x00" * 4096)  # past the end of the segment
        assert slave.commit_log.max_offset == 200
    with pytest.raises(StoreNotRunningError):
        slave.append_to_commit_log(200, data[200:300])


def test_an_empty_slave_may_start_at_a_later_segment(tmp_path: Path) -> None:
    master = MessageStore(small_config(tmp_path / "master"))
    slave = MessageStore(small_config(tmp_path / "slave", broker_role=BrokerRole.SLAVE))
    batches: list[DispatchBatch] = []
    with master, slave:
        fill_master(master, 120)
        last = master.commit_log.files.files[-1].file_from_offset  # where a master starts an empty slave
        assert last > 0
        end = replicate(master, slave, last, 512)
        assert slave.commit_log.min_offset == last and end == master.commit_log.max_offset
        master.commit_log.scan(last, False, batches.append)
        firsts: dict[tuple[str, int], int] = {}
        for batch in batches:
            for key, (first_offset, _) in batch.runs.items():
                firsts[key] = min(firsts.get(key, first_offset), first_offset)
        assert firsts
        for (topic, queue_id), first in firsts.items():
            got = slave.get_messages("g", topic, queue_id, first, 32)
            assert got.buffers == master.get_messages("g", topic, queue_id, first, 32).buffers
