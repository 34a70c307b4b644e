"""Rows -> messages for the ``rocketmq`` sink.

Columns (case-insensitive): ``body`` (binary or string, required, not empty), ``keys``, ``tags``,
``sharding_key`` and ``topic`` (strings, optional; a null topic falls back to the ``topic`` option).
Rows without a sharding key go out as SEND_BATCH_MESSAGE requests (round-robin over the queues);
rows with one are sent one at a time per key, in row order, to the queue the key hashes to, so the
order of a key's rows is kept. Delivery is at-least-once: a task that fails and is retried by Spark
sends its rows again.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, Final

from rocketflow.client.producer.producer import Producer
from rocketflow.protocol.message import Message
from rocketflow.spark.connection import RPC_TIMEOUT, SourceError

#: Messages per SEND_BATCH_MESSAGE and the body bytes they may add up to.
BATCH_MESSAGES: Final = 256
BATCH_BYTES: Final = 512 * 1024
#: Requests in flight per write task.
SENDS_IN_FLIGHT: Final = 16


def _column(batch: Any, name: str) -> list[Any] | None:
    for index, field_name in enumerate(batch.schema.names):
        if field_name.lower() == name:
            values: list[Any] = batch.column(index).to_pylist()
            return values
    return None


def build_messages(batch: Any, default_topic: str | None) -> list[tuple[Message, str | None]]:
    """The batch's rows as ``(message, sharding_key)`` pairs; `SourceError` for a row that cannot be sent."""
    bodies = _column(batch, "body")
    if bodies is None:
        raise SourceError("the rocketmq sink needs a body column (binary or string)")
    count = len(bodies)
    nothing: list[Any] = [None] * count
    keys = _column(batch, "keys") or nothing
    tags = _column(batch, "tags") or nothing
    sharding = _column(batch, "sharding_key") or nothing
    topics = _column(batch, "topic") or nothing
    messages: list[tuple[Message, str | None]] = []
    for index in range(count):
        body = bodies[index]
        if isinstance(body, str):
            body = body.encode("utf-8")
        if not body:
            raise SourceError(f"row {index} of a write batch has a null or empty body; RocketMQ messages need a body")
        topic = topics[index] or default_topic
        if not topic:
            raise SourceError(f"row {index} has no topic: add a topic column or set the sink's topic option")
        messages.append((Message(topic, body, tags=tags[index] or None, keys=keys[index] or None),
                         sharding[index] or None))
    return messages


async def _send_all(producer: Producer, messages: list[tuple[Message, str | None]]) -> int:
    unkeyed: dict[str, list[Message]] = defaultdict(list)
    keyed: dict[tuple[str, str], list[Message]] = defaultdict(list)
    for msg, key in messages:
        if key is None:
            unkeyed[msg.topic].append(msg)
        else:
            keyed[(msg.topic, key)].append(msg)
    limit = asyncio.Semaphore(SENDS_IN_FLIGHT)

    async def send_batch(batch: list[Message]) -> int:
        async with limit:
            await producer.send_batch_coro(batch, timeout=RPC_TIMEOUT)
        return len(batch)

    async def send_in_order(key: str, batch: list[Message]) -> int:
        async with limit:
            for msg in batch:
                await producer.send_async_await(msg, sharding_key=key, timeout=RPC_TIMEOUT)
        return len(batch)

    jobs = []
    for batch_messages in unkeyed.values():
        current: list[Message] = []
        size = 0
        for msg in batch_messages:
            if current and (len(current) >= BATCH_MESSAGES or size + len(msg.body) > BATCH_BYTES):
                jobs.append(send_batch(current))
                current, size = [], 0
            current.append(msg)
            size += len(msg.body)
        if current:
            jobs.append(send_batch(current))
    jobs.extend(send_in_order(key, batch) for (_, key), batch in keyed.items())
    return sum(await asyncio.gather(*jobs))


def send_record_batch(producer: Producer, batch: Any, default_topic: str | None) -> int:
    """Send every row of an Arrow record batch and wait for the broker's acknowledgements; returns the count.

    A send that fails raises the client's `rocketflow.client.MQError` (Spark then retries the task).
    """
    messages = build_messages(batch, default_topic)
    if not messages:
        return 0
    return producer.instance.run(_send_all(producer, messages))


__all__ = ["BATCH_BYTES", "BATCH_MESSAGES", "SENDS_IN_FLIGHT", "build_messages", "send_record_batch"]
