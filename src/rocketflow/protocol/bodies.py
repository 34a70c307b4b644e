"""Command bodies of RocketMQ 4.9.3's protocol as dataclasses (PROTOCOL.md sections 2.3, 4.1 and 5).

Every body has ``encode()`` (fastjson's dialect: bean keys sorted, nulls omitted, enums as names,
numeric and MessageQueue map keys bare) and ``decode(data)``. Decoding is lenient like fastjson:
unknown keys are ignored, missing ones take Java's defaults, numbers may arrive as strings and
enums as names or ordinals (the C++ client sends ordinals). A body of the wrong shape raises
`BodyDecodeError` saying where, never another exception type.

Enum ordinals follow the 4.9.3 Java declarations (verified against the source of
``common/consumer/ConsumeFromWhere.java``, ``ConsumeType`` and ``MessageModel``):
``ConsumeType``: CONSUME_ACTIVELY 0, CONSUME_PASSIVELY 1; ``MessageModel``: BROADCASTING 0,
CLUSTERING 1; ``ConsumeFromWhere``: CONSUME_FROM_LAST_OFFSET 0,
CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST 1, CONSUME_FROM_MIN_OFFSET 2,
CONSUME_FROM_MAX_OFFSET 3, CONSUME_FROM_FIRST_OFFSET 4, CONSUME_FROM_TIMESTAMP 5. The C++ client's
enums use the same numbering.
"""

from __future__ import annotations

import re
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Self, TypeVar

from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting import fastjson
from rocketflow.remoting.codes import LanguageCode
from rocketflow.remoting.errors import BodyDecodeError
from rocketflow.remoting.fastjson import ObjectKey

#: PermName READ | WRITE: the default permission of a topic (PermName lives in protocol/names).
_PERM_READ_WRITE: Final = 6
#: Decompressed size limit for a compressed REGISTER_BROKER body (guards against zlib bombs).
MAX_DECOMPRESSED_REGISTER_BODY: Final = 64 * 1024 * 1024

_I32 = struct.Struct(">i")
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_EnumT = TypeVar("_EnumT", bound=Enum)


def now_millis() -> int:
    """Java's ``System.currentTimeMillis()``."""
    return time.time_ns() // 1_000_000


def register_body_crc32(body: bytes) -> int:
    """The ``bodyCrc32`` ext field of REGISTER_BROKER: CRC32 of the body, masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


# =========================================================================== enums


class ConsumeType(Enum):
    """How a consumer gets messages (pull/lite-pull consumers are ACTIVELY, push is PASSIVELY)."""

    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"


class MessageModel(Enum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(Enum):
    """Where a new consumer group starts. Declaration order = Java ordinals (the C++ client sends those)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class TopicFilterType(Enum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


# =========================================================================== lenient readers


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | ObjectKey):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"string {shown!r}"
    return f"{type(value).__name__} {value!r}"


def _as_str(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise BodyDecodeError(f"{where}: expected a string, got {_describe(value)}")


def _as_int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise BodyDecodeError(f"{where}: expected an integer, got {_describe(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        return int(value.strip())
    raise BodyDecodeError(f"{where}: expected an integer, got {_describe(value)}")


def _as_float(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise BodyDecodeError(f"{where}: expected a number, got {_describe(value)}")


def _as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    raise BodyDecodeError(f"{where}: expected a boolean, got {_describe(value)}")


def _as_enum(enum_type: type[_EnumT], value: Any, where: str) -> _EnumT:
    """An enum from its name or its Java ordinal (as a number or a numeric string)."""
    if isinstance(value, enum_type):
        return value
    ordinal: int | None = None
    if isinstance(value, str):
        name = value.strip()
        if name in enum_type.__members__:
            return enum_type[name]
        if name.isdigit():
            ordinal = int(name)
    elif isinstance(value, int) and not isinstance(value, bool):
        ordinal = value
    if ordinal is not None:
        members = list(enum_type)
        if 0 <= ordinal < len(members):
            return members[ordinal]
    raise BodyDecodeError(f"{where}: not a {enum_type.__name__} name or ordinal: {_describe(value)}")


def _as_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise BodyDecodeError(f"{where}: expected an array, got {_describe(value)}")


def _as_map(value: Any, where: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise BodyDecodeError(f"{where}: expected an object, got {_describe(value)}")


def _int_key(key: Any, where: str) -> int:
    if isinstance(key, int | str) and not isinstance(key, bool):
        try:
            return _as_int(key, where)
        except BodyDecodeError:
            pass
    raise BodyDecodeError(f"{where}: expected an integer map key, got {_describe(key)}")


def _message_queue(value: Any, where: str) -> MessageQueue:
    if isinstance(value, MessageQueue):
        return value
    if isinstance(value, ObjectKey):
        value = value.as_dict()
    reader = _Object(value, where)
    return MessageQueue(
        topic=reader.string("topic", ""),
        broker_name=reader.string("brokerName", ""),
        queue_id=reader.integer("queueId", 0),
    )


def _message_queue_key(key: Any, where: str) -> MessageQueue:
    """A MessageQueue map key: fastjson's raw-object key, or (from other writers) its JSON text."""
    if isinstance(key, str):
        try:
            key = fastjson.loads(key)
        except BodyDecodeError:
            raise BodyDecodeError(f"{where}: map key {key!r} is not a MessageQueue") from None
    if isinstance(key, ObjectKey | dict):
        return _message_queue(key, where)
    raise BodyDecodeError(f"{where}: expected a MessageQueue map key, got {_describe(key)}")


class _Object:
    """Typed, path-aware access to one decoded JSON object."""

    __slots__ = ("data", "where")

    def __init__(self, data: Any, where: str) -> None:
        if isinstance(data, ObjectKey):
            data = data.as_dict()
        if not isinstance(data, dict):
            raise BodyDecodeError(f"{where}: expected an object, got {_describe(data)}")
        self.data: dict[Any, Any] = data
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def raw(self, key: str) -> Any:
        return self.data.get(key)

    def string(self, key: str, default: str) -> str:
        value = self.data.get(key)
        return default if value is None else _as_str(value, self.at(key))

    def optional_string(self, key: str) -> str | None:
        value = self.data.get(key)
        return None if value is None else _as_str(value, self.at(key))

    def integer(self, key: str, default: int) -> int:
        value = self.data.get(key)
        return default if value is None else _as_int(value, self.at(key))

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key)
        return default if value is None else _as_float(value, self.at(key))

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        return default if value is None else _as_bool(value, self.at(key))

    def enum(self, enum_type: type[_EnumT], key: str, default: _EnumT) -> _EnumT:
        value = self.data.get(key)
        return default if value is None else _as_enum(enum_type, value, self.at(key))

    def array(self, key: str) -> list[Any]:
        return _as_list(self.data.get(key), self.at(key))

    def mapping(self, key: str) -> dict[Any, Any]:
        return _as_map(self.data.get(key), self.at(key))

    def strings(self, key: str) -> list[str]:
        where = self.at(key)
        return [_as_str(item, f"{where}[{index}]") for index, item in enumerate(self.array(key))]

    def objects(self, key: str) -> list[tuple[Any, str]]:
        """Array items with their paths (for nested `from_json_dict` calls)."""
        where = self.at(key)
        return [(item, f"{where}[{index}]") for index, item in enumerate(self.array(key))]


def _bean(values: Mapping[str, Any]) -> dict[str, Any]:
    """A JavaBean as fastjson writes it: keys sorted, null fields left out."""
    return {key: values[key] for key in sorted(values) if values[key] is not None}


# =========================================================================== base


class WireBody:
    """Base of the JSON bodies: `encode`/`decode` in terms of `to_json_dict`/`from_json_dict`."""

    __slots__ = ()

    def to_json_dict(self) -> dict[str, Any]:
        """The fastjson-shaped structure (may hold int, MessageQueue and ObjectKey map keys)."""
        raise NotImplementedError

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        """Build from a decoded JSON object; ``where`` names it in error messages."""
        raise NotImplementedError

    def encode(self, *, pretty: bool = False) -> bytes:
        """fastjson bytes; ``pretty`` gives the TAB-indented form of the broker's config files."""
        return fastjson.dumps(self.to_json_dict(), pretty=pretty)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse a body; any malformation raises `BodyDecodeError`."""
        if not data:
            raise BodyDecodeError(f"{cls.__name__}: empty body")
        try:
            parsed = fastjson.loads(data)
        except BodyDecodeError as exc:
            raise BodyDecodeError(f"{cls.__name__}: {exc}") from None
        return cls.from_json_dict(parsed, cls.__name__)


# =========================================================================== topics and routes


@dataclass(slots=True)
class DataVersion(WireBody):
    """Version stamp of a broker's topic (or subscription-group) table."""

    timestamp: int = field(default_factory=now_millis)
    counter: int = 0

    def next_version(self) -> None:
        """Java's ``nextVersion()``: bump the counter, refresh the timestamp."""
        self.counter += 1
        self.timestamp = now_millis()

    def assign_from(self, other: DataVersion) -> None:
        self.timestamp = other.timestamp
        self.counter = other.counter

    def to_json_dict(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(timestamp=reader.integer("timestamp", 0), counter=reader.integer("counter", 0))


@dataclass(slots=True)
class TopicConfig(WireBody):
    """One topic on one broker. Defaults as Java's: 16/16 queues, perm READ|WRITE, SINGLE_TAG."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = _PERM_READ_WRITE
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5's topic attributes (``message.type``: NORMAL, FIFO, DELAY or TRANSACTION); written only
    #: when there are some, so 4.x peers see the 4.x shape
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return _bean(
            {
                "attributes": dict(sorted(self.attributes.items())) if self.attributes else None,
                "order": self.order,
                "perm": self.perm,
                "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type.name,
                "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums,
            }
        )

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            topic_name=reader.string("topicName", ""),
            read_queue_nums=reader.integer("readQueueNums", 16),
            write_queue_nums=reader.integer("writeQueueNums", 16),
            perm=reader.integer("perm", _PERM_READ_WRITE),
            topic_filter_type=reader.enum(TopicFilterType, "topicFilterType", TopicFilterType.SINGLE_TAG),
            topic_sys_flag=reader.integer("topicSysFlag", 0),
            order=reader.boolean("order", False),
            attributes={str(key): str(value) for key, value in reader.mapping("attributes").items()}
            if reader.data.get("attributes") is not None else {},
        )

    def encode_text(self) -> str:
        """Java's ``TopicConfig.encode()`` (compressed REGISTER_BROKER): ``"name read write perm TYPE"``."""
        return (
            f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} "
            f"{self.topic_filter_type.name}"
        )

    @classmethod
    def decode_text(cls, text: str, where: str | None = None) -> Self:
        """Inverse of `encode_text` (topicSysFlag and order are not carried: they come back 0/false)."""
        where = where or cls.__name__
        parts = text.split(" ")
        if len(parts) != 5:
            raise BodyDecodeError(f"{where}: expected 5 space-separated fields, got {text!r}")
        name, read, write, perm, filter_type = parts
        return cls(
            topic_name=name,
            read_queue_nums=_as_int(read, f"{where}.readQueueNums"),
            write_queue_nums=_as_int(write, f"{where}.writeQueueNums"),
            perm=_as_int(perm, f"{where}.perm"),
            topic_filter_type=_as_enum(TopicFilterType, filter_type, f"{where}.topicFilterType"),
        )


@dataclass(slots=True)
class TopicConfigSerializeWrapper(WireBody):
    """A broker's topic table: ``topics.json`` and the GET_ALL_TOPIC_CONFIG body."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json_dict(),
            "topicConfigTable": {
                name: self.topic_config_table[name].to_json_dict() for name in sorted(self.topic_config_table)
            },
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        table: dict[str, TopicConfig] = {}
        table_where = reader.at("topicConfigTable")
        for name, value in reader.mapping("topicConfigTable").items():
            key = _as_str(name, table_where)
            if value is None:
                continue
            config = TopicConfig.from_json_dict(value, f"{table_where}[{key!r}]")
            if not config.topic_name:
                config.topic_name = key
            table[key] = config
        version = reader.raw("dataVersion")
        return cls(
            topic_config_table=table,
            data_version=DataVersion()
            if version is None
            else DataVersion.from_json_dict(version, reader.at("dataVersion")),
        )


@dataclass(slots=True)
class RegisterBrokerBody(WireBody):
    """REGISTER_BROKER body: the broker's topics plus its filter servers (JSON or compressed form)."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "filterServerList": list(self.filter_server_list),
            "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_json_dict(),
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        wrapper = reader.raw("topicConfigSerializeWrapper")
        return cls(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper()
            if wrapper is None
            else TopicConfigSerializeWrapper.from_json_dict(wrapper, reader.at("topicConfigSerializeWrapper")),
            filter_server_list=reader.strings("filterServerList"),
        )

    def encode_compressed(self) -> bytes:
        """The ``compressed=true`` form: deflate(level 9) of length-prefixed DataVersion JSON, topic
        count, each topic's `TopicConfig.encode_text`, and the filter-server list JSON."""
        wrapper = self.topic_config_serialize_wrapper
        parts: list[bytes] = []

        def chunk(payload: bytes) -> None:
            parts.append(_I32.pack(len(payload)))
            parts.append(payload)

        chunk(wrapper.data_version.encode())
        parts.append(_I32.pack(len(wrapper.topic_config_table)))
        for name in sorted(wrapper.topic_config_table):
            chunk(wrapper.topic_config_table[name].encode_text().encode("utf-8"))
        chunk(fastjson.dumps(list(self.filter_server_list)))
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode_compressed(cls, data: bytes | bytearray | memoryview) -> Self:
        """Inverse of `encode_compressed`; malformed or oversized input raises `BodyDecodeError`."""
        where = f"{cls.__name__} (compressed)"
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(bytes(data), MAX_DECOMPRESSED_REGISTER_BODY)
        except zlib.error as exc:
            raise BodyDecodeError(f"{where}: not a zlib stream ({exc})") from None
        if inflater.unconsumed_tail:
            raise BodyDecodeError(f"{where}: inflates to more than {MAX_DECOMPRESSED_REGISTER_BODY} bytes")
        if not inflater.eof:
            raise BodyDecodeError(f"{where}: truncated zlib stream")
        reader = _BinaryReader(raw, where)
        data_version = DataVersion.from_json_dict(
            _load_json(reader.chunk("dataVersion"), f"{where}.dataVersion"), f"{where}.dataVersion"
        )
        count = reader.int32("topic count")
        if count < 0:
            raise BodyDecodeError(f"{where}: negative topic count {count}")
        table: dict[str, TopicConfig] = {}
        for index in range(count):
            text = reader.text(f"topic config {index}")
            config = TopicConfig.decode_text(text, f"{where}.topicConfig[{index}]")
            table[config.topic_name] = config
        filter_where = f"{where}.filterServerList"
        filter_list = _load_json(reader.chunk("filterServerList"), filter_where)
        servers = [_as_str(item, f"{filter_where}[{i}]") for i, item in enumerate(_as_list(filter_list, filter_where))]
        return cls(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper(table, data_version),
            filter_server_list=servers,
        )


def _load_json(payload: bytes, where: str) -> Any:
    if not payload:
        raise BodyDecodeError(f"{where}: empty JSON")
    try:
        return fastjson.loads(payload)
    except BodyDecodeError as exc:
        raise BodyDecodeError(f"{where}: {exc}") from None


class _BinaryReader:
    __slots__ = ("data", "pos", "where")

    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.pos = 0
        self.where = where

    def int32(self, what: str) -> int:
        if len(self.data) - self.pos < 4:
            raise BodyDecodeError(f"{self.where}: truncated before the {what} length at byte {self.pos}")
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def chunk(self, what: str) -> bytes:
        length = self.int32(what)
        if length < 0 or length > len(self.data) - self.pos:
            raise BodyDecodeError(f"{self.where}: {what} length {length} at byte {self.pos - 4} is out of range")
        payload = self.data[self.pos : self.pos + length]
        self.pos += length
        return payload

    def text(self, what: str) -> str:
        payload = self.chunk(what)
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError:
            raise BodyDecodeError(f"{self.where}: {what} is not valid UTF-8") from None


@dataclass(slots=True)
class QueueData(WireBody):
    """One broker's queues of a topic, as the name server routes them."""

    broker_name: str
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = _PERM_READ_WRITE
    topic_sys_flag: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            broker_name=reader.string("brokerName", ""),
            read_queue_nums=reader.integer("readQueueNums", 0),
            write_queue_nums=reader.integer("writeQueueNums", 0),
            perm=reader.integer("perm", 0),
            topic_sys_flag=reader.integer("topicSysFlag", 0),
        )


@dataclass(slots=True)
class BrokerData(WireBody):
    """A broker name's addresses by broker id (0 = master, 1+ = slaves)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)

    def select_broker_addr(self) -> str | None:
        """The master's address, else the lowest-numbered slave's (Java picks a random one)."""
        if 0 in self.broker_addrs:
            return self.broker_addrs[0]
        return self.broker_addrs[min(self.broker_addrs)] if self.broker_addrs else None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {broker_id: self.broker_addrs[broker_id] for broker_id in sorted(self.broker_addrs)},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        addrs_where = reader.at("brokerAddrs")
        addrs: dict[int, str] = {}
        for key, value in reader.mapping("brokerAddrs").items():
            if value is not None:
                broker_id = _int_key(key, addrs_where)
                addrs[broker_id] = _as_str(value, f"{addrs_where}[{broker_id}]")
        return cls(
            cluster=reader.string("cluster", ""),
            broker_name=reader.string("brokerName", ""),
            broker_addrs=addrs,
        )


@dataclass(slots=True)
class TopicRouteData(WireBody):
    """GET_ROUTEINFO_BY_TOPIC response body (PROTOCOL.md 5.5)."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return _bean(
            {
                "brokerDatas": [broker.to_json_dict() for broker in self.broker_datas],
                "filterServerTable": {
                    addr: list(self.filter_server_table[addr]) for addr in sorted(self.filter_server_table)
                },
                "orderTopicConf": self.order_topic_conf,
                "queueDatas": [queue.to_json_dict() for queue in self.queue_datas],
            }
        )

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        table_where = reader.at("filterServerTable")
        table: dict[str, list[str]] = {}
        for key, value in reader.mapping("filterServerTable").items():
            addr = _as_str(key, table_where)
            items_where = f"{table_where}[{addr!r}]"
            table[addr] = [_as_str(item, items_where) for item in _as_list(value, items_where)]
        return cls(
            queue_datas=[QueueData.from_json_dict(item, path) for item, path in reader.objects("queueDatas")],
            broker_datas=[BrokerData.from_json_dict(item, path) for item, path in reader.objects("brokerDatas")],
            filter_server_table=table,
            order_topic_conf=reader.optional_string("orderTopicConf"),
        )


@dataclass(slots=True)
class ClusterInfo(WireBody):
    """GET_BROKER_CLUSTER_INFO response body."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {
                name: self.broker_addr_table[name].to_json_dict() for name in sorted(self.broker_addr_table)
            },
            "clusterAddrTable": {
                cluster: sorted(self.cluster_addr_table[cluster]) for cluster in sorted(self.cluster_addr_table)
            },
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        brokers_where = reader.at("brokerAddrTable")
        brokers: dict[str, BrokerData] = {}
        for key, value in reader.mapping("brokerAddrTable").items():
            name = _as_str(key, brokers_where)
            if value is not None:
                brokers[name] = BrokerData.from_json_dict(value, f"{brokers_where}[{name!r}]")
        clusters_where = reader.at("clusterAddrTable")
        clusters: dict[str, set[str]] = {}
        for key, value in reader.mapping("clusterAddrTable").items():
            cluster = _as_str(key, clusters_where)
            names_where = f"{clusters_where}[{cluster!r}]"
            clusters[cluster] = {_as_str(item, names_where) for item in _as_list(value, names_where)}
        return cls(broker_addr_table=brokers, cluster_addr_table=clusters)


@dataclass(slots=True)
class TopicList(WireBody):
    """A set of topic names (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER, ...)."""

    topic_list: set[str] = field(default_factory=set)
    broker_addr: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return _bean({"brokerAddr": self.broker_addr, "topicList": sorted(self.topic_list)})

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(topic_list=set(reader.strings("topicList")), broker_addr=reader.optional_string("brokerAddr"))


@dataclass(slots=True)
class KVTable(WireBody):
    """A string-to-string table (name-server KV config, REGISTER_BROKER response)."""

    table: dict[str, str] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"table": {key: self.table[key] for key in sorted(self.table)}}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        table_where = reader.at("table")
        table: dict[str, str] = {}
        for key, value in reader.mapping("table").items():
            if value is not None:
                name = _as_str(key, table_where)
                table[name] = _as_str(value, f"{table_where}[{name!r}]")
        return cls(table=table)


# =========================================================================== clients (heartbeat, locks)


@dataclass(slots=True)
class SubscriptionData(WireBody):
    """One topic subscription of a consumer group (``subString`` like ``"TagA || TagB"`` or ``"*"``)."""

    topic: str
    sub_string: str = "*"
    tags_set: set[str] = field(default_factory=set)
    code_set: set[int] = field(default_factory=set)
    sub_version: int = field(default_factory=now_millis)
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags_set),
            "topic": self.topic,
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        codes_where = reader.at("codeSet")
        sub_version = reader.raw("subVersion")
        return cls(
            topic=reader.string("topic", ""),
            sub_string=reader.string("subString", "*"),
            tags_set=set(reader.strings("tagsSet")),
            code_set={_as_int(code, codes_where) for code in reader.array("codeSet")},
            sub_version=now_millis() if sub_version is None else _as_int(sub_version, reader.at("subVersion")),
            expression_type=reader.string("expressionType", "TAG"),
            class_filter_mode=reader.boolean("classFilterMode", False),
        )


@dataclass(slots=True)
class ConsumerData(WireBody):
    """A consumer group as announced in a heartbeat."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where.name,
            "consumeType": self.consume_type.name,
            "groupName": self.group_name,
            "messageModel": self.message_model.name,
            "subscriptionDataSet": [sub.to_json_dict() for sub in self.subscription_data_set],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            group_name=reader.string("groupName", ""),
            consume_type=reader.enum(ConsumeType, "consumeType", ConsumeType.CONSUME_PASSIVELY),
            message_model=reader.enum(MessageModel, "messageModel", MessageModel.CLUSTERING),
            consume_from_where=reader.enum(
                ConsumeFromWhere, "consumeFromWhere", ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
            ),
            subscription_data_set=[
                SubscriptionData.from_json_dict(item, path) for item, path in reader.objects("subscriptionDataSet")
            ],
            unit_mode=reader.boolean("unitMode", False),
        )


@dataclass(slots=True)
class ProducerData(WireBody):
    group_name: str

    def to_json_dict(self) -> dict[str, Any]:
        return {"groupName": self.group_name}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        return cls(group_name=_Object(data, where or cls.__name__).string("groupName", ""))


@dataclass(slots=True)
class HeartbeatData(WireBody):
    """HEART_BEAT body (PROTOCOL.md 5.1)."""

    client_id: str
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "consumerDataSet": [consumer.to_json_dict() for consumer in self.consumer_data_set],
            "producerDataSet": [producer.to_json_dict() for producer in self.producer_data_set],
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            client_id=reader.string("clientID", ""),
            producer_data_set=[
                ProducerData.from_json_dict(item, path) for item, path in reader.objects("producerDataSet")
            ],
            consumer_data_set=[
                ConsumerData.from_json_dict(item, path) for item, path in reader.objects("consumerDataSet")
            ],
        )


def _queue_set(reader: _Object, key: str) -> set[MessageQueue]:
    return {_message_queue(item, path) for item, path in reader.objects(key)}


@dataclass(slots=True)
class LockBatchRequestBody(WireBody):
    """LOCK_BATCH_MQ body (PROTOCOL.md 5.2)."""

    consumer_group: str
    client_id: str
    mq_set: set[MessageQueue] = field(default_factory=set)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "mqSet": sorted(self.mq_set),
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            consumer_group=reader.string("consumerGroup", ""),
            client_id=reader.string("clientId", ""),
            mq_set=_queue_set(reader, "mqSet"),
        )


@dataclass(slots=True)
class UnlockBatchRequestBody(WireBody):
    """UNLOCK_BATCH_MQ body."""

    consumer_group: str
    client_id: str
    mq_set: set[MessageQueue] = field(default_factory=set)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "mqSet": sorted(self.mq_set),
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            consumer_group=reader.string("consumerGroup", ""),
            client_id=reader.string("clientId", ""),
            mq_set=_queue_set(reader, "mqSet"),
        )


@dataclass(slots=True)
class LockBatchResponseBody(WireBody):
    """LOCK_BATCH_MQ response: the queues now locked by the caller."""

    lock_ok_mq_set: set[MessageQueue] = field(default_factory=set)

    def to_json_dict(self) -> dict[str, Any]:
        return {"lockOKMQSet": sorted(self.lock_ok_mq_set)}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        return cls(lock_ok_mq_set=_queue_set(_Object(data, where or cls.__name__), "lockOKMQSet"))


@dataclass(slots=True)
class ConsumerListBody(WireBody):
    """GET_CONSUMER_LIST_BY_GROUP response: client ids of the group's live consumers."""

    consumer_id_list: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {"consumerIdList": list(self.consumer_id_list)}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        return cls(consumer_id_list=_Object(data, where or cls.__name__).strings("consumerIdList"))


@dataclass(slots=True)
class CheckClientRequestBody(WireBody):
    """CHECK_CLIENT_CONFIG body."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return _bean(
            {
                "clientId": self.client_id,
                "group": self.group,
                "subscriptionData": None if self.subscription_data is None else self.subscription_data.to_json_dict(),
            }
        )

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        subscription = reader.raw("subscriptionData")
        return cls(
            client_id=reader.string("clientId", ""),
            group=reader.string("group", ""),
            subscription_data=None
            if subscription is None
            else SubscriptionData.from_json_dict(subscription, reader.at("subscriptionData")),
        )


# =========================================================================== offsets and stats


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
        reader = _Object(data, where or cls.__name__)
        return cls(
            broker_offset=reader.integer("brokerOffset", 0),
            consumer_offset=reader.integer("consumerOffset", 0),
            last_timestamp=reader.integer("lastTimestamp", 0),
        )


_ValueT = TypeVar("_ValueT")


def _queue_table(reader: _Object, key: str, convert: Callable[[Any, str], _ValueT]) -> dict[MessageQueue, _ValueT]:
    """A map keyed by MessageQueue, each value passed through ``convert(value, where)``."""
    table_where = reader.at(key)
    result: dict[MessageQueue, _ValueT] = {}
    for raw_key, value in reader.mapping(key).items():
        queue = _message_queue_key(raw_key, table_where)
        if value is not None:
            result[queue] = convert(value, f"{table_where}[{queue}]")
    return result


def _sorted_by_key(table: Mapping[Any, _ValueT]) -> Iterable[tuple[Any, _ValueT]]:
    return sorted(table.items(), key=lambda item: item[0])


@dataclass(slots=True)
class ConsumeStats(WireBody):
    """GET_CONSUME_STATS response (PROTOCOL.md 5.4)."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def compute_total_diff(self) -> int:
        """Sum of broker offset minus consumer offset over all queues (not serialised)."""
        return sum(wrapper.broker_offset - wrapper.consumer_offset for wrapper in self.offset_table.values())

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "consumeTps": float(self.consume_tps),
            "offsetTable": {queue: wrapper.to_json_dict() for queue, wrapper in _sorted_by_key(self.offset_table)},
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            offset_table=_queue_table(reader, "offsetTable", OffsetWrapper.from_json_dict),
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
        reader = _Object(data, where or cls.__name__)
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
        return {"offsetTable": {queue: offset.to_json_dict() for queue, offset in _sorted_by_key(self.offset_table)}}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(offset_table=_queue_table(reader, "offsetTable", TopicOffset.from_json_dict))


@dataclass(slots=True)
class ResetOffsetBody(WireBody):
    """RESET_CONSUMER_CLIENT_OFFSET body: the offset each queue is reset to."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"offsetTable": dict(_sorted_by_key(self.offset_table))}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(offset_table=_queue_table(reader, "offsetTable", _as_int))


class OffsetSerializeWrapper(ResetOffsetBody):
    """A broadcasting client's local ``offsets.json`` (same shape as `ResetOffsetBody`)."""

    __slots__ = ()


@dataclass(slots=True)
class ConsumerOffsetTable(WireBody):
    """``consumerOffset.json`` / GET_ALL_CONSUMER_OFFSET: ``"topic@group"`` -> queue id -> offset."""

    offset_table: dict[str, dict[int, int]] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"offsetTable": {key: dict(_sorted_by_key(self.offset_table[key])) for key in sorted(self.offset_table)}}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        table_where = reader.at("offsetTable")
        table: dict[str, dict[int, int]] = {}
        for key, value in reader.mapping("offsetTable").items():
            name = _as_str(key, table_where)
            queues_where = f"{table_where}[{name!r}]"
            queues: dict[int, int] = {}
            for queue_key, offset in _as_map(value, queues_where).items():
                if offset is not None:
                    queue_id = _int_key(queue_key, queues_where)
                    queues[queue_id] = _as_int(offset, f"{queues_where}[{queue_id}]")
            table[name] = queues
        return cls(offset_table=table)


@dataclass(slots=True)
class DelayOffsetTable(WireBody):
    """``delayOffset.json`` / GET_ALL_DELAY_OFFSET: delay level -> offset in SCHEDULE_TOPIC_XXXX."""

    offset_table: dict[int, int] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"offsetTable": dict(_sorted_by_key(self.offset_table))}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        table_where = reader.at("offsetTable")
        table: dict[int, int] = {}
        for key, value in reader.mapping("offsetTable").items():
            if value is not None:
                level = _int_key(key, table_where)
                table[level] = _as_int(value, f"{table_where}[{level}]")
        return cls(offset_table=table)


# =========================================================================== subscription groups


@dataclass(slots=True)
class SubscriptionGroupConfig(WireBody):
    """A consumer group's broker-side config (defaults as 4.9.3's)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5's FIFO group: each message group's messages are delivered one after the other (written
    #: only when true, so 4.x peers see the 4.x shape)
    consume_message_orderly: bool = False

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }
        if self.consume_message_orderly:
            data["consumeMessageOrderly"] = True
            data = dict(sorted(data.items()))
        return data

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            group_name=reader.string("groupName", ""),
            consume_enable=reader.boolean("consumeEnable", True),
            consume_from_min_enable=reader.boolean("consumeFromMinEnable", True),
            consume_broadcast_enable=reader.boolean("consumeBroadcastEnable", True),
            retry_queue_nums=reader.integer("retryQueueNums", 1),
            retry_max_times=reader.integer("retryMaxTimes", 16),
            broker_id=reader.integer("brokerId", 0),
            which_broker_when_consume_slowly=reader.integer("whichBrokerWhenConsumeSlowly", 1),
            notify_consumer_ids_changed_enable=reader.boolean("notifyConsumerIdsChangedEnable", True),
            consume_message_orderly=reader.boolean("consumeMessageOrderly", False),
        )


@dataclass(slots=True)
class SubscriptionGroupWrapper(WireBody):
    """``subscriptionGroup.json`` / GET_ALL_SUBSCRIPTIONGROUP_CONFIG."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json_dict(),
            "subscriptionGroupTable": {
                name: self.subscription_group_table[name].to_json_dict()
                for name in sorted(self.subscription_group_table)
            },
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        table_where = reader.at("subscriptionGroupTable")
        table: dict[str, SubscriptionGroupConfig] = {}
        for key, value in reader.mapping("subscriptionGroupTable").items():
            name = _as_str(key, table_where)
            if value is None:
                continue
            config = SubscriptionGroupConfig.from_json_dict(value, f"{table_where}[{name!r}]")
            if not config.group_name:
                config.group_name = name
            table[name] = config
        version = reader.raw("dataVersion")
        return cls(
            subscription_group_table=table,
            data_version=DataVersion()
            if version is None
            else DataVersion.from_json_dict(version, reader.at("dataVersion")),
        )


# =========================================================================== connections


@dataclass(slots=True)
class Connection(WireBody):
    """One client channel of a group (the language is written as its name)."""

    client_id: str
    client_addr: str
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "clientAddr": self.client_addr,
            "clientId": self.client_id,
            "language": self.language.name,
            "version": self.version,
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        language = reader.raw("language")
        if language is not None and not isinstance(language, str | int):
            raise BodyDecodeError(f"{reader.at('language')}: expected a language name, got {_describe(language)}")
        return cls(
            client_id=reader.string("clientId", ""),
            client_addr=reader.string("clientAddr", ""),
            language=LanguageCode.JAVA if language is None else LanguageCode.parse(language),
            version=reader.integer("version", 0),
        )


@dataclass(slots=True)
class ConsumerConnection(WireBody):
    """GET_CONSUMER_CONNECTION_LIST response."""

    connection_set: list[Connection] = field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: ConsumeType | None = None
    message_model: MessageModel | None = None
    consume_from_where: ConsumeFromWhere | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return _bean(
            {
                "connectionSet": [connection.to_json_dict() for connection in self.connection_set],
                "consumeFromWhere": None if self.consume_from_where is None else self.consume_from_where.name,
                "consumeType": None if self.consume_type is None else self.consume_type.name,
                "messageModel": None if self.message_model is None else self.message_model.name,
                "subscriptionTable": {
                    topic: self.subscription_table[topic].to_json_dict() for topic in sorted(self.subscription_table)
                },
            }
        )

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        table_where = reader.at("subscriptionTable")
        table: dict[str, SubscriptionData] = {}
        for key, value in reader.mapping("subscriptionTable").items():
            topic = _as_str(key, table_where)
            if value is not None:
                table[topic] = SubscriptionData.from_json_dict(value, f"{table_where}[{topic!r}]")

        def optional_enum(enum_type: type[_EnumT], key: str) -> _EnumT | None:
            value = reader.raw(key)
            return None if value is None else _as_enum(enum_type, value, reader.at(key))

        return cls(
            connection_set=[Connection.from_json_dict(item, path) for item, path in reader.objects("connectionSet")],
            subscription_table=table,
            consume_type=optional_enum(ConsumeType, "consumeType"),
            message_model=optional_enum(MessageModel, "messageModel"),
            consume_from_where=optional_enum(ConsumeFromWhere, "consumeFromWhere"),
        )


@dataclass(slots=True)
class ProducerConnection(WireBody):
    """GET_PRODUCER_CONNECTION_LIST response."""

    connection_set: list[Connection] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {"connectionSet": [connection.to_json_dict() for connection in self.connection_set]}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            connection_set=[Connection.from_json_dict(item, path) for item, path in reader.objects("connectionSet")]
        )


# =========================================================================== consumer running info


@dataclass(slots=True)
class ProcessQueueInfo(WireBody):
    """A consumer's view of one queue (``ProcessQueue.fillProcessQueueInfo``)."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        return _bean({wire: getattr(self, attr) for attr, wire in _PROCESS_QUEUE_INFO_FIELDS})

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        values: dict[str, Any] = {}
        for attr, wire in _PROCESS_QUEUE_INFO_FIELDS:
            if attr in ("locked", "droped"):
                values[attr] = reader.boolean(wire, False)
            else:
                values[attr] = reader.integer(wire, 0)
        return cls(**values)


_PROCESS_QUEUE_INFO_FIELDS: Final = (
    ("commit_offset", "commitOffset"),
    ("cached_msg_min_offset", "cachedMsgMinOffset"),
    ("cached_msg_max_offset", "cachedMsgMaxOffset"),
    ("cached_msg_count", "cachedMsgCount"),
    ("cached_msg_size_in_mib", "cachedMsgSizeInMiB"),
    ("transaction_msg_min_offset", "transactionMsgMinOffset"),
    ("transaction_msg_max_offset", "transactionMsgMaxOffset"),
    ("transaction_msg_count", "transactionMsgCount"),
    ("locked", "locked"),
    ("try_unlock_times", "tryUnlockTimes"),
    ("last_lock_timestamp", "lastLockTimestamp"),
    ("droped", "droped"),
    ("last_pull_timestamp", "lastPullTimestamp"),
    ("last_consume_timestamp", "lastConsumeTimestamp"),
)


@dataclass(slots=True)
class ConsumeStatus(WireBody):
    """Per-topic consume statistics of a client (rates are per second, RTs in ms)."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "consumeFailedMsgs": self.consume_failed_msgs,
            "consumeFailedTPS": float(self.consume_failed_tps),
            "consumeOKTPS": float(self.consume_ok_tps),
            "consumeRT": float(self.consume_rt),
            "pullRT": float(self.pull_rt),
            "pullTPS": float(self.pull_tps),
        }

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        return cls(
            pull_rt=reader.number("pullRT", 0.0),
            pull_tps=reader.number("pullTPS", 0.0),
            consume_rt=reader.number("consumeRT", 0.0),
            consume_ok_tps=reader.number("consumeOKTPS", 0.0),
            consume_failed_tps=reader.number("consumeFailedTPS", 0.0),
            consume_failed_msgs=reader.integer("consumeFailedMsgs", 0),
        )


@dataclass(slots=True)
class ConsumerRunningInfo(WireBody):
    """GET_CONSUMER_RUNNING_INFO response (the commonly used subset; unknown keys are ignored)."""

    properties: dict[str, str] = field(default_factory=dict)
    subscription_set: list[SubscriptionData] = field(default_factory=list)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, ConsumeStatus] = field(default_factory=dict)
    jstack: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return _bean(
            {
                "jstack": self.jstack,
                "mqTable": {queue: info.to_json_dict() for queue, info in _sorted_by_key(self.mq_table)},
                "properties": {key: self.properties[key] for key in sorted(self.properties)},
                "statusTable": {topic: self.status_table[topic].to_json_dict() for topic in sorted(self.status_table)},
                "subscriptionSet": [sub.to_json_dict() for sub in self.subscription_set],
            }
        )

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = _Object(data, where or cls.__name__)
        properties_where = reader.at("properties")
        properties: dict[str, str] = {}
        for key, value in reader.mapping("properties").items():
            if value is not None:
                name = _as_str(key, properties_where)
                properties[name] = _as_str(value, f"{properties_where}[{name!r}]")
        status_where = reader.at("statusTable")
        status: dict[str, ConsumeStatus] = {}
        for key, value in reader.mapping("statusTable").items():
            if value is not None:
                topic = _as_str(key, status_where)
                status[topic] = ConsumeStatus.from_json_dict(value, f"{status_where}[{topic!r}]")
        return cls(
            properties=properties,
            subscription_set=[
                SubscriptionData.from_json_dict(item, path) for item, path in reader.objects("subscriptionSet")
            ],
            mq_table=_queue_table(reader, "mqTable", ProcessQueueInfo.from_json_dict),
            status_table=status,
            jstack=reader.optional_string("jstack"),
        )


__all__ = [
    "MAX_DECOMPRESSED_REGISTER_BODY",
    "BrokerData",
    "CheckClientRequestBody",
    "ClusterInfo",
    "Connection",
    "ConsumeFromWhere",
    "ConsumeStats",
    "ConsumeStatus",
    "ConsumeType",
    "ConsumerConnection",
    "ConsumerData",
    "ConsumerListBody",
    "ConsumerOffsetTable",
    "ConsumerRunningInfo",
    "DataVersion",
    "DelayOffsetTable",
    "HeartbeatData",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageModel",
    "OffsetSerializeWrapper",
    "OffsetWrapper",
    "ProcessQueueInfo",
    "ProducerConnection",
    "ProducerData",
    "QueueData",
    "RegisterBrokerBody",
    "ResetOffsetBody",
    "SubscriptionData",
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicFilterType",
    "TopicList",
    "TopicOffset",
    "TopicRouteData",
    "TopicStatsTable",
    "UnlockBatchRequestBody",
    "WireBody",
    "now_millis",
    "register_body_crc32",
]
