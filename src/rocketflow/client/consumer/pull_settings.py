"""The pull consumer's settings (`PullConsumerSettings`) and the checks of its arguments."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rocketflow.client.consumer.options import check_int, check_offset_store_dir
from rocketflow.client.errors import MQClientError
from rocketflow.protocol.message import MessageQueue

#: RocketMQ ignores auto-commit intervals below one second (``MIN_AUTOCOMMIT_INTERVAL_MILLIS``).
MIN_AUTO_COMMIT_INTERVAL: Final = 1.0


@dataclass(slots=True)
class PullConsumerSettings:
    """Pull consumer settings with RocketMQ 4.9.3's ``DefaultLitePullConsumer`` defaults (seconds)."""

    #: Messages per pull, hence at most per `PullConsumer.poll`.
    pull_batch_size: int = 10
    #: How long `PullConsumer.poll` waits for a batch by default.
    poll_timeout: float = 5.0
    auto_commit: bool = True
    #: `PullConsumer.poll` commits the positions at most this often (at least 1 s).
    auto_commit_interval: float = 5.0
    #: Stop pulling while all queues together cache more messages than this...
    pull_threshold_for_all: int = 10_000
    #: ... or one queue caches more messages than this, or more MiB than this,
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100
    #: ... or its cached offsets span more than this.
    consume_max_span: int = 2000
    #: How long the broker may hold a pull that found nothing (long polling).
    broker_suspend_max_time: float = 20.0
    #: Client timeout of such a pull (must exceed ``broker_suspend_max_time``).
    consumer_timeout_when_suspend: float = 30.0
    #: Root of broadcasting consumers' offset files (None: ``~/.rocketmq_offsets``).
    local_offset_store_dir: str | Path | None = None

    def __post_init__(self) -> None:
        for name, (low, high) in {"pull_batch_size": (1, 1024), "pull_threshold_for_all": (1, 1 << 31),
                                  "pull_threshold_for_queue": (1, 65535), "pull_threshold_size_for_queue": (1, 1024),
                                  "consume_max_span": (1, 65535)}.items():
            check_int(name, getattr(self, name), low, high)
        check_seconds("poll_timeout", self.poll_timeout, allow_zero=True)
        check_seconds("auto_commit_interval", self.auto_commit_interval, allow_zero=False)
        if self.auto_commit_interval < MIN_AUTO_COMMIT_INTERVAL:
            raise MQClientError(f"auto_commit_interval must be >= {MIN_AUTO_COMMIT_INTERVAL} s, "
                                f"got {self.auto_commit_interval!r}")
        check_seconds("broker_suspend_max_time", self.broker_suspend_max_time, allow_zero=False)
        check_seconds("consumer_timeout_when_suspend", self.consumer_timeout_when_suspend, allow_zero=False)
        if self.consumer_timeout_when_suspend <= self.broker_suspend_max_time:
            raise MQClientError(f"consumer_timeout_when_suspend ({self.consumer_timeout_when_suspend}) must be "
                                f"greater than broker_suspend_max_time ({self.broker_suspend_max_time})")
        if not isinstance(self.auto_commit, bool):
            raise MQClientError(f"auto_commit must be a bool, got {self.auto_commit!r}")
        check_offset_store_dir(self.local_offset_store_dir)


PULL_CONSUMER_SETTING_FIELDS: Final = frozenset(field.name for field in dataclasses.fields(PullConsumerSettings))


def check_seconds(name: str, value: object, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MQClientError(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise MQClientError(f"{name} must be {'>= 0' if allow_zero else '> 0'} seconds, got {value!r}")
    return float(value)


def check_queue(mq: object, what: str = "a message queue") -> MessageQueue:
    if not isinstance(mq, MessageQueue):
        raise MQClientError(f"{what} must be a MessageQueue, got {mq!r}")
    return mq


def check_queues(queues: object) -> set[MessageQueue]:
    if isinstance(queues, MessageQueue):
        return {queues}
    if isinstance(queues, str | bytes) or not isinstance(queues, Iterable):
        raise MQClientError(f"expected MessageQueues (an iterable), got {queues!r}")
    return {check_queue(mq) for mq in queues}


def check_offset(offset: object) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise MQClientError(f"an offset must be an int >= 0, got {offset!r}")
    return offset


__all__ = [
    "MIN_AUTO_COMMIT_INTERVAL",
    "PULL_CONSUMER_SETTING_FIELDS",
    "PullConsumerSettings",
    "check_offset",
    "check_queue",
    "check_queues",
    "check_seconds",
]
