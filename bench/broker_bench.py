"""Broker benchmark: our broker over TCP versus Redis Streams, same workload, same run.

Run `python bench/broker_bench.py [--quick]` from the repo root. It starts `rocketflow dev` as a
subprocess (free ports, temporary store) and drives it from this process with the net layer's
`RemotingClient`: pipelined SEND_BATCH_MESSAGE of 32 x 100-byte messages over 8 queues, then
PULL_MESSAGE of 32 per request (one pull in flight per queue) until drained, then single pulls of
32 one at a time for latency. Then it starts Debian's `redis-server` (loopback, no persistence)
and does the same with redis-py: pipelined XADD to 8 streams in batches of 32, then XREADGROUP
(COUNT 32 per stream) + XACK. The servers' CPU time is read from /proc (psutil) per phase.
Optionally (`--cpp`) the C++ client (PyPI `rocketmq` 0.4.4, installed by the interop tests in
`.interop/venv-cpp`) produces and consumes against our broker.

Results: a table on the console and a JSON file under bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rocketflow.net import RemotingClient, event_loop
from rocketflow.protocol.codec import encode_batch_body
from rocketflow.protocol.ids import UniqueIdGenerator
from rocketflow.protocol.message import Message
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import CreateTopicRequestHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2

REPO_ROOT = Path(__file__).resolve().parent.parent
BATCH = 32
QUEUES = 8
BODY_SIZE = 100
TOPIC = "BenchTopic"
GROUP = "bench_group"
TIMEOUT = 30.0
_SIZE = struct.Struct(">i")


# ============================================================================ helpers


def machine_info() -> dict[str, Any]:
    """What a bench's JSON records of the machine and the interpreter it ran on."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "interpreter": os.path.realpath(sys.executable), "platform": platform.platform()}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class CpuMeter:
    """CPU seconds (user + system, all threads) of one process between `start` and `stop`."""

    process: psutil.Process
    started: float = 0.0

    def _now(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)

    def start(self) -> None:
        self.started = self._now()

    def stop(self) -> float:
        return self._now() - self.started


@dataclass
class Phase:
    """One measured phase: messages, wall seconds, CPU seconds of the server and of this process."""

    messages: int
    seconds: float
    server_cpu: float
    client_cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Results:
    messages: int
    inflight: int
    #: message body sizes, smallest and largest (inclusive)
    body_sizes: tuple[int, int] = (BODY_SIZE, BODY_SIZE)
    ours: dict[str, Any] = field(default_factory=dict)
    redis: dict[str, Any] = field(default_factory=dict)
    cpp: dict[str, Any] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)


def phase_dict(phase: Phase) -> dict[str, float]:
    return {"messages": phase.messages, "seconds": round(phase.seconds, 4), "msgs_per_s": round(phase.rate, 1),
            "server_cpu_s": round(phase.server_cpu, 3), "client_cpu_s": round(phase.client_cpu, 3),
            "server_cpu_us_per_msg": round(phase.server_cpu / phase.messages * 1e6, 3) if phase.messages else 0.0}


def message_bodies(sizes: tuple[int, int]) -> list[bytes]:
    """Bodies to cycle through: one of BODY_SIZE bytes, or 1,009 of sizes spread over `sizes` (inclusive)."""
    low, high = sizes
    data = os.urandom(high)
    if low == high:
        return [data[:low]]
    rng = random.Random(7)
    return [data[:rng.randint(low, high)] for _ in range(1009)]


def batch_bodies(count: int, progress: Progress, sizes: tuple[int, int] = (BODY_SIZE, BODY_SIZE)) -> list[bytes]:
    """SEND_BATCH_MESSAGE bodies of 32 messages (of `sizes` bytes), each with its own UNIQ_KEY (as producers set)."""
    ids = UniqueIdGenerator()
    pool = message_bodies(sizes)
    cycle = itertools.cycle(pool)
    bodies: list[bytes] = []
    task = progress.add_task("build batches", total=count)
    made = 0
    while made < count:
        n = min(BATCH, count - made)
        messages = [Message(TOPIC, next(cycle), properties={"UNIQ_KEY": ids.next_id(), "WAIT": "true"})
                    for _ in range(n)]
        bodies.append(encode_batch_body(messages))
        made += n
        if len(bodies) % 200 == 0:
            progress.update(task, completed=made)
    progress.update(task, completed=made)
    return bodies


def count_records(body: bytes) -> int:
    """Records in a pull response body (walking the total-size fields)."""
    count = 0
    pos = 0
    end = len(body)
    unpack = _SIZE.unpack_from
    while pos < end:
        pos += unpack(body, pos)[0]
        count += 1
    return count


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# ============================================================================ our broker


class BrokerProcess:
    """`rocketflow dev` as a subprocess on free ports with a temporary store."""

    def __init__(self, store_dir: Path, extra_args: tuple[str, ...] = (), slaves: int = 0,
                 src_dir: Path | None = None) -> None:
        self.store_dir = store_dir
        #: the source tree the broker runs from (default: this repository's src)
        self.src_dir = src_dir or REPO_ROOT / "src"
        #: more `rocketflow dev` options (``--set key=value`` ...); `slaves` adds ``--slaves``
        self.extra_args = extra_args
        self.slaves = slaves
        self.proc: subprocess.Popen[str] | None = None
        self.broker_addr = ""
        self.namesrv_addr = ""
        self.slave_addrs: list[str] = []

    def start(self) -> None:
        code = "from rocketflow.cli.main import cli; cli()"
        argv = [sys.executable, "-c", code, "dev", "--namesrv-port", str(free_port()), "--broker-port",
                str(free_port()), "--store-dir", str(self.store_dir), "--slaves", str(self.slaves),
                *self.extra_args]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.src_dir) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, env=env)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("namesrv listening on "):
                self.namesrv_addr = line.split()[-1]
            elif line.startswith("broker ") and " listening on " in line:
                self.broker_addr = line.split()[-1]
            elif line.startswith("slave ") and " listening on " in line:
                self.slave_addrs.append(line.split()[-1])
            if self.broker_addr and len(self.slave_addrs) == self.slaves:
                return
        self.stop()
        raise SystemExit("rocketflow dev did not start:\n" + "".join(lines))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        stop_process(proc)


def stop_process(proc: subprocess.Popen[str]) -> None:
    """SIGTERM (a clean stop), SIGKILL after 30 s; closes its stdout pipe."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


async def create_topic(client: RemotingClient, addr: str) -> None:
    header = CreateTopicRequestHeader(topic=TOPIC, default_topic="TBW102", read_queue_nums=QUEUES,
                                      write_queue_nums=QUEUES, perm=6, topic_filter_type="SINGLE_TAG")
    response = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                                                 header.to_ext_fields()), TIMEOUT)
    if response.code != ResponseCode.SUCCESS:
        raise SystemExit(f"UPDATE_AND_CREATE_TOPIC failed: {response.describe()}")


def send_fields(queue_id: int) -> dict[str, str]:
    header = SendMessageRequestHeader(producer_group="bench_pg", topic=TOPIC, default_topic="TBW102",
                                      default_topic_queue_nums=QUEUES, queue_id=queue_id, sys_flag=0,
                                      born_timestamp=int(time.time() * 1000), flag=0, batch=True)
    return SendMessageRequestHeaderV2.from_v1(header).to_ext_fields()


def pull_fields(queue_id: int, offset: int, suspend_millis: int = 0) -> dict[str, str]:
    """A pull of 32 from ``offset``; with ``suspend_millis`` a long-polling one the broker may hold that long."""
    sys_flag = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_millis > 0 else 0)
    return {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": str(BATCH), "sysFlag": str(int(sys_flag)), "commitOffset": "0",
            "suspendTimeoutMillis": str(suspend_millis), "subVersion": "0", "subscription": "*",
            "expressionType": "TAG"}


async def ours_ingest(client: RemotingClient, addr: str, bodies: list[bytes], inflight: int,
                      on_progress: Callable[[int], None]) -> list[int]:
    """Send every batch with `inflight` requests outstanding; returns messages stored per queue."""
    fields = [send_fields(queue_id) for queue_id in range(QUEUES)]
    per_queue = [0] * QUEUES
    source: Iterator[tuple[int, bytes]] = iter(enumerate(bodies))

    async def worker() -> None:
        for index, body in source:
            queue_id = index % QUEUES
            request = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, fields[queue_id], body)
            response = await client.invoke(addr, request, TIMEOUT)
            if response.code != ResponseCode.SUCCESS:
                raise SystemExit(f"SEND_BATCH_MESSAGE failed: {response.describe()}")
            stored = response.ext_fields["msgId"].count(",") + 1
            per_queue[queue_id] += stored
            on_progress(stored)

    await asyncio.gather(*(worker() for _ in range(inflight)))
    return per_queue


async def ours_pull_all(client: RemotingClient, addr: str, per_queue: list[int],
                        on_progress: Callable[[int], None]) -> int:
    """One consumer loop per queue, one pull of 32 in flight each, until every queue is drained."""
    total = 0

    async def drain(queue_id: int) -> None:
        nonlocal total
        offset = 0
        while offset < per_queue[queue_id]:
            request = RemotingCommand.request(RequestCode.PULL_MESSAGE, pull_fields(queue_id, offset))
            response = await client.invoke(addr, request, TIMEOUT)
            if response.code != ResponseCode.SUCCESS:
                raise SystemExit(f"PULL_MESSAGE failed at {queue_id}/{offset}: {response.describe()}")
            got = count_records(response.body)
            offset = int(response.ext_fields["nextBeginOffset"])
            total += got
            on_progress(got)

    await asyncio.gather(*(drain(queue_id) for queue_id in range(QUEUES)))
    return total


async def ours_pull_latency(client: RemotingClient, addr: str, per_queue: list[int], samples: int,
                            on_progress: Callable[[int], None]) -> list[float]:
    """Round-trip seconds of single pulls of 32 (one outstanding) at random offsets."""
    rng = random.Random(7)
    latencies: list[float] = []
    for _ in range(samples):
        queue_id = rng.randrange(QUEUES)
        offset = rng.randrange(max(1, per_queue[queue_id] - BATCH))
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, pull_fields(queue_id, offset))
        started = time.perf_counter()
        response = await client.invoke(addr, request, TIMEOUT)
        latencies.append(time.perf_counter() - started)
        if response.code != ResponseCode.SUCCESS or count_records(response.body) != BATCH:
            raise SystemExit(f"latency pull failed: {response.describe()}")
        on_progress(1)
    return latencies


class Profiler:
    """py-spy sampling the broker during one phase (collapsed stacks of the thread holding the GIL), when a
    profile dir is given."""

    def __init__(self, directory: Path | None, name: str, pid: int) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        if directory is None:
            return
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([binary, "record", "--pid", str(pid), "--format", "raw", "--rate", "1000", "--gil",
                                      "--nonblocking", "--output", str(directory / f"{name}.txt")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # let it attach before the phase starts

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=30)
            self.proc = None


def run_ours(bodies: list[bytes], count: int, inflight: int, latency_samples: int, progress: Progress,
             work_dir: Path, profile_dir: Path | None = None) -> dict[str, Any]:
    # what earlier runs left dirty is written back first, not while this one is timed
    os.sync()
    broker = BrokerProcess(work_dir / "store")
    broker.start()
    me = psutil.Process()
    try:
        server = CpuMeter(psutil.Process(broker.pid))
        client_meter = CpuMeter(me)

        async def main() -> dict[str, Any]:
            client = RemotingClient(name="bench")
            try:
                addr = broker.broker_addr
                await create_topic(client, addr)
                # warm the connection (and the topic's queues) outside the timed phases
                await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, pull_fields(0, 0)),
                                    TIMEOUT)
                ingest_task = progress.add_task("ours: SEND_BATCH_MESSAGE", total=count)
                profiler = Profiler(profile_dir, "ingest", broker.pid)
                server.start()
                client_meter.start()
                started = time.perf_counter()
                per_queue = await ours_ingest(client, addr, bodies, inflight,
                                              lambda n: progress.advance(ingest_task, n))
                ingest = Phase(sum(per_queue), time.perf_counter() - started, server.stop(), client_meter.stop())
                profiler.stop()
                pull_task = progress.add_task("ours: PULL_MESSAGE x 32", total=count)
                profiler = Profiler(profile_dir, "pull", broker.pid)
                server.start()
                client_meter.start()
                started = time.perf_counter()
                pulled = await ours_pull_all(client, addr, per_queue, lambda n: progress.advance(pull_task, n))
                pull = Phase(pulled, time.perf_counter() - started, server.stop(), client_meter.stop())
                profiler.stop()
                if pulled != count or ingest.messages != count:
                    raise SystemExit(f"sent {count}, stored {ingest.messages}, pulled {pulled}")
                latency_task = progress.add_task("ours: single pulls (latency)", total=latency_samples)
                latencies = await ours_pull_latency(client, addr, per_queue, latency_samples,
                                                    lambda n: progress.advance(latency_task, n))
            finally:
                await client.close()
            return {
                "ingest": phase_dict(ingest),
                "pull": phase_dict(pull),
                "pull_latency_ms": {
                    "samples": len(latencies),
                    "p50": round(statistics.median(latencies) * 1000, 4),
                    "p99": round(percentile(latencies, 0.99) * 1000, 4),
                    "mean": round(statistics.fmean(latencies) * 1000, 4),
                },
            }

        return event_loop.run(main())
    finally:
        broker.stop()


# ============================================================================ Redis Streams


class ServerProcess:
    """A peer's server binary on a free loopback port, started and stopped by a bench."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self, argv: list[str]) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class RedisProcess(ServerProcess):
    """Debian's redis-server on a free loopback port, no persistence."""

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed: apt-get install -y redis-server")
        self.launch([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                     "--daemonize", "no", "--dir", str(self.work_dir), "--logfile", "", "--loglevel", "warning"])
        import redis

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                redis.Redis(host="127.0.0.1", port=self.port).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise SystemExit("redis-server did not start")


def run_redis(count: int, inflight: int, progress: Progress, work_dir: Path,
              sizes: tuple[int, int] = (BODY_SIZE, BODY_SIZE)) -> dict[str, Any]:
    import redis

    server_proc = RedisProcess(work_dir / "redis")
    server_proc.start()
    try:
        client = redis.Redis(host="127.0.0.1", port=server_proc.port)
        server = CpuMeter(psutil.Process(server_proc.pid))
        client_meter = CpuMeter(psutil.Process())
        streams = [f"bench:{queue_id}" for queue_id in range(QUEUES)]
        cycle = itertools.cycle(message_bodies(sizes))
        # pipelined XADD: `inflight` batches of 32 per round trip, batch i to stream i % 8
        produce_task = progress.add_task("redis: pipelined XADD", total=count)
        server.start()
        client_meter.start()
        started = time.perf_counter()
        sent = 0
        batch_index = 0
        while sent < count:
            pipe = client.pipeline(transaction=False)
            queued = 0
            for _ in range(inflight):
                if sent + queued >= count:
                    break
                stream = streams[batch_index % QUEUES]
                n = min(BATCH, count - sent - queued)
                for _ in range(n):
                    pipe.xadd(stream, {"body": next(cycle)})
                queued += n
                batch_index += 1
            pipe.execute()
            sent += queued
            progress.advance(produce_task, queued)
        produce = Phase(sent, time.perf_counter() - started, server.stop(), client_meter.stop())
        for stream in streams:
            client.xgroup_create(stream, GROUP, id="0")
        # XREADGROUP of 32 per stream from all 8 streams + XACK of the previous round, one round trip each
        consume_task = progress.add_task("redis: XREADGROUP + XACK", total=count)
        server.start()
        client_meter.start()
        started = time.perf_counter()
        consumed = 0
        to_ack: dict[str, list[bytes]] = {}
        while consumed < count:
            pipe = client.pipeline(transaction=False)
            for stream, ids in to_ack.items():
                pipe.xack(stream, GROUP, *ids)
            pipe.xreadgroup(GROUP, "bench-consumer", dict.fromkeys(streams, ">"), count=BATCH)
            replies = pipe.execute()
            to_ack = {}
            got = 0
            for stream_name, entries in replies[-1] or []:
                ids = [entry_id for entry_id, _fields in entries]
                if ids:
                    to_ack[stream_name.decode()] = ids
                    got += len(ids)
            if got == 0:
                raise SystemExit(f"redis: XREADGROUP returned nothing after {consumed} of {count}")
            consumed += got
            progress.advance(consume_task, got)
        if to_ack:
            pipe = client.pipeline(transaction=False)
            for stream, ids in to_ack.items():
                pipe.xack(stream, GROUP, *ids)
            pipe.execute()
        consume = Phase(consumed, time.perf_counter() - started, server.stop(), client_meter.stop())
        pending = sum(client.xpending(stream, GROUP)["pending"] for stream in streams)
        if pending:
            raise SystemExit(f"redis: {pending} messages left unacknowledged")
        client.close()
        return {"produce": phase_dict(produce), "consume": phase_dict(consume),
                "redis_version": redis_server_version(), "redis_py": redis.__version__,
                "hiredis": bool(getattr(redis.utils, "HIREDIS_AVAILABLE", False))}
    finally:
        server_proc.stop()


def redis_server_version() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        return "?"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


# ============================================================================ C++ client (optional)

_CPP_SCRIPT = textwrap.dedent("""
    import json, sys, time, threading
    from rocketmq.client import Producer, PushConsumer, Message
    namesrv, topic, count, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    body = b"x" * 100
    if mode == "produce":
        producer = Producer("bench_cpp_pg")
        producer.set_namesrv_addr(namesrv)
        producer.start()
        started = time.perf_counter()
        for i in range(count):
            msg = Message(topic)
            msg.set_body(body)
            producer.send_sync(msg)
        elapsed = time.perf_counter() - started
        producer.shutdown()
    else:
        consumer = PushConsumer("bench_cpp_cg")
        consumer.set_namesrv_addr(namesrv)
        consumer.set_thread_count(2)
        received = [0]
        done = threading.Event()
        first = [0.0]
        lock = threading.Lock()
        def callback(msg):
            with lock:
                if not received[0]:
                    first[0] = time.perf_counter()
                received[0] += 1
                if received[0] >= count:
                    done.set()
        consumer.subscribe(topic, callback)
        started = time.perf_counter()
        consumer.start()
        done.wait(300)
        elapsed = time.perf_counter() - started
        consumer.shutdown()
        count = received[0]
    print(json.dumps({"messages": count, "seconds": elapsed}), flush=True)
""")


def run_cpp(count: int, progress: Progress, work_dir: Path) -> dict[str, Any]:
    python = REPO_ROOT / ".interop" / "venv-cpp" / "bin" / "python"
    if not python.exists():
        return {"skipped": "no .interop/venv-cpp (run the interop tests once to install PyPI rocketmq 0.4.4)"}
    broker = BrokerProcess(work_dir / "store-cpp")
    broker.start()
    results: dict[str, Any] = {}
    try:
        server = CpuMeter(psutil.Process(broker.pid))
        for mode in ("produce", "consume"):
            task = progress.add_task(f"C++ client: {mode} {count:,} (sync send / push consumer)", total=None)
            server.start()
            completed = subprocess.run([str(python), "-c", _CPP_SCRIPT, broker.namesrv_addr, "BenchCpp", str(count),
                                        mode], capture_output=True, text=True, timeout=600, check=False,
                                       cwd=work_dir)
            cpu = server.stop()
            progress.update(task, total=1, completed=1)
            lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
            if completed.returncode != 0 or not lines:
                results[mode] = {"error": (completed.stdout + completed.stderr)[-800:]}
                continue
            data = json.loads(lines[-1])
            phase = Phase(int(data["messages"]), float(data["seconds"]), cpu, 0.0)
            results[mode] = phase_dict(phase)
    finally:
        broker.stop()
    return results


# ============================================================================ main


def body_sizes_arg(text: str) -> tuple[int, int]:
    """``"100"`` or ``"80-120"`` -> (smallest, largest)."""
    low, _, high = text.partition("-")
    try:
        sizes = (int(low), int(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or MIN-MAX, got {text!r}") from None
    if not 1 <= sizes[0] <= sizes[1]:
        raise argparse.ArgumentTypeError(f"expected 1 <= MIN <= MAX, got {text!r}")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100,000 messages instead of 1,000,000")
    parser.add_argument("--messages", type=int, default=None, help="messages per phase (overrides --quick)")
    parser.add_argument("--inflight", type=int, default=16, help="send requests (batches) in flight")
    parser.add_argument("--latency-samples", type=int, default=None, help="single pulls timed (default 2000)")
    parser.add_argument("--no-redis", action="store_true", help="skip Redis Streams")
    parser.add_argument("--cpp", action="store_true", help="also the C++ client's produce/consume rates")
    parser.add_argument("--cpp-messages", type=int, default=20_000, help="messages for the C++ client runs")
    parser.add_argument("--body-sizes", type=body_sizes_arg, default=(BODY_SIZE, BODY_SIZE), metavar="MIN-MAX",
                        help=f"body sizes in bytes, e.g. 80-120: spread over the range for both systems "
                             f"(default {BODY_SIZE}: every body the same size)")
    parser.add_argument("--output", type=Path, default=None, help="JSON result file")
    parser.add_argument("--profile-dir", type=Path, default=None,
                        help="sample the broker with py-spy during ingest and pull (collapsed stacks written here)")
    args = parser.parse_args()
    count = args.messages or (100_000 if args.quick else 1_000_000)
    latency_samples = args.latency_samples or (500 if args.quick else 2000)
    console = Console(width=None if sys.stdout.isatty() else 150)
    results = Results(messages=count, inflight=args.inflight, body_sizes=args.body_sizes, machine=machine_info())
    work_dir = Path(tempfile.mkdtemp(prefix="rocketflow-broker-bench-"))
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            bodies = batch_bodies(count, progress, args.body_sizes)
            results.ours = run_ours(bodies, count, args.inflight, latency_samples, progress, work_dir,
                                    args.profile_dir)
            del bodies
            if not args.no_redis:
                results.redis = run_redis(count, args.inflight, progress, work_dir, args.body_sizes)
            if args.cpp:
                results.cpp = run_cpp(args.cpp_messages, progress, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    ours = results.ours
    if results.redis:
        results.ratios = {
            "ingest_vs_produce": round(ours["ingest"]["msgs_per_s"] / results.redis["produce"]["msgs_per_s"], 3),
            "pull_vs_consume": round(ours["pull"]["msgs_per_s"] / results.redis["consume"]["msgs_per_s"], 3),
        }
    print_report(console, results)
    output = args.output or REPO_ROOT / "bench" / "results" / f"broker_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(asdict(results), indent=2) + "\n")
    console.print(f"results written to {output}")


def print_report(console: Console, results: Results) -> None:
    low, high = results.body_sizes
    sizes = f"{low}" if low == high else f"{low}-{high}"
    table = Table(title=f"broker benchmark: {results.messages:,} x {sizes} B, batches of {BATCH}, "
                        f"{QUEUES} queues, {results.inflight} send batches in flight")
    for column in ("system", "phase", "msg/s", "seconds", "server CPU s", "server CPU us/msg", "bench CPU s",
                   "ratio ours/Redis"):
        table.add_column(column, justify="right")
    ours, redis_results = results.ours, results.redis
    rows: list[tuple[str, str, dict[str, float], str]] = [
        ("rocketflow", "ingest (SEND_BATCH_MESSAGE)", ours["ingest"],
         f"{results.ratios['ingest_vs_produce']:.2f}x" if results.ratios else ""),
        ("rocketflow", "pull (PULL_MESSAGE x 32)", ours["pull"],
         f"{results.ratios['pull_vs_consume']:.2f}x" if results.ratios else ""),
    ]
    if redis_results:
        rows += [("redis " + redis_results["redis_version"], "XADD (pipelined)", redis_results["produce"], ""),
                 ("redis " + redis_results["redis_version"], "XREADGROUP + XACK", redis_results["consume"], "")]
    for name, phase in (("produce", "C++ client: send_sync"), ("consume", "C++ client: push consumer")):
        data = results.cpp.get(name)
        if isinstance(data, dict) and "msgs_per_s" in data:
            rows.append(("rocketflow", phase, data, ""))
    for system, phase_name, data, ratio in rows:
        table.add_row(system, phase_name, f"{data['msgs_per_s']:,.0f}", f"{data['seconds']:.2f}",
                      f"{data['server_cpu_s']:.2f}", f"{data['server_cpu_us_per_msg']:.2f}",
                      f"{data['client_cpu_s']:.2f}", ratio)
    console.print(table)
    latency = ours["pull_latency_ms"]
    console.print(f"single pull of {BATCH} (one outstanding, loopback): p50 {latency['p50']:.3f} ms, "
                  f"p99 {latency['p99']:.3f} ms, mean {latency['mean']:.3f} ms over {latency['samples']} pulls")
    if results.ratios:
        console.print(f"targets: ingest >= 1.0x Redis ({results.ratios['ingest_vs_produce'] >= 1.0}), "
                      f"pull >= 1.0x Redis ({results.ratios['pull_vs_consume'] >= 1.0}), "
                      f"pull p50 < 1 ms ({latency['p50'] < 1.0})")
    for name, data in results.cpp.items():
        if isinstance(data, dict) and "msgs_per_s" not in data:
            console.print(f"C++ client {name}: {data}")


if __name__ == "__main__":
    main()
