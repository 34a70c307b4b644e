"""Spark benchmark: the `rocketmq` source reading a broker versus Spark reading the same rows from Parquet.

Run `python bench/spark_bench.py [--quick]` from the repo root (needs the `spark` extra and Java 17).

1. starts `rocketflow dev` as a subprocess (free ports, temporary store) and loads `--messages`
   100-byte messages (each with its UNIQ_KEY, as producers send them) into an 8-queue topic with the
   rocketflow `Producer` (SEND_BATCH_MESSAGE of 64, 16 requests in flight);
2. starts a local Spark session (`--master`, default local[2]) and reads the topic with the source,
   `readStream ... trigger(availableNow=True)` into the `noop` sink (timed);
3. writes the same rows (a batch read of the source, untimed) to a Parquet directory, then reads that
   with `spark.read.parquet` into the `noop` sink (timed);
4. the floor: the same streaming query over a stand-in source with the same schema and partitions
   that pulls and decodes nothing (each partition yields one pre-built Arrow batch of real-looking
   rows over and over). What it takes is Spark's own cost of a Python streaming source: no source
   can be faster, so its ratio to Parquet bounds the one the `rocketmq` source can reach.

Targets: source <= 3x Parquet, and source <= 1.2x the floor (what the source adds to Spark's own cost
of a Python source: pulling and decoding). Both read the source's default columns (no `properties`
map); `--include-properties` reads the map in both.

Each repetition runs the three reads in turn, in one session after a warm-up job, so the ratios
compare sources, not JVM start-up or warm-up. Results: a table on the console and a JSON file under
bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "src"))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from broker_bench import machine_info  # noqa: E402

from rocketflow.client import Producer  # noqa: E402
from rocketflow.protocol.bodies import TopicConfig  # noqa: E402
from rocketflow.protocol.message import Message  # noqa: E402

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
except ImportError:  # the `spark` extra is missing: main() says so
    DataSource = DataSourceStreamReader = InputPartition = object  # type: ignore[misc,assignment]

TOPIC = "SparkBench"
QUEUES = 8
BODY_SIZE = 100
SEND_BATCH = 64
IN_FLIGHT = 16


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DevProcess:
    """`rocketflow dev` as a subprocess; its output goes to a log file in the store directory."""

    def __init__(self, store_dir: Path, settings: list[str]) -> None:
        self.store_dir = store_dir
        self.settings = settings
        self.proc: subprocess.Popen[bytes] | None = None
        self.namesrv_addr = ""
        self.log_path = store_dir / "dev.log"

    def start(self) -> None:
        argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli()", "dev",
                "--namesrv-port", str(free_port()), "--broker-port", str(free_port()),
                "--store-dir", str(self.store_dir / "store")]
        for setting in self.settings:
            argv += ["--set", setting]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        (self.store_dir / "store").mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            for line in text.splitlines():
                if line.startswith("namesrv listening on "):
                    self.namesrv_addr = line.split()[-1]
                if line.startswith("broker ") and " listening on " in line and self.namesrv_addr:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise SystemExit("rocketflow dev did not start:\n" + self.log_path.read_text(errors="replace"))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load_messages(console: Console, namesrv: str, count: int) -> float:
    """Create the topic and send ``count`` messages; returns the seconds it took."""
    producer = Producer("spark_bench_producer", namesrv=namesrv)
    producer.start()
    try:
        instance = producer.instance
        instance.run(instance.update_topic_route("TBW102"))
        route = instance.run(instance.api.get_topic_route("TBW102"))
        assert route is not None and route.broker_datas, "no broker registered"
        broker_addr = route.broker_datas[0].select_broker_addr()
        assert broker_addr is not None
        instance.run(instance.api.create_topic(broker_addr, TopicConfig(TOPIC, QUEUES, QUEUES)))
        deadline = time.monotonic() + 10
        while not instance.run(instance.update_topic_route(TOPIC)) and time.monotonic() < deadline:
            time.sleep(0.1)
        body = b"x" * BODY_SIZE
        started = time.perf_counter()
        with Progress(TextColumn("loading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task("load", total=count)

            async def load() -> None:
                limit = asyncio.Semaphore(IN_FLIGHT)

                async def send(size: int) -> None:
                    async with limit:
                        await producer.send_batch_coro([Message(TOPIC, body) for _ in range(size)], timeout=30)
                    progress.advance(task, size)

                jobs = [send(min(SEND_BATCH, count - start)) for start in range(0, count, SEND_BATCH)]
                await asyncio.gather(*jobs)

            instance.run(load())
        return time.perf_counter() - started
    finally:
        producer.shutdown()


FLOOR_BATCH_ROWS = 4096  # about what the source yields a piece (DECODE_PIECE_BYTES of 100-byte records)


def floor_batch(queue_id: int, rows: int, include_properties: bool = False) -> Any:
    """An Arrow batch of the source's schema: ``rows`` records like the loaded ones, decoded as the source does."""
    from rocketflow.protocol.codec import encode_record
    from rocketflow.protocol.message import MessageExt
    from rocketflow.spark.columns import records_to_batch

    body = b"x" * BODY_SIZE
    records = b"".join(encode_record(MessageExt(
        TOPIC, body,
        properties={"UNIQ_KEY": f"7F00000100002A9F{offset:016X}", "WAIT": "true", "CLUSTER": "DefaultCluster"},
        queue_id=queue_id, queue_offset=offset, commit_log_offset=offset * 200, born_timestamp=1_700_000_000_000,
        store_timestamp=1_700_000_000_001, born_host=("127.0.0.1", 5555), store_host=("127.0.0.1", 10911)))
        for offset in range(rows))
    return records_to_batch(records, TOPIC, "broker-a", include_properties=include_properties)


class FloorPartition(InputPartition):  # type: ignore[misc]
    def __init__(self, queue_id: int, rows: int) -> None:
        self.queue_id = queue_id
        self.rows = rows


class FloorStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """One partition per queue, as the source plans a backlog of ``rows`` over ``QUEUES`` queues."""

    def __init__(self, rows: int, include_properties: bool) -> None:
        self.rows = rows
        self.include_properties = include_properties

    def initialOffset(self) -> dict[str, int]:
        return {"end": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"end": self.rows}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[FloorPartition]:
        total = end["end"] - start["end"]
        return [FloorPartition(queue_id, total * (queue_id + 1) // QUEUES - total * queue_id // QUEUES)
                for queue_id in range(QUEUES)]

    def read(self, partition: FloorPartition) -> Any:
        batch = floor_batch(partition.queue_id, min(FLOOR_BATCH_ROWS, partition.rows), self.include_properties)
        left = partition.rows
        while left > 0:
            yield batch if left >= batch.num_rows else batch.slice(0, left)
            left -= batch.num_rows

    def commit(self, end: dict[str, int]) -> None:
        pass


class FloorSource(DataSource):  # type: ignore[misc]
    """``format("rocketmq_floor")``: see `FloorStreamReader`."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq_floor"

    def schema(self) -> str:
        from rocketflow.spark.columns import schema_ddl

        return schema_ddl(self.options.get("includeProperties", "false") == "true")

    def streamReader(self, schema: Any) -> FloorStreamReader:
        return FloorStreamReader(int(self.options["rows"]), self.options.get("includeProperties", "false") == "true")


def _pull_queues(namesrv: str, queue_ids: list[int], pull_batch_size: int, decode: bool) -> tuple[int, float]:
    """Pull (and with ``decode``, decode as the source does) whole queues of the topic in this process;
    returns (records, CPU seconds of this process)."""
    import resource

    from rocketflow.spark.columns import records_to_batch
    from rocketflow.spark.connection import get_connection
    from rocketflow.spark.source import _pieces

    connection = get_connection(namesrv)
    queues = [mq for mq in connection.queues(TOPIC) if mq.queue_id in queue_ids]
    ends = connection.max_offsets(queues)
    before = resource.getrusage(resource.RUSAGE_SELF)
    records = 0
    for mq in queues:
        for chunk in connection.read_range(mq, 0, ends[mq], group="spark_bench_pull_only", sub_expression="*",
                                           pull_batch_size=pull_batch_size):
            for piece in _pieces(chunk.bodies):  # joined as the source joins them before decoding
                if decode:
                    records += records_to_batch(piece, TOPIC, mq.broker_name, include_properties=False).num_rows
    after = resource.getrusage(resource.RUSAGE_SELF)
    return records, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def pull_phase(namesrv: str, pull_batch_size: int, decode: bool, workers: int = 2) -> tuple[float, float]:
    """The source's work outside Spark, in ``workers`` processes as local[2] runs two Python workers (each
    a share of the queues): wall seconds and CPU seconds of the workers."""
    import concurrent.futures
    import multiprocessing

    shares = [[queue_id for queue_id in range(QUEUES) if queue_id % workers == worker] for worker in range(workers)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        list(pool.map(_pull_queues, [namesrv] * workers, [[0]] * workers, [pull_batch_size] * workers,
                      [False] * workers))  # warm-up: imports, connections
        started = time.perf_counter()
        results = list(pool.map(_pull_queues, [namesrv] * workers, shares, [pull_batch_size] * workers,
                                [decode] * workers))
        wall = time.perf_counter() - started
    return wall, sum(cpu for _, cpu in results)


def timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--quick", action="store_true", help="200,000 messages")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--pull-batch-size", type=int, default=1024,
                        help="messages per pull asked by the source (default 1024)")
    parser.add_argument("--broker-transfer-count", type=int, default=1024,
                        help="the broker's maxTransferCountOnMessageInMemory (RocketMQ's default: 32)")
    parser.add_argument("--broker-transfer-bytes", type=int, default=1024 * 1024,
                        help="the broker's maxTransferBytesOnMessageInMemory (RocketMQ's default: 262144)")
    parser.add_argument("--include-properties", action="store_true",
                        help="read the properties map too (the source's includeProperties=true), in source and floor")
    parser.add_argument("--repeat", type=int, default=4,
                        help="timed runs of each read (best is reported; Parquet warms up over the first ~3)")
    args = parser.parse_args()
    count = 200_000 if args.quick else args.messages
    console = Console()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    work_dir = Path(tempfile.mkdtemp(prefix="rocketflow-spark-bench-"))
    broker_settings = [f"maxTransferCountOnMessageInMemory={args.broker_transfer_count}",
                       f"maxTransferBytesOnMessageInMemory={args.broker_transfer_bytes}"]
    dev = DevProcess(work_dir, broker_settings)
    spark = None
    try:
        console.print(f"starting rocketflow dev ({', '.join(broker_settings)})")
        dev.start()
        load_seconds = load_messages(console, dev.namesrv_addr, count)
        console.print(f"loaded {count:,} messages in {load_seconds:.1f}s ({count / load_seconds:,.0f} msg/s)")

        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master(args.master).appName("rocketflow-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        include = "true" if args.include_properties else "false"
        spark.range(1000).write.format("noop").mode("overwrite").save()  # warm-up

        def source_stream(checkpoint: Path) -> Any:
            return (spark.readStream.format("rocketmq").option("namesrv", dev.namesrv_addr).option("topic", TOPIC)
                    .option("startingOffsets", "earliest").option("pullBatchSize", str(args.pull_batch_size))
                    .option("includeProperties", include).load()
                    .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
                    .trigger(availableNow=True))

        spark.dataSource.register(FloorSource)

        def floor_stream(checkpoint: Path) -> Any:
            return (spark.readStream.format("rocketmq_floor").option("rows", str(count))
                    .option("includeProperties", include).load()
                    .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
                    .trigger(availableNow=True))

        parquet_dir = work_dir / "parquet"
        console.print("writing the same rows to Parquet (untimed)")
        (spark.read.format("rocketmq").option("namesrv", dev.namesrv_addr).option("topic", TOPIC)
         .option("pullBatchSize", str(args.pull_batch_size)).load().write.parquet(str(parquet_dir)))
        parquet_bytes = sum(path.stat().st_size for path in parquet_dir.rglob("*.parquet"))
        parquet_rows = spark.read.parquet(str(parquet_dir)).count()

        def run_stream(query: Any) -> tuple[float, int]:
            started = time.perf_counter()
            running = query.start()
            running.awaitTermination()
            return time.perf_counter() - started, sum(int(p["numInputRows"]) for p in running.recentProgress)

        source_times: list[float] = []
        floor_times: list[float] = []
        parquet_times: list[float] = []
        source_rows = floor_rows = 0
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task("reads (source, floor, Parquet)", total=args.repeat * 3)
            for attempt in range(args.repeat):
                seconds, source_rows = run_stream(source_stream(work_dir / f"checkpoint-{attempt}"))
                source_times.append(seconds)
                progress.advance(task)
                seconds, floor_rows = run_stream(floor_stream(work_dir / f"floor-checkpoint-{attempt}"))
                floor_times.append(seconds)
                progress.advance(task)
                parquet_times.append(timed(lambda: spark.read.parquet(str(parquet_dir)).write.format("noop")
                                           .mode("overwrite").save()))
                progress.advance(task)
        # the source's own work without Spark: what a Python source reading this broker cannot do without
        console.print("pulling the topic without Spark (2 processes, as local[2]'s Python workers): "
                      "pull only, then pull + decode")
        pull_wall, pull_cpu = pull_phase(dev.namesrv_addr, args.pull_batch_size, decode=False)
        decode_wall, decode_cpu = pull_phase(dev.namesrv_addr, args.pull_batch_size, decode=True)
    finally:
        if spark is not None:
            spark.stop()
        dev.stop()

    source_best, parquet_best, floor_best = min(source_times), min(parquet_times), min(floor_times)
    ratio = source_best / parquet_best
    floor_ratio = floor_best / parquet_best
    over_floor = source_best / floor_best
    table = Table(title=f"Spark reads of {count:,} x {BODY_SIZE}-byte messages ({args.master}, best of {args.repeat})")
    for column in ("read", "rows", "seconds", "rows/s", "vs floor", "vs Parquet"):
        table.add_column(column, justify="right" if column != "read" else "left")
    columns = "with the properties map" if args.include_properties else "default columns, no properties map"
    table.add_row(f"rocketmq source (availableNow, noop; {columns})", f"{source_rows:,}", f"{source_best:.2f}",
                  f"{source_rows / source_best:,.0f}", f"{over_floor:.2f}x", f"{ratio:.2f}x")
    table.add_row("floor: a stand-in source that pulls and decodes nothing", f"{floor_rows:,}", f"{floor_best:.2f}",
                  f"{floor_rows / floor_best:,.0f}", "1.00x", f"{floor_ratio:.2f}x")
    table.add_row(f"Parquet ({parquet_bytes / 1e6:.0f} MB, noop)", f"{parquet_rows:,}", f"{parquet_best:.2f}",
                  f"{parquet_rows / parquet_best:,.0f}", f"{parquet_best / floor_best:.2f}x", "1.00x")
    console.print(table)
    console.print(f"without Spark, 2 processes: pull only {pull_wall:.2f}s ({pull_cpu:.2f}s CPU), pull + decode "
                  f"{decode_wall:.2f}s ({decode_cpu:.2f}s CPU); the floor plus the decode alone would be "
                  f"{(floor_best + decode_wall - pull_wall) / floor_best:.2f}x the floor, plus the pulls "
                  f"{(floor_best + decode_wall) / floor_best:.2f}x")
    verdict = "[green]met[/green]" if ratio <= 3.0 else "[red]missed[/red]"
    console.print(f"target source <= 3x Parquet: {verdict} ({ratio:.2f}x); "
                  f"all runs: source {[round(t, 2) for t in source_times]}, "
                  f"floor {[round(t, 2) for t in floor_times]}, Parquet {[round(t, 2) for t in parquet_times]}")
    floor_verdict = "[green]met[/green]" if over_floor <= 1.2 else "[red]missed[/red]"
    console.print(f"target source <= 1.2x the floor: {floor_verdict} ({over_floor:.2f}x); the source takes "
                  f"{source_best - floor_best:.2f}s more than the floor; the floor alone is {floor_ratio:.2f}x Parquet")
    if source_rows != count or parquet_rows != count or floor_rows != count:
        console.print(f"[red]row counts differ from {count}: source {source_rows}, floor {floor_rows}, "
                      f"Parquet {parquet_rows}[/red]")

    results = {
        "messages": count, "body_size": BODY_SIZE, "queues": QUEUES, "master": args.master,
        "broker_settings": broker_settings, "pull_batch_size": args.pull_batch_size,
        "load_seconds": round(load_seconds, 3),
        "source": {"rows": source_rows, "seconds": [round(t, 3) for t in source_times]},
        "floor": {"rows": floor_rows, "seconds": [round(t, 3) for t in floor_times]},
        "parquet": {"rows": parquet_rows, "bytes": parquet_bytes, "seconds": [round(t, 3) for t in parquet_times]},
        "include_properties": args.include_properties,
        "ratio": round(ratio, 3),
        "floor_ratio": round(floor_ratio, 3),
        "source_over_floor": round(over_floor, 3),
        "without_spark": {"pull_seconds": round(pull_wall, 3), "pull_cpu_seconds": round(pull_cpu, 3),
                          "pull_decode_seconds": round(decode_wall, 3),
                          "pull_decode_cpu_seconds": round(decode_cpu, 3)},
        "machine": machine_info(),
    }
    out_dir = REPO_ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"spark_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=1))
    console.print(f"results: {out.relative_to(REPO_ROOT)}")
    shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
