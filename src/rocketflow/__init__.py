"""rocketflow: RocketMQ's messaging model, wire-compatible, in Python."""

from __future__ import annotations

__version__ = "0.1.0"

from rocketflow.client.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
)
from rocketflow.client.consume_context import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from rocketflow.client.message_selector import MessageSelector
from rocketflow.client.producer import Producer
from rocketflow.client.pull_consumer import PullConsumer
from rocketflow.client.push_consumer import PushConsumer
from rocketflow.client.simple_consumer import SimpleConsumer
from rocketflow.client.transaction_producer import LocalTransactionState, TransactionProducer
from rocketflow.protocol.bodies import ConsumeFromWhere, MessageModel
from rocketflow.protocol.message import Message, MessageExt, MessageQueue

__all__ = [
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "SimpleConsumer",
    "TransactionProducer",
    "__version__",
]
