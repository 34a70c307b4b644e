"""Fixtures of the client integration tests: one dev cluster per module, no client left behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client_helpers import client_threads

from rocketflow.broker import DevCluster
from rocketflow.client import ClientInstance
from rocketflow.client.instance import shutdown_all


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def no_client_left_behind() -> Iterator[None]:
    yield
    leftovers = ClientInstance.live_instances()
    shutdown_all()
    assert not leftovers, f"client instances left running: {leftovers}"
    assert not client_threads(), f"client threads left running: {client_threads()}"
