"""Replication benchmark: what a slave costs the master's sends, ASYNC_MASTER against SYNC_MASTER.

Run `python bench/replication_bench.py [--quick]`. Three setups, one after the other, each on free
ports with fresh stores: a `rocketflow dev` broker alone (the peer), an ASYNC_MASTER with one slave,
a SYNC_MASTER with one slave (each slave a `rocketflow broker --role SLAVE` process of its own, as
deployed, so its work is not the master's; both share this machine's cores). For each: pipelined
SEND_BATCH_MESSAGE ingest (32 x 100 B, 16 in flight, as broker_bench.py), the time the slave still
needs after the last acknowledgement to hold everything (its reported offset
reaching the master's commit-log end), and single SEND_MESSAGE round trips one at a time
(p50/p99). Ratios are against the broker alone, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from broker_bench import (
    BODY_SIZE,
    QUEUES,
    REPO_ROOT,
    TIMEOUT,
    TOPIC,
    BrokerProcess,
    CpuMeter,
    batch_bodies,
    create_topic,
    free_port,
    ours_ingest,
    percentile,
    stop_process,
)

from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import KVTable
from rocketflow.protocol.ids import UniqueIdGenerator
from rocketflow.protocol.properties import encode_properties
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2

SETUPS = (("alone", "ASYNC_MASTER", 0), ("async + slave", "ASYNC_MASTER", 1), ("sync + slave", "SYNC_MASTER", 1))


def start_slave(namesrv: str, store_dir: Path) -> tuple[subprocess.Popen[str], str]:
    """`rocketflow broker --role SLAVE` of the dev broker's name; returns the process and its address."""
    argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli()", "broker", "-n", namesrv,
            "--port", str(free_port()), "--store-dir", str(store_dir), "--role", "SLAVE", "--broker-id", "1"]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               text=True, env=env)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("broker ") and " listening on " in line:
            return process, line.split()[-1]
    raise SystemExit("the slave did not start")


async def runtime_info(client: RemotingClient, addr: str) -> dict[str, str]:
    response = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), TIMEOUT)
    return dict(KVTable.decode(response.body).table)


async def single_sends(client: RemotingClient, addr: str, samples: int) -> list[float]:
    ids = UniqueIdGenerator()
    body = b"x" * BODY_SIZE
    times: list[float] = []
    for index in range(samples):
        header = SendMessageRequestHeader(
            producer_group="bench_pg", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=QUEUES,
            queue_id=index % QUEUES, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
            properties=encode_properties({"UNIQ_KEY": ids.next_id(), "WAIT": "true"}))
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                          SendMessageRequestHeaderV2.from_v1(header).to_ext_fields(), body)
        started = time.perf_counter()
        response = await client.invoke(addr, request, TIMEOUT)
        times.append((time.perf_counter() - started) * 1000)
        if response.code != ResponseCode.SUCCESS:
            raise SystemExit(f"SEND_MESSAGE failed: {response.describe()}")
    return times


async def measure(broker: BrokerProcess, slave: subprocess.Popen[str] | None, slave_addr: str | None,
                  bodies: list[bytes], count: int, samples: int, progress: Progress, label: str) -> dict[str, Any]:
    async with RemotingClient(name="replication-bench") as client:
        await create_topic(client, broker.broker_addr)
        if slave_addr:  # wait for the slave to connect (a SYNC_MASTER would answer SLAVE_NOT_AVAILABLE)
            deadline = time.monotonic() + 60
            while (await runtime_info(client, broker.broker_addr)).get("haConnections") != "1":
                if time.monotonic() > deadline:
                    raise SystemExit("the slave did not connect")
                await asyncio.sleep(0.1)
        task = progress.add_task(f"{label}: ingest", total=count)
        master_cpu = CpuMeter(psutil.Process(broker.pid))
        slave_cpu = CpuMeter(psutil.Process(slave.pid)) if slave is not None else None
        master_cpu.start()
        if slave_cpu is not None:
            slave_cpu.start()
        started = time.perf_counter()
        await ours_ingest(client, broker.broker_addr, bodies, 16, lambda n: progress.advance(task, n))
        ingest_seconds = time.perf_counter() - started
        catch_up = 0.0
        if slave_addr:
            end = int((await runtime_info(client, broker.broker_addr))["commitLogMaxOffset"])
            while int((await runtime_info(client, slave_addr)).get("haReportedOffset", "-1")) < end:
                await asyncio.sleep(0.005)
            catch_up = time.perf_counter() - started - ingest_seconds
        master_us = master_cpu.stop() / count * 1e6
        slave_us = slave_cpu.stop() / count * 1e6 if slave_cpu is not None else 0.0
        latencies = await single_sends(client, broker.broker_addr, samples)
    return {"ingest_msgs_per_s": round(count / ingest_seconds, 1), "ingest_seconds": round(ingest_seconds, 3),
            "slave_catch_up_s": round(catch_up, 3), "master_cpu_us_per_msg": round(master_us, 2),
            "slave_cpu_us_per_msg": round(slave_us, 2), "send_p50_ms": round(percentile(latencies, 0.5), 3),
            "send_p99_ms": round(percentile(latencies, 0.99), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="50,000 messages instead of 300,000")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--samples", type=int, default=1000, help="single sends timed per setup")
    parser.add_argument("--output", type=Path, default=None, help="JSON result file")
    args = parser.parse_args()
    count = args.messages or (50_000 if args.quick else 300_000)
    console = Console(width=None if sys.stdout.isatty() else 150)
    work_dir = Path(tempfile.mkdtemp(prefix="rocketflow-replication-bench-"))
    results: dict[str, Any] = {"messages": count, "setups": {}}
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            bodies = batch_bodies(count, progress)
            for label, role, slaves in SETUPS:
                name = label.replace(" ", "-").replace("+", "and")
                broker = BrokerProcess(work_dir / name, ("--set", f"brokerRole={role}"))
                broker.start()
                slave: subprocess.Popen[str] | None = None
                try:
                    slave_addr = None
                    if slaves:
                        slave, slave_addr = start_slave(broker.namesrv_addr, work_dir / f"{name}-slave")
                    results["setups"][label] = asyncio.run(
                        measure(broker, slave, slave_addr, bodies, count, args.samples, progress, label))
                finally:
                    if slave is not None:
                        stop_process(slave)
                    broker.stop()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    alone = results["setups"]["alone"]
    table = Table(title=f"replication benchmark: {count:,} x {BODY_SIZE} B in batches of 32, then "
                        f"{args.samples:,} single sends")
    for column in ("setup", "ingest msg/s", "vs alone", "master CPU us/msg", "slave CPU us/msg",
                   "slave catch-up after last ack (s)", "send p50 ms", "send p99 ms", "p50 vs alone"):
        table.add_column(column, justify="right")
    for label, row in results["setups"].items():
        ratio = row["ingest_msgs_per_s"] / alone["ingest_msgs_per_s"]
        p50_ratio = row["send_p50_ms"] / alone["send_p50_ms"]
        row["ingest_vs_alone"], row["p50_vs_alone"] = round(ratio, 3), round(p50_ratio, 3)
        alone_row = label == "alone"
        table.add_row(label, f"{row['ingest_msgs_per_s']:,.0f}", f"{ratio:.2f}x", f"{row['master_cpu_us_per_msg']:.2f}",
                      "-" if alone_row else f"{row['slave_cpu_us_per_msg']:.2f}",
                      "-" if alone_row else f"{row['slave_catch_up_s']:.3f}",
                      f"{row['send_p50_ms']:.3f}", f"{row['send_p99_ms']:.3f}", f"{p50_ratio:.2f}x")
    console.print(table)
    output = args.output or REPO_ROOT / "bench" / "results" / f"replication_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"results written to {output}")


if __name__ == "__main__":
    main()
