"""Fixtures of the client integration tests: one dev cluster per module, no client left behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rocketflow.dev import DevCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def _leave_no_client_behind(no_client_left_behind: None) -> None:
    """Every test here stops the clients it started (see the root conftest)."""
