"""The broker's request processors, one module per RocketMQ processor (the admin one split by role)."""

from rocketflow.broker.processors.admin import AdminBrokerProcessor
from rocketflow.broker.processors.client_manage import ClientManageProcessor
from rocketflow.broker.processors.consumer_manage import ConsumerManageProcessor
from rocketflow.broker.processors.end_transaction import EndTransactionProcessor
from rocketflow.broker.processors.pull import PullMessageProcessor
from rocketflow.broker.processors.query import QueryMessageProcessor
from rocketflow.broker.processors.reply import ReplyMessageProcessor
from rocketflow.broker.processors.send import SendMessageProcessor
from rocketflow.broker.processors.send_back import SendBackProcessor

__all__ = [
    "AdminBrokerProcessor",
    "ClientManageProcessor",
    "ConsumerManageProcessor",
    "EndTransactionProcessor",
    "PullMessageProcessor",
    "QueryMessageProcessor",
    "ReplyMessageProcessor",
    "SendBackProcessor",
    "SendMessageProcessor",
]
