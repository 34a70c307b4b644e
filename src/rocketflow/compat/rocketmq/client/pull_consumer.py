"""``PullConsumer`` of 0.4.x: reads every queue of a topic from the positions in its shared offset table."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

from rocketflow import MessageQueue
from rocketflow import PullConsumer as _RfPullConsumer
from rocketflow.client import MQError
from rocketflow.client.admin import Admin
from rocketflow.compat.rocketmq.client._common import ClientSettings, ClientState, Connection, as_text
from rocketflow.compat.rocketmq.client.message import RecvMessage
from rocketflow.compat.rocketmq.exceptions import (
    ConsumerException,
    NullPointerException,
    PullConsumerFetchMessageFailed,
    PullConsumerFetchMQFailed,
    PullConsumerStartFailed,
)

#: How long a 0.4.x ``PullConsumer.pull`` waits for the next batch of a queue before moving on (seconds).
PULL_WAIT: Final = 3.0


def _tag_filter(expression: str) -> Callable[[str | None], bool]:
    """The tags a subscription expression (``"*"`` or ``"TagA || TagB"``) accepts."""
    if expression.strip() in ("", "*"):
        return lambda tags: True
    wanted = {tag.strip() for tag in expression.split("||") if tag.strip()}
    return lambda tags: tags is not None and tags in wanted


class PullConsumer(ClientSettings):
    """0.4.x's pull consumer: ``for msg in consumer.pull(topic): ...`` reads every queue of the topic
    from where the previous ``pull`` left it (offset 0 at first) to its end.

    Positions live in the class attribute ``offset_table`` (shared by the process's pull consumers and
    never committed to the broker), as in 0.4.x.
    """

    offset_table: dict[str, int] = {}  # shared by every instance, as in 0.4.x

    def __init__(self, group_id: str | bytes) -> None:
        if group_id is None:
            raise NullPointerException("CreatePullConsumer returned null pointer")
        self._group = as_text(group_id, "group_id")
        self._connection = Connection()
        self._state = ClientState.CREATED
        self._lock = threading.Lock()
        self._consumer: _RfPullConsumer | None = None
        self._admin: Admin | None = None
        self._assigned: set[MessageQueue] = set()

    def set_group(self, group_id: str | bytes) -> None:
        self._group = as_text(group_id, "group_id")

    #: 0.4.x spellings (2.0.x has no pull consumer; rocketflow gives it both)
    set_namesrv_addr = ClientSettings.set_name_server_address
    set_namesrv_domain = ClientSettings.set_name_server_domain

    def start(self) -> None:
        """Connect; raises `PullConsumerStartFailed`. A second call does nothing."""
        with self._lock:
            if self._state is not ClientState.CREATED:
                return
            admin: Admin | None = None
            try:
                settings = self._connection.client_settings()
                consumer = _RfPullConsumer(self._group, auto_commit=False, pull_batch_size=32, **settings)
                admin = Admin(**{name: value for name, value in settings.items() if name != "instance_name"})
                consumer.start()
                try:
                    admin.start()
                except BaseException:
                    consumer.shutdown()
                    raise
            except (MQError, ValueError) as exc:
                raise PullConsumerStartFailed(str(exc)) from exc
            self._consumer, self._admin = consumer, admin
            self._state = ClientState.RUNNING

    def shutdown(self) -> None:
        """Disconnect (idempotent)."""
        with self._lock:
            if self._state is not ClientState.RUNNING:
                return
            self._state = ClientState.SHUT_DOWN
            consumer, self._consumer = self._consumer, None
            admin, self._admin = self._admin, None
        try:
            if consumer is not None:
                consumer.shutdown()
        except MQError as exc:
            raise ConsumerException(str(exc)) from exc
        finally:
            if admin is not None:
                admin.shutdown()

    def _get_mq_key(self, mq: Any) -> str:
        # 0.4.x keys the table by the C struct's topic, which is bytes: "b'Topic'@0"
        topic = mq.topic if isinstance(mq.topic, bytes) else str(mq.topic).encode("utf-8")
        queue_id = getattr(mq, "queueId", None)
        if queue_id is None:
            queue_id = mq.queue_id
        return f"{topic!s}@{queue_id}"

    def get_message_queue_offset(self, mq: Any) -> int:
        return self.offset_table.get(self._get_mq_key(mq), 0)

    def set_message_queue_offset(self, mq: Any, offset: int) -> None:
        self.offset_table[self._get_mq_key(mq)] = offset

    def pull(self, topic: str | bytes, expression: str | bytes = "*", max_num: int = 32) -> Iterator[RecvMessage]:
        """Every message of ``topic`` whose tag matches ``expression``, queue after queue, from each
        queue's position in `offset_table` to the queue's end as of the call; the positions advance as
        the batches are read. ``max_num`` is accepted (each pull reads up to 32 messages)."""
        consumer, admin = self._consumer, self._admin
        if consumer is None or admin is None:
            raise PullConsumerFetchMQFailed(f"the pull consumer of group {self._group!r} is not started")
        name = as_text(topic, "topic")
        accepts = _tag_filter(as_text(expression, "expression"))
        try:
            stats = admin.topic_stats(name)
        except MQError as exc:
            raise PullConsumerFetchMQFailed(str(exc)) from exc
        queues = [MessageQueue(row.topic, row.broker_name, row.queue_id) for row in stats]
        try:
            new = set(queues) - self._assigned
            if new:
                consumer.pause(new)
                self._assigned |= new
                consumer.assign(self._assigned)
        except MQError as exc:
            raise PullConsumerFetchMQFailed(str(exc)) from exc
        for mq, row in zip(queues, stats, strict=True):
            key = self._get_mq_key(mq)
            offset = min(max(self.offset_table.get(key, 0), row.min_offset), row.max_offset)
            self.offset_table[key] = offset
            if offset >= row.max_offset:
                continue
            yield from self._read_queue(consumer, mq, key, offset, row.max_offset, accepts)

    def _read_queue(self, consumer: _RfPullConsumer, mq: MessageQueue, key: str, offset: int, end: int,
                    accepts: Callable[[str | None], bool]) -> Iterator[RecvMessage]:
        try:
            consumer.seek(mq, offset)
            consumer.resume(mq)
        except MQError as exc:
            raise PullConsumerFetchMessageFailed(str(exc)) from exc
        try:
            while offset < end:
                try:
                    batch = consumer.poll(timeout=PULL_WAIT)
                except MQError as exc:
                    raise PullConsumerFetchMessageFailed(str(exc)) from exc
                if not batch:
                    break
                offset = batch[-1].queue_offset + 1
                self.offset_table[key] = offset
                for msg in batch:
                    if accepts(msg.tags):
                        yield RecvMessage(msg)
        finally:
            consumer.pause(mq)

