"""What the admin API returns and takes: result rows, timestamps, topic kinds, queue layout warnings."""

from __future__ import annotations

import itertools
import logging
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from rocketflow.client.errors import MQClientError
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import (
    InvalidNameError,
    PermName,
    is_dlq_topic,
    is_retry_topic,
    is_system_topic,
    validate_group,
    validate_topic,
)
from rocketflow.remoting.command import ROCKETMQ_VERSION

logger = logging.getLogger(__name__)

#: The group the admin tools pull and query as (RocketMQ's ``MixAll.TOOLS_CONSUMER_GROUP``).
TOOLS_CONSUMER_GROUP: Final = "TOOLS_CONSUMER"
#: The producer group of `Admin.send`.
ADMIN_PRODUCER_GROUP: Final = "rocketflow_admin_producer"
#: Name-server KV namespace of ordered topics' ``brokerName:queueNums;...`` configuration.
ORDER_TOPIC_CONFIG_NAMESPACE: Final = "ORDER_TOPIC_CONFIG"
#: ``reset_offset`` timestamps with a special meaning: the first retained message / the end of each queue.
EARLIEST: Final = 0
LATEST: Final = -1
#: mqadmin's defaults for new topics and for message queries.
DEFAULT_QUEUE_NUMS: Final = 8
DEFAULT_PERM: Final = int(PermName.READ | PermName.WRITE)
#: the message types of RocketMQ 5's topics (``create_topic(message_type=...)``)
MESSAGE_TYPES: Final = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")
DEFAULT_QUERY_MAX_NUM: Final = 64
MASTER_ID: Final = 0

instance_counter = itertools.count(1)




@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One broker address of the cluster and what its GET_BROKER_RUNTIME_INFO says (``error`` if it failed)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    version: str = ""
    put_tps: float = 0.0
    get_tps: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """GET_TOPIC_STATS_INFO of one queue (``last_update_timestamp``: store time of its last message, ms)."""

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """A consumer group's progress on one queue."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    client_id: str
    last_timestamp: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


@dataclass(frozen=True, slots=True)
class ConsumerProgress:
    """A consumer group's progress on every queue it has offsets for, with its consume TPS."""

    group: str
    queues: list[QueueProgress] = field(default_factory=list)
    consume_tps: float = 0.0

    @property
    def total_lag(self) -> int:
        return sum(queue.lag for queue in self.queues)

    @property
    def broker_offset_total(self) -> int:
        return sum(queue.broker_offset for queue in self.queues)

    @property
    def consumer_offset_total(self) -> int:
        return sum(queue.consumer_offset for queue in self.queues)





def parse_timestamp(text: str) -> int:
    """Epoch milliseconds of ``text``: an integer (ms), ``now`` or an ISO 8601 time (local time if no zone).

    Raises `MQClientError` naming the accepted forms.
    """
    value = text.strip()
    if value.lower() == "now":
        return time.time_ns() // 1_000_000
    if value.lstrip("-").isdigit():
        millis = int(value)
        if millis < 0:
            raise MQClientError(f"a timestamp cannot be negative, got {text!r}")
        return millis
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise MQClientError(f"invalid timestamp {text!r}: expected epoch milliseconds, 'now' or an ISO 8601 time "
                            "such as 2024-05-01T12:00:00") from None
    return int(moment.timestamp() * 1000)


def format_timestamp(millis: int) -> str:
    """``millis`` as local ``YYYY-MM-DD HH:MM:SS.mmm`` ("" for 0 or less)."""
    if millis <= 0:
        return ""
    moment = datetime.fromtimestamp(millis / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{millis % 1000:03d}"


def version_desc(version: int) -> str:
    """A remoting version for humans (RocketMQ's ``MQVersion`` ordinal; 399 is V4_9_3)."""
    if version == ROCKETMQ_VERSION:
        return "V4_9_3"
    return str(version)


def first_number(text: str | None) -> float:
    """A runtime-info rate: Java brokers report three windows ("10s 60s 600s"); the first one."""
    if not text:
        return 0.0
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return 0.0


def check_topic(topic: str) -> None:
    try:
        validate_topic(topic)
    except InvalidNameError as exc:
        raise MQClientError(str(exc)) from None


def check_group(group: str) -> None:
    try:
        validate_group(group)
    except InvalidNameError as exc:
        raise MQClientError(str(exc)) from None


class QueueLayoutWarning(UserWarning):
    """A topic was given more write queues than read queues: what is sent to the extra queues is read by
    no consumer (nor Spark query) until the read queues follow."""


def warn_queue_layout(topic: str, read_queue_nums: int, write_queue_nums: int, where: str = "") -> None:
    """Warn (`QueueLayoutWarning`) when ``write_queue_nums`` exceeds ``read_queue_nums``."""
    if write_queue_nums > read_queue_nums:
        warnings.warn(QueueLayoutWarning(
            f"topic {topic} has {write_queue_nums} write queues but {read_queue_nums} read queues{where}: "
            f"messages sent to queues {read_queue_nums}-{write_queue_nums - 1} are not consumed until the read "
            f"queues follow (topic update {topic} --read-queues {write_queue_nums}). Grow a topic by raising "
            "its read queues first, shrink it by lowering its write queues first."), stacklevel=3)


def topic_kind(topic: str, reserved: frozenset[str] | set[str] = frozenset()) -> str:
    """``retry``, ``dlq``, ``system`` or ``normal``; ``reserved`` names (the cluster and broker names,
    which brokers register as topics) count as system topics."""
    if is_retry_topic(topic):
        return "retry"
    if is_dlq_topic(topic):
        return "dlq"
    if is_system_topic(topic) or topic in reserved:
        return "system"
    return "normal"


__all__ = [
    "ADMIN_PRODUCER_GROUP",
    "DEFAULT_PERM",
    "DEFAULT_QUERY_MAX_NUM",
    "DEFAULT_QUEUE_NUMS",
    "EARLIEST",
    "LATEST",
    "MASTER_ID",
    "MESSAGE_TYPES",
    "ORDER_TOPIC_CONFIG_NAMESPACE",
    "TOOLS_CONSUMER_GROUP",
    "BrokerStatus",
    "ConsumerProgress",
    "QueueLayoutWarning",
    "QueueProgress",
    "QueueStats",
    "check_group",
    "check_topic",
    "first_number",
    "format_timestamp",
    "instance_counter",
    "parse_timestamp",
    "topic_kind",
    "version_desc",
    "warn_queue_layout",
]
