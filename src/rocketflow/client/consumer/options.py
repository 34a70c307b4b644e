"""What a push and a pull consumer are built from: their constructor arguments, checked once for both.

`consumer_options` validates the group, message model, ``consume_from``, ``consume_timestamp`` and
allocation strategy, and splits the keyword settings between `ClientConfig` and the consumer's own
settings dataclass, whose checks share `check_int` and `check_offset_store_dir`. `ServiceState` is
the lifecycle both consumers go through.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from rocketflow.client.config import ClientConfig, check_group, split_settings
from rocketflow.client.consumer.allocate import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy
from rocketflow.client.errors import MQClientError
from rocketflow.protocol.bodies import ConsumeFromWhere, MessageModel

#: RocketMQ refuses this group name for user consumers.
DEFAULT_CONSUMER_GROUP: Final = "DEFAULT_CONSUMER"
#: Format of ``consume_timestamp`` (RocketMQ's ``UtilAll.YYYYMMDDHHMMSS``), local time.
CONSUME_TIMESTAMP_FORMAT: Final = "%Y%m%d%H%M%S"

_SettingsT = TypeVar("_SettingsT")


class ServiceState(enum.Enum):
    CREATE_JUST = "CREATE_JUST"
    RUNNING = "RUNNING"
    SHUTDOWN_ALREADY = "SHUTDOWN_ALREADY"
    START_FAILED = "START_FAILED"


def default_consume_timestamp() -> str:
    """Half an hour ago as ``yyyyMMddHHmmss`` local time (RocketMQ's default ``consumeTimestamp``)."""
    return time.strftime(CONSUME_TIMESTAMP_FORMAT, time.localtime(time.time() - 30 * 60))


def parse_consume_timestamp(text: str) -> int:
    """``yyyyMMddHHmmss`` (local time) -> epoch milliseconds; raises `MQClientError` if malformed."""
    if not isinstance(text, str) or len(text) != 14 or not text.isdigit():
        raise MQClientError(f"consume_timestamp must be 'yyyyMMddHHmmss' (14 digits), got {text!r}")
    try:
        moment = datetime.strptime(text, CONSUME_TIMESTAMP_FORMAT)
    except ValueError as exc:
        raise MQClientError(f"consume_timestamp {text!r} is not a valid time: {exc}") from None
    return int(moment.timestamp() * 1000)


def check_int(name: str, value: object, low: int, high: int) -> None:
    """Raise `MQClientError` unless the setting ``name`` is an int (not a bool) in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise MQClientError(f"{name} must be an int in {low}..{high}, got {value!r}")


def check_offset_store_dir(value: object) -> None:
    """Raise `MQClientError` unless ``local_offset_store_dir`` is None or a path."""
    if value is not None and not isinstance(value, str | Path):
        raise MQClientError(f"local_offset_store_dir must be a path, got {value!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerOptions(Generic[_SettingsT]):
    """A consumer's checked constructor arguments."""

    group: str
    client_config: ClientConfig
    message_model: MessageModel
    consume_from: ConsumeFromWhere
    #: ``yyyyMMddHHmmss`` local time, and the same as epoch milliseconds
    consume_timestamp: str
    consume_timestamp_ms: int
    allocate_strategy: AllocateMessageQueueStrategy
    settings: _SettingsT


def consumer_options(kind: str, settings_type: type[_SettingsT], group: str, namesrv: str | None, *,
                     message_model: MessageModel, consume_from: ConsumeFromWhere,
                     consume_timestamp: str | datetime | None, allocate_strategy: AllocateMessageQueueStrategy | None,
                     client_config: ClientConfig | None, settings: dict[str, Any]) -> ConsumerOptions[_SettingsT]:
    """Check a ``kind`` consumer's (``"push consumer"``, ``"pull consumer"``) arguments; ``settings`` are
    ``settings_type`` fields (a dataclass) and `ClientConfig` fields. Raises `MQClientError`."""
    check_group("consumer", group, DEFAULT_CONSUMER_GROUP)
    if not isinstance(message_model, MessageModel):
        raise MQClientError(f"message_model must be a MessageModel, got {message_model!r}")
    if not isinstance(consume_from, ConsumeFromWhere):
        raise MQClientError(f"consume_from must be a ConsumeFromWhere, got {consume_from!r}")
    if allocate_strategy is None:
        allocate_strategy = AllocateMessageQueueAveragely()
    if not callable(getattr(allocate_strategy, "allocate", None)):
        raise MQClientError(f"allocate_strategy must be an AllocateMessageQueueStrategy, got {allocate_strategy!r}")
    if consume_timestamp is None:
        consume_timestamp = default_consume_timestamp()
    elif isinstance(consume_timestamp, datetime):
        consume_timestamp = consume_timestamp.strftime(CONSUME_TIMESTAMP_FORMAT)
    consume_timestamp_ms = parse_consume_timestamp(consume_timestamp)
    config, own = split_settings(kind, settings_type, settings, namesrv, client_config)
    return ConsumerOptions(group, config, message_model, consume_from, consume_timestamp, consume_timestamp_ms,
                           allocate_strategy, own)


__all__ = [
    "CONSUME_TIMESTAMP_FORMAT",
    "DEFAULT_CONSUMER_GROUP",
    "ConsumerOptions",
    "ServiceState",
    "check_int",
    "check_offset_store_dir",
    "consumer_options",
    "default_consume_timestamp",
    "parse_consume_timestamp",
]
