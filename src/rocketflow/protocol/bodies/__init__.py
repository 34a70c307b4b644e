"""Command bodies of RocketMQ 4.9.3's protocol as dataclasses, one module per role.

Every body has ``encode()`` (fastjson's dialect: bean keys sorted, nulls omitted, enums as names,
numeric and MessageQueue map keys bare) and ``decode(data)``; `base` holds what they share and how
decoding stays lenient. The bodies: `route` (topics, routes, broker registration), `client`
(heartbeats, queue locks), `offsets` (consume progress and offset files), `admin` (subscription
groups, connections, running info), `enums` (the consumer-model enums). Every name is importable
from here too. docs/design/wire-format.md, "Bodies", describes the encoding.
"""

from __future__ import annotations

from rocketflow.protocol.bodies.admin import (
    Connection,
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStatus,
    ProcessQueueInfo,
    ProducerConnection,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
)
from rocketflow.protocol.bodies.base import (
    WireBody,
    now_millis,
    register_body_crc32,
)
from rocketflow.protocol.bodies.client import (
    CheckClientRequestBody,
    ConsumerData,
    ConsumerListBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ProducerData,
    SubscriptionData,
    UnlockBatchRequestBody,
)
from rocketflow.protocol.bodies.enums import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    TopicFilterType,
)
from rocketflow.protocol.bodies.offsets import (
    ConsumerOffsetTable,
    ConsumeStats,
    DelayOffsetTable,
    OffsetSerializeWrapper,
    OffsetWrapper,
    ResetOffsetBody,
    TopicOffset,
    TopicStatsTable,
)
from rocketflow.protocol.bodies.route import (
    MAX_DECOMPRESSED_REGISTER_BODY,
    BrokerData,
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
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
