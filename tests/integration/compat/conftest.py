"""Fixtures of the `rocketflow.compat.rocketmq` tests: one dev cluster for the folder, no client left behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from compat_helpers import BROKER_SETTINGS, DevCluster, start_cluster

from rocketflow.client.admin import Admin


@pytest.fixture(scope="package")
def cluster() -> Iterator[DevCluster]:
    cluster = start_cluster(broker_settings=BROKER_SETTINGS)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="package")
def namesrv(cluster: DevCluster) -> str:
    return cluster.namesrv_addr


@pytest.fixture()
def admin(namesrv: str) -> Iterator[Admin]:
    with Admin(namesrv) as admin:
        yield admin


@pytest.fixture(autouse=True)
def _leave_no_client_behind(no_client_left_behind: None) -> None:
    """Every test stops the clients it started (see the root conftest)."""
