"""Offsets and statistics: consume progress, topic offsets, offset resets and the offset files."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from rocketflow.protocol.bodies.base import (
    ObjectReader,
    WireBody,
    as_int,
    as_map,
    as_str,
    int_key,
    queue_table,
    sorted_by_key,
)
from rocketflow.protocol.message import MessageQueue


@dataclass(slots=True)
class OffsetWrapper(WireBody):
    """Per-queue consume progress in `ConsumeStats`."""

    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lastTimestamp": self.last_timestamp,
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        return cls(
            broker_offset=reader.integer("brokerOffset", 0),
            consumer_offset=reader.integer("consumerOffset", 0),
            last_timestamp=reader.integer("lastTimestamp", 0),
        )


@dataclass(slots=True)
class ConsumeStats(WireBody):
    """GET_CONSUME_STATS response."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def compute_total_diff(self) -> int:
        """Sum of broker offset minus consumer offset over all queues (not serialised)."""
        return sum(wrapper.broker_offset - wrapper.consumer_offset for wrapper in self.offset_table.values())

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "consumeTps": float(self.consume_tps),
            "offsetTable": {queue: wrapper.to_json_dict() for queue, wrapper in sorted_by_key(self.offset_table)},
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        return cls(
            offset_table=queue_table(reader, "offsetTable", OffsetWrapper.from_json_dict),
            consume_tps=reader.number("consumeTps", 0.0),
        )


@dataclass(slots=True)
class TopicOffset(WireBody):
    """Per-queue offsets in `TopicStatsTable`."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "lastUpdateTimestamp": self.last_update_timestamp,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        return cls(
            min_offset=reader.integer("minOffset", 0),
            max_offset=reader.integer("maxOffset", 0),
            last_update_timestamp=reader.integer("lastUpdateTimestamp", 0),
        )


@dataclass(slots=True)
class TopicStatsTable(WireBody):
    """GET_TOPIC_STATS_INFO response."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"offsetTable": {queue: offset.to_json_dict() for queue, offset in sorted_by_key(self.offset_table)}}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        return cls(offset_table=queue_table(reader, "offsetTable", TopicOffset.from_json_dict))


@dataclass(slots=True)
class ResetOffsetBody(WireBody):
    """RESET_CONSUMER_CLIENT_OFFSET body: the offset each queue is reset to."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"offsetTable": dict(sorted_by_key(self.offset_table))}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        return cls(offset_table=queue_table(reader, "offsetTable", as_int))


class OffsetSerializeWrapper(ResetOffsetBody):
    """A broadcasting client's local ``offsets.json`` (same shape as `ResetOffsetBody`)."""

    __slots__ = ()


@dataclass(slots=True)
class ConsumerOffsetTable(WireBody):
    """``consumerOffset.json`` / GET_ALL_CONSUMER_OFFSET: ``"topic@group"`` -> queue id -> offset."""

    offset_table: dict[str, dict[int, int]] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"offsetTable": {key: dict(sorted_by_key(self.offset_table[key])) for key in sorted(self.offset_table)}}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        table_where = reader.at("offsetTable")
        table: dict[str, dict[int, int]] = {}
        for key, value in reader.mapping("offsetTable").items():
            name = as_str(key, table_where)
            queues_where = f"{table_where}[{name!r}]"
            queues: dict[int, int] = {}
            for queue_key, offset in as_map(value, queues_where).items():
                if offset is not None:
                    queue_id = int_key(queue_key, queues_where)
                    queues[queue_id] = as_int(offset, f"{queues_where}[{queue_id}]")
            table[name] = queues
        return cls(offset_table=table)


@dataclass(slots=True)
class DelayOffsetTable(WireBody):
    """``delayOffset.json`` / GET_ALL_DELAY_OFFSET: delay level -> offset in SCHEDULE_TOPIC_XXXX."""

    offset_table: dict[int, int] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"offsetTable": dict(sorted_by_key(self.offset_table))}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        table_where = reader.at("offsetTable")
        table: dict[int, int] = {}
        for key, value in reader.mapping("offsetTable").items():
            if value is not None:
                level = int_key(key, table_where)
                table[level] = as_int(value, f"{table_where}[{level}]")
        return cls(offset_table=table)


__all__ = [
    "ConsumeStats",
    "ConsumerOffsetTable",
    "DelayOffsetTable",
    "OffsetSerializeWrapper",
    "OffsetWrapper",
    "ResetOffsetBody",
    "TopicOffset",
    "TopicStatsTable",
]
