"""What clients tell brokers: heartbeats (their producer and consumer groups) and queue locks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from rocketflow.protocol.bodies.base import (
    ObjectReader,
    WireBody,
    as_int,
    bean,
    now_millis,
    queue_set,
)
from rocketflow.protocol.bodies.enums import ConsumeFromWhere, ConsumeType, MessageModel
from rocketflow.protocol.message import MessageQueue


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
        reader = ObjectReader(data, where or cls.__name__)
        codes_where = reader.at("codeSet")
        sub_version = reader.raw("subVersion")
        return cls(
            topic=reader.string("topic", ""),
            sub_string=reader.string("subString", "*"),
            tags_set=set(reader.strings("tagsSet")),
            code_set={as_int(code, codes_where) for code in reader.array("codeSet")},
            sub_version=now_millis() if sub_version is None else as_int(sub_version, reader.at("subVersion")),
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
        reader = ObjectReader(data, where or cls.__name__)
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
        return cls(group_name=ObjectReader(data, where or cls.__name__).string("groupName", ""))


@dataclass(slots=True)
class HeartbeatData(WireBody):
    """HEART_BEAT body."""

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
        reader = ObjectReader(data, where or cls.__name__)
        return cls(
            client_id=reader.string("clientID", ""),
            producer_data_set=[
                ProducerData.from_json_dict(item, path) for item, path in reader.objects("producerDataSet")
            ],
            consumer_data_set=[
                ConsumerData.from_json_dict(item, path) for item, path in reader.objects("consumerDataSet")
            ],
        )


@dataclass(slots=True)
class _QueueBatchRequestBody(WireBody):
    """A (group, client id) and a set of queues: the body of LOCK_BATCH_MQ and of UNLOCK_BATCH_MQ."""

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
        reader = ObjectReader(data, where or cls.__name__)
        return cls(
            consumer_group=reader.string("consumerGroup", ""),
            client_id=reader.string("clientId", ""),
            mq_set=queue_set(reader, "mqSet"),
        )


@dataclass(slots=True)
class LockBatchRequestBody(_QueueBatchRequestBody):
    """LOCK_BATCH_MQ body."""


@dataclass(slots=True)
class UnlockBatchRequestBody(_QueueBatchRequestBody):
    """UNLOCK_BATCH_MQ body."""


@dataclass(slots=True)
class LockBatchResponseBody(WireBody):
    """LOCK_BATCH_MQ response: the queues now locked by the caller."""

    lock_ok_mq_set: set[MessageQueue] = field(default_factory=set)

    def to_json_dict(self) -> dict[str, Any]:
        return {"lockOKMQSet": sorted(self.lock_ok_mq_set)}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        return cls(lock_ok_mq_set=queue_set(ObjectReader(data, where or cls.__name__), "lockOKMQSet"))


@dataclass(slots=True)
class ConsumerListBody(WireBody):
    """GET_CONSUMER_LIST_BY_GROUP response: client ids of the group's live consumers."""

    consumer_id_list: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {"consumerIdList": list(self.consumer_id_list)}

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        return cls(consumer_id_list=ObjectReader(data, where or cls.__name__).strings("consumerIdList"))


@dataclass(slots=True)
class CheckClientRequestBody(WireBody):
    """CHECK_CLIENT_CONFIG body."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return bean(
            {
                "clientId": self.client_id,
                "group": self.group,
                "subscriptionData": None if self.subscription_data is None else self.subscription_data.to_json_dict(),
            }
        )

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        reader = ObjectReader(data, where or cls.__name__)
        subscription = reader.raw("subscriptionData")
        return cls(
            client_id=reader.string("clientId", ""),
            group=reader.string("group", ""),
            subscription_data=None
            if subscription is None
            else SubscriptionData.from_json_dict(subscription, reader.at("subscriptionData")),
        )


__all__ = [
    "CheckClientRequestBody",
    "ConsumerData",
    "ConsumerListBody",
    "HeartbeatData",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "ProducerData",
    "SubscriptionData",
    "UnlockBatchRequestBody",
]
