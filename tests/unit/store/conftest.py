"""Fixtures for store tests: small segment sizes so boundaries are crossed quickly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketflow.store import MessageStore, PutMessageRequest, StoreConfig


def small_config(root: Path, **overrides: Any) -> StoreConfig:
    settings: dict[str, Any] = {
        "store_root": root,
        "commit_log_segment_size": 4096,
        "consume_queue_segment_units": 8,
        "max_hash_slot_num": 32,
        "max_index_num": 64,
        "flush_interval_commit_log_ms": 50,
        "flush_interval_consume_queue_ms": 50,
    }
    settings.update(overrides)
    return StoreConfig(**settings)


def request(topic: str = "T", queue_id: int = 0, body: bytes = b"hello", **properties: str) -> PutMessageRequest:
    return PutMessageRequest(topic=topic, queue_id=queue_id, body=body, properties=dict(properties),
                             born_timestamp=1_700_000_000_000, born_host=("10.0.0.1", 5000))


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """Factory of started stores under tmp_path/store; shuts down whatever it started."""
    started: list[MessageStore] = []

    def factory(**overrides: Any) -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store", **overrides))
        store.start()
        started.append(store)
        return store

    yield factory
    for store in started:
        store.shutdown()
