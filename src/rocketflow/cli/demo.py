"""`rocketflow demo`: the main job, end to end on the embedded default.

One run, on a fresh topic of a `DevCluster` started in this process (temporary store) or of the
cluster behind ``--namesrv``:

1. producer threads send N orders' events, each order ``create -> pay -> ship -> complete`` or
   cancelled after ``create`` or ``pay``, sharded by order id (one order, one queue, in order);
   JSON bodies with amount, state, step and timestamp; keys = order id, tags = state;
2. an orderly push consumer (its own group) checks every order's state machine and counts
   violations and duplicates;
3. a Spark Structured Streaming job (`rocketflow.cli.demo_spark`) reads the topic through the
   ``rocketmq`` source, writes Parquet (events, revenue and state counts per minute, per-queue lag)
   and commits its progress to its own group.

A progress bar shows sent / consumed / Spark rows; at the end a summary table, ``summary.json`` and
a PNG of throughput and lag over time are written next to the Parquet output. The exit code is 1
when an order broke its state machine, a message was lost, or the revenue does not add up.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson
from rich import box
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from rocketflow.client import (
    ClientInstance,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MQBrokerError,
    MQError,
    Producer,
    PushConsumer,
    SendStatus,
)
from rocketflow.client.instance import shutdown_all
from rocketflow.dev import DevCluster
from rocketflow.protocol.bodies import TopicConfig
from rocketflow.protocol.message import Message, MessageExt, MessageQueue

if TYPE_CHECKING:
    from rocketflow.cli.demo_spark import BatchRecord, LagSample, SparkPipeline, SparkTotals
    from rocketflow.console import ConsoleThread

logger = logging.getLogger("rocketflow.demo")

#: Orders of a default run: about a minute on 2 cores, Spark's start included.
DEFAULT_ORDERS: Final = 5000
#: How long the run may go without any progress once the producer is done and Spark ran a batch (seconds).
STALL_TIMEOUT: Final = 60.0


class DemoError(ValueError):
    """Bad demo settings or an unusable environment, with what to change."""


class OrderState(StrEnum):
    CREATE = "create"
    PAY = "pay"
    SHIP = "ship"
    COMPLETE = "complete"
    CANCEL = "cancel"


#: The order state machine: which state may follow which (None: the order is new).
ALLOWED_NEXT: Final[dict[OrderState | None, frozenset[OrderState]]] = {
    None: frozenset({OrderState.CREATE}),
    OrderState.CREATE: frozenset({OrderState.PAY, OrderState.CANCEL}),
    OrderState.PAY: frozenset({OrderState.SHIP, OrderState.CANCEL}),
    OrderState.SHIP: frozenset({OrderState.COMPLETE}),
}


@dataclass(slots=True, frozen=True)
class PlannedOrder:
    """One order's life as the producer will send it."""

    order_id: str
    amount_cents: int
    steps: tuple[OrderState, ...]

    @property
    def revenue_cents(self) -> int:
        """Paid and not refunded: only completed orders count."""
        return self.amount_cents if self.steps[-1] is OrderState.COMPLETE else 0

    def body(self, step: int, timestamp_ms: int) -> bytes:
        state = self.steps[step]
        refund = self.amount_cents if state is OrderState.CANCEL and OrderState.PAY in self.steps[:step] else 0
        return orjson.dumps({"order_id": self.order_id, "state": state.value, "step": step,
                             "amount_cents": self.amount_cents, "refund_cents": refund, "ts": timestamp_ms})


def plan_orders(count: int, *, seed: int = 7, cancel_ratio: float = 0.2) -> list[PlannedOrder]:
    """``count`` orders with amounts of 5.00 to 500.00; ``cancel_ratio`` of them are cancelled, half
    of those after ``create`` and half after ``pay`` (refunded)."""
    rng = random.Random(seed)
    full = (OrderState.CREATE, OrderState.PAY, OrderState.SHIP, OrderState.COMPLETE)
    orders = []
    for index in range(count):
        amount = rng.randint(500, 50_000)
        roll = rng.random()
        if roll < cancel_ratio / 2:
            steps: tuple[OrderState, ...] = (OrderState.CREATE, OrderState.CANCEL)
        elif roll < cancel_ratio:
            steps = (OrderState.CREATE, OrderState.PAY, OrderState.CANCEL)
        else:
            steps = full
        orders.append(PlannedOrder(f"order-{index:07d}", amount, steps))
    return orders


@dataclass(slots=True, frozen=True)
class DemoSettings:
    """Everything `run_demo` takes (the CLI's flags)."""

    orders: int = DEFAULT_ORDERS
    queues: int = 4
    producer_threads: int = 4
    open_orders: int = 32
    cancel_ratio: float = 0.2
    rate: float = 0.0
    trigger_seconds: float = 1.0
    max_per_batch: int = 20_000
    timeout: float = 600.0
    namesrv: str | None = None
    output: Path | None = None
    spark: bool = True
    seed: int = 7
    #: serve ``rocketflow console`` on this port beside the pipeline (None: no console; 0: a free port)
    console_port: int | None = None

    def __post_init__(self) -> None:
        checks: list[tuple[str, object, float, float]] = [
            ("orders", self.orders, 1, 10_000_000), ("queues", self.queues, 1, 1024),
            ("producer_threads", self.producer_threads, 1, 256), ("open_orders", self.open_orders, 1, 100_000),
            ("cancel_ratio", self.cancel_ratio, 0.0, 1.0), ("rate", self.rate, 0.0, 10_000_000.0),
            ("trigger_seconds", self.trigger_seconds, 0.0, 3600.0), ("max_per_batch", self.max_per_batch, 1, 1 << 31),
            ("timeout", self.timeout, 1.0, 86_400.0),
        ]
        for name, value, low, high in checks:
            if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
                raise DemoError(f"{name} must be a number in {low}..{high}, got {value!r}")


# ---------------------------------------------------------------------------------------------- counters


@dataclass(slots=True)
class Meter:
    """A thread-safe count with the times of its first and last increment (monotonic seconds)."""

    count: int = 0
    first: float | None = None
    last: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, amount: int = 1) -> None:
        now = time.monotonic()
        with self._lock:
            self.count += amount
            if self.first is None:
                self.first = now
            self.last = now

    def rate(self, since: float | None = None) -> float:
        """Per second between ``since`` (default: the first increment) and the last increment."""
        start = self.first if since is None else since
        if start is None or self.last is None or self.last <= start:
            return 0.0
        return self.count / (self.last - start)


class OrderProducer:
    """Producer threads, each owning a share of the orders and keeping ``open_orders`` of them in
    flight at once (their events interleave in the queues, each order's in order)."""

    def __init__(self, producer: Producer, topic: str, orders: Sequence[PlannedOrder], *, threads: int,
                 open_orders: int, rate: float, seed: int) -> None:
        self.producer = producer
        self.topic = topic
        self.orders = orders
        self.threads = threads
        self.open_orders = open_orders
        self.rate = rate
        self.seed = seed
        self.sent = Meter()
        self.failed = 0
        self.errors: list[str] = []
        self.started_at: float | None = None
        self.started_wall = 0.0
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._running = 0

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.started_wall = time.time()
        self._running = self.threads
        for index in range(self.threads):
            share = self.orders[index :: self.threads]
            threading.Thread(target=self._run, args=(index, share), name=f"demo-producer-{index}", daemon=True).start()

    def _run(self, index: int, orders: Sequence[PlannedOrder]) -> None:
        rng = random.Random(self.seed * 1000 + index)
        interval = self.threads / self.rate if self.rate > 0 else 0.0
        next_send = time.monotonic()
        waiting = list(reversed(orders))
        active: list[tuple[PlannedOrder, int]] = []
        try:
            while waiting or active:
                while waiting and len(active) < self.open_orders:
                    active.append((waiting.pop(), 0))
                slot = rng.randrange(len(active))
                order, step = active[slot]
                if interval:
                    next_send += interval
                    delay = next_send - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                self._send(order, step)
                if step + 1 < len(order.steps):
                    active[slot] = (order, step + 1)
                else:
                    active[slot] = active[-1]
                    active.pop()
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self.finished.set()

    def _send(self, order: PlannedOrder, step: int) -> None:
        state = order.steps[step]
        message = Message(self.topic, order.body(step, int(time.time() * 1000)), tags=state.value, keys=order.order_id)
        for attempt in range(3):
            try:
                result = self.producer.send(message, sharding_key=order.order_id)
            except MQError as exc:
                error = f"{order.order_id} {state}: {exc}"
                time.sleep(0.2 * (attempt + 1))
                continue
            if result.send_status is SendStatus.SEND_OK:
                self.sent.add()
                return
            error = f"{order.order_id} {state}: {result.send_status.name}"
            break
        with self._lock:
            self.failed += 1
            if len(self.errors) < 5:
                self.errors.append(error)


class OrderChecker:
    """The orderly listener: every order's events must follow `ALLOWED_NEXT`, step by step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self.states: dict[str, OrderState] = {}
        self._steps: dict[str, int] = {}
        self.consumed = Meter()
        self.duplicates = 0
        self.violations = 0
        self.examples: list[str] = []

    def __call__(self, messages: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        with self._lock:
            fresh = sum(self._check(message) for message in messages)
        if fresh:
            self.consumed.add(fresh)
        return ConsumeOrderlyStatus.SUCCESS

    def _check(self, message: MessageExt) -> int:
        msg_id = message.client_msg_id
        if msg_id in self._seen:
            self.duplicates += 1
            return 0
        self._seen.add(msg_id)
        where = f"queue {message.queue_id} offset {message.queue_offset}"
        try:
            event = orjson.loads(message.body)
            order_id = str(event["order_id"])
            state = OrderState(event["state"])
            step = int(event["step"])
        except (orjson.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
            self._violation(f"{where}: undecodable order event ({exc})")
            return 1
        if message.keys != order_id or message.tags != state.value:
            self._violation(f"{where}: keys/tags {message.keys!r}/{message.tags!r} do not match {order_id} {state}")
        previous = self.states.get(order_id)
        expected_step = self._steps.get(order_id, -1) + 1
        if state not in ALLOWED_NEXT.get(previous, frozenset()) or step != expected_step:
            self._violation(f"{order_id}: {previous or 'new'} -> {state} (step {step}, expected {expected_step}) "
                            f"at {where}")
        self.states[order_id] = state
        self._steps[order_id] = step
        return 1

    def _violation(self, text: str) -> None:
        self.violations += 1
        if len(self.examples) < 5:
            self.examples.append(text)


class BrokerView:
    """The admin calls the demo makes: topic creation, max offsets, group lag, offset commits."""

    def __init__(self, instance: ClientInstance, topic: str) -> None:
        self.instance = instance
        self.topic = topic

    def create_topic(self, queues: int, timeout: float = 15.0) -> None:
        """Create the topic on every master of the cluster and wait for its route."""
        api = self.instance.api
        cluster = self.instance.run(api.get_broker_cluster_info())
        masters = sorted(data.master_addr for data in cluster.broker_addr_table.values() if data.master_addr)
        if not masters:
            raise DemoError("the name server knows no broker master; start one (rocketflow broker -n ...)")
        for addr in masters:
            self.instance.run(api.create_topic(addr, TopicConfig(self.topic, queues, queues)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            route = self.instance.run(api.get_topic_route(self.topic))
            if route is not None and sum(queue.read_queue_nums for queue in route.queue_datas) >= queues * len(masters):
                self.instance.run(self.instance.update_topic_route(self.topic))
                return
            time.sleep(0.1)
        raise DemoError(f"topic {self.topic} got no route from the name server within {timeout:.0f} s")

    def _masters(self) -> list[tuple[str, str]]:
        route = self.instance.topic_route(self.topic)
        if route is None:
            return []
        return [(data.broker_name, data.master_addr) for data in route.broker_datas if data.master_addr]

    def max_offsets(self) -> dict[tuple[str, int], int]:
        """Each queue's max offset (messages stored) by (broker name, queue id)."""
        offsets = {}
        for _, addr in self._masters():
            stats = self.instance.run(self.instance.api.get_topic_stats(addr, self.topic))
            for queue, offset in stats.offset_table.items():
                offsets[(queue.broker_name, queue.queue_id)] = offset.max_offset
        return offsets

    def group_lag(self, group: str) -> int | None:
        """The group's total lag on the topic as the broker sees it (None if it committed nothing)."""
        total = 0
        found = False
        for _, addr in self._masters():
            try:
                stats = self.instance.run(self.instance.api.get_consume_stats(addr, group, self.topic))
            except MQBrokerError:
                continue
            if stats.offset_table:
                found = True
                total += stats.compute_total_diff()
        return total if found else None

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        masters = dict(self._masters())
        for (broker_name, queue_id), offset in offsets.items():
            addr = masters.get(broker_name)
            if addr is not None:
                queue = MessageQueue(self.topic, broker_name, queue_id)
                self.instance.run(self.instance.api.update_consumer_offset(addr, group, queue, offset))


# ---------------------------------------------------------------------------------------------- the run


@dataclass(slots=True, frozen=True)
class Sample:
    """The run's counters at one moment (seconds since the producer started)."""

    at: float
    sent: int
    consumed: int
    spark_rows: int
    stored: int
    spark_end: int


@dataclass(slots=True)
class DemoResult:
    """What `run_demo` found; ``ok`` decides the exit code."""

    topic: str
    output: Path
    orders: int
    expected_messages: int
    expected_revenue_cents: int
    sent: int = 0
    send_failures: int = 0
    consumed: int = 0
    duplicates: int = 0
    violations: int = 0
    wrong_final_states: int = 0
    consumer_group_lag: int | None = None
    spark_rows: int | None = None
    spark_distinct: int | None = None
    spark_revenue_cents: int | None = None
    spark_batches: int | None = None
    spark_queue_lag: int | None = None
    spark_group_lag_from_source: int | None = None
    spark_group_lag: int | None = None
    producer_rate: float = 0.0
    consumer_rate: float = 0.0
    spark_rate: float = 0.0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _default_output() -> Path:
    return Path.cwd() / "rocketflow-demo" / time.strftime("run-%Y%m%d-%H%M%S")


def _prepare_output(output: Path) -> Path:
    output = output.expanduser().resolve()
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise DemoError(f"output directory {output} exists and is not empty; choose another with --output")
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DemoError(f"cannot create output directory {output}: {exc}") from None
    return output


def _check_spark_installed() -> None:
    try:
        import pyarrow  # type: ignore[import-untyped]  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise DemoError(f"the Spark part needs the spark extra ({exc}): pip install 'rocketflow[spark,demo]', "
                        "or run with --no-spark") from None


def run_demo(settings: DemoSettings, console: Console | None = None) -> DemoResult:
    """Run the whole pipeline once; prints progress and a summary, returns what it found."""
    console = console or Console()
    if settings.spark:
        _check_spark_installed()
    output = _prepare_output(settings.output or _default_output())
    run_id = uuid.uuid4().hex[:8]
    topic = f"DemoOrders_{run_id}"
    checker_group = f"demo_order_checker_{run_id}"
    spark_group = f"demo_spark_{run_id}"
    orders = plan_orders(settings.orders, seed=settings.seed, cancel_ratio=settings.cancel_ratio)
    result = DemoResult(topic, output, len(orders), sum(len(order.steps) for order in orders),
                        sum(order.revenue_cents for order in orders))

    cluster: DevCluster | None = None
    namesrv = settings.namesrv
    if namesrv is None:
        console.print("starting the embedded name server and broker (temporary store) ...")
        cluster = DevCluster.start_in_thread()
        namesrv = cluster.namesrv_addr
    producer: Producer | None = None
    consumer: PushConsumer | None = None
    pipeline: SparkPipeline | None = None
    web_console: ConsoleThread | None = None
    try:
        if settings.console_port is not None:
            web_console = _start_console(console, namesrv, settings.console_port)
        producer = Producer(f"demo_order_producer_{run_id}", namesrv=namesrv)
        try:
            producer.start()
            view = BrokerView(producer.instance, topic)
            view.create_topic(settings.queues)
        except MQError as exc:
            raise DemoError(f"cannot reach the cluster of name server {namesrv}: {exc}") from None
        console.print(f"namesrv [bold]{namesrv}[/bold], topic [bold]{topic}[/bold] ({settings.queues} queues per "
                      f"broker), groups {checker_group} (orderly checker) and {spark_group} (Spark); "
                      f"{len(orders)} orders = {result.expected_messages} messages")

        if settings.spark:
            from rocketflow.cli.demo_spark import SparkPipeline

            warm_up_topic = f"{topic}_warmup"
            BrokerView(producer.instance, warm_up_topic).create_topic(2)
            warm_up_order = PlannedOrder("warm-up", 100, (OrderState.CREATE,))
            producer.send_batch([Message(warm_up_topic, warm_up_order.body(0, int(time.time() * 1000)))
                                 for _ in range(4)])
            pipeline = SparkPipeline(namesrv=namesrv, topic=topic, group=spark_group, output=output,
                                     trigger_seconds=settings.trigger_seconds, max_per_batch=settings.max_per_batch,
                                     broker_offsets=view.max_offsets, warm_up_topic=warm_up_topic)
            pipeline.start_in_background()

        checker = OrderChecker()
        consumer = PushConsumer(checker_group, namesrv=namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                consume_message_batch_max_size=16, pull_batch_size=64)
        consumer.subscribe(topic, "*")
        consumer.register_orderly_listener(checker)
        consumer.start()
        if pipeline is not None:
            # the producer starts once the query runs, so Spark streams alongside it
            with console.status("starting Spark (local[2]) and the streaming query ..."):
                if not pipeline.ready.wait(settings.timeout):
                    raise DemoError(f"Spark did not start within {settings.timeout:.0f} s (--timeout)")
            if pipeline.error is not None:
                raise DemoError(f"the Spark job did not start: {pipeline.query_failure()}")

        order_producer = OrderProducer(producer, topic, orders, threads=settings.producer_threads,
                                       open_orders=settings.open_orders, rate=settings.rate, seed=settings.seed)
        order_producer.start()
        assert order_producer.started_at is not None
        samples = _watch(console, settings, result, order_producer, checker, pipeline, view)

        # the results
        consumer.shutdown()  # persists the checker group's offsets
        planned_final = {order.order_id: order.steps[-1] for order in orders}
        result.sent = order_producer.sent.count
        result.send_failures = order_producer.failed
        result.consumed = checker.consumed.count
        result.duplicates = checker.duplicates
        result.violations = checker.violations
        result.wrong_final_states = sum(1 for order_id, state in planned_final.items()
                                        if checker.states.get(order_id) is not state)
        result.producer_rate = order_producer.sent.rate(order_producer.started_at)
        result.consumer_rate = checker.consumed.rate(order_producer.started_at)
        result.consumer_group_lag = view.group_lag(checker_group)
        result.seconds = time.monotonic() - order_producer.started_at
        lag_samples: list[LagSample] = []
        batches: list[BatchRecord] = []
        if pipeline is not None:
            _finish_spark(console, pipeline, view, spark_group, result)
            lag_samples = list(pipeline.lag_samples)
            batches = pipeline.batches
        _judge(result, order_producer, checker)
        _write_outputs(console, result, samples, lag_samples, batches, order_producer.started_wall)
        _print_summary(console, result, pipeline)
        if web_console is not None:
            _linger(console, web_console)
        return result
    finally:
        if web_console is not None:
            web_console.stop()
        if consumer is not None:
            consumer.shutdown()
        if pipeline is not None:
            pipeline.stop_query()
            pipeline.stop_session()
        if producer is not None:
            producer.shutdown()
        shutdown_all()
        if cluster is not None:
            cluster.close()


def _watch(console: Console, settings: DemoSettings, result: DemoResult, order_producer: OrderProducer,
           checker: OrderChecker, pipeline: SparkPipeline | None, view: BrokerView) -> list[Sample]:
    """Show progress until everything is consumed and processed (or the run stalls or times out)."""
    assert order_producer.started_at is not None
    started = order_producer.started_at
    expected = result.expected_messages
    samples: list[Sample] = []
    columns = (TextColumn("{task.description:>14}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[info]}"), TimeElapsedColumn())
    last_progress = (time.monotonic(), -1)
    next_sample = 0.0
    with Progress(*columns, console=console, refresh_per_second=8) as progress:
        sent_task = progress.add_task("sent", total=expected, info="")
        consumed_task = progress.add_task("consumed", total=expected, info="")
        spark_task = progress.add_task("Spark rows", total=expected, info="", visible=pipeline is not None)
        while True:
            now = time.monotonic()
            sent, consumed = order_producer.sent.count, checker.consumed.count
            spark_rows = pipeline.rows if pipeline is not None else 0
            progress.update(sent_task, completed=sent, info=f"{order_producer.sent.rate(started):,.0f} msg/s")
            progress.update(consumed_task, completed=consumed,
                            info=f"{checker.violations} violations, {checker.duplicates} duplicates")
            if pipeline is not None:
                progress.update(spark_task, completed=spark_rows, info=pipeline.status)
            if now >= next_sample:
                next_sample = now + 1.0
                stored = view.max_offsets()
                spark_end = pipeline.end_offset_total() if pipeline is not None else 0
                samples.append(Sample(now - started, sent, consumed, spark_rows, sum(stored.values()), spark_end))
                done_producing = order_producer.finished.is_set()
                caught_up = pipeline is None or pipeline.caught_up(stored)
                if done_producing and consumed >= sent and sum(stored.values()) >= sent and caught_up:
                    break
            failure = pipeline.query_failure() if pipeline is not None else None
            if failure is not None:
                result.problems.append(f"the Spark job failed: {failure}")
                break
            position = sent + consumed + spark_rows
            if position != last_progress[1]:
                last_progress = (now, position)
            elif (order_producer.finished.is_set() and (pipeline is None or pipeline.batches)
                  and now - last_progress[0] > STALL_TIMEOUT):
                result.problems.append(f"no progress for {STALL_TIMEOUT:.0f} s: stopped waiting")
                break
            if now - started > settings.timeout:
                result.problems.append(f"timed out after {settings.timeout:.0f} s (--timeout)")
                break
            time.sleep(0.125)
    return samples


def _start_console(console: Console, namesrv: str, port: int) -> ConsoleThread:
    """``rocketflow console`` (read-only) for the demo's cluster, in a thread of this process."""
    try:
        from rocketflow.console import ConsoleSettings, ConsoleThread
    except ModuleNotFoundError as exc:
        raise DemoError(f"--console needs the 'console' extra ({exc.name} is missing): "
                        "pip install 'rocketflow[console]'") from None
    try:
        web_console = ConsoleThread(ConsoleSettings(namesrv, port=port)).start()
    except (OSError, RuntimeError, TimeoutError) as exc:
        raise DemoError(f"the console could not listen on 127.0.0.1:{port}: {exc} (try --console-port 0)") from None
    console.print(f"console: [bold]{web_console.url}[/bold] (the topic, the groups' lag, the messages)",
                  soft_wrap=True)
    return web_console


def _linger(console: Console, web_console: ConsoleThread) -> None:
    """Keep the console (and the embedded cluster) up after the run until Ctrl-C, on a terminal."""
    import sys

    if not sys.stdin.isatty():
        return
    console.print(f"the console stays up at [bold]{web_console.url}[/bold]: Ctrl-C to stop", soft_wrap=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def _finish_spark(console: Console, pipeline: SparkPipeline, view: BrokerView, group: str, result: DemoResult) -> None:
    console.print("stopping the streaming query, writing the per-minute and lag tables ...")
    pipeline.stop_query()
    batches = pipeline.batches
    rows = sum(batch.rows for batch in batches)
    result.spark_batches = len(batches)
    busy = sum(batch.finished - batch.started for batch in batches)
    result.spark_rate = rows / busy if busy > 0 else 0.0
    totals: SparkTotals = pipeline.finish()
    result.spark_rows = totals.rows
    result.spark_distinct = totals.distinct_msg_ids
    result.spark_revenue_cents = totals.revenue_cents
    stored = view.max_offsets()
    result.spark_queue_lag = sum(max(0, offset - pipeline.end_offsets.get(queue, 0))
                                 for queue, offset in stored.items())
    # The query's GroupProgressListener commits each finished batch's end offsets; its events reach
    # Python asynchronously, so give the last one a moment. A group still behind then (a failed
    # write) gets the final end offsets committed here, and the summary shows both numbers.
    deadline = time.monotonic() + 10
    result.spark_group_lag_from_source = view.group_lag(group)
    while result.spark_group_lag_from_source and time.monotonic() < deadline:
        time.sleep(0.25)
        result.spark_group_lag_from_source = view.group_lag(group)
    result.spark_group_lag = result.spark_group_lag_from_source
    if result.spark_group_lag:
        try:
            view.commit(group, dict(pipeline.end_offsets))
            result.spark_group_lag = view.group_lag(group)
        except MQError as exc:
            logger.warning("committing the Spark group's final offsets failed: %s", exc)


def _judge(result: DemoResult, order_producer: OrderProducer, checker: OrderChecker) -> None:
    problems = result.problems
    if result.send_failures:
        problems.append(f"{result.send_failures} sends failed, e.g. {order_producer.errors[:2]}")
    if result.violations:
        problems.append(f"{result.violations} state machine violations, e.g. {checker.examples[:3]}")
    if result.consumed < result.expected_messages:
        problems.append(f"the consumer got {result.consumed} of {result.expected_messages} messages")
    if result.wrong_final_states:
        problems.append(f"{result.wrong_final_states} orders did not end in their planned state")
    if result.spark_rows is not None:
        if result.spark_distinct is None or result.spark_distinct < result.expected_messages:
            problems.append(f"Spark wrote {result.spark_distinct} distinct messages of {result.expected_messages}")
        if result.spark_revenue_cents != result.expected_revenue_cents:
            problems.append(f"Spark's revenue {_money(result.spark_revenue_cents)} is not the expected "
                            f"{_money(result.expected_revenue_cents)}")


def _money(cents: int | None) -> str:
    return "-" if cents is None else f"{cents / 100:,.2f}"


def _write_outputs(console: Console, result: DemoResult, samples: list[Sample], lag_samples: list[LagSample],
                   batches: list[BatchRecord], started_wall: float) -> None:
    plot = result.output / "throughput_lag.png"
    try:
        write_plot(samples, lag_samples, plot, f"rocketflow demo: {result.orders} orders, "
                                               f"{result.expected_messages} messages on {result.topic}",
                   started_wall=started_wall)
        result.files["plot"] = str(plot)
    except ImportError:
        console.print("[yellow]matplotlib is not installed: no plot (pip install 'rocketflow[demo]')[/yellow]")
    for name in ("events", "orders_per_minute", "queue_lag"):
        if (result.output / name).exists():
            result.files[name] = str(result.output / name)
    summary = result.output / "summary.json"
    result.files["summary"] = str(summary)
    data = {key: value for key, value in asdict(result).items() if key != "output"}
    data.update(output=str(result.output), ok=result.ok)
    summary.write_text(json.dumps(data, indent=2, default=str) + "\n")
    timeline = {"samples": [asdict(sample) for sample in samples],
                "spark_batches": [{**asdict(batch), "started": batch.started - started_wall,
                                   "finished": batch.finished - started_wall} for batch in batches]}
    (result.output / "timeline.json").write_text(json.dumps(timeline) + "\n")
    result.files["timeline"] = str(result.output / "timeline.json")


#: Per-queue lag panels drawn at most (a topic with more queues shows its first ones).
MAX_QUEUE_PANELS: Final = 8


def write_plot(samples: Sequence[Sample], lag_samples: Sequence[LagSample], path: Path, title: str, *,
               started_wall: float, cores: int | None = None) -> None:
    """Throughput (messages/s) and lag (messages) over the run, as a PNG (``started_wall``: the
    producer's start, epoch seconds, to place the lag samples).

    Three rows: rates; total lag of the orderly consumer and of Spark; Spark's lag per queue, one small
    panel a queue on a shared scale (lines of equal queues would hide one another). Legends sit beside
    the axes, never over the data; a note says why the producer slows once Spark runs.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_queue: dict[tuple[str, int], list[LagSample]] = {}
    for lag in lag_samples:
        by_queue.setdefault((lag.broker, lag.queue_id), []).append(lag)
    queues = sorted(by_queue)[:MAX_QUEUE_PANELS]
    figure = plt.figure(figsize=(12, 9 if queues else 7))
    grid = figure.add_gridspec(3 if queues else 2, max(len(queues), 1), height_ratios=[3, 2, 1.6][:3 if queues else 2],
                               hspace=0.45, wspace=0.12)
    rate_axes = figure.add_subplot(grid[0, :])
    lag_axes = figure.add_subplot(grid[1, :], sharex=rate_axes)
    times = [sample.at for sample in samples]

    def rates(values: list[int], window: int) -> list[float]:
        out = []
        for index in range(len(values)):
            low = max(0, index - window)
            span = times[index] - times[low]
            out.append((values[index] - values[low]) / span if span > 0 else 0.0)
        return out

    outside = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, "fontsize": "small"}
    # Spark's rows arrive a micro-batch at a time: its rate is averaged over a longer window
    series: list[tuple[str, list[int], int, dict[str, Any]]] = [
        ("producer (sent)", [s.sent for s in samples], 2, {"linewidth": 3.5, "alpha": 0.45}),
        ("orderly consumer", [s.consumed for s in samples], 2, {"linewidth": 1.5}),
    ]
    if lag_samples:
        series.append(("Spark (rows,\n5 s average)", [s.spark_rows for s in samples], 5, {"linewidth": 1.5}))
    for label, values, window, style in series:
        rate_axes.plot(times, rates(values, window), label=label, **style)
    rate_axes.set_ylabel("messages / s")
    rate_axes.tick_params(labelbottom=False)
    rate_axes.set_title(title)
    rate_axes.grid(alpha=0.3)
    rate_axes.legend(**outside)
    if lag_samples:
        cores = cores or os.cpu_count() or 1
        plural = "s" if cores != 1 else ""
        rate_axes.text(0.0, -0.04, f"The producer, the orderly consumer, the broker and Spark share this machine's "
                       f"{cores} core{plural}: the producer's rate falls while Spark's micro-batches run.",
                       transform=rate_axes.transAxes, fontsize="small", style="italic", va="top")

    lag_axes.plot(times, [max(0, s.stored - s.consumed) for s in samples], label="orderly consumer",
                  linewidth=1.8, color="tab:orange")
    if lag_samples:
        lag_axes.plot(times, [max(0, s.stored - s.spark_end) for s in samples], label="Spark",
                      linewidth=1.8, color="tab:green")
    lag_axes.set_ylabel("total lag (messages)")
    lag_axes.set_xlabel("seconds since the producer started")
    lag_axes.grid(alpha=0.3)
    lag_axes.legend(**outside)

    if queues:
        colors = plt.get_cmap("tab10")
        first_axes = None
        for index, (broker, queue_id) in enumerate(queues):
            axes = figure.add_subplot(grid[2, index], sharey=first_axes, sharex=first_axes)
            first_axes = first_axes or axes
            points = by_queue[(broker, queue_id)]
            axes.plot([point.at - started_wall for point in points], [point.lag for point in points],
                      linewidth=1.0, marker=".", markersize=3, color=colors(index % 10))
            axes.set_title(f"{broker}:{queue_id}", fontsize="small")
            axes.tick_params(labelsize="x-small")
            axes.grid(alpha=0.3)
            if index == 0:
                axes.set_ylabel("Spark lag\nper queue", fontsize="small")
            else:
                axes.tick_params(labelleft=False)
        more = len(by_queue) - len(queues)
        note = f" (first {len(queues)} of {len(by_queue)} queues)" if more > 0 else ""
        figure.text(0.5, 0.05, f"Spark's lag per queue after each micro-batch, seconds since the producer "
                    f"started{note}", ha="center", fontsize="small")
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)


#: Below this console width the summary tables take a compact layout (an 80-column terminal fits).
COMPACT_WIDTH: Final = 100


def summary_table(result: DemoResult, width: int) -> Table:
    """The run's figures by stage; measures wrap rather than being cut on a narrow console."""
    def rate(value: float) -> str:
        return f"{value:,.0f} msg/s"

    def count(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    compact = width < COMPACT_WIDTH
    table = Table(title=f"rocketflow demo: {result.orders:,} orders on {result.topic} in {result.seconds:.1f} s",
                  box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD)
    table.add_column("stage", overflow="fold")
    table.add_column("measure", overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_row("producer", "messages sent / expected", f"{result.sent:,} / {result.expected_messages:,}")
    table.add_row("", "send failures", count(result.send_failures))
    table.add_row("", "throughput", rate(result.producer_rate))
    table.add_row("orderly consumer" if not compact else "consumer", "messages consumed", count(result.consumed))
    table.add_row("", "state machine violations", count(result.violations))
    table.add_row("", "duplicates", count(result.duplicates))
    table.add_row("", "orders not in their planned final state", count(result.wrong_final_states))
    table.add_row("", "group lag at the broker", count(result.consumer_group_lag))
    table.add_row("", "throughput", rate(result.consumer_rate))
    if result.spark_rows is not None:
        table.add_row("Spark", "rows written (distinct message ids)",
                      f"{result.spark_rows:,} ({count(result.spark_distinct)})")
        table.add_row("", "micro-batches", count(result.spark_batches))
        table.add_row("", "revenue (expected)",
                      f"{_money(result.spark_revenue_cents)} ({_money(result.expected_revenue_cents)})")
        table.add_row("", "lag: end offsets vs broker max offsets", count(result.spark_queue_lag))
        table.add_row("", "group lag at the broker (committed by the progress listener)",
                      count(result.spark_group_lag_from_source))
        if result.spark_group_lag != result.spark_group_lag_from_source:
            table.add_row("", "group lag at the broker (after a final commit)", count(result.spark_group_lag))
        table.add_row("", "throughput (rows / time in batches)", rate(result.spark_rate))
    return table


#: The per-minute table's state columns: (key, header, compact header).
_STATE_HEADERS: Final = (("created", "created", "new"), ("paid", "paid", "paid"), ("shipped", "shipped", "ship"),
                         ("completed", "completed", "done"), ("cancelled", "cancelled", "cancel"))


def per_minute_table(minutes: list[dict[str, Any]], width: int, limit: int = 10) -> Table:
    """Spark's orders per minute; on a narrow console short headers and light borders, nothing cut."""
    compact = width < COMPACT_WIDTH
    table = Table(title="Spark: orders per minute (event time)", box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
                  caption="new, ship, done: created, shipped, completed" if compact else None)
    headers = ["UTC" if compact else "minute (UTC)", "events", "revenue",
               *(short if compact else long for _key, long, short in _STATE_HEADERS)]
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True)
    for row in minutes[:limit]:
        table.add_row(row["minute"].strftime("%H:%M"), f"{row['events']:,}", f"{row['revenue']:,}",
                      *(f"{row[key]:,}" for key, _long, _short in _STATE_HEADERS))
    return table


def _print_summary(console: Console, result: DemoResult, pipeline: SparkPipeline | None) -> None:
    console.print(summary_table(result, console.width))
    if pipeline is not None:
        console.print(per_minute_table(pipeline.per_minute(), console.width))
    for name, path in result.files.items():
        console.print(f"{name:>18}: {path}", soft_wrap=True)  # a path is copied, not read: never wrapped
    if result.ok:
        console.print("[bold green]OK[/bold green]: every order followed its state machine, nothing was lost.")
    else:
        for problem in result.problems:
            console.print(f"[bold red]FAILED[/bold red]: {problem}")


def configure_logging(console: Console, verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(name)s: %(message)s",
                        handlers=[RichHandler(console=console, show_path=False)], force=True)


def demo_main(settings: DemoSettings, *, verbose: bool = False) -> int:
    """The CLI entry: run, print, return the exit code."""
    console = Console()
    configure_logging(console, verbose)
    try:
        result = run_demo(settings, console)
    except DemoError as exc:
        console.print(f"[bold red]error[/bold red]: {exc}", soft_wrap=True)
        return 2
    except MQError as exc:
        console.print(f"[bold red]error[/bold red]: the cluster failed during the run: {exc}", soft_wrap=True)
        return 1
    return 0 if result.ok else 1


__all__ = [
    "ALLOWED_NEXT",
    "DEFAULT_ORDERS",
    "BrokerView",
    "DemoError",
    "DemoResult",
    "DemoSettings",
    "OrderChecker",
    "OrderProducer",
    "OrderState",
    "PlannedOrder",
    "demo_main",
    "plan_orders",
    "run_demo",
    "write_plot",
]
