"""The broker's CPU for one message at a time: a held pull, one single send, the pull's answer.

Run `python bench/broker_cycle_bench.py [--cycles 20000] [--rounds 3]` from the repo root. One
`rocketflow dev` subprocess. Each cycle sends a long-polling PULL_MESSAGE for the next offset of one
of 8 queues, waits `--gap-us` so that the broker holds it, then sends one 100 B message to that
queue with the producer (SEND_MESSAGE_V2 with its UNIQ_KEY and WAIT properties) and waits for the
send's answer and the pull's. That is the broker's whole work for a message at low rates: two
requests read, a put, a held pull woken and answered, two answers written. The broker's user and
system CPU (from `/proc`, all its threads) over each round is divided by the round's cycles.

Rounds alternate nothing: they show the spread on this machine, which is wide on a shared VM.
`--src DIR` runs the broker from another source tree (for example a copy built with mypyc) so that
two builds can be compared by alternating runs. Prints a table and writes JSON under
bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
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
from broker_bench import (
    QUEUES,
    REPO_ROOT,
    TOPIC,
    BrokerProcess,
    create_topic,
    machine_info,
    percentile,
    pull_fields,
)

from rocketflow import Message, Producer
from rocketflow.net import RemotingClient
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

BODY = b"x" * 100
SUSPEND_MILLIS = 15_000
TIMEOUT = 30.0


def broker_cpu(process: psutil.Process) -> tuple[float, float]:
    times = process.cpu_times()
    return float(times.user), float(times.system)


class Cycler:
    """Drives the cycles on the producer's client loop."""

    def __init__(self, broker: BrokerProcess, producer: Producer, gap: float) -> None:
        self.broker = broker
        self.producer = producer
        self.gap = gap
        self.client = RemotingClient()
        self.offsets = [0] * QUEUES
        self.queues: dict[int, MessageQueue] = {}

    async def prepare(self) -> None:
        addr = self.broker.broker_addr
        await create_topic(self.client, addr)
        for _ in range(4 * QUEUES):  # routes, and the queues' first offsets past the warm-up messages
            await self.producer.send_coro(Message(TOPIC, b"warmup"))
        for queue_id in range(QUEUES):
            self.offsets[queue_id] = await self._max_offset(queue_id)
        self.queues = {mq.queue_id: mq for mq in self.producer.instance.topic_publish_info(TOPIC).message_queues}
        if len(self.queues) != QUEUES:
            raise SystemExit(f"the route of {TOPIC} has {len(self.queues)} queues, not {QUEUES}")

    async def _max_offset(self, queue_id: int) -> int:
        request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(queue_id)})
        response = await self.client.invoke(self.broker.broker_addr, request, TIMEOUT)
        if response.code != ResponseCode.SUCCESS:
            raise SystemExit(f"GET_MAX_OFFSET failed: {response.describe()}")
        return int(response.ext_fields["offset"])

    async def cycle(self, index: int) -> float:
        """One cycle; returns the seconds from the send's start to the pull's answer."""
        queue_id = index % QUEUES
        fields = pull_fields(queue_id, self.offsets[queue_id], suspend_millis=SUSPEND_MILLIS)
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)
        pull = asyncio.ensure_future(self.client.invoke(self.broker.broker_addr, request, TIMEOUT))
        await asyncio.sleep(self.gap)
        started = time.perf_counter()
        mq = self.queues[queue_id]
        await self.producer.send_coro(Message(TOPIC, BODY), selector=lambda queues, msg, arg: mq)
        response = await pull
        answered = time.perf_counter() - started
        if response.code != ResponseCode.SUCCESS:
            raise SystemExit(f"the held pull of queue {queue_id} was answered {response.describe()}")
        self.offsets[queue_id] = int(response.ext_fields["nextBeginOffset"])
        return answered

    async def round(self, cycles: int, on_cycle: Any) -> dict[str, float]:
        process = psutil.Process(self.broker.pid)
        user, system = broker_cpu(process)
        started = time.perf_counter()
        answers = []
        for index in range(cycles):
            answers.append(await self.cycle(index))
            on_cycle()
        elapsed = time.perf_counter() - started
        user_after, system_after = broker_cpu(process)
        return {"cycles": cycles, "wall_us_per_cycle": round(elapsed / cycles * 1e6, 1),
                "broker_user_us_per_cycle": round((user_after - user) / cycles * 1e6, 1),
                "broker_system_us_per_cycle": round((system_after - system) / cycles * 1e6, 1),
                "send_to_answer_p50_ms": round(statistics.median(answers) * 1000, 3),
                "send_to_answer_p99_ms": round(percentile(answers, 0.99) * 1000, 3)}

    async def close(self) -> None:
        await self.client.close()


def run(cycles: int, rounds: int, gap: float, src: Path | None, console: Console) -> list[dict[str, float]]:
    store_dir = Path(tempfile.mkdtemp(prefix="rocketflow-cycle-bench-"))
    broker = BrokerProcess(store_dir, src_dir=src)
    results: list[dict[str, float]] = []
    try:
        broker.start()
        producer = Producer("cycle_bench_pg", broker.namesrv_addr)
        producer.start()
        cycler = Cycler(broker, producer, gap)
        try:
            producer.instance.run(cycler.prepare())
            producer.instance.run(cycler.round(min(cycles, 1000), lambda: None))  # warm-up, not reported
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console) as progress:
                for number in range(1, rounds + 1):
                    task = progress.add_task(f"round {number}", total=cycles)
                    results.append(producer.instance.run(
                        cycler.round(cycles, lambda task=task: progress.advance(task))))
        finally:
            producer.instance.run(cycler.close())
            producer.shutdown()
    finally:
        broker.stop()
        shutil.rmtree(store_dir, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=20_000, help="cycles a round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each reported on its own")
    parser.add_argument("--gap-us", type=float, default=300.0,
                        help="wait between a pull and the send, so that the broker holds the pull")
    parser.add_argument("--src", type=Path, default=None,
                        help="source tree the broker runs from (default: this repository's src)")
    parser.add_argument("--output", type=Path, default=None, help="JSON result file")
    args = parser.parse_args()
    if args.cycles <= 0 or args.rounds <= 0:
        parser.error("--cycles and --rounds must be positive")
    console = Console(width=None if sys.stdout.isatty() else 150)
    rounds = run(args.cycles, args.rounds, args.gap_us / 1e6, args.src, console)
    table = Table(title="broker CPU a cycle: a held pull, one single 100 B send, the pull's answer")
    for column in ("round", "wall us/cycle", "broker user us", "broker system us", "send -> answer p50 ms",
                   "p99 ms"):
        table.add_column(column, justify="right")
    for number, row in enumerate(rounds, 1):
        table.add_row(str(number), f"{row['wall_us_per_cycle']:.1f}", f"{row['broker_user_us_per_cycle']:.1f}",
                      f"{row['broker_system_us_per_cycle']:.1f}", f"{row['send_to_answer_p50_ms']:.3f}",
                      f"{row['send_to_answer_p99_ms']:.3f}")
    console.print(table)
    median_user = statistics.median(row["broker_user_us_per_cycle"] for row in rounds)
    median_system = statistics.median(row["broker_system_us_per_cycle"] for row in rounds)
    console.print(f"median broker CPU a cycle: {median_user:.1f} us user + {median_system:.1f} us system")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    output = args.output or REPO_ROOT / "bench" / "results" / f"broker_cycle_bench-{stamp}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"gap_us": args.gap_us, "src": str(args.src or REPO_ROOT / "src"), **machine_info(),
                                  "rounds": rounds}, indent=2) + "\n")
    console.print(f"results written to {output}")


if __name__ == "__main__":
    main()
