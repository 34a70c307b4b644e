"""The broker's request processors, one module per RocketMQ processor."""

from rocketflow.broker.processors.admin import AdminBrokerProcessor
from rocketflow.broker.processors.client_manage import ClientManageProcessor
from rocketflow.broker.processors.consumer_manage import ConsumerManageProcessor
from rocketflow.broker.processors.pull import PullMessageProcessor
from rocketflow.broker.processors.query import QueryMessageProcessor
from rocketflow.broker.processors.send import SendMessageProcessor

__all__ = [
    "AdminBrokerProcessor",
    "ClientManageProcessor",
    "ConsumerManageProcessor",
    "PullMessageProcessor",
    "QueryMessageProcessor",
    "SendMessageProcessor",
]
