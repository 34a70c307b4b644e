"""The push consumer's settings (`PushConsumerSettings`, `KeyOrderedConfig`), checked on creation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rocketflow.client.consumer.consume.context import JAVA_INT_MAX
from rocketflow.client.consumer.options import check_int, check_offset_store_dir
from rocketflow.client.errors import MQClientError
from rocketflow.protocol.message import MessageExt

#: ``max_reconsume_times`` value for "retry forever" (RocketMQ's orderly default, Integer.MAX_VALUE).
MAX_RECONSUME_TIMES_UNLIMITED: Final = JAVA_INT_MAX
#: What ``max_reconsume_times=-1`` means (for both consumption modes).
DEFAULT_MAX_RECONSUME_TIMES: Final = 16


@dataclass(slots=True)
class PushConsumerSettings:
    """Push consumer settings with RocketMQ 4.9.3's defaults (seconds unless the name says millis)."""

    #: Consume threads (plain listeners) and the cap on concurrent ``async def`` listener calls. The pool
    #: grows to ``consume_thread_max``; ``consume_thread_min`` is validated only (RocketMQ's pool, fed
    #: by an unbounded queue, never grows past its minimum; both default to 20).
    consume_thread_min: int = 20
    consume_thread_max: int = 20
    #: Concurrent flow control: pause pulling a queue while its cached offsets span more than this.
    consume_concurrently_max_span: int = 2000
    #: Pause pulling a queue caching more messages than this...
    pull_threshold_for_queue: int = 1000
    #: ... or more MiB than this.
    pull_threshold_size_for_queue: int = 100
    #: When set (not -1), the per-queue thresholds become this / number of held queues.
    pull_threshold_for_topic: int = -1
    pull_threshold_size_for_topic: int = -1
    #: Pause between pulls of one queue (RocketMQ's ``pullInterval``, there in ms).
    pull_interval: float = 0.0
    consume_message_batch_max_size: int = 1
    pull_batch_size: int = 32
    post_subscription_when_pull: bool = False
    #: -1 = 16; `MAX_RECONSUME_TIMES_UNLIMITED` = never dead-letter (orderly only).
    max_reconsume_times: int = -1
    suspend_current_queue_time_millis: int = 1000
    #: A listener call this long is TIME_OUT; messages consumed this long are sent back (RocketMQ: 15 min).
    consume_timeout: float = 15 * 60.0
    #: Orderly lock renewal period and first delay (``rocketmq.client.rebalance.lockInterval``).
    lock_interval: float = 20.0
    lock_first_delay: float = 1.0
    #: Client-side life of a broker lock (``rocketmq.client.rebalance.lockMaxLiveTime``; broker: 60 s).
    lock_max_live_time: float = 30.0
    #: A queue not pulled for this long is dropped and re-added (``rocketmq.client.pull.pullMaxIdleTime``).
    pull_max_idle_time: float = 120.0
    #: Delay of an orderly queue's unlock when it still holds messages (``rocketmq.client.unlockDelayTimeMills``).
    unlock_delay_time: float = 20.0
    #: An orderly consume loop yields after this long (``rocketmq.client.maxTimeConsumeContinuously``).
    max_time_consume_continuously: float = 60.0
    #: How long `PushConsumer.shutdown` waits for running listener calls.
    shutdown_timeout: float = 30.0
    #: A fast listener's calls are made in a row for about this long (seconds; 0: one call per hand-over).
    consume_bundle_time: float = 0.001
    #: A queue paused by ``pull_threshold_for_queue`` or ``pull_threshold_size_for_queue`` is pulled again
    #: after 50 ms, as RocketMQ re-checks, or as soon as consumption has brought its cache down to this
    #: fraction of both thresholds, whichever comes first (0: the 50 ms re-check only, as RocketMQ).
    flow_control_resume_ratio: float = 0.5
    #: Root of broadcasting consumers' offset files (None: ``~/.rocketmq_offsets``).
    local_offset_store_dir: str | Path | None = None
    #: record SubBefore/SubAfter message traces (``enableMsgTrace``) to ``trace_topic``
    #: (``customizedTraceTopic``; None = RMQ_SYS_TRACE_TOPIC); see `rocketflow.client.trace`
    enable_msg_trace: bool = False
    trace_topic: str | None = None

    def __post_init__(self) -> None:
        int_ranges = {
            "consume_thread_min": (1, 1000),
            "consume_thread_max": (1, 1000),
            "consume_concurrently_max_span": (1, 65535),
            "pull_threshold_for_queue": (1, 65535),
            "pull_threshold_size_for_queue": (1, 1024),
            "consume_message_batch_max_size": (1, 1024),
            "pull_batch_size": (1, 1024),
            "suspend_current_queue_time_millis": (-1, 1 << 31),
        }
        for name, (low, high) in int_ranges.items():
            check_int(name, getattr(self, name), low, high)
        if self.consume_thread_min > self.consume_thread_max:
            raise MQClientError(f"consume_thread_min ({self.consume_thread_min}) must not exceed "
                                f"consume_thread_max ({self.consume_thread_max})")
        for name, high in (("pull_threshold_for_topic", 6_553_500), ("pull_threshold_size_for_topic", 102_400)):
            value = getattr(self, name)
            check_int(name, value, -1, high)
            if value == 0:
                raise MQClientError(f"{name} must be -1 (off) or in 1..{high}, got 0")
        max_reconsume = self.max_reconsume_times
        if isinstance(max_reconsume, bool) or not isinstance(max_reconsume, int) or not (
                max_reconsume == -1 or 0 <= max_reconsume <= JAVA_INT_MAX):
            raise MQClientError(f"max_reconsume_times must be -1 (default) or in 0..{JAVA_INT_MAX}, "
                                f"got {max_reconsume!r}")
        _check_seconds("pull_interval", self.pull_interval, 0.0, 65.535, allow_zero=True)
        _check_seconds("consume_bundle_time", self.consume_bundle_time, 0.0, 1.0, allow_zero=True)
        ratio = self.flow_control_resume_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise MQClientError(f"flow_control_resume_ratio must be a number in 0..1, got {ratio!r}")
        for name in ("consume_timeout", "lock_interval", "lock_max_live_time", "pull_max_idle_time",
                     "max_time_consume_continuously", "shutdown_timeout"):
            _check_seconds(name, getattr(self, name), 0.0, None, allow_zero=False)
        for name in ("lock_first_delay", "unlock_delay_time"):
            _check_seconds(name, getattr(self, name), 0.0, None, allow_zero=True)
        if not isinstance(self.post_subscription_when_pull, bool):
            raise MQClientError(f"post_subscription_when_pull must be a bool, got {self.post_subscription_when_pull!r}")
        check_offset_store_dir(self.local_offset_store_dir)


PUSH_CONSUMER_SETTING_FIELDS: Final = frozenset(field.name for field in dataclasses.fields(PushConsumerSettings))


def _check_seconds(name: str, value: object, low: float, high: float | None, *, allow_zero: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise MQClientError(f"{name} must be a number of seconds, got {value!r}")
    if value < low or (not allow_zero and value == 0) or (high is not None and value > high):
        bounds = f"> {low}" if not allow_zero else f">= {low}"
        if high is not None:
            bounds += f" and <= {high}"
        raise MQClientError(f"{name} must be {bounds} seconds, got {value!r}")


#: Key-ordered consumption (rocketflow's own, no RocketMQ counterpart): keys of one queue consumed at once.
DEFAULT_MAX_IN_FLIGHT_PER_QUEUE: Final = 64
MAX_IN_FLIGHT_PER_QUEUE_LIMIT: Final = 65535


@dataclass(frozen=True, slots=True)
class KeyOrderedConfig:
    """Settings of key-ordered consumption (`PushConsumer.register_key_ordered_listener`).

    ``key``: ``fn(MessageExt) -> str`` naming a message's ordering key (None: the sharding key,
    else the first of KEYS, else no ordering); ``max_in_flight_per_queue``: how many keys of one
    queue may be consumed at the same time.
    """

    key: Callable[[MessageExt], str] | None = None
    max_in_flight_per_queue: int = DEFAULT_MAX_IN_FLIGHT_PER_QUEUE

    def __post_init__(self) -> None:
        if self.key is not None and not callable(self.key):
            raise MQClientError(f"key must be a callable(MessageExt) -> str or None, got {self.key!r}")
        limit = self.max_in_flight_per_queue
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_IN_FLIGHT_PER_QUEUE_LIMIT:
            raise MQClientError(f"max_in_flight_per_queue must be an int in 1..{MAX_IN_FLIGHT_PER_QUEUE_LIMIT}, "
                                f"got {limit!r}")


__all__ = [
    "DEFAULT_MAX_IN_FLIGHT_PER_QUEUE",
    "DEFAULT_MAX_RECONSUME_TIMES",
    "MAX_IN_FLIGHT_PER_QUEUE_LIMIT",
    "MAX_RECONSUME_TIMES_UNLIMITED",
    "PUSH_CONSUMER_SETTING_FIELDS",
    "KeyOrderedConfig",
    "PushConsumerSettings",
]
