"""`PullMessageService.pull_once` (a step of `pull_message`) against stand-ins for the consumer, the
broker and the scheduler: the push consumer's exception delay (3 s), flow control by cached size, the
orderly rules (not locked yet; the first pull after locking re-reads the committed offset once) and the
OFFSET_ILLEGAL fix-up."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rocketflow import PushConsumer
from rocketflow.client import AllocateMessageQueueAveragely, MessageModel, PushConsumerSettings
from rocketflow.client.api import PullResult, PullStatus
from rocketflow.client.consumer.coordinator.push import RebalancePushImpl
from rocketflow.client.consumer.fetcher import (
    ANSWER_LATER_MIN_UNITS,
    OFFSET_ILLEGAL_FIX_DELAY_MILLS,
    PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION,
    PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL,
    PullMessageService,
    PullRequest,
)
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.stats import ConsumerStats
from rocketflow.client.errors import MQBrokerError, MQTimeoutError
from rocketflow.protocol.bodies import SubscriptionData
from rocketflow.protocol.codec import encode_record
from rocketflow.protocol.message import MessageExt, MessageQueue
from rocketflow.remoting.codes import ResponseCode

TOPIC = "T"
MQ = MessageQueue(TOPIC, "b", 0)
MIB = 1024 * 1024
#: The push consumer's default, as its constructor resolves it.
EXCEPTION_DELAY = PushConsumer("cg", namesrv="127.0.0.1:9876").client_config.pull_time_delay_mills_when_exception


class FakeStore:
    def __init__(self) -> None:
        self.updates: list[tuple[MessageQueue, int, bool]] = []
        self.persisted: list[MessageQueue] = []
        self.removed: list[MessageQueue] = []

    async def read_offset(self, mq: MessageQueue, read_type: object) -> int:
        return -1

    def memory_offset(self, mq: MessageQueue) -> int | None:
        return None

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        self.updates.append((mq, offset, increase_only))

    async def persist(self, mq: MessageQueue) -> None:
        self.persisted.append(mq)

    def remove_offset(self, mq: MessageQueue) -> None:
        self.removed.append(mq)


class FakeConsumer:
    """The parts of `PushConsumer` the pull flow and the rebalance use."""

    def __init__(self, *, orderly: bool) -> None:
        self.group = "cg"
        self.instance = object()
        self.message_model = MessageModel.CLUSTERING
        self.allocate_strategy = AllocateMessageQueueAveragely()
        self.client_config = PushConsumer("cg", namesrv="127.0.0.1:9876").client_config
        self.settings = PushConsumerSettings()
        self.consume_orderly = orderly
        self.is_running = True
        self.paused = False
        self.pull_threshold_for_queue = self.settings.pull_threshold_for_queue
        self.pull_threshold_size_for_queue = self.settings.pull_threshold_size_for_queue
        self.offset_store = FakeStore()
        self.consumer_stats = ConsumerStats()
        self.submitted: list[list[MessageExt]] = []
        self.spawned: list[Coroutine[Any, Any, Any]] = []
        self.rebalance = RebalancePushImpl(self)  # type: ignore[arg-type]
        self.rebalance.put_subscription(SubscriptionData(TOPIC, "*", sub_version=1))

    def new_process_queue(self) -> ProcessQueue:
        return ProcessQueue()

    def submit_consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                               dispatch: bool) -> None:
        self.submitted.append(msgs)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.spawned.append(coro)

    def take(self, mq: MessageQueue, pq: ProcessQueue, records: list[Any]) -> None:
        raise AssertionError("no undecodable record is pulled here")


class Harness:
    """A pull service whose scheduling and broker calls are recorded instead of run."""

    def __init__(self, *, orderly: bool = False) -> None:
        self.consumer = FakeConsumer(orderly=orderly)
        consumer = self.consumer
        self.service = PullMessageService(consumer, consumer.rebalance, consumer, consumer)  # type: ignore[arg-type]
        self.later: list[tuple[PullRequest, int]] = []
        self.immediately: list[PullRequest] = []
        self.tasks: list[tuple[Callable[[], None], int]] = []
        self.pulled_from: list[int] = []
        self.result: Callable[[int], PullResult | BaseException] = \
            lambda offset: PullResult(PullStatus.NO_NEW_MSG, offset, 0, offset)
        self.start_offsets: list[int | BaseException] = []
        self.computed = 0
        #: loop passes a pull takes (a real answer comes at the earliest in the pass after the request's)
        self.round_trip_passes = 0
        #: how many messages the process queue held as each pull went out
        self.held_at_pull: list[int] = []
        service = self.service
        service.execute_pull_request_later = self._later  # type: ignore[method-assign]
        service.execute_pull_request_immediately = self._immediately  # type: ignore[method-assign]
        service.execute_task_later = self._task_later  # type: ignore[method-assign]
        #: pulls started by a task or a callback (the flow-control resumption)
        self.started: list[PullRequest] = []
        service._start_pull = self.started.append  # type: ignore[method-assign]
        service._on_loop = lambda fn, *args: fn(*args)  # type: ignore[method-assign]
        service.wrapper.pull_kernel_impl = self._pull  # type: ignore[method-assign]
        self.consumer.rebalance.compute_pull_from_where = self._compute  # type: ignore[method-assign]

    def _later(self, request: PullRequest, delay_ms: int) -> None:
        self.later.append((request, delay_ms))

    def _immediately(self, request: PullRequest) -> None:
        self.immediately.append(request)

    def _task_later(self, task: Callable[[], None], delay_ms: int) -> None:
        self.tasks.append((task, delay_ms))

    async def _pull(self, mq: MessageQueue, sub_expression: str | None, expression_type: str, sub_version: int,
                    offset: int, max_nums: int, sys_flag: int, commit_offset: int, broker_suspend_max_time_millis: int,
                    timeout_millis: int) -> PullResult:
        self.pulled_from.append(offset)
        self.held_at_pull.append(self.consumer.rebalance.process_queue_table[mq].msg_count)
        for _ in range(self.round_trip_passes):
            await asyncio.sleep(0)
        result = self.result(offset)
        if isinstance(result, BaseException):
            raise result
        return result

    async def _compute(self, mq: MessageQueue) -> int:
        self.computed += 1
        answer = self.start_offsets.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def request(self, next_offset: int = 5, *, locked: bool = True) -> PullRequest:
        pq = ProcessQueue()
        pq.locked = locked
        self.consumer.rebalance.process_queue_table[MQ] = pq
        return PullRequest("cg", MQ, pq, next_offset)

    def pull(self, request: PullRequest) -> None:
        """One step of the pull flow; a step that asks for the next pull at once is recorded as such."""
        if asyncio.run(self.service.pull_once(request)):
            self.immediately.append(request)


def test_the_push_consumers_exception_delay_is_three_seconds() -> None:
    assert EXCEPTION_DELAY == PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION == 3000


@pytest.mark.parametrize("broker_offset", [12, 3], ids=["broker-ahead", "broker-behind"])
def test_the_first_orderly_pull_after_locking_rereads_the_offset_once(broker_offset: int) -> None:
    harness = Harness(orderly=True)
    harness.start_offsets = [broker_offset]
    request = harness.request(next_offset=5)
    harness.pull(request)
    assert request.previously_locked and request.next_offset == broker_offset
    assert harness.pulled_from == [broker_offset] and harness.later == []
    harness.pull(request)
    assert harness.computed == 1 and harness.pulled_from == [broker_offset, broker_offset]


@pytest.mark.parametrize("failure", [
    pytest.param(MQBrokerError(ResponseCode.SYSTEM_BUSY, "busy", "addr"), id="broker-error"),
    pytest.param(MQTimeoutError("timed out", "addr"), id="timeout"),
    pytest.param(-1, id="offset-unknown"),
])
def test_a_failed_offset_reread_retries_after_the_exception_delay(failure: int | BaseException) -> None:
    harness = Harness(orderly=True)
    harness.start_offsets = [failure, 9]
    request = harness.request(next_offset=5)
    harness.pull(request)
    assert harness.later == [(request, EXCEPTION_DELAY)] and harness.pulled_from == []
    assert not request.previously_locked and request.next_offset == 5
    harness.pull(request)                                # the retry re-reads it
    assert request.previously_locked and harness.pulled_from == [9] and harness.computed == 2


def test_an_orderly_queue_not_locked_yet_waits_the_exception_delay() -> None:
    harness = Harness(orderly=True)
    request = harness.request(locked=False)
    harness.pull(request)
    assert harness.later == [(request, EXCEPTION_DELAY)]
    assert harness.pulled_from == [] and harness.computed == 0 and not request.previously_locked


def test_pull_errors_and_a_stopped_consumer_wait_the_exception_delay() -> None:
    harness = Harness()
    harness.result = lambda offset: MQTimeoutError("timed out", "addr")
    request = harness.request()
    harness.pull(request)
    assert harness.later == [(request, EXCEPTION_DELAY)] and harness.pulled_from == [5]
    harness.consumer.is_running = False
    harness.pull(request)
    assert harness.later[-1] == (request, EXCEPTION_DELAY) and harness.pulled_from == [5]
    harness.consumer.is_running = True
    harness.consumer.rebalance.remove_subscription(TOPIC)
    harness.pull(request)
    assert harness.later[-1] == (request, EXCEPTION_DELAY) and harness.pulled_from == [5]


@pytest.mark.parametrize(("body_size", "controlled"), [
    (2 * MIB + 1, True),         # 2 MiB cached > 1
    (2 * MIB - 1, False),        # 1 MiB (rounded down) is not over the threshold
])
def test_flow_control_by_cached_size(body_size: int, controlled: bool) -> None:
    harness = Harness()
    harness.consumer.settings.flow_control_resume_ratio = 0  # RocketMQ's re-check only
    harness.consumer.pull_threshold_size_for_queue = 1
    request = harness.request()
    request.process_queue.put_messages([MessageExt(TOPIC, b"x" * body_size, queue_offset=4)])
    harness.pull(request)
    if controlled:
        assert harness.later == [(request, PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)] and harness.pulled_from == []
    else:
        assert harness.later == [] and harness.pulled_from == [5]


def test_flow_control_by_cached_count() -> None:
    harness = Harness()
    harness.consumer.settings.flow_control_resume_ratio = 0
    harness.consumer.pull_threshold_for_queue = 2
    request = harness.request()
    request.process_queue.put_messages([MessageExt(TOPIC, b"x", queue_offset=offset) for offset in range(3)])
    harness.pull(request)
    assert harness.later == [(request, PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)] and harness.pulled_from == []
    assert harness.tasks == [] and harness.started == []


def _flow_controlled(harness: Harness, *, count_threshold: int, size_threshold_mib: int,
                     bodies: list[int]) -> PullRequest:
    harness.consumer.pull_threshold_for_queue = count_threshold
    harness.consumer.pull_threshold_size_for_queue = size_threshold_mib
    request = harness.request()
    request.process_queue.put_messages([MessageExt(TOPIC, b"x" * size, queue_offset=offset)
                                        for offset, size in enumerate(bodies)])
    harness.pull(request)
    [(_, delay)] = harness.tasks
    assert delay == PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL  # RocketMQ's re-check stays as the fallback
    assert harness.pulled_from == [] and harness.later == [] and harness.started == []
    return request


def test_flow_control_by_count_resumes_once_the_cache_drains_to_the_ratio() -> None:
    harness = Harness()                                  # flow_control_resume_ratio 0.5 by default
    request = _flow_controlled(harness, count_threshold=4, size_threshold_mib=100, bodies=[1] * 6)
    pq = request.process_queue
    offsets = iter(range(6))
    pq.remove_messages([MessageExt(TOPIC, b"x", queue_offset=next(offsets)) for _ in range(3)])
    assert harness.started == []                         # 3 held, over half of 4
    pq.remove_messages([MessageExt(TOPIC, b"x", queue_offset=next(offsets))])
    assert harness.started == [request]                  # 2 held: the pull goes on before the 50 ms
    [(recheck, _)] = harness.tasks
    recheck()                                            # the re-check then finds the pull resumed
    pq.remove_messages([MessageExt(TOPIC, b"x", queue_offset=offset) for offset in offsets])
    assert harness.started == [request]


def test_flow_control_by_size_resumes_below_half_of_both_thresholds() -> None:
    harness = Harness()
    harness.consumer.settings.flow_control_resume_ratio = 0.25
    # 3 MiB cached over a 2 MiB threshold; the count threshold (1000) is far away
    request = _flow_controlled(harness, count_threshold=1000, size_threshold_mib=2, bodies=[MIB] * 3)
    pq = request.process_queue
    pq.remove_messages([MessageExt(TOPIC, b"x", queue_offset=0)])
    pq.remove_messages([MessageExt(TOPIC, b"x", queue_offset=1)])
    assert harness.started == []                         # 1 MiB held, over a quarter of 2 MiB
    pq.remove_messages([MessageExt(TOPIC, b"x", queue_offset=2)])
    assert harness.started == [request]


def test_flow_control_timer_first_resumes_once() -> None:
    harness = Harness()
    request = _flow_controlled(harness, count_threshold=4, size_threshold_mib=100, bodies=[1] * 6)
    [(recheck, _)] = harness.tasks
    recheck()                                            # the consumer was slow: the 50 ms re-check pulls
    assert harness.started == [request]
    request.process_queue.remove_messages([MessageExt(TOPIC, b"x", queue_offset=offset) for offset in range(6)])
    assert harness.started == [request]                  # the drained cache does not pull a second time


def test_offset_illegal_below_the_minimum_moves_on_at_once_keeping_the_process_queue() -> None:
    """Retention deleted what the queue was to read next: the broker's next offset is the new minimum."""
    harness = Harness()
    harness.result = lambda offset: PullResult(PullStatus.OFFSET_ILLEGAL, 40, 40, 90)
    request = harness.request(next_offset=5)
    harness.pull(request)
    assert request.next_offset == 40 and not request.process_queue.dropped
    assert harness.immediately == [request] and harness.tasks == []          # pulls on at once, no fix-up later
    assert harness.consumer.offset_store.updates == [(MQ, 40, True)]         # nothing cached: the offset follows
    assert MQ in harness.consumer.rebalance.process_queue_table


def test_offset_illegal_below_the_minimum_leaves_the_offset_to_cached_messages() -> None:
    harness = Harness()
    harness.result = lambda offset: PullResult(PullStatus.OFFSET_ILLEGAL, 40, 40, 90)
    request = harness.request(next_offset=5)
    request.process_queue.put_messages([MessageExt(TOPIC, b"x", queue_offset=offset) for offset in range(3, 5)])
    harness.pull(request)
    assert request.next_offset == 40 and harness.immediately == [request]
    # the cached messages are still consumed; the committed offset moves as they are
    assert harness.consumer.offset_store.updates == []


def _offset_illegal(harness: Harness) -> PullRequest:
    """An offset past the queue's end (the broker's store was replaced, say): RocketMQ's fix-up."""
    harness.result = lambda offset: PullResult(PullStatus.OFFSET_ILLEGAL, 40, 0, 40)
    request = harness.request(next_offset=90)
    harness.pull(request)
    assert request.process_queue.dropped and request.next_offset == 40
    [(task, delay)] = harness.tasks
    assert delay == OFFSET_ILLEGAL_FIX_DELAY_MILLS
    task()
    return request


def test_offset_illegal_fixes_the_offset_and_removes_its_process_queue() -> None:
    harness = Harness()
    request = _offset_illegal(harness)
    [fix_up] = harness.consumer.spawned
    asyncio.run(fix_up)
    store = harness.consumer.offset_store
    assert store.updates == [(MQ, 40, False)] and store.persisted[0] == MQ
    assert MQ not in harness.consumer.rebalance.process_queue_table and request.process_queue.dropped


@pytest.mark.parametrize("restarted", [True, False], ids=["restarted", "removed"])
def test_offset_illegal_fix_up_leaves_a_queue_removed_or_restarted_meanwhile(restarted: bool) -> None:
    harness = Harness()
    _offset_illegal(harness)
    table = harness.consumer.rebalance.process_queue_table
    del table[MQ]                                        # e.g. the queue went to another member...
    fresh = ProcessQueue()
    if restarted:
        table[MQ] = fresh                                # ... and came back before the fix-up ran
    [fix_up] = harness.consumer.spawned
    asyncio.run(fix_up)
    store = harness.consumer.offset_store
    assert table.get(MQ) is (fresh if restarted else None) and not fresh.dropped
    assert store.updates == [] and store.persisted == [] and store.removed == []


def test_pull_message_goes_on_in_its_task_while_each_step_asks_for_the_next() -> None:
    harness = Harness()
    answers: list[PullResult | BaseException] = [PullResult(PullStatus.NO_NEW_MSG, 6, 0, 6),
                                                 PullResult(PullStatus.NO_MATCHED_MSG, 9, 0, 9),
                                                 MQTimeoutError("timed out", "addr")]
    harness.result = lambda offset: answers.pop(0)
    request = harness.request(next_offset=5)
    asyncio.run(harness.service.pull_message(request))
    # three pulls in one task: the third failed, so the next is scheduled after the exception delay
    assert harness.pulled_from == [5, 6, 9] and harness.later == [(request, EXCEPTION_DELAY)]
    assert harness.immediately == [] and request.next_offset == 9


# ---------------------------------------------------------------------- answers taken after the next pull


def _records(first_offset: int, count: int, body: bytes = b"m") -> bytes:
    return b"".join(encode_record(MessageExt(TOPIC, body, queue_id=0, queue_offset=offset,
                                             store_host=("127.0.0.1", 10911)))
                    for offset in range(first_offset, first_offset + count))


def _script(harness: Harness, answers: list[PullResult | BaseException]) -> None:
    """Answer the pulls in turn, each a few loop passes after it went out."""
    harness.result = lambda offset: answers.pop(0)
    harness.round_trip_passes = 3


async def _pull_and_settle(harness: Harness, request: PullRequest) -> None:
    await harness.service.pull_message(request)
    for _ in range(4):  # the loop passes the last answer's callbacks take
        await asyncio.sleep(0)


def test_a_found_answer_is_taken_after_the_next_pull_went_out() -> None:
    harness = Harness()
    request = harness.request(next_offset=5)
    _script(harness, [PullResult(PullStatus.FOUND, 13, 0, 40, body=_records(5, 8)),
                      PullResult(PullStatus.FOUND, 23, 0, 40, body=_records(13, 10)),
                      MQTimeoutError("timed out", "addr")])
    asyncio.run(_pull_and_settle(harness, request))
    assert harness.pulled_from == [5, 13, 23]
    # each pull went out before the answer before it was put in the process queue
    assert harness.held_at_pull == [0, 0, 8]
    assert [[msg.queue_offset for msg in msgs] for msgs in harness.consumer.submitted] == [
        list(range(5, 13)), list(range(13, 23))]
    assert request.process_queue.msg_count == 18 and request.next_offset == 23
    assert harness.later == [(request, EXCEPTION_DELAY)]


def test_a_short_answer_is_taken_before_the_next_pull() -> None:
    harness = Harness()
    request = harness.request(next_offset=5)
    units = ANSWER_LATER_MIN_UNITS - 1
    _script(harness, [PullResult(PullStatus.FOUND, 5 + units, 0, 40, body=_records(5, units)),
                      MQTimeoutError("timed out", "addr")])
    asyncio.run(_pull_and_settle(harness, request))
    assert harness.pulled_from == [5, 5 + units] and harness.held_at_pull == [0, units]


@pytest.mark.parametrize("limit", ["count", "size", "span"])
def test_an_answer_that_could_trip_flow_control_is_taken_before_the_next_pull(limit: str) -> None:
    harness = Harness()
    consumer = harness.consumer
    request = harness.request(next_offset=5)
    body = _records(5, 8, b"x" * 100)
    if limit == "count":
        consumer.pull_threshold_for_queue = 7          # eight units could pass it
    elif limit == "size":
        consumer.pull_threshold_size_for_queue = 0     # and a body of 1 MiB or more could pass 0 MiB
        body = _records(5, 8, b"x" * (MIB // 8))
    else:
        consumer.settings = PushConsumerSettings(consume_concurrently_max_span=6)
    _script(harness, [PullResult(PullStatus.FOUND, 13, 0, 40, body=body)])
    asyncio.run(_pull_and_settle(harness, request))
    # taken at once, so the next pull's own flow control saw the messages and held the pull back
    assert harness.held_at_pull == [0] and harness.pulled_from == [5]
    if limit == "span":
        assert harness.later == [(request, PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL)]
    else:  # the re-check, which the drained cache may bring forward
        assert harness.later == []
        assert [delay for _, delay in harness.tasks] == [PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL]
    assert harness.started == []
    assert request.process_queue.msg_count == 8 and len(harness.consumer.submitted) == 1


def _damaged(first_offset: int, count: int) -> bytes:
    records = bytearray(_records(first_offset, count))
    records[4:8] = b"\x00\x00\x00\x00"                  # the first record's magic code
    return bytes(records)


def test_a_bad_answer_taken_late_rewinds_and_drops_the_pull_in_flight() -> None:
    harness = Harness()
    request = harness.request(next_offset=5)
    _script(harness, [PullResult(PullStatus.FOUND, 13, 0, 40, body=_records(5, 8)),
                      PullResult(PullStatus.FOUND, 21, 0, 40, body=_damaged(13, 8)),
                      PullResult(PullStatus.FOUND, 29, 0, 40, body=_records(21, 8)),
                      PullResult(PullStatus.NO_NEW_MSG, 29, 0, 29)])
    asyncio.run(_pull_and_settle(harness, request))
    # the answer after the bad one was already asked for; it is dropped and pulling goes back to 13
    assert harness.pulled_from == [5, 13, 21]
    assert [[msg.queue_offset for msg in msgs] for msgs in harness.consumer.submitted] == [list(range(5, 13))]
    assert request.next_offset == 13 and request.rewind_offset is None
    assert harness.later == [(request, EXCEPTION_DELAY)]
    assert harness.consumer.offset_store.updates == []


def test_a_bad_answer_taken_late_rewinds_a_pull_that_failed_meanwhile() -> None:
    harness = Harness()
    request = harness.request(next_offset=5)
    _script(harness, [PullResult(PullStatus.FOUND, 13, 0, 40, body=_damaged(5, 8)),
                      MQTimeoutError("timed out", "addr")])
    asyncio.run(_pull_and_settle(harness, request))
    assert harness.pulled_from == [5, 13] and harness.consumer.submitted == []
    assert request.next_offset == 5 and harness.later == [(request, EXCEPTION_DELAY)]


def test_span_with_counts_the_offsets_to_come() -> None:
    pq = ProcessQueue()
    assert pq.span_with(10, 14) == 4
    pq.put_messages([MessageExt(TOPIC, b"x", queue_offset=offset) for offset in (3, 7)])
    assert pq.span_with(10, 14) == 11 and pq.span_with(5, 6) == 4 and pq.max_span == 4
