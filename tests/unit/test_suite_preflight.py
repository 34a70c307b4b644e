"""The suite's own start-up check: a nearly full temp disk stops the run at once, saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# not imported from conftest: with the whole suite collected, `conftest` may name tests/unit/store's
REPO_ROOT = Path(__file__).resolve().parents[2]


def _run_suite_with(min_free_gb: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROCKETFLOW_TEST_MIN_FREE_GB": min_free_gb}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/unit/store/test_store_scan.py"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_nearly_full_temp_disk_stops_the_run_with_the_reason() -> None:
    completed = _run_suite_with("1000000")  # a million GB: more than any disk here has
    assert completed.returncode == 3, completed.stdout + completed.stderr
    assert "GB free under" in completed.stdout + completed.stderr
    assert "ROCKETFLOW_TEST_MIN_FREE_GB" in completed.stdout + completed.stderr


def test_enough_free_space_runs_the_tests() -> None:
    completed = _run_suite_with("0")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "passed" in completed.stdout
