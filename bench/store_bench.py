"""Store benchmark: batch appends and consume-queue reads of 100-byte and 4-KiB messages.

Run `python bench/store_bench.py [--quick] [--dir PATH]`. Prints msg/s, MB/s, the disk's raw
sequential write bandwidth (plain file writes), peak memory (anonymous = Python heap, which
must stay flat; file-backed mapped pages are page cache the kernel reclaims), and how long the
store takes to start again on what it wrote: after a clean shutdown (the last segments' records
checked, CRC included) and after a crash (the abort marker left behind: consume queues and index
rebuilt from the checkpoint's segment on). A verdict line flags
(without failing) a case whose anonymous memory grew more than `--anon-limit-mb` while it ran.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rocketflow.protocol.ids import UniqueIdGenerator
from rocketflow.protocol.properties import encode_properties_bytes
from rocketflow.protocol.tags import tags_code
from rocketflow.store import MessageStore, PutMessageRequest, StoreConfig
from rocketflow.store.checkpoint import create_abort_marker

BATCH = 32
QUEUES = 8
#: anonymous-memory growth (MB) of one case above which the memory verdict flags it
ANON_GROWTH_LIMIT_MB = 40.0


def rss_status() -> dict[str, int]:
    """VmHWM / RssAnon / RssFile in KiB from /proc/self/status."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(value.split()[0])
    except OSError:
        out["VmHWM"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


def raw_write_bandwidth(directory: Path, total_bytes: int, progress: Progress) -> float:
    """MB/s of plain sequential 1 MiB writes to a new file (no fsync: page cache, like the store)."""
    path = directory / "raw.bin"
    block = os.urandom(1 << 20)
    task = progress.add_task("raw disk write", total=total_bytes)
    start = time.perf_counter()
    with open(path, "wb", buffering=0) as handle:
        written = 0
        while written < total_bytes:
            handle.write(block)
            written += len(block)
            progress.advance(task, len(block))
            if written % (64 << 20) == 0:
                progress.refresh()
    elapsed = time.perf_counter() - start
    path.unlink()
    return total_bytes / elapsed / 1e6


def run_case(directory: Path, count: int, body_size: int, progress: Progress) -> dict[str, float]:
    root = directory / f"store-{body_size}"
    config = StoreConfig(store_root=root)
    store = MessageStore(config)
    store.start()
    ids = UniqueIdGenerator()
    body = os.urandom(body_size)
    tag_code = tags_code("TagA")
    anon_before = rss_status().get("RssAnon", 0)
    task = progress.add_task(f"append {count:,} x {body_size} B", total=count)
    put_seconds = 0.0
    build_seconds = 0.0
    stored_bytes = 0
    sent = 0
    batch_index = 0
    anon_peak = anon_before
    while sent < count:
        started = time.perf_counter()
        n = min(BATCH, count - sent)
        queue_id = batch_index % QUEUES
        batch = []
        for _ in range(n):
            uniq = ids.next_id()
            props = encode_properties_bytes({"TAGS": "TagA", "UNIQ_KEY": uniq, "WAIT": "true"})
            batch.append(PutMessageRequest("BenchTopic", queue_id, body, properties_bytes=props,
                                           born_timestamp=0, tags_code=tag_code, uniq_key=uniq, keys=""))
        built = time.perf_counter()
        result = store.put_messages(batch)
        done = time.perf_counter()
        if not result.status.is_ok:
            raise SystemExit(f"put failed: {result}")
        build_seconds += built - started
        put_seconds += done - built
        stored_bytes += result.wrote_bytes
        sent += n
        batch_index += 1
        if batch_index % 1000 == 0:
            progress.update(task, completed=sent)
            progress.refresh()
            anon_peak = max(anon_peak, rss_status().get("RssAnon", 0))
    progress.update(task, completed=sent)
    read_task = progress.add_task(f"read {count:,} x {body_size} B", total=count)
    read_count = 0
    read_bytes = 0
    display_seconds = 0.0  # drawing the progress bar, taken out of the read time
    read_start = time.perf_counter()
    for queue_id in range(QUEUES):
        offset = 0
        calls = 0
        while True:
            got = store.get_messages("bench", "BenchTopic", queue_id, offset, 32)
            if not got.message_count:
                break
            read_count += got.message_count
            read_bytes += got.buffer_total_size
            offset = got.next_begin_offset
            calls += 1
            if calls % 1000 == 0:
                drawn = time.perf_counter()
                progress.update(read_task, completed=read_count)
                progress.refresh()
                anon_peak = max(anon_peak, rss_status().get("RssAnon", 0))
                display_seconds += time.perf_counter() - drawn
    read_seconds = time.perf_counter() - read_start - display_seconds
    progress.update(read_task, completed=read_count)
    if read_count != count:
        raise SystemExit(f"read back {read_count} messages, wrote {count}")
    store.shutdown()
    restart_seconds = timed_start(config, count)
    create_abort_marker(config.abort_path)  # what a kill -9 leaves behind: the next start recovers
    recovery_seconds = timed_start(config, count)
    shutil.rmtree(root, ignore_errors=True)
    return {
        "count": count,
        "append_msgs": count / put_seconds,
        "append_mb": stored_bytes / put_seconds / 1e6,
        "append_incl_build_msgs": count / (put_seconds + build_seconds),
        "read_msgs": read_count / read_seconds,
        "read_mb": read_bytes / read_seconds / 1e6,
        "anon_growth_mb": (anon_peak - anon_before) / 1024,
        "restart_s": restart_seconds,
        "recovery_s": recovery_seconds,
    }


def timed_start(config: StoreConfig, count: int) -> float:
    """Seconds `MessageStore.start` takes on the store of `config` (recovery included); checks every message is back."""
    store = MessageStore(config)
    started = time.perf_counter()
    store.start()
    seconds = time.perf_counter() - started
    try:
        stored = sum(store.get_max_offset_in_queue("BenchTopic", queue_id) for queue_id in range(QUEUES))
        if stored != count:
            raise SystemExit(f"after a restart the store holds {stored} messages, wrote {count}")
    finally:
        store.shutdown()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--anon-limit-mb", type=float, default=ANON_GROWTH_LIMIT_MB,
                        help="flag a case whose anonymous memory grew more than this (default %(default)s MB)")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    directory = Path(tempfile.mkdtemp(prefix="rocketflow-bench-", dir=args.dir))
    console = Console()
    try:
        # no refresh thread: it would take the GIL inside the timed puts and reads; each loop redraws
        # the bar itself, outside what it times
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}"),
                      TimeRemainingColumn(), console=console, auto_refresh=False) as progress:
            small = run_case(directory, 1_000_000 // scale, 100, progress)
            large = run_case(directory, 200_000 // scale, 4096, progress)
            raw = raw_write_bandwidth(directory, (1 << 30) // scale, progress)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    memory = rss_status()
    table = Table(title="rocketflow store benchmark (one Python thread, async flush, batches of 32)")
    for column in ("case", "append msg/s", "append MB/s", "incl. request build msg/s", "read msg/s",
                   "read MB/s", "anon mem growth MB"):
        table.add_column(column, justify="right")
    for name, case in (("100 B", small), ("4 KiB", large)):
        table.add_row(name, f"{case['append_msgs']:,.0f}", f"{case['append_mb']:,.1f}",
                      f"{case['append_incl_build_msgs']:,.0f}", f"{case['read_msgs']:,.0f}",
                      f"{case['read_mb']:,.1f}", f"{case['anon_growth_mb']:,.1f}")
    console.print(table)
    for name, case in (("100 B", small), ("4 KiB", large)):
        count = case["count"]
        console.print(f"start on {count:,.0f} x {name}: after a clean shutdown {case['restart_s']:.2f} s "
                      f"({case['restart_s'] / count * 1e6:.2f} us/msg), after a crash {case['recovery_s']:.2f} s "
                      f"({case['recovery_s'] / count * 1e6:.2f} us/msg)")
    fraction = large["append_mb"] / raw
    console.print(f"raw sequential write: {raw:,.0f} MB/s; 4-KiB append = {fraction:.1%} of raw")
    console.print(f"targets: 100 B append >= 500,000 msg/s ({small['append_msgs'] >= 500_000}), "
                  f"reads >= 1,000,000 msg/s ({min(small['read_msgs'], large['read_msgs']) >= 1_000_000}), "
                  f"4 KiB >= 25% of raw ({fraction >= 0.25})")
    peak, anon, mapped = (memory.get(key, 0) / 1024 for key in ("VmHWM", "RssAnon", "RssFile"))
    console.print(f"peak RSS {peak:,.0f} MB (anon now {anon:,.0f} MB, file-backed now {mapped:,.0f} MB)")
    console.print(memory_verdict({"100 B": small, "4 KiB": large}, args.anon_limit_mb), markup=False, soft_wrap=True)


def memory_verdict(cases: dict[str, dict[str, float]], limit_mb: float) -> str:
    """One line: FLAT, or FLAG naming the cases whose anonymous memory grew past `limit_mb` (not a failure)."""
    growths = ", ".join(f"{name} +{case['anon_growth_mb']:,.1f} MB" for name, case in cases.items())
    over = [name for name, case in cases.items() if case["anon_growth_mb"] > limit_mb]
    if over:
        return (f"MEMORY VERDICT: FLAG - anonymous memory grew past {limit_mb:g} MB in {', '.join(over)} "
                f"({growths}): log data may be held as Python objects")
    return f"MEMORY VERDICT: FLAT - anonymous memory growth within {limit_mb:g} MB per case ({growths})"


if __name__ == "__main__":
    main()
