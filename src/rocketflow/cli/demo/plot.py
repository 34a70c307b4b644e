"""The run's PNG: throughput, total lag and Spark's lag per queue over time (needs matplotlib)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rocketflow.cli.demo.settings import Sample

if TYPE_CHECKING:
    from rocketflow.cli.demo_spark import LagSample


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

