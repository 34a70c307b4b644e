"""`ConsumerBase`: what the push and the pull consumer share as members of a group on a client instance.

Their constructor and its checked options (`rocketflow.client.consumer.options`), their lifecycle
state, joining the client instance (one per client id and name servers) with the offset store of
their message model (the brokers' for clustering, a local file for broadcasting), persisting its
offsets, leaving it again, and the subscription table they announce, held by their rebalance.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, Self, TypeVar

from rocketflow.client.config import ClientConfig
from rocketflow.client.consumer.allocate import AllocateMessageQueueStrategy
from rocketflow.client.consumer.coordinator.rebalance import RebalanceImpl
from rocketflow.client.consumer.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
    commit_offsets_to_brokers,
)
from rocketflow.client.consumer.options import ServiceState, consumer_options
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.instance import LIFECYCLE_TIMEOUT, ClientInstance
from rocketflow.protocol.bodies import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from rocketflow.protocol.message import MessageQueue

logger = logging.getLogger(__name__)

_SettingsT = TypeVar("_SettingsT")


class ConsumerBase(ABC, Generic[_SettingsT]):
    """A consumer group member's options, state, client instance and offset store (see the module)."""

    #: ``"push consumer"`` or ``"pull consumer"``, as errors name the consumer
    kind: str
    #: The dataclass of the consumer's own settings (`PushConsumerSettings`, `PullConsumerSettings`).
    settings_type: type[_SettingsT]
    rebalance: RebalanceImpl

    def __init__(self, group: str, namesrv: str | None = None, *,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp: str | datetime | None = None,
                 allocate_strategy: AllocateMessageQueueStrategy | None = None,
                 client_config: ClientConfig | None = None, **settings: Any) -> None:
        """``settings`` are fields of the consumer's `settings_type` and `ClientConfig` fields (``instance_name``,
        ``rebalance_interval``, ``persist_consumer_offset_interval``, ...); ``namesrv`` is
        ``"host:port;host:port"``; ``consume_timestamp`` (for CONSUME_FROM_TIMESTAMP) is
        ``yyyyMMddHHmmss`` local time or a datetime, default half an hour ago."""
        options = consumer_options(self.kind, self.settings_type, group, namesrv,
                                   message_model=message_model, consume_from=consume_from,
                                   consume_timestamp=consume_timestamp, allocate_strategy=allocate_strategy,
                                   client_config=client_config, settings=settings)
        self.settings: _SettingsT = options.settings
        self.consume_timestamp_ms = options.consume_timestamp_ms
        self.consume_timestamp: str = options.consume_timestamp
        self.group = options.group
        self.client_config = options.client_config
        self.message_model = options.message_model
        self.consume_from = options.consume_from
        self.allocate_strategy = options.allocate_strategy
        self._state = ServiceState.CREATE_JUST
        self._state_lock = threading.Lock()
        self._instance: ClientInstance | None = None
        self._instance_started = False
        self._offset_store: OffsetStore | None = None
        self._setup()

    @abstractmethod
    def _setup(self) -> None:
        """Make the consumer's own state and the parts that do not need the client instance (end of `__init__`)."""

    # ------------------------------------------------------------------ parts (valid once started)

    @property
    def instance(self) -> ClientInstance:
        """The client instance this consumer runs on (raises `MQClientError` before `start`)."""
        if self._instance is None:
            raise MQClientError(f"{self.kind} {self.group!r} is not started")
        return self._instance

    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise MQClientError(f"{self.kind} {self.group!r} is not started")
        return self._offset_store

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    @property
    def is_running(self) -> bool:
        return self._state is ServiceState.RUNNING

    @property
    def state(self) -> ServiceState:
        return self._state

    # ------------------------------------------------------------------ lifecycle

    def _check_startable(self) -> None:
        """Raise `MQClientError` when the consumer lacks something to start (under the state lock)."""

    @abstractmethod
    def _start(self) -> None:
        """Start the consumer's parts and join the client instance; the state becomes RUNNING."""

    @abstractmethod
    def _abort_start(self) -> None:
        """Undo what a failed `_start` did."""

    def _start_once(self) -> None:
        """Run `_start` once in the consumer's life (`_abort_start` when it fails); raises `MQClientError`."""
        with self._state_lock:
            if self._state is not ServiceState.CREATE_JUST:
                raise MQClientError(f"{self.kind} {self.group!r} is {self._state.name}; a consumer starts once")
            self._check_startable()
            self._state = ServiceState.START_FAILED
        try:
            self._start()
        except BaseException:
            self._abort_start()
            raise

    def __enter__(self) -> Self:
        if self._state is ServiceState.CREATE_JUST:
            self.start()
        return self

    @abstractmethod
    def start(self) -> None:
        """Join (or create) the client instance and start; raises `MQClientError`."""

    # ------------------------------------------------------------------ joining and leaving the instance

    def _check_name_servers(self) -> None:
        if not self.client_config.namesrv_addresses():
            raise MQClientError("no name server address: pass namesrv='host:port' "
                                "(or set the NAMESRV_ADDR environment variable)")

    def _join_instance(self, local_offset_store_dir: str | Path | None) -> ClientInstance:
        """The client instance of this consumer's config (made if need be, not started yet) and the
        offset store of its message model, loaded."""
        config = self.client_config
        if self.message_model is MessageModel.CLUSTERING:
            config.change_instance_name_to_pid()
        instance = ClientInstance.get_or_create(config)
        self._instance = instance
        self.rebalance.instance = instance
        store: OffsetStore
        if self.message_model is MessageModel.BROADCASTING:
            store = LocalFileOffsetStore(self.group, instance.config.instance_name, store_dir=local_offset_store_dir,
                                         unit_name=instance.config.unit_name)
        else:
            store = RemoteBrokerOffsetStore(instance, self.group)
        store.load()
        self._offset_store = store
        return instance

    def _start_instance(self, instance: ClientInstance) -> None:
        """Register this consumer's group on ``instance`` and start it (or take a reference to it)."""
        instance.register_consumer(self.group, self)
        try:
            instance.start()
        except BaseException:
            instance.unregister_consumer(self.group)
            raise
        self._instance_started = True

    def _leave_instance_after_failed_start(self, stop_on_loop: Coroutine[Any, Any, None]) -> None:
        """Undo what a failed `start` did on the instance: unregister, run ``stop_on_loop``, release it."""
        instance = self._instance
        if instance is None:
            stop_on_loop.close()
            return
        if instance.select_consumer(self.group) is self:
            instance.unregister_consumer(self.group)
        if not self._instance_started:
            stop_on_loop.close()
            return
        self._instance_started = False
        with contextlib.suppress(MQError):
            instance.run(stop_on_loop, LIFECYCLE_TIMEOUT)
        instance.shutdown()

    def _begin_shutdown(self, own_thread_prefix: str, own_thread_error: str) -> bool:
        """Whether a `shutdown` has work to do (the state becomes SHUTDOWN_ALREADY); raises when called on the
        client's loop or on a thread whose name starts with ``own_thread_prefix`` (``own_thread_error``)."""
        instance = self._instance
        if instance is not None and instance.in_loop_thread():
            raise MQClientError("a consumer cannot be shut down from its client's event loop thread")
        if threading.current_thread().name.startswith(own_thread_prefix):
            raise MQClientError(own_thread_error)
        with self._state_lock:
            if self._state is not ServiceState.RUNNING:
                if self._state is ServiceState.CREATE_JUST:
                    self._state = ServiceState.SHUTDOWN_ALREADY
                return False
            self._state = ServiceState.SHUTDOWN_ALREADY
        return True

    async def _persist_offsets_now(self, store: OffsetStore, mqs: list[MessageQueue]) -> list[str]:
        """Persist the offsets of ``mqs``: to the local file (broadcasting) or by acknowledged
        UPDATE_CONSUMER_OFFSETs (clustering); the brokers' failures (`commit_offsets_to_brokers`)."""
        if self.message_model is MessageModel.BROADCASTING:
            await store.persist_all(mqs)
            return []
        return await commit_offsets_to_brokers(store, mqs, self.group)

    def _leave_instance(self) -> None:
        """Unregister this consumer's group and release the instance (the end of `shutdown`)."""
        instance = self.instance
        instance.unregister_consumer(self.group)
        if self._instance_started:
            self._instance_started = False
            instance.shutdown()

    # ------------------------------------------------------------------ subscriptions

    def subscriptions(self) -> dict[str, str]:
        """topic -> subscription expression (a push consumer in clustering mode has its retry topic there
        once started)."""
        return self.rebalance.subscriptions()

    async def _heartbeat_and_rebalance(self, heartbeat: str) -> None:
        """Announce the subscriptions to every broker (a failure is logged as ``heartbeat`` failed) and
        rebalance at once."""
        instance = self.instance
        try:
            await instance.send_heartbeat_to_all_brokers()
        except MQError as exc:
            logger.warning("%s: %s failed: %s", self.group, heartbeat, exc)
        instance.rebalance_immediately()

    def _consumer_data(self, consume_type: ConsumeType) -> ConsumerData:
        return ConsumerData(self.group, consume_type, self.message_model, self.consume_from,
                            list(self.rebalance.subscription_inner.values()), self.client_config.unit_mode)

    def _running_properties(self) -> dict[str, str]:
        """The GET_CONSUMER_RUNNING_INFO properties both consumers report first."""
        return {
            "consumerGroup": self.group,
            "messageModel": self.message_model.name,
            "consumeFromWhere": self.consume_from.name,
            "consumeTimestamp": self.consume_timestamp,
            "allocateMessageQueueStrategy": type(self.allocate_strategy).__name__,
            "instanceName": self.client_config.instance_name,
        }

    def update_topic_subscribe_info(self, topic: str, queues: list[MessageQueue]) -> None:
        """A route change of a subscribed topic (the client instance calls this)."""
        self.rebalance.update_topic_subscribe_info(topic, queues)


__all__ = ["ConsumerBase"]
