"""rocketflow: RocketMQ's messaging model, wire-compatible, in Python.

The names below are loaded on first use (PEP 562), so that importing a lower layer (the frame codec,
the store) does not import the client with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rocketflow.version import __version__

#: public name -> the module it comes from
_EXPORTS: dict[str, str] = {
    **dict.fromkeys((
        "AllocateMessageQueueAveragely",
        "AllocateMessageQueueAveragelyByCircle",
        "AllocateMessageQueueByConfig",
        "AllocateMessageQueueByMachineRoom",
        "AllocateMessageQueueConsistentHash",
        "ConsumeConcurrentlyStatus",
        "ConsumeOrderlyStatus",
        "LocalTransactionState",
        "MessageSelector",
        "Producer",
        "PullConsumer",
        "PushConsumer",
        "SimpleConsumer",
        "TransactionProducer",
    ), "rocketflow.client"),
    **dict.fromkeys(("ConsumeFromWhere", "MessageModel"), "rocketflow.protocol.bodies"),
    **dict.fromkeys(("Message", "MessageExt", "MessageQueue"), "rocketflow.protocol.message"),
}

if TYPE_CHECKING:
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
        SimpleConsumer,
        TransactionProducer,
    )
    from rocketflow.protocol.bodies import ConsumeFromWhere, MessageModel
    from rocketflow.protocol.message import Message, MessageExt, MessageQueue


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


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
