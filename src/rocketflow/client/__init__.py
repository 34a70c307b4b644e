"""The pure-Python RocketMQ client: producer, push consumer, their shared client instance and RPCs."""

from rocketflow.client.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    MachineRoomResolver,
)
from rocketflow.client.api import ClientAPI, CommunicationMode, PullResult, PullStatus, SendResult, SendStatus
from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import (
    MQBrokerError,
    MQClientError,
    MQConnectError,
    MQConnectionClosedError,
    MQError,
    MQRemotingError,
    MQTimeoutError,
)
from rocketflow.client.instance import ClientInstance
from rocketflow.client.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from rocketflow.client.process_queue import ProcessQueue, ProcessQueueInfo
from rocketflow.client.producer import Producer, ProducerSettings
from rocketflow.client.route import FindBrokerResult, TopicPublishInfo
from rocketflow.protocol.bodies import ConsumeFromWhere, MessageModel

__all__ = [
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "ClientAPI",
    "ClientConfig",
    "ClientInstance",
    "CommunicationMode",
    "ConsumeFromWhere",
    "FindBrokerResult",
    "LocalFileOffsetStore",
    "MQBrokerError",
    "MQClientError",
    "MQConnectError",
    "MQConnectionClosedError",
    "MQError",
    "MQRemotingError",
    "MQTimeoutError",
    "MachineRoomResolver",
    "MessageModel",
    "OffsetStore",
    "ProcessQueue",
    "ProcessQueueInfo",
    "Producer",
    "ProducerSettings",
    "PullResult",
    "PullStatus",
    "ReadOffsetType",
    "RemoteBrokerOffsetStore",
    "SendResult",
    "SendStatus",
    "TopicPublishInfo",
]
