"""What a push and a pull consumer are built from: their constructor arguments, checked once for both.

`consumer_options` validates the group, message model, ``consume_from``, ``consume_timestamp`` and
allocation strategy, and splits the keyword settings between `ClientConfig` and the consumer's own
settings dataclass. `ServiceState` is the lifecycle both consumers go through.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from datetime import datetime
from typing import Any, Final, Generic, TypeVar

from rocketflow.client.config import CLIENT_CONFIG_FIELDS, ClientConfig
from rocketflow.client.consumer.allocate import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy
from rocketflow.client.errors import MQClientError
from rocketflow.protocol.bodies import ConsumeFromWhere, MessageModel
from rocketflow.protocol.names import InvalidNameError, validate_group

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
    try:
        validate_group(group)
    except InvalidNameError as exc:
        raise MQClientError(f"consumer group: {exc}") from None
    if group == DEFAULT_CONSUMER_GROUP:
        raise MQClientError(f"the consumer group cannot be {DEFAULT_CONSUMER_GROUP!r}; choose another name")
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
    own_fields = frozenset(field.name for field in dataclasses.fields(settings_type))  # type: ignore[arg-type]
    unknown = set(settings) - own_fields - CLIENT_CONFIG_FIELDS
    if unknown:
        raise MQClientError(f"unknown {kind} settings {sorted(unknown)}; known: "
                            f"{sorted(own_fields | CLIENT_CONFIG_FIELDS)}")
    client_settings = {name: value for name, value in settings.items() if name in CLIENT_CONFIG_FIELDS}
    if namesrv is not None:
        client_settings["namesrv_addr"] = namesrv
    try:
        config = client_config.copy(**client_settings) if client_config is not None \
            else ClientConfig(**client_settings)
        own = settings_type(**{name: value for name, value in settings.items() if name in own_fields})
    except TypeError as exc:
        raise MQClientError(f"invalid {kind} settings: {exc}") from None
    return ConsumerOptions(group, config, message_model, consume_from, consume_timestamp, consume_timestamp_ms,
                           allocate_strategy, own)


__all__ = [
    "CONSUME_TIMESTAMP_FORMAT",
    "DEFAULT_CONSUMER_GROUP",
    "ConsumerOptions",
    "ServiceState",
    "consumer_options",
    "default_consume_timestamp",
    "parse_consume_timestamp",
]
