"""Before and after: the client and broker's CPU for one workload, this tree against another.

Rates on a shared 2-core VM move by up to 25% from run to run, so a change of a few percent in what a
message costs is lost in them. This bench runs one fixed workload on two source trees, alternating,
and reports the CPU time it took (client and broker processes together, user + system, from the
kernel's accounting of finished child processes) beside each phase's rate.

The workload is client_bench's own phases, run from each tree's `bench/client_bench.py` against a
`rocketflow dev` broker of the same tree (its gRPC endpoint off where the tree has one): single sends
(a fifth of ``--messages``) from 8 threads, `send_batch` of 32 from 8 threads, then concurrent,
orderly and `async def` consumption of everything, each by a new group from the first offset.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/before_after.py --baseline /tmp/before          # 5 pairs of 200,000
    .venv/bin/python bench/before_after.py --baseline /tmp/before --pairs 3 --messages 100000

The baseline tree must have `bench/client_bench.py` with the same phase functions (any commit since
the bench took its current form).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
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
PHASES = ("produce_sync", "produce_batch", "consume_concurrent", "consume_orderly", "consume_concurrent_async")


def run_workload(tree: Path, count: int) -> dict[str, Any]:
    """In a child process: the workload on ``tree``'s client and broker; the phases' results as JSON."""
    sys.path[:0] = [str(tree / "bench"), str(tree / "src")]
    import client_bench as bench  # the tree's own bench module and, through it, the tree's rocketflow

    grpc_off = ("--no-grpc",) if (tree / "src" / "rocketflow" / "proxy").is_dir() else ()
    work_dir = Path(tempfile.mkdtemp(prefix="rocketflow-before-after-"))
    broker = bench.BrokerProcess(work_dir / "store", extra_args=grpc_off, src_dir=tree / "src")
    broker.start()
    results: dict[str, Any] = {}
    try:
        producer = bench.Producer("before_after_pg", broker.namesrv_addr)
        producer.start()
        try:
            bench.create_topic(producer, broker.broker_addr, bench.TOPIC)
            producer.send(bench.Message(bench.TOPIC, b"warmup"))
            with Progress(disable=True) as progress:
                results["produce_sync"] = bench.produce_sync(producer, count // 5, progress)
                results["produce_batch"] = bench.produce_batches(producer, count, progress)
        finally:
            producer.shutdown()
        total = count + count // 5 + 1
        with Progress(disable=True) as progress:
            results["consume_concurrent"] = bench.consume(broker.namesrv_addr, "before_after_concurrent", total,
                                                          False, progress, None)
            results["consume_orderly"] = bench.consume(broker.namesrv_addr, "before_after_orderly", total, True,
                                                       progress, None)
            results["consume_concurrent_async"] = bench.consume(broker.namesrv_addr, "before_after_async", total,
                                                                False, progress, None, on_loop=True)
    finally:
        broker.stop()
    return results


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(tree: Path, count: int) -> dict[str, Any]:
    """The workload in a child process; its phases and the CPU it and its broker used."""
    before = children_cpu()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--workload", str(tree), "--messages", str(count)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""}, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the workload on {tree} failed:\n{done.stderr[-3000:]}")
    phases = json.loads(done.stdout.strip().splitlines()[-1])
    return {"cpu_s": round(children_cpu() - before, 3), "wall_s": round(wall, 3), "phases": phases}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="the other source tree (e.g. a git worktree of an older commit)")
    parser.add_argument("--pairs", type=int, default=5, help="alternating runs of each tree")
    parser.add_argument("--messages", type=int, default=200_000, help="messages of the send_batch phase")
    parser.add_argument("--output", type=Path, default=None, help="JSON result file")
    parser.add_argument("--workload", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workload is not None:
        print(json.dumps(run_workload(args.workload.resolve(), args.messages)))
        return
    if args.baseline is None or not (args.baseline / "bench" / "client_bench.py").is_file():
        parser.error("--baseline must be a source tree with bench/client_bench.py")
    trees = {"before": args.baseline.resolve(), "after": REPO_ROOT}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    console = Console(width=None if sys.stdout.isatty() else 130)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task("alternating runs", total=2 * args.pairs)
        for pair in range(args.pairs):
            order = ("before", "after") if pair % 2 == 0 else ("after", "before")
            for name in order:
                progress.update(task, description=f"pair {pair + 1}: {name}")
                runs[name].append(one_run(trees[name], args.messages))
                progress.advance(task)
    table = Table(title=f"before ({trees['before']}) and after ({trees['after']}), {args.pairs} pairs, "
                        f"{args.messages:,} messages")
    for column in ("measure", "before (median, range)", "after (median, range)", "after / before"):
        table.add_column(column, justify="right" if column != "measure" else "left")
    rows: dict[str, dict[str, float]] = {}

    def add(label: str, before: list[float], after: list[float], digits: int) -> None:
        ratio = median(after) / median(before)
        rows[label] = {"before": median(before), "after": median(after), "ratio": round(ratio, 3)}
        table.add_row(label, f"{median(before):,.{digits}f} ({min(before):,.{digits}f}-{max(before):,.{digits}f})",
                      f"{median(after):,.{digits}f} ({min(after):,.{digits}f}-{max(after):,.{digits}f})",
                      f"{ratio:.2f}x")

    add("CPU s, client + broker", [run["cpu_s"] for run in runs["before"]], [run["cpu_s"] for run in runs["after"]], 2)
    for phase in PHASES:
        add(f"{phase} msg/s", [run["phases"][phase]["msgs_per_s"] for run in runs["before"]],
            [run["phases"][phase]["msgs_per_s"] for run in runs["after"]], 0)
    console.print(table)
    console.print("CPU is the measure to compare: rates move with the host; a run's CPU moves far less.")
    output = args.output or REPO_ROOT / "bench" / "results" / f"before_after_{time.strftime('%Y%m%d_%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"baseline": str(trees["before"]), "pairs": args.pairs, "messages": args.messages,
                                  "summary": rows, "runs": runs}, indent=2))
    console.print(f"results written to {output}")


if __name__ == "__main__":
    main()
