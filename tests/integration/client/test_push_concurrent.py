"""`PushConsumer` with concurrent listeners against a dev cluster: delivery, offsets, flow control,
async listeners, hooks, stats, running info, suspend/resume and prompt rebalancing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from push_helpers import Recorder, admin, broker_offset, make_topic, new_consumer, send

from rocketflow import Producer, PushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeMessageContext,
    ConsumeMessageHook,
    ConsumeReturnType,
    MessageModel,
    MQClientError,
)
from rocketflow.client.consumer.consume.context import CMResult
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.dev import DevCluster
from rocketflow.protocol.bodies import ConsumerRunningInfo
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import GetConsumerRunningInfoRequestHeader
from testkit import client_threads, wait_until

SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture
def producer(cluster: DevCluster) -> Iterator[Producer]:
    producer = Producer("push_concurrent_pg", namesrv=cluster.namesrv_addr, instance_name="push-concurrent-producer")
    producer.start()
    yield producer
    producer.shutdown()


@pytest.fixture
def consumers() -> Iterator[list[PushConsumer]]:
    started: list[PushConsumer] = []
    yield started
    for consumer in started:
        consumer.shutdown()


def recording_listener(recorder: Recorder):  # type: ignore[no-untyped-def]
    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        recorder.record(msgs, context.message_queue)
        return SUCCESS

    return listener


def test_every_message_is_consumed_once_and_the_end_is_committed(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushAllT", 4)
    keys = send(producer, "PushAllT", 200)
    recorder = Recorder()
    consumer = new_consumer(cluster, "cg_push_all", "push-all", consume_from=FIRST)
    consumer.subscribe("PushAllT", "*")
    consumer.register_concurrent_listener(recording_listener(recorder))
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(200)
    time.sleep(0.3)
    assert sorted(recorder.keys()) == sorted(keys)
    assert {d.thread.rsplit("_", 1)[0] for d in recorder.snapshot()} == {"rocketflow-client-consume[cg_push_all]"}
    queues = [mq for mq in consumer.assigned_queues() if mq.topic == "PushAllT"]
    assert len(queues) == 4
    wait_until(lambda: sum(consumer.committed_offsets("PushAllT").values()) == 200)
    totals = consumer.consumer_stats.totals("cg_push_all", "PushAllT")
    assert totals.consume_ok_msgs == 200 and totals.pulled_msgs == 200 and totals.consume_failed_msgs == 0
    status = consumer.stats()["PushAllT"]
    assert status.consume_ok_tps > 0 and status.pull_tps > 0 and status.pull_rt >= 0
    consumer.shutdown()
    with admin(cluster) as instance:
        committed = {mq: broker_offset(instance, "cg_push_all", mq) for mq in queues}
    assert sum(committed.values()) == 200, committed
    assert not [thread for thread in client_threads() if "cg_push_all" in thread.name]


def test_a_later_message_finishing_first_never_moves_the_commit_past_an_earlier_one(
        cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushGapT", 1)
    send(producer, "PushGapT", 10)
    release = threading.Event()
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        if msgs[0].keys == "k4":
            assert release.wait(20)
        recorder.record(msgs, context.message_queue)
        return SUCCESS

    consumer = new_consumer(cluster, "cg_push_gap", "push-gap", consume_from=FIRST)
    consumer.subscribe("PushGapT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(9)
    mq = MessageQueue("PushGapT", cluster.broker_config.broker_name, 0)
    time.sleep(0.5)   # several persistence rounds (every 0.2 s)
    assert consumer.committed_offsets("PushGapT") == {mq: 4}
    with admin(cluster) as instance:
        assert broker_offset(instance, "cg_push_gap", mq) == 4
        release.set()
        recorder.wait_for(10)
        wait_until(lambda: consumer.committed_offsets("PushGapT") == {mq: 10})
        wait_until(lambda: broker_offset(instance, "cg_push_gap", mq) == 10)


def test_async_listeners_run_on_the_client_loop(cluster: DevCluster, producer: Producer,
                                                consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushAsyncT", 2)
    keys = send(producer, "PushAsyncT", 50)
    recorder = Recorder()
    on_loop: list[bool] = []
    consumer = new_consumer(cluster, "cg_push_async", "push-async", consume_from=FIRST)

    async def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        on_loop.append(consumer.instance.in_loop_thread())
        recorder.record(msgs, context.message_queue)
        return SUCCESS

    consumer.subscribe("PushAsyncT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(50)
    assert sorted(recorder.keys()) == sorted(keys)
    assert all(on_loop)
    wait_until(lambda: sum(consumer.committed_offsets("PushAsyncT").values()) == 50)


def held_consumer(cluster: DevCluster, producer: Producer, consumers: list[PushConsumer], name: str, count: int,
                  let_through: Callable[[], bool], **settings: object) -> tuple[ProcessQueue, Recorder]:
    """A two-thread consumer of a new one-queue topic of ``count`` messages whose listener calls each wait for
    ``let_through()`` (True once let through); its process queue and what it consumed."""
    topic = f"Push{name}T"
    make_topic(cluster, topic, 1)
    send(producer, topic, count)
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        assert let_through()
        recorder.record(msgs, context.message_queue)
        return SUCCESS

    consumer = new_consumer(cluster, f"cg_push_{name}", f"push-{name}", consume_from=FIRST, consume_thread_min=2,
                            consume_thread_max=2, **settings)
    consumer.subscribe(topic)
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    mq = MessageQueue(topic, cluster.broker_config.broker_name, 0)
    wait_until(lambda: mq in consumer.rebalance.process_queue_table)
    return consumer.rebalance.process_queue_table[mq], recorder


# batches of 8 queue units or more are put after the next pull goes out (`ANSWER_LATER_MIN_UNITS`)
@pytest.mark.parametrize("batch", [4, 8], ids=["taken-at-once", "taken-after-the-next-pull"])
def test_flow_control_caps_cached_messages_per_queue(cluster: DevCluster, producer: Producer,
                                                     consumers: list[PushConsumer], batch: int) -> None:
    release = threading.Event()
    pq, recorder = held_consumer(cluster, producer, consumers, f"Flow{batch}", 60, lambda: release.wait(20),
                                 pull_threshold_for_queue=10, pull_batch_size=batch)
    highest = 0
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        highest = max(highest, pq.msg_count)
        time.sleep(0.002)
    assert 10 < highest <= 10 + batch  # a pull happens at count <= 10 and adds one batch
    release.set()
    recorder.wait_for(60)
    assert len(set(recorder.keys())) == 60


def test_a_flow_controlled_queue_resumes_once_its_cache_has_drained(cluster: DevCluster, producer: Producer,
                                                                    consumers: list[PushConsumer]) -> None:
    """The pause over `pull_threshold_for_queue` ends when the consume threads bring the cache down to half
    the threshold, not only at RocketMQ's 50 ms re-check: each round fills the cache past the threshold while
    the listener is held, then lets it drain at once."""
    rounds = 3
    permits = threading.Semaphore(0)
    pq, recorder = held_consumer(cluster, producer, consumers, "FlowResume", 60 * rounds,
                                 lambda: permits.acquire(timeout=20), pull_threshold_for_queue=10, pull_batch_size=4)
    consumer = consumers[-1]
    pull_service = consumer._pull_service
    assert pull_service is not None
    consumed = 0
    for _ in range(rounds):
        wait_until(lambda: pq.msg_count > 10)               # paused: over the threshold
        before = pull_service._drained_resume_times
        held = pq.msg_count
        for _ in range(held):
            permits.release()
        consumed += held
        recorder.wait_for(consumed)
        wait_until(lambda: pq.msg_count > 0 or recorder.count() >= 60 * rounds)
        if pull_service._drained_resume_times > before:
            break
    else:
        pytest.fail("three pauses all ended at the 50 ms re-check: the drained cache never resumed the pull")
    for _ in range(60 * rounds):
        permits.release()
    recorder.wait_for(60 * rounds)
    assert len(set(recorder.keys())) == 60 * rounds


@pytest.mark.parametrize(("max_span", "batch"), [(5, 4), (12, 8)], ids=["taken-at-once", "taken-after-the-next-pull"])
def test_offset_span_flow_control(cluster: DevCluster, producer: Producer, consumers: list[PushConsumer],
                                  max_span: int, batch: int) -> None:
    release = threading.Event()
    pq, recorder = held_consumer(cluster, producer, consumers, f"Span{batch}", 40, lambda: release.wait(20),
                                 consume_concurrently_max_span=max_span, pull_batch_size=batch)
    wait_until(lambda: pq.max_span > max_span)
    time.sleep(0.5)
    # nothing is consumed: pulling stops once the cached offsets span more than max_span, one batch past it at most
    assert max_span < pq.max_span <= max_span + batch and pq.msg_count <= max_span + batch + 1
    release.set()
    recorder.wait_for(40)


class RecordingHook(ConsumeMessageHook):
    def __init__(self) -> None:
        self.before: list[ConsumeMessageContext] = []
        self.after: list[tuple[str, bool, str]] = []

    def consume_message_before(self, context: ConsumeMessageContext) -> None:
        self.before.append(context)

    def consume_message_after(self, context: ConsumeMessageContext) -> None:
        self.after.append((context.status, context.success, context.props["ConsumeContextType"]))


def test_hooks_stats_and_running_info_through_the_broker(cluster: DevCluster, producer: Producer,
                                                        consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushHookT", 2)
    send(producer, "PushHookT", 20)
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus | None:
        recorder.record(msgs, context.message_queue)
        if msgs[0].keys == "k3" and msgs[0].reconsume_times == 0:
            raise RuntimeError("boom")
        if msgs[0].keys == "k5" and msgs[0].reconsume_times == 0:
            return None
        return SUCCESS

    hook = RecordingHook()
    consumer = new_consumer(cluster, "cg_push_hook", "push-hook", consume_from=FIRST)
    consumer.subscribe("PushHookT")
    consumer.register_concurrent_listener(listener)
    consumer.register_hook(hook)
    with pytest.raises(MQClientError):
        consumer.register_hook(object())
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(20)
    wait_until(lambda: len(hook.after) >= 20)
    assert len(hook.before) >= 20
    assert all(ctx.consumer_group == "cg_push_hook" and len(ctx.msg_list) == 1 for ctx in hook.before)
    outcomes = {(status, success, kind) for status, success, kind in hook.after}
    assert ("CONSUME_SUCCESS", True, ConsumeReturnType.SUCCESS.name) in outcomes
    assert ("RECONSUME_LATER", False, ConsumeReturnType.EXCEPTION.name) in outcomes
    assert ("RECONSUME_LATER", False, ConsumeReturnType.RETURNNULL.name) in outcomes
    # the stats count a result after the hook has seen it (and a failure once its send-back is decided)
    wait_until(lambda: consumer.consumer_stats.totals("cg_push_hook", "PushHookT").consume_failed_msgs >= 2)
    totals = consumer.consumer_stats.totals("cg_push_hook", "PushHookT")
    assert totals.consume_ok_msgs == 18 and totals.consume_failed_msgs == 2
    assert consumer.stats()["PushHookT"].consume_failed_msgs == 2
    # both failures went back to the broker: the offsets still reach the end
    wait_until(lambda: sum(consumer.committed_offsets("PushHookT").values()) == 20)

    with admin(cluster) as instance:
        header = GetConsumerRunningInfoRequestHeader(consumer_group="cg_push_hook", client_id=consumer.client_id,
                                                     jstack_enable=False)
        request = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header.to_ext_fields())
        response = instance.run(instance.api.invoke(cluster.broker_addr, request, 5.0))
    assert response.code == ResponseCode.SUCCESS, response.remark
    info = ConsumerRunningInfo.decode(response.body)
    assert info.properties["PROP_CONSUMEORDERLY"] == "false"
    assert info.properties["consumerGroup"] == "cg_push_hook"
    assert {sub.topic for sub in info.subscription_set} == {"PushHookT", "%RETRY%cg_push_hook"}
    topic_queues = {mq: pq for mq, pq in info.mq_table.items() if mq.topic == "PushHookT"}
    assert len(topic_queues) == 2 and sum(pq.commit_offset for pq in topic_queues.values()) == 20
    assert info.status_table["PushHookT"].consume_ok_tps > 0


def test_consume_message_directly(cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushDirectT", 1)

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        if msgs[0].body == b"bad":
            raise ValueError("bad body")
        return SUCCESS if msgs[0].body == b"good" else ConsumeConcurrentlyStatus.RECONSUME_LATER

    consumer = new_consumer(cluster, "cg_push_direct", "push-direct")
    consumer.subscribe("PushDirectT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    broker = cluster.broker_config.broker_name
    results = {body: consumer.instance.run(consumer.consume_message_directly(MessageExt("PushDirectT", body), broker))
               for body in (b"good", b"later", b"bad")}
    assert results[b"good"].consume_result is CMResult.CR_SUCCESS and not results[b"good"].order
    assert results[b"later"].consume_result is CMResult.CR_LATER
    assert results[b"bad"].consume_result is CMResult.CR_THROW_EXCEPTION
    assert "bad body" in (results[b"bad"].remark or "")
    assert b'"consumeResult":"CR_SUCCESS"' in results[b"good"].encode()


def test_suspend_and_resume(cluster: DevCluster, producer: Producer, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushPauseT", 1)
    recorder = Recorder()
    consumer = new_consumer(cluster, "cg_push_pause", "push-pause")
    consumer.subscribe("PushPauseT")
    consumer.register_concurrent_listener(recording_listener(recorder))
    consumer.start()
    consumers.append(consumer)
    mq = MessageQueue("PushPauseT", cluster.broker_config.broker_name, 0)
    wait_until(lambda: mq in consumer.rebalance.process_queue_table)
    time.sleep(0.3)   # the queue's first pull is now held by the broker (long polling)
    consumer.suspend()
    assert consumer.paused
    send(producer, "PushPauseT", 1, prefix="wake")   # answers the pull in flight
    recorder.wait_for(1)
    send(producer, "PushPauseT", 5, prefix="held")
    time.sleep(1.5)
    assert recorder.keys() == ["wake0"]
    consumer.resume()
    recorder.wait_for(6, timeout=5)
    assert sorted(recorder.keys()) == ["held0", "held1", "held2", "held3", "held4", "wake0"]


def test_members_joining_and_leaving_rebalance_promptly(cluster: DevCluster, producer: Producer,
                                                        consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushJoinT", 8)
    recorder = Recorder()

    def start(name: str) -> PushConsumer:
        consumer = new_consumer(cluster, "cg_push_join", name, rebalance_interval=120.0)
        consumer.subscribe("PushJoinT")
        consumer.register_concurrent_listener(recording_listener(recorder))
        consumer.start()
        consumers.append(consumer)
        return consumer

    def queues(consumer: PushConsumer) -> set[MessageQueue]:
        return {mq for mq in consumer.assigned_queues() if mq.topic == "PushJoinT"}

    first = start("push-join-1")
    wait_until(lambda: len(queues(first)) == 8, timeout=5)
    second = start("push-join-2")
    # only NOTIFY_CONSUMER_IDS_CHANGED can make this quick: the periodic rebalance is 120 s away
    wait_until(lambda: len(queues(first)) == 4 and len(queues(second)) == 4, timeout=5)
    assert queues(first).isdisjoint(queues(second))
    keys = send(producer, "PushJoinT", 40)
    recorder.wait_for(40)
    assert sorted(set(recorder.keys())) == sorted(keys)
    second.shutdown()
    wait_until(lambda: len(queues(first)) == 8, timeout=5)


def test_lifecycle_errors(cluster: DevCluster) -> None:
    consumer = new_consumer(cluster, "cg_push_life", "push-life", message_model=MessageModel.CLUSTERING)
    with pytest.raises(MQClientError, match="no listener"):
        consumer.start()
    consumer2 = new_consumer(cluster, "cg_push_life", "push-life-2")
    consumer2.subscribe("PushLifeT")
    consumer2.register_concurrent_listener(lambda msgs, context: SUCCESS)
    consumer2.start()
    try:
        with pytest.raises(MQClientError, match="starts once"):
            consumer2.start()
        with pytest.raises(MQClientError, match="before start"):
            consumer2.register_orderly_listener(lambda msgs, context: None)
    finally:
        consumer2.shutdown()
    consumer2.shutdown()   # idempotent
    assert not client_threads()


def test_topic_thresholds_become_per_queue_thresholds(cluster: DevCluster, consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushTopicFlowT", 4)
    consumer = new_consumer(cluster, "cg_push_topic_flow", "push-topic-flow", pull_threshold_for_topic=100,
                            pull_threshold_size_for_topic=50)
    consumer.subscribe("PushTopicFlowT")
    consumer.register_concurrent_listener(lambda msgs, context: SUCCESS)
    consumer.start()
    consumers.append(consumer)
    # 4 queues of the topic plus the retry topic's queue: RocketMQ divides by every held queue
    wait_until(lambda: len(consumer.assigned_queues()) == 5)
    wait_until(lambda: consumer.pull_threshold_for_queue == 20 and consumer.pull_threshold_size_for_queue == 10)


def test_reset_offset_from_the_broker_replays_the_queues(cluster: DevCluster, producer: Producer,
                                                          consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushResetT", 2)
    keys = send(producer, "PushResetT", 20)
    recorder = Recorder()
    consumer = new_consumer(cluster, "cg_push_reset", "push-reset", consume_from=FIRST)
    consumer.subscribe("PushResetT")
    consumer.register_concurrent_listener(recording_listener(recorder))
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(20)
    wait_until(lambda: sum(consumer.committed_offsets("PushResetT").values()) == 20)
    with admin(cluster) as instance:
        reset = instance.run(instance.api.invoke_broker_to_reset_offset(cluster.broker_addr, "PushResetT",
                                                                        "cg_push_reset", 0))
    assert sum(reset.values()) == 0
    recorder.wait_for(40)
    assert sorted(recorder.keys()) == sorted(keys * 2)
    wait_until(lambda: sum(consumer.committed_offsets("PushResetT").values()) == 20)


def test_an_illegal_offset_is_fixed_after_ten_seconds(cluster: DevCluster, producer: Producer,
                                                     consumers: list[PushConsumer]) -> None:
    make_topic(cluster, "PushIllegalT", 1)
    keys = send(producer, "PushIllegalT", 5)
    mq = MessageQueue("PushIllegalT", cluster.broker_config.broker_name, 0)
    with admin(cluster) as instance:
        instance.run(instance.update_topic_route("PushIllegalT"))
        instance.run(instance.api.update_consumer_offset(cluster.broker_addr, "cg_push_illegal", mq, 1000))
    recorder = Recorder()
    consumer = new_consumer(cluster, "cg_push_illegal", "push-illegal", rebalance_interval=1.0)
    consumer.subscribe("PushIllegalT")
    consumer.register_concurrent_listener(recording_listener(recorder))
    started = time.monotonic()
    consumer.start()
    consumers.append(consumer)
    # offset 1000 is past the end: OFFSET_ILLEGAL drops the queue; 10 s later the offset is fixed (to 0 here,
    # the queue's minimum being 0), the queue removed, and the next rebalance takes it again from there
    wait_until(lambda: consumer.rebalance.process_queue_table.get(mq) is not None)
    wait_until(lambda: consumer.rebalance.process_queue_table[mq].dropped)
    recorder.wait_for(5, timeout=20)
    assert time.monotonic() - started >= 9.5
    assert sorted(recorder.keys()) == sorted(keys)


@pytest.mark.parametrize("post_subscription", [False, True])
def test_tag_subscriptions_filter_messages(cluster: DevCluster, producer: Producer, consumers: list[PushConsumer],
                                           post_subscription: bool) -> None:
    topic = f"PushTagT{int(post_subscription)}"
    make_topic(cluster, topic, 2)
    for tags in ("a", "b", "c", None, "a"):
        send(producer, topic, 1, prefix=f"tag-{tags}-", tags=tags)
    recorder = Recorder()
    consumer = new_consumer(cluster, f"cg_push_tag{int(post_subscription)}", f"push-tag-{post_subscription}",
                            consume_from=FIRST, post_subscription_when_pull=post_subscription)
    consumer.subscribe(topic, "a || b")
    consumer.register_concurrent_listener(recording_listener(recorder))
    consumer.start()
    consumers.append(consumer)
    recorder.wait_for(3)
    time.sleep(0.5)
    assert sorted(recorder.keys()) == ["tag-a-0", "tag-a-0", "tag-b-0"]


def test_a_slow_listener_keeps_every_consume_thread_busy(cluster: DevCluster, producer: Producer,
                                                         consumers: list[PushConsumer]) -> None:
    """Calls are bundled only for fast listeners: one that blocks gets a consume request per call, so
    messages of one pulled batch run in parallel on the pool as in RocketMQ."""
    make_topic(cluster, "PushSlowT", 1)
    lock = threading.Lock()
    running = [0]
    most = [0]
    recorder = Recorder()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        recorder.record(msgs, context.message_queue)
        return SUCCESS

    consumer = new_consumer(cluster, "cg_push_slow", "push-slow", consume_from=FIRST, consume_thread_max=20)
    consumer.subscribe("PushSlowT")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    send(producer, "PushSlowT", 3, prefix="warm")
    recorder.wait_for(3)
    most[0] = 0
    assert consumer.consume_service.bundle_size(32) == 1
    send(producer, "PushSlowT", 40)
    recorder.wait_for(43, timeout=20)
    assert most[0] >= 10, most[0]


def test_async_listener_calls_in_flight_are_capped_at_the_thread_count(cluster: DevCluster, producer: Producer,
                                                                        consumers: list[PushConsumer]) -> None:
    """An ``async def`` listener runs as tasks on the client's loop, at most ``consume_thread_max`` at once (as the
    thread pool would); the others wait for a slot, and a call that raises frees its slot too."""
    topic = "PushAsyncCapT"
    make_topic(cluster, topic, 4)
    keys = send(producer, topic, 24)
    release = threading.Event()
    recorder = Recorder()
    lock = threading.Lock()
    in_flight = [0, 0]  # now, most seen
    failed: list[str] = []

    async def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            while not release.is_set():
                await asyncio.sleep(0.005)
            if msgs[0].keys == "k5" and not failed:
                failed.append("k5")
                context.delay_level_when_next_consume = 1  # back in 1 s, through %RETRY%
                raise RuntimeError("the listener fails once")
            recorder.record(msgs, context.message_queue)
            return SUCCESS
        finally:
            with lock:
                in_flight[0] -= 1

    consumer = new_consumer(cluster, "cg_push_async_cap", "push-async-cap", consume_from=FIRST,
                            consume_thread_min=3, consume_thread_max=3)
    consumer.subscribe(topic)
    consumer.register_concurrent_listener(listener)
    consumer.start()
    consumers.append(consumer)
    wait_until(lambda: in_flight[0] == 3)
    time.sleep(0.3)  # the pulled messages of all four queues are waiting; none has a slot
    assert in_flight == [3, 3]
    release.set()
    recorder.wait_for(len(keys), timeout=40)
    assert set(recorder.keys()) == set(keys) and failed == ["k5"]
    assert in_flight[1] == 3
