"""Client benchmark: our Producer and PushConsumer versus Apache's C++ client and Redis Streams, same run.

Run `python bench/client_bench.py [--quick]` from the repo root. It starts `rocketflow dev` as a
subprocess (free ports, temporary store) and, with 100-byte messages on topics of 8 queues:

1. produce, sync: `Producer.send` from 8 threads (`--sync-messages`);
2. produce, batches: `Producer.send_batch` of 32 from 8 threads (this fills the consume topic);
3. consume, concurrent: a `PushConsumer` (default settings, so batch size 1: the no-op listener is
   called once per message) from the first offset until every message arrived;
4. consume, orderly: the same with `register_orderly_listener` (another group, the same messages);
   then the drop-in for Apache's rocketmq-client-python, `rocketflow.compat.rocketmq`'s `PushConsumer`
   (its defaults: one consume thread per CPU, a callback a message; another group, the same messages),
   `--no-compat` skips it;
5. latency: a producer subprocess sends at a steady `--latency-rate` msg/s (default 5,000), each body
   starting with its send time (`time.time_ns()`); the listener here records the difference;
6. the C++ client (PyPI `rocketmq` 0.4.4 from `.interop/venv-cpp`, which the interop tests install;
   run with HOME in a temporary directory): `send_sync` from 8 threads, then its push consumer on
   the same messages, against the same broker;
7. Redis Streams (Debian `redis-server`, redis-py + hiredis): pipelined XADD, then XREADGROUP + XACK;
   then its latency at the same rate: a producer process paced as ours with one XADD a message over
   8 streams, and a consumer process in a blocking XREADGROUP (its XACKs in the same round trip);
8. NATS JetStream (Debian `nats-server`, file storage; nats-py), a second latency peer:
   the same rate from an asyncio producer process paced as ours (each publish awaits its PubAck) to
   an asyncio consumer process with a push subscription acking each message (`--no-nats` skips it;
   skipped as well when nats-server or nats-py is missing).

Rates are messages over the wall time of the phase (consume phases include the consumer's start,
as the C++ client's do). Results: a table on the console and a JSON file under bench/results/.
`--profile-dir DIR` samples this process with py-spy during the consume phases (collapsed stacks).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "src"))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from broker_bench import (  # noqa: E402
    BrokerProcess,
    CpuMeter,
    RedisProcess,
    ServerProcess,
    machine_info,
    percentile,
    run_redis,
)

from rocketflow import Message, Producer, PushConsumer  # noqa: E402
from rocketflow.client import ConsumeConcurrentlyStatus, ConsumeFromWhere, ConsumeOrderlyStatus  # noqa: E402
from rocketflow.compat.rocketmq import client as compat_client  # noqa: E402
from rocketflow.protocol.bodies import TopicConfig  # noqa: E402
from rocketflow.protocol.message import MessageQueue  # noqa: E402

QUEUES = 8
BODY_SIZE = 100
BATCH = 32
THREADS = 8
TOPIC = "ClientBench"
CPP_TOPIC = "ClientBenchCpp"
LATENCY_TOPIC = "ClientBenchLatency"
CONSUME_TIMEOUT = 900.0


@dataclass
class Results:
    messages: int
    sync_messages: int
    cpp_messages: int
    ours: dict[str, Any] = field(default_factory=dict)
    cpp: dict[str, Any] = field(default_factory=dict)
    redis: dict[str, Any] = field(default_factory=dict)
    nats: dict[str, Any] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)


def rate_dict(messages: int, seconds: float, cpu: float | None = None) -> dict[str, float]:
    result = {"messages": messages, "seconds": round(seconds, 4),
              "msgs_per_s": round(messages / seconds, 1) if seconds > 0 else 0.0}
    if cpu is not None:
        result["client_cpu_s"] = round(cpu, 3)
    return result


class Profiler:
    """py-spy sampling this process during one phase (collapsed stacks), when a profile dir is given."""

    def __init__(self, directory: Path | None, name: str) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        if directory is None:
            return
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([binary, "record", "--pid", str(os.getpid()), "--format", "raw", "--rate", "200",
                                      "--threads", "--nonblocking", "--output", str(directory / f"{name}.txt")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=60)
            self.proc = None


# ============================================================================ ours


def create_topic(producer: Producer, broker_addr: str, topic: str) -> None:
    """Create ``topic`` with 8 queues and wait until the name server routes it."""
    instance = producer.instance
    instance.run(instance.api.create_topic(broker_addr, TopicConfig(topic, QUEUES, QUEUES)))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        route = instance.run(instance.api.get_topic_route(topic))
        if route is not None and len(route.queue_datas) and route.queue_datas[0].write_queue_nums == QUEUES:
            return
        time.sleep(0.1)
    raise SystemExit(f"topic {topic} was not routed in time")


def run_threads(count: int, work: Callable[[int], None]) -> float:
    """Run ``work(thread_index)`` on 8 threads; returns the wall seconds."""
    threads = [threading.Thread(target=work, args=(index,)) for index in range(THREADS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def produce_sync(producer: Producer, count: int, progress: Progress) -> dict[str, float]:
    body = os.urandom(BODY_SIZE)
    task = progress.add_task(f"ours: send x {THREADS} threads", total=count)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        share = count // THREADS + (1 if index < count % THREADS else 0)
        try:
            for done in range(share):
                producer.send(Message(TOPIC, body))
                if done % 500 == 499:
                    progress.advance(task, 500)
        except BaseException as exc:  # reported below
            errors.append(exc)

    meter = CpuMeter(psutil.Process())
    meter.start()
    seconds = run_threads(count, work)
    if errors:
        raise SystemExit(f"send failed: {errors[0]!r}")
    progress.update(task, completed=count)
    return rate_dict(count, seconds, meter.stop())


def produce_batches(producer: Producer, count: int, progress: Progress) -> dict[str, float]:
    body = os.urandom(BODY_SIZE)
    task = progress.add_task(f"ours: send_batch of {BATCH} x {THREADS} threads", total=count)
    errors: list[BaseException] = []
    batches = (count + BATCH - 1) // BATCH

    def work(index: int) -> None:
        try:
            for batch_index in range(index, batches, THREADS):
                n = min(BATCH, count - batch_index * BATCH)
                producer.send_batch([Message(TOPIC, body) for _ in range(n)])
                progress.advance(task, n)
        except BaseException as exc:
            errors.append(exc)

    meter = CpuMeter(psutil.Process())
    meter.start()
    seconds = run_threads(count, work)
    if errors:
        raise SystemExit(f"send_batch failed: {errors[0]!r}")
    return rate_dict(count, seconds, meter.stop())


@dataclass
class Arrivals:
    """What a consume phase counts: ``note()`` once per message (a closure, as cheap as the listener's own
    loop); ``done`` is set at the ``count``-th, ``first`` holds when the first came."""

    note: Callable[[], None]
    done: threading.Event
    first: list[float]
    counter: itertools.count[int]


def arrivals(count: int, progress: Progress, task: Any) -> Arrivals:
    counter = itertools.count(1)
    done = threading.Event()
    first = [0.0]

    def note() -> None:
        seen = next(counter)  # atomic under the GIL
        if seen == 1:
            first[0] = time.perf_counter()
        if seen % 1000 == 0:
            progress.update(task, completed=seen)
        if seen == count:
            done.set()

    return Arrivals(note, done, first, counter)


def timed_consume(consumer: Any, arrived: Arrivals, count: int, what: str, progress: Progress, task: Any,
                  profile_dir: Path | None, profile_name: str) -> dict[str, float]:
    """Start ``consumer`` and time it (wall and this process's CPU) until ``count`` messages arrived."""
    profiler = Profiler(profile_dir, profile_name)
    meter = CpuMeter(psutil.Process())
    meter.start()
    started = time.perf_counter()
    consumer.start()
    try:
        if not arrived.done.wait(CONSUME_TIMEOUT):
            raise SystemExit(f"{what} consumer got only {next(arrived.counter) - 1} of {count} messages")
        seconds = time.perf_counter() - started
        cpu = meter.stop()
    finally:
        profiler.stop()
        consumer.shutdown()
    progress.update(task, completed=count)
    result = rate_dict(count, seconds, cpu)
    result["first_to_last_msgs_per_s"] = round(count / (started + seconds - arrived.first[0]), 1)
    return result


def consume(namesrv: str, group: str, count: int, orderly: bool, progress: Progress,
            profile_dir: Path | None, on_loop: bool = False) -> dict[str, float]:
    """A push consumer from the first offset until ``count`` messages of TOPIC arrived; ``on_loop``: with an
    ``async def`` listener (concurrent mode), run on the client's event loop instead of the consume threads."""
    kind = "orderly" if orderly else "concurrent-async" if on_loop else "concurrent"
    task = progress.add_task(f"ours: push consumer, {kind}", total=count)
    arrived = arrivals(count, progress, task)
    note = arrived.note

    def concurrent_listener(msgs: list[Any], context: Any) -> ConsumeConcurrentlyStatus:
        for _ in msgs:
            note()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def async_listener(msgs: list[Any], context: Any) -> ConsumeConcurrentlyStatus:
        for _ in msgs:
            note()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def orderly_listener(msgs: list[Any], context: Any) -> ConsumeOrderlyStatus:
        for _ in msgs:
            note()
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(group, namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")
    if orderly:
        consumer.register_orderly_listener(orderly_listener)
    else:
        consumer.register_concurrent_listener(async_listener if on_loop else concurrent_listener)
    return timed_consume(consumer, arrived, count, kind, progress, task, profile_dir, f"consume-{kind}")


def consume_compat(namesrv: str, group: str, count: int, progress: Progress,
                   profile_dir: Path | None) -> dict[str, float]:
    """`rocketflow.compat.rocketmq`'s push consumer, as a rocketmq-client-python user runs it (its callback
    once per message), until ``count`` messages of TOPIC arrived (a new group: the first offset)."""
    task = progress.add_task("ours: rocketmq-client-python drop-in push consumer", total=count)
    arrived = arrivals(count, progress, task)
    note = arrived.note

    def callback(msg: Any) -> compat_client.ConsumeStatus:
        note()
        return compat_client.ConsumeStatus.CONSUME_SUCCESS

    consumer = compat_client.PushConsumer(group)
    consumer.set_name_server_address(namesrv)
    consumer.subscribe(TOPIC, callback)
    return timed_consume(consumer, arrived, count, "compat", progress, task, profile_dir, "consume-compat")


#: A timerfd pacing an event loop, for the latency producers (ours and NATS's).
_TICKER = textwrap.dedent("""
    class Ticker:
        # A periodic Linux timerfd: sub-millisecond ticks for an event loop, whose own timers (uvloop's
        # and asyncio's) fire on a 1 ms grid and would send the messages in bursts of rate/1000.

        def __init__(self, rate):
            import ctypes, os
            self._os = os
            libc = ctypes.CDLL(None, use_errno=True)

            class Timespec(ctypes.Structure):
                _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

            class ITimerSpec(ctypes.Structure):
                _fields_ = [("it_interval", Timespec), ("it_value", Timespec)]

            self.fd = libc.timerfd_create(1, 0o4000 | 0o2000000)  # CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC
            if self.fd < 0:
                raise OSError(ctypes.get_errno(), "timerfd_create")
            period = int(1e9 / rate)
            spec = Timespec(period // 1_000_000_000, period % 1_000_000_000)
            if libc.timerfd_settime(self.fd, 0, ctypes.byref(ITimerSpec(spec, spec)), None) != 0:
                raise OSError(ctypes.get_errno(), "timerfd_settime")

        def expirations(self):
            try:
                return int.from_bytes(self._os.read(self.fd, 8), "little")
            except BlockingIOError:
                return 0

        def close(self):
            self._os.close(self.fd)

""")


_LATENCY_PRODUCER = textwrap.dedent("""
    import asyncio, sys, threading, time
    sys.path.insert(0, sys.argv[5])
    from rocketflow import Message, Producer
    namesrv, topic, rate, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    batch, mode = int(sys.argv[6]), sys.argv[7]
    producer = Producer("client_bench_latency_pg", namesrv)
    producer.start()
    pad = b"x" * 81
    for _ in range(200):  # warm up connections and routes (not measured: no timestamp)
        producer.send(Message(topic, b"warmup"))
    total = int(rate * seconds)
    # Completed sends are counted, not kept: a list of every future grows the heap by ~20 GC-tracked
    # objects a send, and the full collections it triggers then stall this process for 100s of ms
    # (measured with gc.callbacks), which the latency would wrongly charge to the client.
    lock = threading.Lock()
    outcome = {"done": 0, "error": None}
    all_done = threading.Event()

    def completed(future):
        error = future.exception()
        with lock:
            outcome["done"] += 1
            if error is not None and outcome["error"] is None:
                outcome["error"] = error
            if outcome["done"] == total:
                all_done.set()

    async def pace_on_the_loop():
        # an asyncio application's producer: paced by the client's own loop, each send a task
        loop = asyncio.get_running_loop()
        running = set()
        sent = 0
        finished = loop.create_future()
        ticker = Ticker(rate)

        def tick():
            nonlocal sent
            for _ in range(ticker.expirations()):
                if sent == total:
                    break
                task = loop.create_task(producer.send_async_await(Message(topic, b"%019d" % time.time_ns() + pad)))
                running.add(task)
                task.add_done_callback(running.discard)
                task.add_done_callback(completed)
                sent += 1
            if sent == total and not finished.done():
                loop.remove_reader(ticker.fd)
                finished.set_result(None)

        loop.add_reader(ticker.fd, tick)
        try:
            await finished
        finally:
            ticker.close()

""") + _TICKER + textwrap.dedent("""
    started = time.perf_counter()
    cpu_started = time.process_time()
    if mode == "asyncio":  # batch is 1
        producer.instance.run(pace_on_the_loop())
    else:
        for index in range(0, total, batch):
            target = started + index / rate
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            if batch == 1:
                producer.send_async(Message(topic, b"%019d" % time.time_ns() + pad)).add_done_callback(completed)
            else:
                producer.send_batch([Message(topic, b"%019d" % time.time_ns() + pad) for _ in range(batch)])
    if batch == 1:
        if not all_done.wait(30):
            raise SystemExit(f"only {outcome['done']} of {total} sends completed")
        if outcome["error"] is not None:
            raise outcome["error"]
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    producer.shutdown()
    print("sent", total, round(total / elapsed, 1), round(cpu, 3), flush=True)
""")


#: how the latency phase's producer and consumer are written: ``threads`` (send_async from a pacing
#: thread; a plain listener on the consume threads) or ``asyncio`` (sends paced by the client's loop
#: with send_async_await; an ``async def`` listener on the loop), as an asyncio application would
LATENCY_MODES = ("threads", "asyncio")


_LATENCY_CONSUMER = textwrap.dedent("""
    import sys, threading, time
    sys.path.insert(0, sys.argv[1])
    from rocketflow import PushConsumer
    from rocketflow.client import ConsumeConcurrentlyStatus, ConsumeFromWhere
    namesrv, topic, total, mode, out_path = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
    give_up_after = float(sys.argv[7])
    samples = []  # now minus the send time stamped in the body, in ns
    lock = threading.Lock()
    done = threading.Event()

    def record(msgs):
        now = time.time_ns()
        for msg in msgs:
            if msg.body[:1] != b"w":
                with lock:
                    samples.append(now - int(msg.body[:19]))
                    if len(samples) >= total:
                        done.set()

    def listener(msgs, context):
        record(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def async_listener(msgs, context):
        record(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("client_bench_latency_cg", namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    consumer.subscribe(topic, "*")
    consumer.register_concurrent_listener(async_listener if mode == "asyncio" else listener)
    consumer.start()
    print("ready", flush=True)
    cpu_started = time.process_time()
    deadline = time.monotonic() + give_up_after
    while not done.wait(0.5) and time.monotonic() < deadline:
        print("received", len(samples), flush=True)
    cpu = time.process_time() - cpu_started
    consumer.shutdown()
    with lock:
        taken = samples[:total]
    with open(out_path, "w") as out:
        out.write("\\n".join(map(str, taken)))
    print("done", len(taken), round(cpu, 3), flush=True)
""")


def latency(namesrv: str, rate: int, seconds: float, batch: int, progress: Progress,
            mode: str = "threads", broker_pid: int | None = None) -> dict[str, Any]:
    """End-to-end latency: a producer subprocess at a steady rate and a push consumer subprocess.

    The consumer has a process of its own: in this one the progress display renders ~2 ms at a time,
    ten times a second, holding the GIL, which stalled the consumer's loop (measured: p99 +0.3-0.5 ms).
    """
    if mode not in LATENCY_MODES or (mode == "asyncio" and batch != 1):
        raise SystemExit(f"latency mode {mode!r} (batch {batch}) is not one of {LATENCY_MODES} (asyncio: batch 1)")
    total = (int(rate * seconds) + batch - 1) // batch * batch
    with tempfile.TemporaryDirectory(prefix="rocketflow-latency-") as work_dir:
        samples_path = Path(work_dir) / "samples.txt"
        consumer = [sys.executable, "-c", _LATENCY_CONSUMER, str(REPO_ROOT / "src"), namesrv, LATENCY_TOPIC,
                    str(total), mode, str(samples_path), str(seconds + 60)]
        producer = [sys.executable, "-c", _LATENCY_PRODUCER, namesrv, LATENCY_TOPIC, str(rate), str(seconds),
                    str(REPO_ROOT / "src"), str(batch), mode]
        # the consumer's rebalance assigns the queues in the 2 s before anything is sent
        result = measure_latency(f"ours: latency at {rate:,} msg/s ({mode})", consumer, producer, samples_path,
                                 total, rate, progress, settle=2.0, server_pid=broker_pid)
    return {**result, "send_batch": batch, "mode": mode}


def measure_latency(title: str, consumer_argv: list[str], producer_argv: list[str], samples_path: Path, total: int,
                    rate: int, progress: Progress, settle: float = 0.0,
                    server_pid: int | None = None) -> dict[str, Any]:
    """Start the consumer process, wait for its "ready" (then ``settle`` s), start the producer process,
    follow the consumer's counts, then read the samples (ns, one a line) it wrote: p50/p99/p99.9/max.

    With ``server_pid`` the server's CPU over the producer's run is measured too, so that each of the
    three processes' CPU a message can be set beside the peer's."""
    task = progress.add_task(title, total=total)
    consumer = subprocess.Popen(consumer_argv, stdout=subprocess.PIPE, text=True)
    producer: subprocess.Popen[str] | None = None
    try:
        assert consumer.stdout is not None
        if consumer.stdout.readline().strip() != "ready":
            raise SystemExit(f"{title}: the consumer did not start")
        time.sleep(settle)
        server_cpu = CpuMeter(psutil.Process(server_pid)) if server_pid is not None else None
        if server_cpu is not None:
            server_cpu.start()
        producer = subprocess.Popen(producer_argv, stdout=subprocess.PIPE, text=True)
        summary: list[str] = []
        for line in consumer.stdout:
            fields = line.split()
            if fields[:1] == ["received"]:
                progress.update(task, completed=int(fields[1]))
            elif fields[:1] == ["done"]:
                summary = fields
        out, _ = producer.communicate(timeout=120)
        server_cpu_s = server_cpu.stop() if server_cpu is not None else None
        consumer.wait(timeout=60)
    finally:
        for proc in (producer, consumer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    samples = [int(line) / 1e6 for line in samples_path.read_text().split()] if samples_path.exists() else []
    progress.update(task, completed=len(samples))
    if len(samples) < total:
        raise SystemExit(f"{title}: received {len(samples)} of {total} ({out.strip()})")
    fields = out.split() if out.startswith("sent") else []
    producer_cpu_s = float(fields[3]) if len(fields) > 3 else 0.0
    consumer_cpu_s = float(summary[2]) if len(summary) > 2 else 0.0
    cpu_us_per_msg = {"producer": round(producer_cpu_s / total * 1e6, 1),
                      "consumer": round(consumer_cpu_s / total * 1e6, 1)}
    if server_cpu_s is not None:
        cpu_us_per_msg["server"] = round(server_cpu_s / total * 1e6, 1)
    return {"messages": len(samples), "target_rate": rate, "sent_rate": float(fields[2]) if len(fields) > 2 else 0.0,
            "producer_cpu_s": producer_cpu_s, "consumer_cpu_s": consumer_cpu_s, "cpu_us_per_msg": cpu_us_per_msg,
            "p50_ms": round(statistics.median(samples), 3), "p99_ms": round(percentile(samples, 0.99), 3),
            "p999_ms": round(percentile(samples, 0.999), 3), "max_ms": round(max(samples), 3),
            "mean_ms": round(statistics.fmean(samples), 3)}


def run_ours(broker: BrokerProcess, count: int, sync_count: int, latency_rate: int, latency_seconds: float,
             latency_batch: int, progress: Progress, profile_dir: Path | None, compat: bool = True) -> dict[str, Any]:
    producer = Producer("client_bench_pg", broker.namesrv_addr)
    producer.start()
    try:
        producer.send(Message(TOPIC, b"warmup"))  # routes and the connection, outside the timed phases
        sync = produce_sync(producer, sync_count, progress)
        batches = produce_batches(producer, count, progress)
    finally:
        producer.shutdown()
    total = count + sync_count + 1
    concurrent = consume(broker.namesrv_addr, "client_bench_concurrent", total, False, progress, profile_dir)
    orderly = consume(broker.namesrv_addr, "client_bench_orderly", total, True, progress, profile_dir)
    on_loop = consume(broker.namesrv_addr, "client_bench_concurrent_async", total, False, progress, profile_dir,
                      on_loop=True)
    compat_result = consume_compat(broker.namesrv_addr, "client_bench_compat", total, progress, profile_dir) \
        if compat else None
    lat = latency(broker.namesrv_addr, latency_rate, latency_seconds, latency_batch, progress, broker_pid=broker.pid)
    results = {"produce_sync": sync, "produce_batch": batches, "consume_concurrent": concurrent,
               "consume_orderly": orderly, "consume_concurrent_async": on_loop, "latency": lat}
    if compat_result is not None:
        results["consume_compat"] = compat_result
    if latency_batch == 1:  # and as an asyncio application would send and consume (see LATENCY_MODES)
        results["latency_asyncio"] = latency(broker.namesrv_addr, latency_rate, latency_seconds, 1, progress,
                                             "asyncio", broker_pid=broker.pid)
    return results


# ============================================================================ the C++ client

_CPP_SCRIPT = textwrap.dedent("""
    import json, sys, threading, time
    from rocketmq.client import Message, Producer, PushConsumer
    from rocketmq.exceptions import ProducerSendSyncFailed
    namesrv, topic, count, mode, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    body = b"x" * 100
    if mode == "produce":
        producer = Producer("client_bench_cpp_pg")
        producer.set_namesrv_addr(namesrv)
        producer.start()
        warmup = Message(topic)
        warmup.set_body(body)
        producer.send_sync(warmup)  # routes and connections, outside the timed part
        # The wheel's librocketmq.so passes a steady-clock deadline to pthread_mutex_timedlock (which
        # takes CLOCK_REALTIME), so a send whose thread finds the client's connection table locked by
        # another fails at once ("GetTransport ... get timed_mutex timeout"; three in a row raise "No
        # route info of this topic"). Retry those sends: a thread that died on one would silently
        # leave its share unsent, and the consumers would "stall" at the count actually stored.
        retries = [0] * threads
        failed = threading.Event()
        def work(index):
            share = count // threads + (1 if index < count % threads else 0)
            for _ in range(share):
                msg = Message(topic)
                msg.set_body(body)
                for attempt in range(100):
                    try:
                        producer.send_sync(msg)
                        break
                    except ProducerSendSyncFailed:
                        if attempt == 99:
                            failed.set()
                            raise
                        retries[index] += 1
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
        producer.shutdown()
        if failed.is_set():
            sys.exit("a send_sync failed 100 times; the topic holds fewer messages than the consumers expect")
        print(json.dumps({"messages": count, "seconds": elapsed, "send_retries": sum(retries)}), flush=True)
        sys.exit(0)
    else:
        consumer = PushConsumer("client_bench_cpp_cg_" + mode, orderly=(mode == "orderly"))
        consumer.set_namesrv_addr(namesrv)
        if threads:
            consumer.set_thread_count(threads)
        received = [0]
        last_at = [0.0]
        lock = threading.Lock()
        done = threading.Event()
        def callback(msg):
            with lock:
                received[0] += 1
                last_at[0] = time.perf_counter()
                if received[0] >= count:
                    done.set()
        consumer.subscribe(topic, callback)
        started = time.perf_counter()
        consumer.start()
        last = -1
        while not done.wait(10):  # give up when nothing arrives for 10 s
            if received[0] == last:
                break
            last = received[0]
        elapsed = time.perf_counter() - started
        consumer.shutdown()
        if not done.is_set():  # report the rate up to the last message, flagged
            print(json.dumps({"messages": received[0], "seconds": last_at[0] - started, "stalled_of": count}),
                  flush=True)
            sys.exit(0)
    print(json.dumps({"messages": count, "seconds": elapsed}), flush=True)
""")


#: Redis Streams' end-to-end latency, the peer of ours: the same shape (a paced producer process, a
#: consumer process, the server in a third) with redis-py's blocking client, as a Python application
#: would use it. 8 streams stand for the 8 queues; a sample is the consumer's clock minus the send
#: time stamped in the body.
_REDIS_LATENCY_CONSUMER = textwrap.dedent("""
    import sys, time
    import redis
    port, total, out_path, give_up_after = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    client = redis.Redis(host="127.0.0.1", port=port)
    streams = {f"latency:{index}": ">" for index in range(8)}
    samples = []
    print("ready", flush=True)
    deadline = time.monotonic() + give_up_after
    reported = time.monotonic()
    cpu_started = time.process_time()
    to_ack = {}
    while len(samples) < total and time.monotonic() < deadline:
        # the previous read's XACKs and the next blocking read share one round trip
        pipe = client.pipeline(transaction=False)
        for stream, ids in to_ack.items():
            pipe.xack(stream, "latency", *ids)
        pipe.xreadgroup("latency", "consumer", streams, count=100, block=1000)
        replies = pipe.execute()
        now = time.time_ns()
        to_ack = {}
        for stream, entries in replies[-1] or []:
            to_ack[stream] = [entry_id for entry_id, _ in entries]
            samples.extend(now - int(fields[b"body"][:19]) for _, fields in entries)
        if time.monotonic() - reported > 0.5 or len(samples) >= total:
            reported = time.monotonic()
            print("received", len(samples), flush=True)
    cpu = time.process_time() - cpu_started
    with open(out_path, "w") as out:
        out.write("\\n".join(map(str, samples[:total])))
    print("done", min(len(samples), total), round(cpu, 3), flush=True)
""")

_REDIS_LATENCY_PRODUCER = textwrap.dedent("""
    import sys, time
    import redis
    port, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(200):  # warm up the connection (a stream the consumer does not read)
        client.xadd("latency:warmup", {"body": b"warmup"})
    pad = b"x" * 81
    total = int(rate * seconds)
    streams = [f"latency:{index}" for index in range(8)]
    started = time.perf_counter()
    cpu_started = time.process_time()
    for index in range(total):
        delay = started + index / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        client.xadd(streams[index % 8], {"body": b"%019d" % time.time_ns() + pad})
    elapsed = time.perf_counter() - started
    print("sent", total, round(total / elapsed, 1), round(time.process_time() - cpu_started, 3), flush=True)
""")


def run_redis_latency(rate: int, seconds: float, progress: Progress, work_dir: Path) -> dict[str, Any]:
    """Redis Streams with redis-py at ``rate`` msg/s for ``seconds``: p50/p99 as `latency` reports ours."""
    import redis

    server = RedisProcess(work_dir / "redis-latency")
    server.start()
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        for index in range(QUEUES):
            client.xgroup_create(f"latency:{index}", "latency", id="$", mkstream=True)
        client.close()
        return run_peer_latency(_REDIS_LATENCY_CONSUMER, _REDIS_LATENCY_PRODUCER, "redis", server.port, rate,
                                seconds, progress, work_dir, server.pid)
    finally:
        server.stop()


#: NATS JetStream's end-to-end latency with nats-py, the second latency peer: an asyncio
#: producer process paced by a timerfd as our asyncio producer is, each publish a task awaiting its
#: PubAck, and an asyncio consumer process with a push subscription acking each message; both on
#: uvloop, as our client is.
_NATS_LATENCY_CONSUMER = textwrap.dedent("""
    import asyncio, sys, time
    import nats
    port, total, out_path, give_up_after = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])

    async def main():
        connection = await nats.connect(f"nats://127.0.0.1:{port}")
        stream = connection.jetstream()
        await stream.add_stream(name="LATENCY", subjects=["latency.*"])
        samples = []
        done = asyncio.Event()

        async def handler(msg):
            now = time.time_ns()
            if msg.data[:1] != b"w":
                samples.append(now - int(msg.data[:19]))
                if len(samples) >= total:
                    done.set()
            await msg.ack()

        await stream.subscribe("latency.*", durable="latency", cb=handler, manual_ack=True)
        print("ready", flush=True)
        cpu_started = time.process_time()
        deadline = time.monotonic() + give_up_after
        while not done.is_set() and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(done.wait(), 0.5)
            except asyncio.TimeoutError:
                pass
            print("received", len(samples), flush=True)
        cpu = time.process_time() - cpu_started
        await connection.close()
        with open(out_path, "w") as out:
            out.write("\\n".join(map(str, samples[:total])))
        print("done", min(len(samples), total), round(cpu, 3), flush=True)

    try:  # the loop our client runs on, where it is installed
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
""")

_NATS_LATENCY_PRODUCER = textwrap.dedent("""
    import asyncio, sys, time
    import nats
    port, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
""") + _TICKER + textwrap.dedent("""

    async def main():
        connection = await nats.connect(f"nats://127.0.0.1:{port}")
        stream = connection.jetstream()
        for _ in range(200):  # warm up (the consumer skips these)
            await stream.publish("latency.w", b"warmup")
        loop = asyncio.get_running_loop()
        pad = b"x" * 81
        total = int(rate * seconds)
        subjects = [f"latency.{index}" for index in range(8)]
        running = set()
        failures = []
        finished = loop.create_future()
        ticker = Ticker(rate)
        sent = 0

        def completed(task):
            running.discard(task)
            if not task.cancelled() and task.exception() is not None:
                failures.append(task.exception())
            if sent == total and not running and not finished.done():
                finished.set_result(None)

        def tick():
            nonlocal sent
            for _ in range(ticker.expirations()):
                if sent == total:
                    break
                task = loop.create_task(stream.publish(subjects[sent % 8], b"%019d" % time.time_ns() + pad))
                running.add(task)
                task.add_done_callback(completed)
                sent += 1
            if sent == total:
                loop.remove_reader(ticker.fd)

        started = time.perf_counter()
        cpu_started = time.process_time()
        loop.add_reader(ticker.fd, tick)
        try:
            await finished
        finally:
            ticker.close()
        elapsed = time.perf_counter() - started
        await connection.close()
        if failures:
            raise SystemExit(f"{len(failures)} publishes failed: {failures[0]!r}")
        print("sent", total, round(total / elapsed, 1), round(time.process_time() - cpu_started, 3), flush=True)

    try:  # the loop our client runs on, where it is installed
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
""")


class NatsProcess(ServerProcess):
    """Debian's nats-server with JetStream (file storage) on a free loopback port."""

    def start(self) -> None:
        binary = shutil.which("nats-server")
        if binary is None:
            raise FileNotFoundError("nats-server")
        self.launch([binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.work_dir)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise SystemExit("nats-server did not start")

    def version(self) -> str:
        binary = shutil.which("nats-server") or "nats-server"
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
        return out.strip().rsplit("v", 1)[-1] or "?"


def run_peer_latency(consumer_code: str, producer_code: str, name: str, port: int, rate: int, seconds: float,
                     progress: Progress, work_dir: Path, server_pid: int | None = None) -> dict[str, Any]:
    """A peer's latency phase, shaped as ours: its consumer process, then its paced producer process."""
    total = int(rate * seconds)
    samples_path = work_dir / f"{name}-latency-samples.txt"
    consumer = [sys.executable, "-c", consumer_code, str(port), str(total), str(samples_path), str(seconds + 60)]
    producer = [sys.executable, "-c", producer_code, str(port), str(rate), str(seconds)]
    return measure_latency(f"{name}: latency at {rate:,} msg/s", consumer, producer, samples_path, total, rate,
                           progress, server_pid=server_pid)


def run_nats_latency(rate: int, seconds: float, progress: Progress, work_dir: Path) -> dict[str, Any]:
    """NATS JetStream (Debian's nats-server, nats-py) at ``rate`` msg/s; {} when either is missing."""
    try:
        import nats  # noqa: F401
    except ImportError:
        return {}
    server = NatsProcess(work_dir / "nats")
    try:
        server.start()
    except FileNotFoundError:
        return {}
    try:  # the consumer process makes the stream before it says it is ready
        result = run_peer_latency(_NATS_LATENCY_CONSUMER, _NATS_LATENCY_PRODUCER, "nats", server.port, rate,
                                  seconds, progress, work_dir, server.pid)
        result["nats_server"] = server.version()
        return result
    finally:
        server.stop()


def run_cpp(broker: BrokerProcess, count: int, threads: int, progress: Progress, work_dir: Path) -> dict[str, Any]:
    python = REPO_ROOT / ".interop" / "venv-cpp" / "bin" / "python"
    if not python.exists():
        return {"skipped": "no .interop/venv-cpp (run the interop tests once to install PyPI rocketmq 0.4.4)"}
    home = work_dir / "cpp-home"
    home.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["HOME"] = str(home)
    results: dict[str, Any] = {}
    # The C++ push consumer starts a new group at the last offset; commit 0 for its groups so that it
    # consumes what its producer sent, as ours does with CONSUME_FROM_FIRST_OFFSET.
    preset = Producer("client_bench_offsets_pg", broker.namesrv_addr)
    preset.start()
    try:
        instance = preset.instance
        route = instance.run(instance.api.get_topic_route(CPP_TOPIC))
        broker_name = route.queue_datas[0].broker_name
        for group in ("client_bench_cpp_cg_concurrent", "client_bench_cpp_cg_orderly"):
            for queue_id in range(QUEUES):
                instance.run(instance.api.update_consumer_offset(
                    broker.broker_addr, group, MessageQueue(CPP_TOPIC, broker_name, queue_id), 0))
    finally:
        preset.shutdown()
    # produce count (+1 warm-up message), then consume all of them concurrently and orderly
    for mode, mode_threads, mode_count in (("produce", THREADS, count), ("concurrent", threads, count + 1),
                                           ("orderly", threads, count + 1)):
        if mode != "produce" and "msgs_per_s" not in results["produce"]:
            break
        task = progress.add_task(f"C++ client: {mode} {mode_count:,}", total=None)
        completed = subprocess.run([str(python), "-c", _CPP_SCRIPT, broker.namesrv_addr, CPP_TOPIC, str(mode_count),
                                    mode, str(mode_threads)], capture_output=True, text=True, timeout=900,
                                   check=False, cwd=home, env=env)
        progress.update(task, total=1, completed=1)
        lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
        if completed.returncode != 0 or not lines:
            results[mode] = {"error": (completed.stdout + completed.stderr)[-800:]}
            continue
        data = json.loads(lines[-1])
        results[mode] = rate_dict(int(data["messages"]), float(data["seconds"]))
        if "stalled_of" in data:
            results[mode]["stalled_of"] = int(data["stalled_of"])
        if "send_retries" in data:
            results[mode]["send_retries"] = int(data["send_retries"])
    return results


# ============================================================================ main


def ratio(numerator: dict[str, Any], denominator: dict[str, Any]) -> float | None:
    if "msgs_per_s" not in numerator or not denominator.get("msgs_per_s"):
        return None
    return round(numerator["msgs_per_s"] / denominator["msgs_per_s"], 3)


def p99_ratio(ours: dict[str, Any] | None, peer: dict[str, Any] | None) -> float | None:
    if not ours or not peer or not peer.get("p99_ms"):
        return None
    return round(ours["p99_ms"] / peer["p99_ms"], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100,000 messages instead of 1,000,000")
    parser.add_argument("--messages", type=int, default=None, help="messages consumed (overrides --quick)")
    parser.add_argument("--sync-messages", type=int, default=None,
                        help="messages sent one by one (default: a fifth of --messages)")
    parser.add_argument("--cpp-messages", type=int, default=None, help="C++ client messages (default: --sync-messages)")
    parser.add_argument("--cpp-threads", type=int, default=0, help="C++ consume threads (0: its default)")
    parser.add_argument("--latency-rate", type=int, default=5000, help="msg/s of the latency phase")
    parser.add_argument("--latency-seconds", type=float, default=None, help="length of the latency phase")
    parser.add_argument("--latency-batch", type=int, default=1,
                        help="latency producer: messages per send (1: send_async; more: send_batch, still at the rate)")
    parser.add_argument("--no-redis", action="store_true", help="skip Redis Streams")
    parser.add_argument("--no-cpp", action="store_true", help="skip the C++ client")
    parser.add_argument("--no-nats", action="store_true", help="skip NATS JetStream's latency")
    parser.add_argument("--no-compat", action="store_true",
                        help="skip the rocketmq-client-python drop-in's push consumer")
    parser.add_argument("--output", type=Path, default=None, help="JSON result file")
    parser.add_argument("--profile-dir", type=Path, default=None,
                        help="sample this process with py-spy during the consume phases (collapsed stacks)")
    args = parser.parse_args()
    count = args.messages or (100_000 if args.quick else 1_000_000)
    sync_count = args.sync_messages or count // 5
    cpp_count = args.cpp_messages or sync_count
    latency_seconds = args.latency_seconds or (5.0 if args.quick else 20.0)
    console = Console(width=None if sys.stdout.isatty() else 150)
    results = Results(messages=count, sync_messages=sync_count, cpp_messages=cpp_count,
                      machine=machine_info())
    work_dir = Path(tempfile.mkdtemp(prefix="rocketflow-client-bench-"))
    broker = BrokerProcess(work_dir / "store")
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            broker.start()
            try:
                setup = Producer("client_bench_setup_pg", broker.namesrv_addr)
                setup.start()
                try:
                    for topic in (TOPIC, CPP_TOPIC, LATENCY_TOPIC):
                        create_topic(setup, broker.broker_addr, topic)
                finally:
                    setup.shutdown()
                # The C++ client first, on the empty store.
                if not args.no_cpp:
                    results.cpp = run_cpp(broker, cpp_count, args.cpp_threads, progress, work_dir)
                results.ours = run_ours(broker, count, sync_count, args.latency_rate, latency_seconds,
                                        args.latency_batch, progress, args.profile_dir, compat=not args.no_compat)
            finally:
                broker.stop()
            if not args.no_redis:
                results.redis = run_redis(count, 16, progress, work_dir)
                results.redis["latency"] = run_redis_latency(args.latency_rate, latency_seconds, progress, work_dir)
            if not args.no_nats:
                results.nats = run_nats_latency(args.latency_rate, latency_seconds, progress, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    ours, cpp, redis_results = results.ours, results.cpp, results.redis
    candidates = {
        "consume_vs_cpp": ratio(ours["consume_concurrent"], cpp.get("concurrent", {})),
        "orderly_vs_cpp_orderly": ratio(ours["consume_orderly"], cpp.get("orderly", {})),
        "consume_vs_redis": ratio(ours["consume_concurrent"], redis_results.get("consume", {})),
        "async_consume_vs_redis": ratio(ours.get("consume_concurrent_async", {}), redis_results.get("consume", {})),
        "async_consume_vs_cpp": ratio(ours.get("consume_concurrent_async", {}), cpp.get("concurrent", {})),
        "orderly_vs_concurrent": ratio(ours["consume_orderly"], ours["consume_concurrent"]),
        "compat_vs_concurrent": ratio(ours.get("consume_compat", {}), ours["consume_concurrent"]),
        "compat_vs_cpp": ratio(ours.get("consume_compat", {}), cpp.get("concurrent", {})),
        "sync_produce_vs_cpp": ratio(ours["produce_sync"], cpp.get("produce", {})),
        "batch_produce_vs_redis": ratio(ours["produce_batch"], redis_results.get("produce", {})),
        # latency ratios are ours over Redis's p99 (lower is better)
        "latency_p99_vs_redis": p99_ratio(ours.get("latency_asyncio"), redis_results.get("latency")),
        "threads_latency_p99_vs_redis": p99_ratio(ours.get("latency"), redis_results.get("latency")),
        "latency_p99_vs_nats": p99_ratio(ours.get("latency_asyncio"), results.nats),
        "threads_latency_p99_vs_nats": p99_ratio(ours.get("latency"), results.nats),
    }
    results.ratios = {name: value for name, value in candidates.items() if value is not None}
    print_report(console, results)
    output = args.output or REPO_ROOT / "bench" / "results" / f"client_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(asdict(results), indent=2) + "\n")
    console.print(f"results written to {output}")


def cpu_text(latency_result: dict[str, Any]) -> str:
    """A latency phase's CPU a message, by process."""
    cpu = latency_result.get("cpu_us_per_msg", {})
    return "CPU a message: " + ", ".join(f"{role} {cpu[role]:.0f} us" for role in ("producer", "server", "consumer")
                                         if role in cpu)


def print_report(console: Console, results: Results) -> None:
    table = Table(title=f"client benchmark: {BODY_SIZE} B messages, {QUEUES} queues, no-op listener")
    for column in ("system", "phase", "messages", "msg/s", "seconds", "ratio"):
        table.add_column(column, justify="right")
    ours, cpp, redis_results, ratios = results.ours, results.cpp, results.redis, results.ratios

    def row(system: str, phase: str, data: dict[str, Any] | None, note: str = "") -> None:
        if not isinstance(data, dict) or "msgs_per_s" not in data:
            return
        if "stalled_of" in data:
            note = f"stalled after {data['messages']:,} of {data['stalled_of']:,} (rate up to then)"
        if data.get("send_retries"):
            note = f"{data['send_retries']:,} sends retried (client lock bug, see README)"
        table.add_row(system, phase, f"{data['messages']:,}", f"{data['msgs_per_s']:,.0f}", f"{data['seconds']:.2f}",
                      note)

    def fmt(name: str, what: str) -> str:
        return f"{ratios[name]:.2f}x {what}" if name in ratios else ""

    row("rocketflow", f"send, {THREADS} threads", ours["produce_sync"], fmt("sync_produce_vs_cpp", "C++"))
    row("rocketflow", f"send_batch of {BATCH}, {THREADS} threads", ours["produce_batch"],
        fmt("batch_produce_vs_redis", "Redis"))
    row("rocketflow", "push consumer, concurrent", ours["consume_concurrent"],
        " / ".join(part for part in (fmt("consume_vs_cpp", "C++"), fmt("consume_vs_redis", "Redis")) if part))
    row("rocketflow", "push consumer, concurrent, async def", ours.get("consume_concurrent_async"),
        " / ".join(part for part in (fmt("async_consume_vs_cpp", "C++"), fmt("async_consume_vs_redis", "Redis"))
                   if part))
    row("rocketflow", "push consumer, orderly", ours["consume_orderly"],
        " / ".join(part for part in (fmt("orderly_vs_concurrent", "concurrent"),
                                     fmt("orderly_vs_cpp_orderly", "C++ orderly")) if part))
    row("rocketflow.compat.rocketmq", "push consumer, a callback a message", ours.get("consume_compat"),
        " / ".join(part for part in (fmt("compat_vs_concurrent", "concurrent"), fmt("compat_vs_cpp", "C++"))
                   if part))
    row("C++ rocketmq 0.4.4", f"send_sync, {THREADS} threads", cpp.get("produce"))
    row("C++ rocketmq 0.4.4", "push consumer, concurrent", cpp.get("concurrent"))
    row("C++ rocketmq 0.4.4", "push consumer, orderly", cpp.get("orderly"))
    if redis_results:
        version = "redis " + redis_results["redis_version"]
        row(version, "XADD (pipelined, 32 per batch)", redis_results["produce"])
        row(version, "XREADGROUP + XACK", redis_results["consume"])
    console.print(table)
    checks = []
    for key in ("latency", "latency_asyncio"):
        lat = ours.get(key)
        if lat is None:
            continue
        mode = lat.get("mode", "threads")
        console.print(f"end-to-end latency at {lat['target_rate']:,} msg/s ({mode}; sent {lat['sent_rate']:,.0f}/s, "
                      f"{lat['send_batch']} per send, "
                      f"{lat['messages']:,} messages): p50 {lat['p50_ms']:.3f} ms, p99 {lat['p99_ms']:.3f} ms, "
                      f"p99.9 {lat['p999_ms']:.3f} ms, max {lat['max_ms']:.3f} ms; {cpu_text(lat)}")
        checks.append(f"p99 < 2 ms, {mode} ({lat['p99_ms'] < 2.0})")
    peers = (("Redis Streams (redis-py)", redis_results.get("latency"), "redis"),
             (f"NATS JetStream {results.nats.get('nats_server', '')} (nats-py)", results.nats, "nats"))
    for label, peer, key in peers:
        if not peer:
            continue
        versus = ", ".join(f"{ratios[name]:.2f}x ({mode})" for name, mode in
                           ((f"latency_p99_vs_{key}", "asyncio"), (f"threads_latency_p99_vs_{key}", "threads"))
                           if name in ratios)
        console.print(f"{label} at {peer['target_rate']:,} msg/s (sent {peer['sent_rate']:,.0f}/s, "
                      f"{peer['messages']:,} messages): p50 {peer['p50_ms']:.3f} ms, p99 {peer['p99_ms']:.3f} ms, "
                      f"p99.9 {peer['p999_ms']:.3f} ms, max {peer['max_ms']:.3f} ms; {cpu_text(peer)}; "
                      f"our p99 is {versus}")
    if "consume_vs_cpp" in ratios:
        checks.append(f"consume >= 1.0x C++ ({ratios['consume_vs_cpp'] >= 1.0})")
    if "consume_vs_redis" in ratios:
        checks.append(f"consume >= 0.5x Redis ({ratios['consume_vs_redis'] >= 0.5})")
    if "async_consume_vs_redis" in ratios:
        checks.append(f"consume with an async def listener >= 0.5x Redis ({ratios['async_consume_vs_redis'] >= 0.5})")
    if "orderly_vs_concurrent" in ratios:
        checks.append(f"orderly >= 0.7x concurrent ({ratios['orderly_vs_concurrent'] >= 0.7})")
    console.print("targets: " + ", ".join(checks))
    for name, data in cpp.items():
        if isinstance(data, dict) and "msgs_per_s" not in data:
            console.print(f"C++ client {name}: {data}")


if __name__ == "__main__":
    main()
