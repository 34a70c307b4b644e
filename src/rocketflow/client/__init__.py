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
from rocketflow.client.consume_context import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeMessageContext,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    ConsumeReturnType,
)
from rocketflow.client.errors import (
    MQBrokerError,
    MQClientError,
    MQConnectError,
    MQConnectionClosedError,
    MQError,
    MQRemotingError,
    MQTimeoutError,
)
from rocketflow.client.hooks import ConsumeMessageHook
from rocketflow.client.instance import ClientInstance
from rocketflow.client.message_selector import MessageSelector
from rocketflow.client.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from rocketflow.client.process_queue import ProcessQueue, ProcessQueueInfo
from rocketflow.client.producer import Producer, ProducerSettings
from rocketflow.client.pull_consumer import PullConsumer, PullConsumerSettings
from rocketflow.client.push_consumer import MAX_RECONSUME_TIMES_UNLIMITED, PushConsumer, PushConsumerSettings
from rocketflow.client.request_reply import create_reply_message
from rocketflow.client.route import FindBrokerResult, TopicPublishInfo
from rocketflow.client.simple_consumer import ReceivedMessage, SimpleConsumer
from rocketflow.client.stats import ConsumerStats
from rocketflow.client.transaction_producer import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
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
