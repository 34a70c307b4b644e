"""``rocketmq.exceptions``: the exception classes the client raises, with the original hierarchy.

Where the native library answered a call with a failure status, the original raised the class
registered for that status (``ProducerSendSyncFailed`` for a failed `send_sync`, ...) and the base
`RocketMQException` for statuses without one (a failed ``send_async`` or transactional send). This
layer raises the same classes for the same calls; the message is rocketflow's error text and the
rocketflow error is chained as ``__cause__``.
"""

from __future__ import annotations


class RocketMQException(Exception):
    """Base of every exception of this module."""


class NullPointerException(RocketMQException):
    """A required argument was missing (the native library got a null pointer)."""


class MallocFailed(RocketMQException):
    """Kept for compatibility: the native library could not allocate memory (never raised here)."""


class ProducerException(RocketMQException):
    """Base of the producer's exceptions."""


class ProducerStartFailed(ProducerException):
    """The producer could not start (or be configured, or shut down)."""


class ProducerSendSyncFailed(ProducerException):
    """``send_sync`` (or ``send_batch``) failed."""


class ProducerSendOnewayFailed(ProducerException):
    """``send_oneway`` (or ``send_oneway_orderly``) failed."""


class ProducerSendOrderlyFailed(ProducerException):
    """``send_orderly_with_sharding_key`` (or ``send_orderly``) failed."""


class ProducerSendAsyncFailed(ProducerException):
    """What ``send_async``'s exception callback receives: the failure, its code, where and of what type."""

    def __init__(self, msg: str, error: int, file: str, line: int, type: str) -> None:
        super().__init__(msg)
        self.error = error
        self.file = file
        self.line = line
        self.type = type


class ConsumerException(RocketMQException):
    """Base of the consumers' exceptions."""


class PushConsumerStartFailed(ConsumerException):
    """The push consumer could not start (e.g. started without a subscription)."""


class PullConsumerStartFailed(ConsumerException):
    """The pull consumer (0.4.x) could not start."""


class PullConsumerFetchMQFailed(ConsumerException):
    """The pull consumer (0.4.x) could not find the topic's queues."""


class PullConsumerFetchMessageFailed(ConsumerException):
    """The pull consumer (0.4.x) could not pull messages."""


__all__ = [
    "ConsumerException",
    "MallocFailed",
    "NullPointerException",
    "ProducerException",
    "ProducerSendAsyncFailed",
    "ProducerSendOnewayFailed",
    "ProducerSendOrderlyFailed",
    "ProducerSendSyncFailed",
    "ProducerStartFailed",
    "PullConsumerFetchMQFailed",
    "PullConsumerFetchMessageFailed",
    "PullConsumerStartFailed",
    "PushConsumerStartFailed",
    "RocketMQException",
]
