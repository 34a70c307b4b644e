"""Memory stays flat while the log grows: segments are mapped files, never held as Python objects.

A child process appends ~160 MiB of 4-KiB messages across 160 one-MiB commit-log segments (plus
consume-queue and index files that roll too), then reads it all back, sampling its RssAnon (the
Python heap and other anonymous memory; mapped file pages are RssFile, page cache the kernel can
reclaim). Growth between a warm-up point (24 MiB in) and the end must stay small. A control run of the
same child that keeps a copy of each full segment's data shows the measurement does see such a leak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

MIB = 1024 * 1024
#: RssAnon may grow at most this much from the warm-up point to the end
GROWTH_BOUND_KIB = 40 * 1024

CHILD = textwrap.dedent(
    """
    import json
    import os
    import struct
    import sys
    from pathlib import Path

    from rocketflow.store import MessageStore, StoreConfig
    from rocketflow.store.put_request import EncodedBatchRequest


    def rss(key):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise SystemExit(f"no {key} in /proc/self/status")


    root, total_mib, leak = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "leak"
    segment = 1024 * 1024
    config = StoreConfig(store_root=root, commit_log_segment_size=segment, consume_queue_segment_units=4096,
                         max_hash_slot_num=16384, max_index_num=65536, flush_interval_commit_log_ms=50)
    store = MessageStore(config)
    store.start()
    body = os.urandom(4000)
    warm_up = 24 * segment
    samples = []
    kept = []
    seq = 0
    next_sample = warm_up
    while store.max_phy_offset < total_mib * segment:
        elements = []
        for _ in range(32):
            props = f"UNIQ_KEY\\x01U{seq}".encode()
            elements.append(struct.pack(">iiiii", 22 + len(body) + len(props), 0, 0, 0, len(body)) + body
                            + struct.pack(">H", len(props)) + props)
            seq += 1
        result = store.put_messages(EncodedBatchRequest("Mem", seq % 8, b"".join(elements)))
        assert result.status.is_ok, result
        while leak and (len(kept) + 2) * segment <= store.max_phy_offset:
            # what the test must catch: the data of every full segment held in Python
            data = store.get_commit_log_data(len(kept) * segment)
            assert data is not None and len(data) == segment
            kept.append(data)
        if store.max_phy_offset >= next_sample:
            samples.append({"offset": store.max_phy_offset, "anon": rss("RssAnon"), "file": rss("RssFile")})
            next_sample += 8 * segment
    read = 0
    for queue_id in range(8):
        offset = 0
        while True:
            got = store.get_messages("g", "Mem", queue_id, offset, 32)
            if not got.buffers:
                break
            read += len(got.buffers)
            offset = got.next_begin_offset
    assert read == seq, (read, seq)
    samples.append({"offset": store.max_phy_offset, "anon": rss("RssAnon"), "file": rss("RssFile")})
    segments = len(store.commit_log.files.files)
    store.shutdown()
    print(json.dumps({"samples": samples, "segments": segments, "messages": seq, "kept": len(kept)}))
    """
)


def run_child(root: Path, total_mib: int, mode: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    done = subprocess.run([sys.executable, "-c", CHILD, str(root), str(total_mib), mode], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def anon_growth_kib(report: dict[str, object]) -> int:
    samples = report["samples"]
    assert isinstance(samples, list) and len(samples) >= 3
    return max(sample["anon"] for sample in samples) - samples[0]["anon"]


def test_anonymous_memory_stays_flat_while_the_log_grows(tmp_path: Path) -> None:
    report = run_child(tmp_path / "store", 160, "ok")
    samples = report["samples"]
    assert isinstance(samples, list)
    assert isinstance(report["segments"], int) and report["segments"] >= 150
    growth = anon_growth_kib(report)
    written_file, read_file = (sample["file"] - samples[0]["file"] for sample in samples[-2:])
    print(f"{report['messages']} messages over {report['segments']} segments: RssAnon "
          f"{samples[0]['anon'] // 1024} -> {samples[-1]['anon'] // 1024} MiB (peak growth {growth / 1024:.1f} MiB); "
          f"RssFile (page cache, reclaimable) +{written_file / 1024:.0f} MiB after writing, "
          f"+{read_file / 1024:.0f} MiB after reading back")
    assert growth < GROWTH_BOUND_KIB, f"RssAnon grew {growth / 1024:.1f} MiB while the log grew: {samples}"


def test_the_measurement_sees_segments_held_in_python(tmp_path: Path) -> None:
    """Control: the same child keeping a copy of each segment it passes grows past the bound."""
    report = run_child(tmp_path / "store", 96, "leak")
    growth = anon_growth_kib(report)
    assert growth > GROWTH_BOUND_KIB, f"a {report['kept']}-segment leak grew RssAnon only {growth / 1024:.1f} MiB"
