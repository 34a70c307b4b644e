"""Headers between brokers and the name server, and of the name server's KV config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from rocketflow.remoting.headers.base import CommandHeader, Int, Long, Wire


@dataclass(slots=True, kw_only=True)
class RegisterBrokerRequestHeader(CommandHeader):
    """REGISTER_BROKER (103); ``body_crc32`` = CRC32(body) & 0x7FFFFFFF, 0 skips the check."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Long
    compressed: bool = False
    body_crc32: Int = 0


@dataclass(slots=True, kw_only=True)
class RegisterBrokerResponseHeader(CommandHeader):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True, kw_only=True)
class UnRegisterBrokerRequestHeader(CommandHeader):
    """UNREGISTER_BROKER (104)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@dataclass(slots=True, kw_only=True)
class QueryDataVersionRequestHeader(CommandHeader):
    """QUERY_DATA_VERSION (322)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@dataclass(slots=True, kw_only=True)
class QueryDataVersionResponseHeader(CommandHeader):
    changed: Annotated[bool, Wire(required=True)] = False


@dataclass(slots=True, kw_only=True)
class GetTopicsByClusterRequestHeader(CommandHeader):
    """GET_TOPICS_BY_CLUSTER (224)."""

    cluster: str


@dataclass(slots=True, kw_only=True)
class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    """WIPE_WRITE_PERM_OF_BROKER (205), to the namesrv."""

    broker_name: str


@dataclass(slots=True, kw_only=True)
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipe_topic_count: Int


@dataclass(slots=True, kw_only=True)
class AddWritePermOfBrokerRequestHeader(CommandHeader):
    """ADD_WRITE_PERM_OF_BROKER (327), to the namesrv."""

    broker_name: str


@dataclass(slots=True, kw_only=True)
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    add_topic_count: Int


@dataclass(slots=True, kw_only=True)
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_NAMESRV (216); ``clusterName`` is only sent by later versions."""

    topic: str
    cluster_name: str | None = None


# --------------------------------------------------------------------------- KV config (namesrv)


@dataclass(slots=True, kw_only=True)
class PutKVConfigRequestHeader(CommandHeader):
    """PUT_KV_CONFIG (100)."""

    namespace: str
    key: str
    value: str


@dataclass(slots=True, kw_only=True)
class GetKVConfigRequestHeader(CommandHeader):
    """GET_KV_CONFIG (101)."""

    namespace: str
    key: str


@dataclass(slots=True, kw_only=True)
class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = None


@dataclass(slots=True, kw_only=True)
class DeleteKVConfigRequestHeader(CommandHeader):
    """DELETE_KV_CONFIG (102)."""

    namespace: str
    key: str


@dataclass(slots=True, kw_only=True)
class GetKVListByNamespaceRequestHeader(CommandHeader):
    """GET_KVLIST_BY_NAMESPACE (219)."""

    namespace: str


__all__ = [
    "AddWritePermOfBrokerRequestHeader",
    "AddWritePermOfBrokerResponseHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "PutKVConfigRequestHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "UnRegisterBrokerRequestHeader",
    "WipeWritePermOfBrokerRequestHeader",
    "WipeWritePermOfBrokerResponseHeader",
]
