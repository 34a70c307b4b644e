"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI runs on 2 shared cores: time per example varies with load, so never fail on timing.
settings.register_profile("rocketflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rocketflow")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"
#: frames captured from the real clients (npm ali-ons 3.12.0, PyPI rocketmq 0.4.4), kept in the repo
CAPTURED_DIR = REPO_ROOT / "tests" / "data" / "captured"


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
