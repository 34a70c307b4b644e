"""End-to-end latency against the send rate: where the tail starts to grow.

Run `python bench/latency_sweep.py [--rates 500,1000,2000,3000,5000] [--seconds 10]` from the repo
root. One `rocketflow dev` subprocess; for each rate, the latency phase of `client_bench.py` (a
producer subprocess sending `send_async` at a steady rate, each body stamped with its send time, and a
concurrent push consumer subprocess recording now minus that), plus the CPU each of the three
processes spent per message. `--modes` picks how producer and consumer are written: ``threads``
(`send_async` from a pacing thread, a plain listener on the consume threads) and/or ``asyncio``
(sends paced by the client's loop with `send_async_await`, an ``async def`` listener on the loop, as
an asyncio application such as one using nats-py would be). Prints a table, writes JSON under
bench/results/ and, with matplotlib installed (the `demo` extra), a PNG of p50/p99/p99.9 and CPU
against the rate.
"""

from __future__ import annotations

import argparse
import json
import shutil
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

from broker_bench import BrokerProcess, CpuMeter, machine_info
from client_bench import LATENCY_MODES, LATENCY_TOPIC, REPO_ROOT, create_topic, latency

from rocketflow import Producer
from rocketflow.client.admin import Admin

#: the latency target (p99, ms)
P99_TARGET_MS = 2.0
#: the broker's long-polling counters (GET_BROKER_RUNTIME_INFO), read around each phase
LONG_POLLING_KEYS = {"suspended": "pullRequestsSuspended", "woken_by_message": "pullRequestsWokenByMessage",
                     "woken_by_timeout": "pullRequestsWokenByTimeout", "messages_stored": "msgPutTotalTodayNow"}


def long_polling_counters(admin: Admin, broker_addr: str) -> dict[str, int]:
    info = admin.broker_runtime_info(broker_addr)
    return {name: int(info.get(key, "0")) for name, key in LONG_POLLING_KEYS.items()}


def sweep(rates: list[int], seconds: float, console: Console, modes: tuple[str, ...] = ("threads",)
          ) -> list[dict[str, Any]]:
    work_dir = Path(tempfile.mkdtemp(prefix="rocketflow-latency-sweep-"))
    broker = BrokerProcess(work_dir / "store")
    rows: list[dict[str, Any]] = []
    try:
        broker.start()
        setup = Producer("latency_sweep_setup_pg", broker.namesrv_addr)
        setup.start()
        try:
            create_topic(setup, broker.broker_addr, LATENCY_TOPIC)
        finally:
            setup.shutdown()
        broker_cpu = CpuMeter(psutil.Process(broker.pid))
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Admin(broker.namesrv_addr) as admin, Progress(*columns, console=console) as progress:
            for mode, rate in ((mode, rate) for mode in modes for rate in rates):
                before = long_polling_counters(admin, broker.broker_addr)
                broker_cpu.start()
                result = latency(broker.namesrv_addr, rate, seconds, 1, progress, mode)
                after = long_polling_counters(admin, broker.broker_addr)
                # A message whose queue had a pull held went out at once; the others waited for the
                # consumer's next pull of their queue (each woken pull carries one message at these rates;
                # the stored count includes the producer's warm-up sends).
                polling = {name: after[name] - before[name] for name in LONG_POLLING_KEYS}
                result["long_polling"] = polling
                result["found_held_pull"] = round(polling["woken_by_message"] / max(polling["messages_stored"], 1), 3)
                # The phase gives the producer's (its own send loop, start-up and warm-up sends left out) and
                # the consumer's (the process once started, with its 2 s wait before the producer starts);
                # the broker's is measured here over the whole phase.
                result["cpu_us_per_msg"]["broker"] = round(broker_cpu.stop() / result["messages"] * 1e6, 1)
                rows.append(result)
    finally:
        broker.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (latency_axes, cpu_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    modes = list(dict.fromkeys(row["mode"] for row in rows))
    styles = {mode: style for mode, style in zip(modes, ("-", ":"), strict=False)}
    for mode in modes:
        mode_rows = [row for row in rows if row["mode"] == mode]
        rates = [row["target_rate"] for row in mode_rows]
        for color, (key, label) in enumerate((("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))):
            latency_axes.plot(rates, [row[key] for row in mode_rows], marker="o", linestyle=styles.get(mode, "-"),
                              color=f"C{color}", label=f"{label} ({mode})" if len(modes) > 1 else label)
    latency_axes.axhline(P99_TARGET_MS, color="grey", linestyle="--", label=f"p99 target {P99_TARGET_MS:g} ms")
    latency_axes.set_yscale("log")
    latency_axes.set_xlabel("send rate (msg/s)")
    latency_axes.set_ylabel("end-to-end latency (ms)")
    latency_axes.legend()
    latency_axes.grid(True, which="both", alpha=0.3)
    for mode in modes:
        mode_rows = [row for row in rows if row["mode"] == mode]
        rates = [row["target_rate"] for row in mode_rows]
        for color, role in enumerate(("producer", "broker", "consumer")):
            cpu_axes.plot(rates, [row["cpu_us_per_msg"][role] * row["target_rate"] / 1e6 for row in mode_rows],
                          marker="o", linestyle=styles.get(mode, "-"), color=f"C{color}",
                          label=f"{role} ({mode})" if len(modes) > 1 else role)
    cpu_axes.axhline(psutil.cpu_count() or 1, color="grey", linestyle="--", label="cores")
    cpu_axes.set_xlabel("send rate (msg/s)")
    cpu_axes.set_ylabel("CPU (cores)")
    cpu_axes.legend()
    cpu_axes.grid(True, alpha=0.3)
    figure.suptitle("rocketflow end-to-end latency, single sends of 100 B, one machine")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="500,1000,2000,3000,5000", help="comma-separated msg/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each rate's phase")
    parser.add_argument("--modes", default="threads,asyncio",
                        help=f"comma-separated, of {', '.join(LATENCY_MODES)} (see above)")
    parser.add_argument("--output", type=Path, default=None, help="JSON result file (the PNG goes beside it)")
    args = parser.parse_args()
    modes = tuple(dict.fromkeys(mode.strip() for mode in args.modes.split(",") if mode.strip()))
    if not modes or any(mode not in LATENCY_MODES for mode in modes):
        parser.error(f"--modes: comma-separated, of {', '.join(LATENCY_MODES)}; got {args.modes!r}")
    try:
        rates = sorted({int(rate) for rate in args.rates.split(",") if rate.strip()})
    except ValueError:
        parser.error(f"--rates: comma-separated integers expected, got {args.rates!r}")
    if not rates or rates[0] <= 0:
        parser.error("--rates: at least one positive rate")
    console = Console(width=None if sys.stdout.isatty() else 150)
    rows = sweep(rates, args.seconds, console, modes)
    table = Table(title="end-to-end latency by send rate (single sends of 100 B)")
    for column in ("mode", "msg/s", "sent/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "producer CPU us/msg",
                   "broker CPU us/msg", "consumer CPU us/msg", "found a held pull", f"p99 < {P99_TARGET_MS:g} ms"):
        table.add_column(column, justify="right")
    for row in rows:
        cpu = row["cpu_us_per_msg"]
        table.add_row(row["mode"], f"{row['target_rate']:,}", f"{row['sent_rate']:,.0f}", f"{row['p50_ms']:.2f}",
                      f"{row['p99_ms']:.2f}", f"{row['p999_ms']:.2f}", f"{row['max_ms']:.2f}", f"{cpu['producer']:.0f}",
                      f"{cpu['broker']:.0f}", f"{cpu['consumer']:.0f}", f"{row['found_held_pull']:.0%}",
                      str(row["p99_ms"] < P99_TARGET_MS))
    console.print(table)
    output = args.output or REPO_ROOT / "bench" / "results" / f"latency_sweep-{time.strftime('%Y%m%d-%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"seconds": args.seconds, **machine_info(), "rows": rows}, indent=2) + "\n")
    console.print(f"results written to {output}")
    png = output.with_suffix(".png")
    if plot(rows, png):
        console.print(f"plot written to {png}")
    else:
        console.print("matplotlib is not installed: no plot (pip install -e '.[demo]')")


if __name__ == "__main__":
    main()
