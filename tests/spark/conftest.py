"""Fixtures of the Spark tests: one local SparkSession and one dev cluster for the whole session."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

# Python workers must run this interpreter (the venv's), not the system one.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession
from spark_helpers import build_session

from rocketflow.client import Producer
from rocketflow.client.instance import shutdown_all
from rocketflow.dev import DevCluster
from testkit import create_topic


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def cluster() -> Iterator[DevCluster]:
    dev = DevCluster.start_in_thread(broker_settings={"grpc_port": 0})  # 5.x clients send to it too
    try:
        yield dev
    finally:
        shutdown_all()
        dev.close()


@pytest.fixture(scope="session")
def producer(cluster: DevCluster) -> Iterator[Producer]:
    with Producer("spark_test_producer", namesrv=cluster.namesrv_addr) as test_producer:
        yield test_producer


@pytest.fixture()
def new_topic(cluster: DevCluster, producer: Producer) -> Callable[..., str]:
    """``new_topic(queues=4)``: a fresh topic with that many queues, routed by the name server."""

    def create(queues: int = 4) -> str:
        topic = f"SparkT_{uuid.uuid4().hex[:10]}"
        create_topic(producer.instance, cluster.broker_addr, topic, queues)
        return topic

    return create


