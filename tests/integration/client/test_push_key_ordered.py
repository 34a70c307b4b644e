"""Key-ordered push consumers (`register_key_ordered_listener`) against a dev cluster.

* per-key order with 1,000 keys on 8 queues while two members join and leave (in one process), and
  the same with consumer processes, one of them killed with SIGKILL and replaced (nothing lost,
  replays of a key in order, never two calls of one key at once, never two members on one queue
  at once);
* a poison message on key A does not hold up key B of the same queue; A goes to the DLQ and A's
  next message follows it;
* the committed offset never passes a message still being consumed;
* ``async def`` listeners with a custom key function; bad arguments are refused.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from client_helpers import pull_messages
from push_helpers import admin, broker_offset, make_topic, new_consumer
from test_push_processes import CLIENT_SETTINGS, ConsumerProcess, read_records

from rocketflow import Message, Producer, PushConsumer
from rocketflow.client import ConsumeFromWhere, ConsumeOrderlyContext, ConsumeOrderlyStatus, MQClientError
from rocketflow.client.consumer.consume.key_ordered import ConsumeKeyOrderedContext, default_message_key
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue
from rocketflow.protocol.names import dlq_topic
from testkit import wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SUCCESS = ConsumeOrderlyStatus.SUCCESS
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
#: Broker locks live 6 s (instead of 60) so that a killed member's queues move on quickly.
BROKER_LOCK_LIFE_MS = 6000
#: Short lock and rebalance timings (seconds) so that handovers take a moment, not a minute.
FAST_LOCKS = {"rebalance_interval": 1.0, "lock_interval": 0.5, "lock_first_delay": 0.2, "unlock_delay_time": 0.3,
              "lock_max_live_time": 4.0}
KEYS = 1000
QUEUES = 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={"rebalance_lock_max_live_time_ms": BROKER_LOCK_LIFE_MS})
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def processes() -> Iterator[list[ConsumerProcess]]:
    started: list[ConsumerProcess] = []
    yield started
    for process in started:
        process.kill()


@dataclass(frozen=True, slots=True)
class Call:
    owner: str        # who consumed it: member and process queue identity (a new one per ownership period)
    queue: int
    offset: int
    key: str          # "<key>-<seq>"
    start: float
    end: float


class CallLog:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def add(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def distinct(self) -> int:
        return len({(call.queue, call.offset) for call in self.snapshot()})


def logging_listener(log: CallLog, member: str, consumer: Callable[[], PushConsumer],
                     pause: float = 0.0) -> Callable[[list[MessageExt], ConsumeOrderlyContext], ConsumeOrderlyStatus]:
    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        assert len(msgs) == 1
        start = time.time()
        if pause:
            time.sleep(pause)
        msg = msgs[0]
        pq = consumer().rebalance.process_queue_table.get(context.message_queue)
        log.add(Call(f"{member}/{id(pq)}", context.message_queue.queue_id, msg.queue_offset, msg.keys or "",
                     start, time.time()))
        return SUCCESS

    return listener


def send_sequences(cluster: DevCluster, topic: str, keys: int, seqs: range) -> None:
    """``key<k>-<seq>`` for every seq, every key, by sharding key ``key<k>``."""
    with Producer(f"{topic}_pg", namesrv=cluster.namesrv_addr, instance_name=f"{topic}-producer") as producer:
        for seq in seqs:
            for key in range(keys):
                producer.send(Message(topic, b"x", keys=f"key{key}-{seq}"), sharding_key=f"key{key}")


def check_key_order(calls: list[dict[str, Any]] | list[Call], keys: int, seqs: int) -> int:
    """Every ``key<k>-<seq>`` consumed; per key, calls never overlap and sequence numbers go up by one,
    except that a new owner may replay from an earlier one. Returns the number of replayed calls."""
    rows = [(c["owner"], c["key"], c["start"], c["end"]) if isinstance(c, dict) else (c.owner, c.key, c.start, c.end)
            for c in calls]
    assert {row[1] for row in rows} == {f"key{k}-{s}" for k in range(keys) for s in range(seqs)}
    by_key: dict[str, list[tuple[float, float, int, str]]] = defaultdict(list)
    for owner, name, start, end in rows:
        key, seq = name.rsplit("-", 1)
        by_key[key].append((start, end, int(seq), owner))
    replays = 0
    for key, key_calls in by_key.items():
        key_calls.sort()
        assert key_calls[0][2] == 0, (key, key_calls[:3])
        for earlier, later in pairwise(key_calls):
            assert later[0] >= earlier[1], ("two calls of one key at once", key, earlier, later)
            if later[2] != earlier[2] + 1:
                assert later[2] <= earlier[2] and later[3] != earlier[3], ("out of order", key, earlier, later)
                replays += 1
    return replays


def check_queue_owners(calls: list[tuple[str, str, int, float, float]]) -> int:
    """``(consumer, process queue, queue, start, end)`` per call: two consumers never ran calls of one queue
    at overlapping times (keys of a queue run in parallel, but only inside its current owner). Returns the
    number of handovers, i.e. the times a queue's calls move to another consumer."""
    by_queue: dict[int, list[tuple[float, float, str, str]]] = defaultdict(list)
    for consumer, pq, queue, start, end in calls:
        by_queue[queue].append((start, end, consumer, pq))
    handovers = 0
    for queue, queue_calls in by_queue.items():
        queue_calls.sort()
        latest_end: dict[str, tuple[float, str]] = {}   # consumer -> (latest end so far, its process queue)
        current: str | None = None
        for start, end, consumer, pq in queue_calls:
            for other, (other_end, other_pq) in latest_end.items():
                assert other == consumer or other_end <= start, (
                    "two consumers on one queue at once", queue, (other, other_pq, other_end),
                    (consumer, pq, start, end))
            if consumer != current:
                handovers += current is not None
                current = consumer
            previous = latest_end.get(consumer)
            latest_end[consumer] = (max(end, previous[0]) if previous else end, pq)
    return handovers


def max_parallel(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = best = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def owned(consumer: PushConsumer, topic: str) -> int:
    return sum(1 for mq in consumer.assigned_queues() if mq.topic == topic)


def committed(cluster: DevCluster, group: str, topic: str, queues: int) -> list[int]:
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route(topic))
        broker = cluster.broker_config.broker_name
        return [broker_offset(instance, group, MessageQueue(topic, broker, queue)) for queue in range(queues)]


def test_key_order_with_members_joining_and_leaving(cluster: DevCluster) -> None:
    topic, group, seqs = "KoChurnT", "cg_ko_churn", 4
    make_topic(cluster, topic, QUEUES)
    log = CallLog()
    members: dict[str, PushConsumer] = {}

    def start(name: str) -> PushConsumer:
        consumer = new_consumer(cluster, group, f"ko-churn-{name}", consume_from=FIRST, **FAST_LOCKS)
        consumer.subscribe(topic)
        consumer.register_key_ordered_listener(logging_listener(log, name, lambda: consumer, pause=0.002),
                                               max_in_flight_per_queue=16)
        consumer.start()
        members[name] = consumer
        return consumer

    try:
        first = start("a")
        send_sequences(cluster, topic, KEYS, range(0, 2))
        second = start("b")
        wait_until(lambda: owned(second, topic) == owned(first, topic) == QUEUES // 2, timeout=20)
        send_sequences(cluster, topic, KEYS, range(2, 3))
        first.shutdown()                                   # leaves: b takes every queue
        wait_until(lambda: owned(second, topic) == QUEUES, timeout=20)
        third = start("c")                                 # joins: half the queues move again
        wait_until(lambda: owned(second, topic) == owned(third, topic) == QUEUES // 2, timeout=20)
        send_sequences(cluster, topic, KEYS, range(3, seqs))
        wait_until(lambda: log.distinct() == KEYS * seqs, timeout=40)
    finally:
        for consumer in members.values():
            consumer.shutdown()
    calls = log.snapshot()
    replays = check_key_order(calls, KEYS, seqs)
    assert replays < len(calls) // 4
    handovers = check_queue_owners([(call.owner.split("/")[0], call.owner, call.queue, call.start, call.end)
                                    for call in calls])
    assert handovers >= QUEUES // 2, "queues moved between members"
    by_queue: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for call in calls:
        by_queue[call.queue].append((call.start, call.end))
    assert max(max_parallel(intervals) for intervals in by_queue.values()) > 1, "keys of a queue ran in parallel"
    assert sum(committed(cluster, group, topic, QUEUES)) == KEYS * seqs


def test_killed_member_replaced_loses_nothing_and_keeps_key_order(cluster: DevCluster, tmp_path: Path,
                                                                    processes: list[ConsumerProcess]) -> None:
    """Two member processes; one is SIGKILLed mid-way and a new one joins: its queues move on once their
    broker locks expire (6 s), nothing is lost and every key stays in order, replays included."""
    topic, group, seqs = "KoKillT", "cg_ko_kill", 3
    make_topic(cluster, topic, QUEUES)
    settings = {**CLIENT_SETTINGS, **FAST_LOCKS, "consume_thread_max": 4, "consume_thread_min": 4}
    outputs: dict[str, Path] = {}

    def start(name: str) -> ConsumerProcess:
        outputs[name] = tmp_path / f"{name}.jsonl"
        process = ConsumerProcess(cluster, group=group, topic=topic, out=outputs[name], instance=f"ko-kill-{name}",
                                  mode="key-ordered", settings=settings, sleep_ms=5)
        processes.append(process)
        process.wait_ready()
        return process

    one, two = start("one"), start("two")
    send_sequences(cluster, topic, KEYS, range(1))
    wait_until(lambda: len(read_records(outputs["two"])) >= 100, timeout=30)
    two.kill()                     # in the middle of its queues' first sequence numbers
    send_sequences(cluster, topic, KEYS, range(1, seqs))
    three = start("three")

    def keys_seen() -> int:
        return len({key for record in read_records(*outputs.values()) for key in record["keys"]})

    wait_until(lambda: keys_seen() == KEYS * seqs, timeout=40, interval=0.3)
    one.terminate()
    three.terminate()
    records = read_records(*outputs.values())
    calls = [{"owner": f"{record['pid']}/{record['pq']}", "key": record["keys"][0], "start": record["start"],
              "end": record["end"]} for record in records]
    replays = check_key_order(calls, KEYS, seqs)
    # a killed member's queues move on only once their broker locks expire: never two processes at once
    handovers = check_queue_owners([(str(record["pid"]), f"{record['pid']}/{record['pq']}", record["queue"],
                                     record["start"], record["end"]) for record in records])
    assert handovers >= 1, "the killed member's queues were taken over"
    assert sum(committed(cluster, group, topic, QUEUES)) == KEYS * seqs
    consumed_by = {record["pid"] for record in records}
    assert len(consumed_by) >= 2
    print(f"kill: {len(records)} calls by {len(consumed_by)} processes, {replays} replayed, {handovers} handovers")


def test_a_poison_key_does_not_delay_other_keys_of_its_queue(cluster: DevCluster) -> None:
    topic, group = "KoPoisonT", "cg_ko_poison"
    make_topic(cluster, topic, 1)
    retry_delay_ms = 2000
    poison_attempts: list[float] = []
    consumed_at: dict[str, float] = {}
    consumed_wall: dict[str, float] = {}
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        assert isinstance(context, ConsumeKeyOrderedContext)
        now = time.monotonic()
        with lock:
            if msgs[0].keys == "A-0":
                poison_attempts.append(now)
                raise RuntimeError("poison")
            consumed_at[msgs[0].keys or ""] = now
            consumed_wall[msgs[0].keys or ""] = time.time()
        return SUCCESS

    consumer = new_consumer(cluster, group, "ko-poison", consume_from=FIRST, max_reconsume_times=1,
                            suspend_current_queue_time_millis=retry_delay_ms, **FAST_LOCKS)
    consumer.subscribe(topic)
    consumer.register_key_ordered_listener(listener)
    sent_at: dict[str, float] = {}
    with consumer, Producer("ko_poison_pg", namesrv=cluster.namesrv_addr, instance_name="ko-poison-p") as producer:
        wait_until(lambda: owned(consumer, topic) == 1, timeout=20)
        producer.send(Message(topic, b"poison", keys="A-0"), sharding_key="A")
        for index in range(5):
            sent_at[f"B-{index}"] = time.monotonic()
            producer.send(Message(topic, b"fine", keys=f"B-{index}"), sharding_key="B")
        producer.send(Message(topic, b"fine", keys="A-1"), sharding_key="A")     # behind the poison message
        wait_until(lambda: all(key in consumed_at for key in sent_at), timeout=10)
        latencies = [consumed_at[key] - sent_at[key] for key in sent_at]
        # max_reconsume_times=1: a first attempt, one retry after the suspend time, then the DLQ
        wait_until(lambda: len(poison_attempts) == 2, timeout=15)
        # then key A goes on with A-1
        wait_until(lambda: "A-1" in consumed_at, timeout=10)
        wait_until(lambda: committed(cluster, group, topic, 1) == [7], timeout=15)
    retry_gap = poison_attempts[1] - poison_attempts[0]
    assert retry_gap >= retry_delay_ms / 1000 * 0.9
    assert max(latencies) < retry_gap / 4, (latencies, retry_gap)
    # A-1 waited for A-0 to be settled (its last attempt is followed by the dead-letter send)
    assert consumed_at["A-1"] > poison_attempts[-1], (consumed_at["A-1"], poison_attempts)
    assert len(poison_attempts) == 2
    with admin(cluster) as instance:
        dlq = dlq_topic(group)

        def dead_letters() -> list[MessageExt]:
            instance.run(instance.update_topic_route(dlq))
            return pull_messages(instance, MessageQueue(dlq, cluster.broker_config.broker_name, 0))

        wait_until(lambda: len(dead_letters()) == 1, timeout=10, interval=0.3)
        letter = dead_letters()[0]
        assert letter.keys == "A-0"
        # A-1 ran after A-0 reached the DLQ: the broker stored the letter before A-1's call began
        assert letter.store_timestamp / 1000 <= consumed_wall["A-1"] + 0.05, (letter.store_timestamp, consumed_wall)


def test_committed_offset_never_passes_a_message_in_flight(cluster: DevCluster) -> None:
    topic, group, total, held_offset = "KoHoldT", "cg_ko_hold", 20, 3
    make_topic(cluster, topic, 1)
    release = threading.Event()
    done: set[int] = set()

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        if msgs[0].queue_offset == held_offset:
            release.wait(30)
        done.add(msgs[0].queue_offset)
        return SUCCESS

    consumer = new_consumer(cluster, group, "ko-hold", consume_from=FIRST, **FAST_LOCKS)
    consumer.subscribe(topic)
    consumer.register_key_ordered_listener(listener)
    mq = MessageQueue(topic, cluster.broker_config.broker_name, 0)
    with Producer("ko_hold_pg", namesrv=cluster.namesrv_addr, instance_name="ko-hold-p") as producer:
        for index in range(total):
            producer.send(Message(topic, b"x", keys=f"h{index}"))    # one key each (KEYS), no sharding key
    with consumer:
        try:
            wait_until(lambda: len(done) == total - 1, timeout=15)
            wait_until(lambda: committed(cluster, group, topic, 1) == [held_offset], timeout=10)
            deadline = time.monotonic() + 1.0            # several persist rounds (every 0.2 s)
            while time.monotonic() < deadline:
                assert consumer.committed_offsets(topic)[mq] == held_offset
                assert committed(cluster, group, topic, 1) == [held_offset]
        finally:
            release.set()                                # (also lets the consumer shut down after a failure)
        wait_until(lambda: committed(cluster, group, topic, 1) == [total], timeout=10)


def test_async_listener_with_a_key_function(cluster: DevCluster) -> None:
    topic, group, keys, seqs, queues = "KoAsyncT", "cg_ko_async", 200, 5, 4
    make_topic(cluster, topic, queues)
    with Producer("ko_async_pg", namesrv=cluster.namesrv_addr, instance_name="ko-async-p") as producer:
        for seq in range(seqs):
            # 10 keys share a sharding key (and so a queue): the key function tells them apart
            for key in range(keys):
                producer.send(Message(topic, b"x", keys=f"key{key}-{seq}"), sharding_key=f"group{key % 20}")
    calls: list[Call] = []
    running: dict[int, int] = defaultdict(int)
    most_parallel = [0]

    async def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        queue = context.message_queue.queue_id
        running[queue] += 1           # on the client's loop: no lock needed
        most_parallel[0] = max(most_parallel[0], running[queue])
        start = time.time()
        await asyncio.sleep(0.002)
        calls.append(Call("async", queue, msgs[0].queue_offset, msgs[0].keys or "", start, time.time()))
        running[queue] -= 1
        return SUCCESS

    consumer = new_consumer(cluster, group, "ko-async", consume_from=FIRST, **FAST_LOCKS)
    consumer.subscribe(topic)
    consumer.register_key_ordered_listener(listener, key=lambda msg: (msg.keys or "").rsplit("-", 1)[0])
    with consumer:
        wait_until(lambda: len(calls) >= keys * seqs, timeout=20)
    check_key_order(list(calls), keys, seqs)
    assert most_parallel[0] > 1
    assert sum(committed(cluster, group, topic, queues)) == keys * seqs


def test_default_keys_and_bad_arguments() -> None:
    msg = MessageExt("T", b"x", properties={MessageConst.KEYS: "k1 k2"})
    assert default_message_key(msg) == "k1"
    msg.properties[MessageConst.SHARDING_KEY] = "s"
    assert default_message_key(msg) == "s"
    assert default_message_key(MessageExt("T", b"x")) is None
    consumer = PushConsumer("cg_ko_bad", namesrv="127.0.0.1:9876")
    with pytest.raises(MQClientError, match="key must be a callable"):
        consumer.register_key_ordered_listener(lambda msgs, context: SUCCESS, key="k")  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="max_in_flight_per_queue"):
        consumer.register_key_ordered_listener(lambda msgs, context: SUCCESS, max_in_flight_per_queue=0)
    consumer.register_key_ordered_listener(lambda msgs, context: SUCCESS)
    assert consumer.key_ordered is not None and consumer.consume_orderly
    consumer.register_concurrent_listener(lambda msgs, context: None)   # switching modes forgets it
    assert consumer.key_ordered is None


def test_consume_lock_is_held_exactly_while_keys_run(cluster: DevCluster) -> None:
    """The queue's consume lock is taken when keys start and released by the consume thread that
    finishes the last of them (at once, not at the driver's next check); while a key runs, anyone
    else (a rebalance dropping the queue) cannot take it, and other keys still start."""
    topic, group = "KoLockT", "cg_ko_lock"
    make_topic(cluster, topic, 1)
    release = threading.Event()
    entered = threading.Event()
    done: list[int] = []

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        if msgs[0].keys == "slow":
            entered.set()
            release.wait(30)
        done.append(msgs[0].queue_offset)
        return SUCCESS

    consumer = new_consumer(cluster, group, "ko-lock", consume_from=FIRST, **FAST_LOCKS)
    consumer.subscribe(topic)
    consumer.register_key_ordered_listener(listener)
    mq = MessageQueue(topic, cluster.broker_config.broker_name, 0)
    with Producer("ko_lock_pg", namesrv=cluster.namesrv_addr, instance_name="ko-lock-p") as producer, consumer:
        for index in range(10):
            producer.send(Message(topic, b"x", keys=f"fast{index}"))
        wait_until(lambda: len(done) == 10, timeout=15)
        pq = consumer.rebalance.process_queue_table[mq]
        # released by the worker that finished the last key: well within the driver's 1 s watch interval
        wait_until(lambda: not pq.consume_lock.locked(), timeout=0.3, interval=0.01)
        try:
            producer.send(Message(topic, b"x", keys="slow"))
            assert entered.wait(10)
            assert pq.consume_lock.locked()
            assert not pq.consume_lock.try_acquire_for(object())     # a rebalance would have to wait
            producer.send(Message(topic, b"x", keys="fast-after"))  # another key still runs meanwhile
            wait_until(lambda: len(done) == 11, timeout=10)
            assert pq.consume_lock.locked()
        finally:
            release.set()
        wait_until(lambda: len(done) == 12, timeout=10)
        wait_until(lambda: not pq.consume_lock.locked(), timeout=0.3, interval=0.01)
        owner = object()
        assert pq.consume_lock.try_acquire_for(owner)
        pq.consume_lock.release_for(owner)
    assert sorted(done) == list(range(12))
