"""Everything the gRPC endpoint needs from the broker, in one place.

The endpoint reaches the broker only through `BrokerAccess`, built on the broker's context (the
`BrokerContext` its processors work on, never its controller) and the lookup of its processors: topic
and group configs, store reads, consumer offsets, the broker's processors (by request code, see
`rocketflow.proxy.local`; sends reach the broker's put path through them), the ACL file and the
broker's settings. When the broker's internals move, this module is the one to adapt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from rocketflow.acl import PlainAclConfig
from rocketflow.broker.config import BrokerConfig
from rocketflow.broker.context import BrokerContext
from rocketflow.net import Processor
from rocketflow.protocol.bodies import SubscriptionGroupConfig, TopicConfig
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.message import MessageExt
from rocketflow.proxy.local import ProcessorLookup
from rocketflow.store import BrokerRole
from rocketflow.store.message_store import GetMessageStatus

#: topic attribute naming the message type a topic accepts (RocketMQ 5's ``message.type``)
MESSAGE_TYPE_ATTRIBUTE = "message.type"


@dataclasses.dataclass(frozen=True, slots=True)
class QueueRead:
    """Messages read from a queue at some offset, and where the next read starts."""

    messages: list[MessageExt]
    next_offset: int
    #: no more messages past ``next_offset`` right now
    exhausted: bool


class BrokerAccess:
    """The broker as the gRPC endpoint sees it."""

    def __init__(self, broker: BrokerContext, processors: ProcessorLookup) -> None:
        self._broker = broker
        self._processors = processors

    # ------------------------------------------------------------------ identity and settings

    @property
    def config(self) -> BrokerConfig:
        return self._broker.config

    @property
    def broker_name(self) -> str:
        return self._broker.config.broker_name

    @property
    def advertised_ip(self) -> str:
        return self._broker.config.advertised_ip

    @property
    def store_host(self) -> str:
        return self._broker.identity.address

    @property
    def is_slave(self) -> bool:
        return self._broker.config.store.broker_role is BrokerRole.SLAVE

    @property
    def acl_config(self) -> PlainAclConfig | None:
        """The ACL file's accounts when ACL is on, else None."""
        acl_hook = self._broker.acl_hook
        return None if acl_hook is None else acl_hook.validator.config

    @property
    def broker_credentials(self) -> tuple[str, str] | None:
        """The broker's own access and secret key (it signs requests it makes for nobody in particular)."""
        config = self._broker.config
        if config.access_key is None or config.secret_key is None:
            return None
        return config.access_key, config.secret_key

    def processor(self, code: int) -> Processor | None:
        return self._processors(code)

    def add_arrival_listener(self, listener: Callable[[str, int], None]) -> None:
        """``listener(topic, queue_id)`` after new messages of a queue are readable (on the broker's loop)."""

        def on_run(topic: str, queue_id: int, first_offset: int, tags_codes: Sequence[int],
                   store_timestamp: int) -> None:
            listener(topic, queue_id)

        self._broker.store.add_dispatch_run_listener(on_run)

    # ------------------------------------------------------------------ topics and groups

    def topic(self, topic: str) -> TopicConfig | None:
        return self._broker.topics.select(topic)

    def ensure_system_topic(self, topic: str, queue_nums: int) -> TopicConfig:
        """A read-write topic the broker uses for itself, created when missing."""
        topics = self._broker.topics
        return topics.select(topic) or topics.add_if_absent(topics.plan_in_send_back(topic, queue_nums, 6))

    def group(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; a group that would be auto-created is created."""
        return self._broker.groups.find(group)

    # ------------------------------------------------------------------ store

    def read(self, topic: str, queue_id: int, offset: int, max_count: int, group: str) -> QueueRead:
        """Up to ``max_count`` messages of a queue from ``offset`` (an offset below the queue's minimum
        reads from the minimum)."""
        store = self._broker.store
        result = store.get_messages(group, topic, queue_id, offset, max_count)
        if result.status is GetMessageStatus.FOUND:
            messages = []
            for record in result.buffers:
                try:
                    message, _ = decode_record(record)
                except RecordDecodeError:
                    continue
                messages.append(message)
            self._broker.stats.get_messages(len(messages), result.buffer_total_size, group)
            return QueueRead(messages, result.next_begin_offset, result.next_begin_offset >= result.max_offset)
        if result.status is GetMessageStatus.OFFSET_TOO_SMALL:
            return QueueRead([], result.next_begin_offset, False)
        next_offset = max(offset, result.next_begin_offset) if result.status in (
            GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING) else offset
        exhausted = result.status not in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING)
        return QueueRead([], next_offset, exhausted)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self._broker.store.get_min_offset_in_queue(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._broker.store.get_max_offset_in_queue(topic, queue_id)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self._broker.store.get_offset_by_timestamp(topic, queue_id, timestamp_ms)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's consumer offset in the queue, -1 if it has none."""
        return self._broker.offsets.query_offset(group, topic, queue_id)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._broker.offsets.commit_offset(group, topic, queue_id, offset)


__all__ = ["MESSAGE_TYPE_ATTRIBUTE", "BrokerAccess", "QueueRead"]
