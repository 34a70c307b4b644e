"""The plain gRPC client of these tests (tests/raw_grpc.py), and the one import of `DevCluster` for them."""

from __future__ import annotations

from raw_grpc import RawClient, Received, ms
from rocketflow.dev import DevCluster

__all__ = ["DevCluster", "RawClient", "Received", "ms"]
