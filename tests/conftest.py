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


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's shared/ folder (specs, captured frames), which sits beside the repo."""
    if not SHARED_DIR.is_dir():
        pytest.skip(f"shared/ not found beside the repo at {SHARED_DIR}")
    return SHARED_DIR
