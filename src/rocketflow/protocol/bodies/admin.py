"""Admin bodies: subscription groups, client connections and a consumer's running info."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Self

from rocketflow.protocol.bodies.base import (
    EnumT,
    ObjectReader,
    WireBody,
    as_enum,
    as_str,
    bean,
    describe,
    queue_table,
    sorted_by_key,
)
from rocketflow.protocol.bodies.client import SubscriptionData
from rocketflow.protocol.bodies.enums import ConsumeFromWhere, ConsumeType, MessageModel
from rocketflow.protocol.bodies.route import DataVersion
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import LanguageCode
from rocketflow.remoting.errors import BodyDecodeError

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
        reader = ObjectReader(data, where or cls.__name__)
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
        reader = ObjectReader(data, where or cls.__name__)
        table_where = reader.at("subscriptionGroupTable")
        table: dict[str, SubscriptionGroupConfig] = {}
        for key, value in reader.mapping("subscriptionGroupTable").items():
            name = as_str(key, table_where)
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
        reader = ObjectReader(data, where or cls.__name__)
        language = reader.raw("language")
        if language is not None and not isinstance(language, str | int):
            raise BodyDecodeError(f"{reader.at('language')}: expected a language name, got {describe(language)}")
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
        return bean(
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
        reader = ObjectReader(data, where or cls.__name__)
        table_where = reader.at("subscriptionTable")
        table: dict[str, SubscriptionData] = {}
        for key, value in reader.mapping("subscriptionTable").items():
            topic = as_str(key, table_where)
            if value is not None:
                table[topic] = SubscriptionData.from_json_dict(value, f"{table_where}[{topic!r}]")

        def optional_enum(enum_type: type[EnumT], key: str) -> EnumT | None:
            value = reader.raw(key)
            return None if value is None else as_enum(enum_type, value, reader.at(key))

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
        reader = ObjectReader(data, where or cls.__name__)
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
        return bean({wire: getattr(self, attr) for attr, wire in _PROCESS_QUEUE_INFO_FIELDS})

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
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
        reader = ObjectReader(data, where or cls.__name__)
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
        return bean(
            {
                "jstack": self.jstack,
                "mqTable": {queue: info.to_json_dict() for queue, info in sorted_by_key(self.mq_table)},
                "properties": {key: self.properties[key] for key in sorted(self.properties)},
                "statusTable": {topic: self.status_table[topic].to_json_dict() for topic in sorted(self.status_table)},
                "subscriptionSet": [sub.to_json_dict() for sub in self.subscription_set],
            }
        )

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        properties_where = reader.at("properties")
        properties: dict[str, str] = {}
        for key, value in reader.mapping("properties").items():
            if value is not None:
                name = as_str(key, properties_where)
                properties[name] = as_str(value, f"{properties_where}[{name!r}]")
        status_where = reader.at("statusTable")
        status: dict[str, ConsumeStatus] = {}
        for key, value in reader.mapping("statusTable").items():
            if value is not None:
                topic = as_str(key, status_where)
                status[topic] = ConsumeStatus.from_json_dict(value, f"{status_where}[{topic!r}]")
        return cls(
            properties=properties,
            subscription_set=[
                SubscriptionData.from_json_dict(item, path) for item, path in reader.objects("subscriptionSet")
            ],
            mq_table=queue_table(reader, "mqTable", ProcessQueueInfo.from_json_dict),
            status_table=status,
            jstack=reader.optional_string("jstack"),
        )


__all__ = [
    "Connection",
    "ConsumeStatus",
    "ConsumerConnection",
    "ConsumerRunningInfo",
    "ProcessQueueInfo",
    "ProducerConnection",
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
]
