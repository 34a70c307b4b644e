"""Delayed messages: a SCHEDULE_TOPIC_XXXX unit's tags code is its deliver time, computed by the store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import small_config
from rocketflow.protocol.codec import encode_batch_body
from rocketflow.protocol.message import Message
from rocketflow.protocol.names import SCHEDULE_TOPIC
from rocketflow.protocol.tags import tags_code
from rocketflow.store import MessageStore, PutMessageRequest, StoreConfig
from rocketflow.store.config import DEFAULT_MESSAGE_DELAY_LEVEL
from rocketflow.store.put_request import EncodedBatchRequest

NOW = 1_700_000_000_123


def delayed(level: str | None, topic: str = SCHEDULE_TOPIC, queue_id: int = 0) -> PutMessageRequest:
    properties = {"TAGS": "TagA", "REAL_TOPIC": "T", "REAL_QID": "0"}
    if level is not None:
        properties["DELAY"] = level
    return PutMessageRequest(topic, queue_id, b"body", properties=properties, tags_code=42)


def units(store: MessageStore, topic: str = SCHEDULE_TOPIC, queue_id: int = 0) -> list[int]:
    queue = store.consume_queues.find(topic, queue_id)
    assert queue is not None
    codes = []
    for offset in range(queue.min_offset, queue.max_offset):
        unit = queue.unit_at(offset)
        assert unit is not None
        codes.append(unit[2])
    return codes


def test_default_table_is_rocketmqs() -> None:
    config = StoreConfig()
    assert config.message_delay_level == DEFAULT_MESSAGE_DELAY_LEVEL
    assert len(config.delay_levels_ms) == 18
    assert config.delay_levels_ms[:4] == (1000, 5000, 10_000, 30_000) and config.delay_levels_ms[-1] == 7_200_000
    with pytest.raises(ValueError, match="message_delay_level"):
        StoreConfig(message_delay_level="1s 5x")
    with pytest.raises(ValueError, match="message_delay_level"):
        StoreConfig(message_delay_level=" ")


def test_put_uses_store_time_plus_level_delay(tmp_path: Path) -> None:
    config = small_config(tmp_path, message_delay_level="2s 4s 1d")
    with MessageStore(config, clock_ms=lambda: NOW) as store:
        for level in ("1", "2", "3", "9", "0", "x", None):
            assert store.put_message(delayed(level)).status.is_ok
        # level 9 clamps to the last level; no usable level keeps the caller's tags code
        assert units(store) == [NOW + 2000, NOW + 4000, NOW + 86_400_000, NOW + 86_400_000, 42, 42, 42]
        # other topics are left alone, DELAY or not
        store.put_message(delayed("1", topic="T"))
        assert units(store, "T") == [42]
    shutil.rmtree(config.consume_queue_dir)
    with MessageStore(config) as store:  # rebuilt from the commit log
        assert units(store) == [NOW + 2000, NOW + 4000, NOW + 86_400_000, NOW + 86_400_000] + [tags_code("TagA")] * 3
        assert units(store, "T") == [tags_code("TagA")]


def test_batch_put_computes_the_same_deliver_times(tmp_path: Path) -> None:
    with MessageStore(small_config(tmp_path), clock_ms=lambda: NOW) as store:
        messages = [Message(SCHEDULE_TOPIC, b"body", tags="TagA", properties={"DELAY": level})
                    for level in ("3", "18", "40")]
        messages.append(Message(SCHEDULE_TOPIC, b"body", tags="TagA"))
        assert store.put_messages(EncodedBatchRequest(SCHEDULE_TOPIC, 2, encode_batch_body(messages))).status.is_ok
        assert units(store, SCHEDULE_TOPIC, 2) == [NOW + 10_000, NOW + 7_200_000, NOW + 7_200_000, tags_code("TagA")]
