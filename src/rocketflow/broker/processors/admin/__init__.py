"""The broker's admin requests, one module per role, behind one default processor."""

from rocketflow.broker.processors.admin.processor import AdminBrokerProcessor
from rocketflow.broker.processors.admin.topics import MAX_QUEUE_NUMS

__all__ = ["MAX_QUEUE_NUMS", "AdminBrokerProcessor"]
