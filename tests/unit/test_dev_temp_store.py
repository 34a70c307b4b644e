"""A dev cluster's temporary store names its owner; the stores of owners that are gone are swept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rocketflow.dev import (
    TEMP_STORE_OWNER_FILE,
    TEMP_STORE_PREFIX,
    mark_temp_store,
    sweep_stale_temp_stores,
)


def _store(root: Path, name: str, owner: str | None) -> Path:
    directory = root / f"{TEMP_STORE_PREFIX}{name}"
    (directory / "commitlog").mkdir(parents=True)
    (directory / "commitlog" / "00000000000000000000").write_bytes(b"\0" * 64)
    if owner is not None:
        (directory / TEMP_STORE_OWNER_FILE).write_text(owner)
    return directory


def _gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _namespace() -> str:
    return os.readlink("/proc/self/ns/pid").replace(" ", "")


def test_the_store_of_a_process_that_is_gone_is_removed_and_the_others_stay(tmp_path: Path) -> None:
    mine = tmp_path / f"{TEMP_STORE_PREFIX}mine"
    mine.mkdir()
    mark_temp_store(mine)
    gone = _store(tmp_path, "gone", f"{_gone_pid()} - {_namespace()}\n")
    kept = _store(tmp_path, "kept", None)  # keep_store: no owner file
    garbled = _store(tmp_path, "garbled", "not a pid\n")
    other_namespace = _store(tmp_path, "elsewhere", f"{_gone_pid()} - pid:[1]\n")
    unrelated = tmp_path / "something-else"
    unrelated.mkdir()
    (unrelated / TEMP_STORE_OWNER_FILE).write_text(f"{_gone_pid()} - {_namespace()}\n")

    assert sweep_stale_temp_stores(tmp_path) == [gone]

    assert not gone.exists()
    for directory in (mine, kept, garbled, other_namespace, unrelated):
        assert directory.is_dir(), directory


def test_a_reused_pid_is_told_apart_by_its_start_time(tmp_path: Path) -> None:
    # this process's pid with another start time: the process that made the store was an earlier one
    reused = _store(tmp_path, "reused", f"{os.getpid()} 1 {_namespace()}\n")
    alive = tmp_path / f"{TEMP_STORE_PREFIX}alive"
    alive.mkdir()
    mark_temp_store(alive)

    assert sweep_stale_temp_stores(tmp_path) == [reused]
    assert alive.is_dir()


def test_the_owner_file_names_this_process(tmp_path: Path) -> None:
    mark_temp_store(tmp_path)
    pid, start_time, namespace = (tmp_path / TEMP_STORE_OWNER_FILE).read_text().split()
    assert int(pid) == os.getpid()
    assert start_time.isdigit()
    assert namespace == _namespace()


def test_a_missing_temporary_directory_sweeps_nothing(tmp_path: Path) -> None:
    assert sweep_stale_temp_stores(tmp_path / "absent") == []
