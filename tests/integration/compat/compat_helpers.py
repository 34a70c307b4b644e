"""Helpers of the `rocketflow.compat.rocketmq` tests.

`DevCluster` is imported here only (its module moves in the package restructuring).
"""

from __future__ import annotations

import time
import uuid

from rocketflow.client import MQError
from rocketflow.client.admin import Admin
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt
from testkit import wait_until

#: fast transaction check-backs (RocketMQ: every 60 s after 6 s) and short retry delays (level 3 = 1 s)
BROKER_SETTINGS = {
    "transaction_check_interval_ms": 200,
    "transaction_timeout_ms": 1000,
    "transaction_check_max": 5,
    "message_delay_level": "1s 1s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s",
}


def start_cluster(**kwargs: object) -> DevCluster:
    """A dev cluster on free ports, serving on a background thread."""
    return DevCluster.start_in_thread(**kwargs)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"




def has_route(admin: Admin, topic: str) -> bool:
    """Whether the name server routes ``topic`` (an auto-created topic gets one at the broker's next
    registration, a moment after its first message)."""
    try:
        admin.topic_route(topic)
    except MQError:
        return False
    return True


def stored_messages(admin: Admin, topic: str, count: int, timeout: float = 10.0) -> list[MessageExt]:
    """The first ``count`` messages stored in ``topic`` (read with the admin API), by queue and offset."""
    found: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    wait_until(lambda: has_route(admin, topic), timeout, f"a route of {topic}")
    with admin.open_tail(topic, from_now=False) as tail:
        while len(found) < count and time.monotonic() < deadline:
            found.extend(tail.poll(0.5))
    assert len(found) >= count, f"{len(found)} of {count} messages stored in {topic}"
    return sorted(found, key=lambda msg: (msg.queue_id, msg.queue_offset))
