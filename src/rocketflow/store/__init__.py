"""The broker's disk store: commit log, consume queues, index, flush, recovery, retention, config files."""

from rocketflow.store.config import BrokerRole, FlushDiskType, StoreConfig
from rocketflow.store.errors import StoreCorruptError, StoreError, StoreLockedError, StoreNotRunningError
from rocketflow.store.message_store import (
    GetMessageResult,
    GetMessageStatus,
    MessageFilter,
    MessageStore,
    QueryMessageResult,
    TagsCodeFilter,
)
from rocketflow.store.put_request import AppendResult, PutMessageRequest, PutMessageStatus

__all__ = [
    "AppendResult",
    "BrokerRole",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "MessageFilter",
    "MessageStore",
    "PutMessageRequest",
    "PutMessageStatus",
    "QueryMessageResult",
    "StoreConfig",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotRunningError",
    "TagsCodeFilter",
]
