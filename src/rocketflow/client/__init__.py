"""The pure-Python RocketMQ client: producer, push consumer, their shared client instance and RPCs."""

from rocketflow.client.api import ClientAPI, CommunicationMode, PullResult, PullStatus, SendResult, SendStatus
from rocketflow.client.config import ClientConfig
from rocketflow.client.consumer.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    MachineRoomResolver,
)
from rocketflow.client.consumer.consume.context import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeMessageContext,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    ConsumeReturnType,
)
from rocketflow.client.consumer.consume.hooks import ConsumeMessageHook
from rocketflow.client.consumer.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from rocketflow.client.consumer.process_queue import ProcessQueue, ProcessQueueInfo
from rocketflow.client.consumer.pull_consumer import PullConsumer
from rocketflow.client.consumer.pull_settings import PullConsumerSettings
from rocketflow.client.consumer.push_consumer import PushConsumer
from rocketflow.client.consumer.push_settings import MAX_RECONSUME_TIMES_UNLIMITED, PushConsumerSettings
from rocketflow.client.consumer.simple_consumer import ReceivedMessage, SimpleConsumer
from rocketflow.client.consumer.stats import ConsumerStats
from rocketflow.client.consumer.subscription import MessageSelector
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
from rocketflow.client.producer.producer import Producer, ProducerSettings
from rocketflow.client.producer.request_reply import create_reply_message
from rocketflow.client.producer.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from rocketflow.client.route import FindBrokerResult, TopicPublishInfo
from rocketflow.protocol.bodies import ConsumeFromWhere, MessageModel
from rocketflow.protocol.codec import UndecodableRecord

__all__ = [
    "MAX_RECONSUME_TIMES_UNLIMITED",
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
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeMessageContext",
    "ConsumeMessageHook",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeReturnType",
    "ConsumerStats",
    "FindBrokerResult",
    "LocalFileOffsetStore",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientError",
    "MQConnectError",
    "MQConnectionClosedError",
    "MQError",
    "MQRemotingError",
    "MQTimeoutError",
    "MachineRoomResolver",
    "MessageModel",
    "MessageSelector",
    "OffsetStore",
    "ProcessQueue",
    "ProcessQueueInfo",
    "Producer",
    "ProducerSettings",
    "PullConsumer",
    "PullConsumerSettings",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "PushConsumerSettings",
    "ReadOffsetType",
    "ReceivedMessage",
    "RemoteBrokerOffsetStore",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TopicPublishInfo",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "UndecodableRecord",
    "create_reply_message",
]
