"""`Admin`: the typed operator API behind ``rocketflow admin`` (RocketMQ's ``DefaultMQAdminExt``).

```python
with Admin("127.0.0.1:9876") as admin:
    admin.create_topic("Orders", read_queue_nums=8, write_queue_nums=8)
    progress = admin.consumer_progress("order-consumers")
    print(progress.total_lag, [queue.client_id for queue in progress.queues])
    admin.reset_offset("order-consumers", "Orders", EARLIEST)
```

It talks to any RocketMQ 4.x name server and its brokers with the ordinary request codes, on its
own `ClientInstance` (one event loop thread; every method blocks the calling thread, so do not
call them on that loop). Errors: `MQClientError` for bad input or a missing topic/message,
`MQBrokerError` (with the server's code and remark) when a server refuses, `MQRemotingError`
subclasses when one cannot be reached.
"""

from __future__ import annotations

from rocketflow.client.admin.cluster import ClusterAdmin
from rocketflow.client.admin.groups import GroupAdmin
from rocketflow.client.admin.messages import MessageAdmin
from rocketflow.client.admin.results import (
    ADMIN_PRODUCER_GROUP,
    DEFAULT_PERM,
    DEFAULT_QUERY_MAX_NUM,
    DEFAULT_QUEUE_NUMS,
    EARLIEST,
    LATEST,
    MESSAGE_TYPES,
    ORDER_TOPIC_CONFIG_NAMESPACE,
    TOOLS_CONSUMER_GROUP,
    BrokerStatus,
    ConsumerProgress,
    QueueLayoutWarning,
    QueueProgress,
    QueueStats,
    format_timestamp,
    parse_timestamp,
    topic_kind,
    version_desc,
    warn_queue_layout,
)
from rocketflow.client.admin.tail import MessageTail
from rocketflow.client.admin.topics import TopicAdmin
from rocketflow.client.consumer.consume.context import CMResult, ConsumeMessageDirectlyResult


class Admin(ClusterAdmin, TopicAdmin, GroupAdmin, MessageAdmin):
    """The admin API; see the module docstring. ``timeout`` (seconds) bounds each request."""


__all__ = [
    "ADMIN_PRODUCER_GROUP",
    "DEFAULT_PERM",
    "DEFAULT_QUERY_MAX_NUM",
    "DEFAULT_QUEUE_NUMS",
    "EARLIEST",
    "LATEST",
    "MESSAGE_TYPES",
    "ORDER_TOPIC_CONFIG_NAMESPACE",
    "TOOLS_CONSUMER_GROUP",
    "Admin",
    "BrokerStatus",
    "CMResult",
    "ConsumeMessageDirectlyResult",
    "ConsumerProgress",
    "MessageTail",
    "QueueLayoutWarning",
    "QueueProgress",
    "QueueStats",
    "format_timestamp",
    "parse_timestamp",
    "topic_kind",
    "version_desc",
    "warn_queue_layout",
]
