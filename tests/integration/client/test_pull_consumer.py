"""`PullConsumer` against a dev cluster: assign and subscribe, polling in queue order, seeking,
committing and resuming, auto-commit, pause/resume, flow control, broadcasting, shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from push_helpers import FAST_CLIENT, admin, broker_offset, make_topic, send

from rocketflow import Message, Producer, PullConsumer
from rocketflow.client import ConsumeFromWhere, LocalFileOffsetStore, MessageModel, MQClientError
from rocketflow.dev import DevCluster
from rocketflow.protocol.bodies import ConsumeType
from rocketflow.protocol.message import MessageExt, MessageQueue
from testkit import client_threads, wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture
def producer(cluster: DevCluster) -> Iterator[Producer]:
    producer = Producer("pull_consumer_pg", namesrv=cluster.namesrv_addr, instance_name="pull-consumer-producer")
    producer.start()
    yield producer
    producer.shutdown()


@pytest.fixture
def consumers() -> Iterator[list[PullConsumer]]:
    started: list[PullConsumer] = []
    yield started
    for consumer in started:
        consumer.shutdown()


def new_pull_consumer(cluster: DevCluster, consumers: list[PullConsumer], group: str, name: str,
                      **kwargs: Any) -> PullConsumer:
    settings: dict[str, Any] = {**FAST_CLIENT, "consume_from": FIRST, **kwargs}
    consumer = PullConsumer(group, namesrv=cluster.namesrv_addr, instance_name=name, **settings)
    consumers.append(consumer)
    return consumer


def send_to(producer: Producer, mq: MessageQueue, count: int, prefix: str) -> list[str]:
    keys = []
    for index in range(count):
        key = f"{prefix}{index}"
        producer.send(Message(mq.topic, key.encode(), keys=key),
                      selector=lambda queues, msg, arg: next(q for q in queues if q.queue_id == arg), arg=mq.queue_id)
        keys.append(key)
    return keys


def poll_until(consumer: PullConsumer, count: int, timeout: float = 15.0) -> list[list[MessageExt]]:
    """Batches polled until ``count`` messages arrived."""
    batches: list[list[MessageExt]] = []
    deadline = time.monotonic() + timeout
    while sum(len(batch) for batch in batches) < count:
        assert time.monotonic() < deadline, f"only {sum(len(b) for b in batches)} of {count} messages polled"
        batch = consumer.poll(timeout=0.5)
        if batch:
            batches.append(batch)
    return batches


def flatten(batches: list[list[MessageExt]]) -> list[MessageExt]:
    return [msg for batch in batches for msg in batch]


def queue_of(msg: MessageExt) -> MessageQueue:
    assert msg.broker_name is not None
    return MessageQueue(msg.topic, msg.broker_name, msg.queue_id)


def test_assign_polls_every_message_in_queue_order(cluster: DevCluster, producer: Producer,
                                                   consumers: list[PullConsumer]) -> None:
    make_topic(cluster, "PullAssignT", 4)
    keys = send(producer, "PullAssignT", 120)
    consumer = new_pull_consumer(cluster, consumers, "cg_pull_assign", "pull-assign", pull_batch_size=7)
    consumer.start()
    queues = consumer.fetch_message_queues("PullAssignT")
    assert len(queues) == 4
    consumer.assign(queues)
    assert consumer.assignment() == queues
    batches = poll_until(consumer, 120)
    offsets: dict[MessageQueue, list[int]] = defaultdict(list)
    for batch in batches:
        assert 1 <= len(batch) <= 7
        assert len({queue_of(msg) for msg in batch}) == 1, "a batch mixes queues"
        for msg in batch:
            offsets[queue_of(msg)].append(msg.queue_offset)
    assert sorted(msg.keys or "" for msg in flatten(batches)) == sorted(keys)
    assert set(offsets) == set(queues)
    for queue_offsets in offsets.values():
        assert queue_offsets == list(range(len(queue_offsets)))
    assert consumer.poll(timeout=0.2) == []
    info = consumer.running_info()
    assert set(info.mq_table) == set(queues) and info.properties["PROP_CONSUME_TYPE"] == "CONSUME_ACTIVELY"
    with admin(cluster) as instance:
        connection = instance.run(instance.api.get_consumer_connection_list(cluster.broker_addr, "cg_pull_assign"))
    assert connection.consume_type is ConsumeType.CONSUME_ACTIVELY


def test_subscribe_group_of_two_splits_queues_and_rebalances_when_one_leaves(
        cluster: DevCluster, producer: Producer, consumers: list[PullConsumer]) -> None:
    make_topic(cluster, "PullGroupT", 4)
    changes: list[tuple[str, str, frozenset[MessageQueue]]] = []

    def listener_for(name: str) -> Any:
        def listener(topic: str, mq_all: set[MessageQueue], mine: set[MessageQueue]) -> None:
            assert len(mq_all) == 4
            changes.append((name, topic, frozenset(mine)))
        return listener

    one = new_pull_consumer(cluster, consumers, "cg_pull_group", "pull-group-1")
    two = new_pull_consumer(cluster, consumers, "cg_pull_group", "pull-group-2")
    one.subscribe("PullGroupT", "*", listener_for("one"))
    two.subscribe("PullGroupT", "*", listener_for("two"))
    one.start()
    two.start()

    def split() -> bool:
        mine, theirs = set(one.assignment()), set(two.assignment())
        return len(mine) == 2 and len(theirs) == 2 and not mine & theirs

    wait_until(split, 15)
    keys = send(producer, "PullGroupT", 80)
    got: list[MessageExt] = []
    deadline = time.monotonic() + 15
    while len(got) < 80:
        assert time.monotonic() < deadline
        for consumer in (one, two):
            batch = consumer.poll(timeout=0.05)
            held = set(consumer.assignment())
            assert all(queue_of(msg) in held for msg in batch)
            got.extend(batch)
    assert sorted(msg.keys or "" for msg in got) == sorted(keys)
    assert any(name == "one" and len(mine) == 2 for name, _, mine in changes)
    assert any(name == "two" and len(mine) == 2 for name, _, mine in changes)

    # one leaves (committing what it polled); two takes every queue and continues where one stopped
    more = send(producer, "PullGroupT", 40, prefix="m")
    one.shutdown()
    wait_until(lambda: len(two.assignment()) == 4, 15)
    later: list[MessageExt] = []
    deadline = time.monotonic() + 15
    while sorted({msg.keys or "" for msg in later}) != sorted(more):
        assert time.monotonic() < deadline, "messages lost after the rebalance"
        later.extend(two.poll(timeout=0.2))
    assert not {msg.keys for msg in later} & set(keys), "messages polled before the rebalance came again"
    wait_until(lambda: any(name == "two" and len(mine) == 4 for name, _, mine in changes), 5)


def test_seek_seek_to_begin_end_and_by_timestamp(cluster: DevCluster, producer: Producer,
                                                 consumers: list[PullConsumer]) -> None:
    make_topic(cluster, "PullSeekT", 2)
    consumer = new_pull_consumer(cluster, consumers, "cg_pull_seek", "pull-seek")
    consumer.start()
    mq, other = consumer.fetch_message_queues("PullSeekT")
    send_to(producer, mq, 10, "a")
    time.sleep(0.3)
    middle = int(time.time() * 1000)     # much closer to b0's store time than to a9's
    time.sleep(0.01)
    send_to(producer, mq, 10, "b")
    consumer.assign([mq])
    assert [msg.queue_offset for msg in flatten(poll_until(consumer, 20))] == list(range(20))

    consumer.seek(mq, 5)
    assert [msg.queue_offset for msg in flatten(poll_until(consumer, 15))] == list(range(5, 20))
    consumer.seek_to_begin(mq)
    assert flatten(poll_until(consumer, 1))[0].queue_offset == 0
    assert consumer.offset_for_timestamp(mq, middle) == 10
    consumer.seek(mq, consumer.offset_for_timestamp(mq, middle))
    assert [msg.keys for msg in flatten(poll_until(consumer, 10))] == [f"b{i}" for i in range(10)]
    consumer.seek_to_end(mq)
    assert consumer.poll(timeout=0.3) == []
    send_to(producer, mq, 1, "c")
    assert [(msg.queue_offset, msg.keys) for msg in flatten(poll_until(consumer, 1))] == [(20, "c0")]

    with pytest.raises(MQClientError, match="offsets go from 0 to 21"):
        consumer.seek(mq, 22)
    with pytest.raises(MQClientError, match="not held"):
        consumer.seek(other, 0)
    with pytest.raises(MQClientError, match="offset must be an int >= 0"):
        consumer.seek(mq, -1)


def test_commit_then_restart_resumes_from_the_committed_offset(cluster: DevCluster, producer: Producer,
                                                               consumers: list[PullConsumer]) -> None:
    make_topic(cluster, "PullCommitT", 2)
    keys = send(producer, "PullCommitT", 60)
    first = new_pull_consumer(cluster, consumers, "cg_pull_commit", "pull-commit-1", auto_commit=False)
    first.start()
    queues = first.fetch_message_queues("PullCommitT")
    first.assign(queues)
    before = flatten(poll_until(first, 30))
    first.commit_sync()
    committed = {mq: first.committed(mq) for mq in queues}
    with admin(cluster) as instance:
        assert {mq: broker_offset(instance, "cg_pull_commit", mq) for mq in queues} == committed
    for mq in queues:
        polled = [msg.queue_offset for msg in before if queue_of(msg) == mq]
        assert committed[mq] == (max(polled) + 1 if polled else 0)
    # polled but not committed: comes again after the restart
    uncommitted = flatten(poll_until(first, 1))
    first.shutdown()

    second = new_pull_consumer(cluster, consumers, "cg_pull_commit", "pull-commit-2", auto_commit=False)
    second.start()
    second.assign(queues)
    after = flatten(poll_until(second, 60 - len(before)))
    assert second.poll(timeout=0.3) == []
    assert sorted(msg.keys or "" for msg in before + after) == sorted(keys), "lost or repeated messages"
    for mq in queues:
        offsets = [msg.queue_offset for msg in after if queue_of(msg) == mq]
        if offsets:
            assert offsets[0] == committed[mq]
    assert {msg.keys for msg in uncommitted} <= {msg.keys for msg in after}


def test_auto_commit_commits_polled_batches_at_a_later_poll(cluster: DevCluster, producer: Producer,
                                                            consumers: list[PullConsumer]) -> None:
    make_topic(cluster, "PullAutoT", 2)
    send(producer, "PullAutoT", 40)
    consumer = new_pull_consumer(cluster, consumers, "cg_pull_auto", "pull-auto-1", auto_commit_interval=1.0)
    consumer.start()
    queues = consumer.fetch_message_queues("PullAutoT")
    consumer.assign(queues)
    polled = flatten(poll_until(consumer, 40))
    ends = {mq: 1 + max(msg.queue_offset for msg in polled if queue_of(msg) == mq) for mq in queues}
    time.sleep(1.1)
    consumer.poll(timeout=0)     # the next poll after the interval commits
    with admin(cluster) as instance:
        wait_until(lambda: {mq: broker_offset(instance, "cg_pull_auto", mq) for mq in queues} == ends, 5)
    # the periodic persistence sent them; a kill now would repeat nothing
    consumer.shutdown()
    again = new_pull_consumer(cluster, consumers, "cg_pull_auto", "pull-auto-2")
    again.start()
    again.assign(queues)
    assert again.poll(timeout=0.5) == []


def test_pause_and_resume_a_queue(cluster: DevCluster, producer: Producer, consumers: list[PullConsumer]) -> None:
    make_topic(cluster, "PullPauseT", 2)
    consumer = new_pull_consumer(cluster, consumers, "cg_pull_pause", "pull-pause")
    consumer.start()
    paused, running = consumer.fetch_message_queues("PullPauseT")
    consumer.pause([paused])
    consumer.assign([paused, running])
    assert consumer.is_paused(paused) and consumer.paused() == {paused}
    send_to(producer, paused, 15, "p")
    send_to(producer, running, 15, "r")
    polled = flatten(poll_until(consumer, 15))
    assert all(queue_of(msg) == running for msg in polled)
    assert consumer.poll(timeout=0.5) == []
    consumer.resume([paused])
    resumed = flatten(poll_until(consumer, 15, timeout=5))
    assert [(queue_of(msg), msg.queue_offset) for msg in resumed] == [(paused, offset) for offset in range(15)]
    # batches already cached when the queue is paused are kept, not handed out, until resume
    send_to(producer, paused, 5, "x")
    wait_until(lambda: consumer.cached_messages(paused) == 5, 5)
    consumer.pause(paused)
    assert consumer.poll(timeout=0.3) == []
    assert consumer.cached_messages(paused) == 5
    consumer.resume(paused)
    assert [msg.keys for msg in flatten(poll_until(consumer, 5, timeout=5))] == [f"x{i}" for i in range(5)]


def test_flow_control_keeps_the_cache_bounded(cluster: DevCluster, producer: Producer,
                                              consumers: list[PullConsumer]) -> None:
    make_topic(cluster, "PullFlowT", 2)
    queues = None
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route("PullFlowT"))
        queues = instance.topic_subscribe_info("PullFlowT")
    for mq in queues:
        send_to(producer, mq, 150, f"q{mq.queue_id}-")
    consumer = new_pull_consumer(cluster, consumers, "cg_pull_flow", "pull-flow", pull_batch_size=5,
                                 pull_threshold_for_queue=20, pull_threshold_for_all=35)
    consumer.start()
    consumer.assign(queues)
    wait_until(lambda: consumer.cached_messages() >= 35, 5)
    time.sleep(0.5)                                  # many flow-control rounds
    peak_queue, peak_all = 0, 0
    got: list[MessageExt] = []
    deadline = time.monotonic() + 20
    while len(got) < 300:
        assert time.monotonic() < deadline
        peak_queue = max(peak_queue, *(consumer.cached_messages(mq) for mq in queues))
        peak_all = max(peak_all, consumer.cached_messages())
        got.extend(consumer.poll(timeout=0.5))
    # a queue is pulled only while it caches <= 20: at most one batch (5) more; all queues: <= 35 + 2 batches
    assert 20 <= peak_queue <= 25
    assert peak_all <= 45
    for mq in queues:
        assert [msg.queue_offset for msg in got if queue_of(msg) == mq] == list(range(150))


def test_broadcasting_every_member_gets_everything_and_offsets_stay_local(
        cluster: DevCluster, producer: Producer, consumers: list[PullConsumer], tmp_path: Path) -> None:
    make_topic(cluster, "PullBroadcastT", 2)
    keys = send(producer, "PullBroadcastT", 30)
    members = [new_pull_consumer(cluster, consumers, "cg_pull_bc", f"pull-bc-{index}",
                                 message_model=MessageModel.BROADCASTING, local_offset_store_dir=tmp_path)
               for index in (1, 2)]
    for member in members:
        member.subscribe("PullBroadcastT")
        member.start()
    for member in members:
        assert sorted(msg.keys or "" for msg in flatten(poll_until(member, 30))) == sorted(keys)
        assert len(member.assignment()) == 2
    for member in members:
        member.shutdown()
    for name in ("pull-bc-1", "pull-bc-2"):
        offsets = LocalFileOffsetStore("cg_pull_bc", name, store_dir=tmp_path).read_local_offsets()
        assert len(offsets) == 2 and sum(offsets.values()) == 30
    with admin(cluster) as instance:
        # nothing went to the broker (which answers 0 for a queue whose first message is still in memory)
        assert all(broker_offset(instance, "cg_pull_bc", mq) in (-1, 0) for mq in offsets)

    restarted = new_pull_consumer(cluster, consumers, "cg_pull_bc", "pull-bc-1",
                                  message_model=MessageModel.BROADCASTING, local_offset_store_dir=tmp_path)
    restarted.subscribe("PullBroadcastT")
    restarted.start()
    assert restarted.poll(timeout=0.5) == []
    new_keys = send(producer, "PullBroadcastT", 6, prefix="n")
    assert sorted(msg.keys or "" for msg in flatten(poll_until(restarted, 6))) == sorted(new_keys)


def test_poll_async_and_shutdown_leave_nothing_running(cluster: DevCluster, producer: Producer) -> None:
    make_topic(cluster, "PullAsyncT", 1)
    keys = send(producer, "PullAsyncT", 5)
    consumer = PullConsumer("cg_pull_async", namesrv=cluster.namesrv_addr, instance_name="pull-async",
                            consume_from=FIRST, **FAST_CLIENT)
    with consumer:
        consumer.subscribe("PullAsyncT", "*")

        async def poll_all() -> list[str]:
            got: list[str] = []
            while len(got) < 5:
                got.extend(msg.keys or "" for msg in await consumer.poll_async(timeout=2))
            return got

        assert asyncio.run(poll_all()) == keys
        # a poll blocked in another thread returns at shutdown
        results: list[list[MessageExt]] = []
        blocked = threading.Thread(target=lambda: results.append(consumer.poll(timeout=30)))
        blocked.start()
        time.sleep(0.2)
    blocked.join(5)
    assert not blocked.is_alive() and results == [[]]
    assert not [thread for thread in client_threads() if "pull-async" in thread.name or "cg_pull_async" in thread.name]
    consumer.shutdown()          # idempotent
    with pytest.raises(MQClientError, match="SHUTDOWN_ALREADY"):
        consumer.poll(timeout=0)


def test_bad_input_gets_clear_errors(cluster: DevCluster) -> None:
    with pytest.raises(MQClientError, match="unknown pull consumer settings"):
        PullConsumer("cg_pull_bad", namesrv=cluster.namesrv_addr, pull_batch=3)
    with pytest.raises(MQClientError, match="pull_batch_size"):
        PullConsumer("cg_pull_bad", namesrv=cluster.namesrv_addr, pull_batch_size=0)
    with pytest.raises(MQClientError, match="consumer_timeout_when_suspend"):
        PullConsumer("cg_pull_bad", namesrv=cluster.namesrv_addr, broker_suspend_max_time=40.0)
    with pytest.raises(MQClientError, match="auto_commit_interval"):
        PullConsumer("cg_pull_bad", namesrv=cluster.namesrv_addr, auto_commit_interval=0.5)
    consumer = PullConsumer("cg_pull_bad", namesrv=cluster.namesrv_addr, instance_name="pull-bad")
    with pytest.raises(MQClientError, match="at least one"):
        consumer.assign([])
    with pytest.raises(MQClientError, match="must be a MessageQueue"):
        consumer.assign(["PullBadT"])   # type: ignore[list-item]
    consumer.assign([MessageQueue("PullBadT", "broker-a", 0)])
    with pytest.raises(MQClientError, match="mutually exclusive"):
        consumer.subscribe("PullBadT")
    with pytest.raises(MQClientError, match="call start"):
        consumer.poll(timeout=0)
    with consumer:
        with pytest.raises(MQClientError, match="does the topic exist"):
            consumer.fetch_message_queues("PullNoSuchTopic")
        with pytest.raises(MQClientError, match="timeout"):
            consumer.poll(timeout=-1)
        with pytest.raises(MQClientError, match="not hold"):
            consumer.commit_sync({MessageQueue("PullBadT", "broker-a", 3): 1})
        with pytest.raises(MQClientError, match="timestamp"):
            consumer.offset_for_timestamp(MessageQueue("PullBadT", "broker-a", 0), "yesterday")  # type: ignore[arg-type]
