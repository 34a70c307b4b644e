"""Topics and routes: the bodies a broker registers with the name server and clients read back."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Final, Self

from rocketflow.protocol.bodies.base import (
    ObjectReader,
    WireBody,
    as_enum,
    as_int,
    as_list,
    as_str,
    bean,
    int_key,
    load_json,
    now_millis,
)
from rocketflow.protocol.bodies.enums import TopicFilterType
from rocketflow.remoting import fastjson
from rocketflow.remoting.errors import BodyDecodeError

#: PermName READ | WRITE: the default permission of a topic (PermName lives in protocol/names).
_PERM_READ_WRITE: Final = 6
#: Decompressed size limit for a compressed REGISTER_BROKER body (guards against zlib bombs).
MAX_DECOMPRESSED_REGISTER_BODY: Final = 64 * 1024 * 1024

_I32 = struct.Struct(">i")


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
        reader = ObjectReader(data, where or cls.__name__)
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
        return bean(
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
        reader = ObjectReader(data, where or cls.__name__)
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
            read_queue_nums=as_int(read, f"{where}.readQueueNums"),
            write_queue_nums=as_int(write, f"{where}.writeQueueNums"),
            perm=as_int(perm, f"{where}.perm"),
            topic_filter_type=as_enum(TopicFilterType, filter_type, f"{where}.topicFilterType"),
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
        reader = ObjectReader(data, where or cls.__name__)
        table: dict[str, TopicConfig] = {}
        table_where = reader.at("topicConfigTable")
        for name, value in reader.mapping("topicConfigTable").items():
            key = as_str(name, table_where)
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
        reader = ObjectReader(data, where or cls.__name__)
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
            load_json(reader.chunk("dataVersion"), f"{where}.dataVersion"), f"{where}.dataVersion"
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
        filter_list = load_json(reader.chunk("filterServerList"), filter_where)
        servers = [as_str(item, f"{filter_where}[{i}]") for i, item in enumerate(as_list(filter_list, filter_where))]
        return cls(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper(table, data_version),
            filter_server_list=servers,
        )


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
        reader = ObjectReader(data, where or cls.__name__)
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
        reader = ObjectReader(data, where or cls.__name__)
        addrs_where = reader.at("brokerAddrs")
        addrs: dict[int, str] = {}
        for key, value in reader.mapping("brokerAddrs").items():
            if value is not None:
                broker_id = int_key(key, addrs_where)
                addrs[broker_id] = as_str(value, f"{addrs_where}[{broker_id}]")
        return cls(
            cluster=reader.string("cluster", ""),
            broker_name=reader.string("brokerName", ""),
            broker_addrs=addrs,
        )


@dataclass(slots=True)
class TopicRouteData(WireBody):
    """GET_ROUTEINFO_BY_TOPIC response body."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return bean(
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
        reader = ObjectReader(data, where or cls.__name__)
        table_where = reader.at("filterServerTable")
        table: dict[str, list[str]] = {}
        for key, value in reader.mapping("filterServerTable").items():
            addr = as_str(key, table_where)
            items_where = f"{table_where}[{addr!r}]"
            table[addr] = [as_str(item, items_where) for item in as_list(value, items_where)]
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
        reader = ObjectReader(data, where or cls.__name__)
        brokers_where = reader.at("brokerAddrTable")
        brokers: dict[str, BrokerData] = {}
        for key, value in reader.mapping("brokerAddrTable").items():
            name = as_str(key, brokers_where)
            if value is not None:
                brokers[name] = BrokerData.from_json_dict(value, f"{brokers_where}[{name!r}]")
        clusters_where = reader.at("clusterAddrTable")
        clusters: dict[str, set[str]] = {}
        for key, value in reader.mapping("clusterAddrTable").items():
            cluster = as_str(key, clusters_where)
            names_where = f"{clusters_where}[{cluster!r}]"
            clusters[cluster] = {as_str(item, names_where) for item in as_list(value, names_where)}
        return cls(broker_addr_table=brokers, cluster_addr_table=clusters)


@dataclass(slots=True)
class TopicList(WireBody):
    """A set of topic names (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER, ...)."""

    topic_list: set[str] = field(default_factory=set)
    broker_addr: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return bean({"brokerAddr": self.broker_addr, "topicList": sorted(self.topic_list)})

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        return cls(topic_list=set(reader.strings("topicList")), broker_addr=reader.optional_string("brokerAddr"))


@dataclass(slots=True)
class KVTable(WireBody):
    """A string-to-string table (name-server KV config, REGISTER_BROKER response)."""

    table: dict[str, str] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"table": {key: self.table[key] for key in sorted(self.table)}}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        table_where = reader.at("table")
        table: dict[str, str] = {}
        for key, value in reader.mapping("table").items():
            if value is not None:
                name = as_str(key, table_where)
                table[name] = as_str(value, f"{table_where}[{name!r}]")
        return cls(table=table)


__all__ = [
    "MAX_DECOMPRESSED_REGISTER_BODY",
    "BrokerData",
    "ClusterInfo",
    "DataVersion",
    "KVTable",
    "QueueData",
    "RegisterBrokerBody",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicList",
    "TopicRouteData",
]
