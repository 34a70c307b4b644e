"""rocketflow: RocketMQ's messaging model, wire-compatible, in Python."""

from __future__ import annotations

__version__ = "0.1.0"

from rocketflow.client import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    LocalTransactionState,
    MessageSelector,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionProducer,
)
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
    "TransactionProducer",
    "__version__",
]
