"""Shared test helpers."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from rocketflow.client import ClientInstance
from rocketflow.client.instance import shutdown_all
from testkit import client_threads

# CI runs on 2 shared cores: time per example varies with load, so never fail on timing.
settings.register_profile("rocketflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rocketflow")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"
#: frames captured from the real clients (npm ali-ons 3.12.0, PyPI rocketmq 0.4.4), kept in the repo
CAPTURED_DIR = REPO_ROOT / "tests" / "data" / "captured"


#: Free space the suite needs where its stores go: a whole run writes ~1.2 GB under tmp_path.
MIN_FREE_BYTES = int(float(os.environ.get("ROCKETFLOW_TEST_MIN_FREE_GB", "2")) * 1024**3)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, saying why, when the temp disk is nearly full: otherwise hundreds of tests fail
    with store errors (or pytest itself with an INTERNALERROR) and the cause is buried."""
    temp_dir = tempfile.gettempdir()
    free = shutil.disk_usage(temp_dir).free
    if free < MIN_FREE_BYTES:
        pytest.exit(f"only {free / 1024**3:.1f} GB free under {temp_dir}; the suite needs "
                    f"{MIN_FREE_BYTES / 1024**3:.1f} GB (ROCKETFLOW_TEST_MIN_FREE_GB sets it)", returncode=3)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's shared/ folder (specs, captured frames), which sits beside the repo."""
    if not SHARED_DIR.is_dir():
        pytest.skip(f"shared/ not found beside the repo at {SHARED_DIR}")
    return SHARED_DIR


@pytest.fixture(scope="session")
def captured_dir() -> Path:
    """The captured real-client sessions (``<client>/frames_*.jsonl``); missing files fail, never skip."""
    assert sorted(CAPTURED_DIR.glob("*/frames_*.jsonl")), f"no captured frames under {CAPTURED_DIR}"
    return CAPTURED_DIR


@pytest.fixture()
def no_client_left_behind() -> Iterator[None]:
    """Fail a test that leaves client instances or their threads running (and stop them).

    Instances already running when the test began (session fixtures of another folder, say) are
    not the test's doing and are left alone.
    """
    instances_before = {id(instance) for instance in ClientInstance.live_instances()}
    threads_before = {thread.ident for thread in client_threads()}
    yield
    leftovers = [instance for instance in ClientInstance.live_instances() if id(instance) not in instances_before]
    shutdown_all(leftovers)
    assert not leftovers, f"client instances left running: {leftovers}"
    threads = [thread for thread in client_threads() if thread.ident not in threads_before]
    assert not threads, f"client threads left running: {threads}"
