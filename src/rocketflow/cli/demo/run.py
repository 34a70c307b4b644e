"""One run of the pipeline (`run_demo`) and the CLI's entry (`demo_main`): start, watch, judge, write, print."""

from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from rocketflow.cli.demo.broker_view import BrokerView
from rocketflow.cli.demo.orders import OrderChecker, OrderProducer, OrderState, PlannedOrder, plan_orders
from rocketflow.cli.demo.plot import write_plot
from rocketflow.cli.demo.settings import DemoError, DemoResult, DemoSettings, Sample
from rocketflow.cli.demo.tables import money, per_minute_table, summary_table
from rocketflow.client import ConsumeFromWhere, MQError, Producer, PushConsumer
from rocketflow.client.instance import shutdown_all
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import Message

if TYPE_CHECKING:
    from rocketflow.cli.demo_spark import BatchRecord, LagSample, SparkPipeline, SparkTotals
    from rocketflow.console import ConsoleThread

logger = logging.getLogger(__name__)

#: How long the run may go without any progress once the producer is done and Spark ran a batch (seconds).
STALL_TIMEOUT: Final = 60.0


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
            problems.append(f"Spark's revenue {money(result.spark_revenue_cents)} is not the expected "
                            f"{money(result.expected_revenue_cents)}")


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
