"""`ConsumerBase`: what the push and the pull consumer share as members of a group on a client instance.

Their checked options (`rocketflow.client.consumer.options`), their lifecycle state, joining the
client instance (one per client id and name servers) with the offset store of their message model
(the brokers' for clustering, a local file for broadcasting), leaving it again, and the
subscription table they announce, held by their rebalance.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Generic, TypeVar

from rocketflow.client.consumer.coordinator.rebalance import RebalanceImpl
from rocketflow.client.consumer.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from rocketflow.client.consumer.options import ConsumerOptions, ServiceState
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.instance import LIFECYCLE_TIMEOUT, ClientInstance
from rocketflow.protocol.bodies import ConsumerData, ConsumeType, MessageModel
from rocketflow.protocol.message import MessageQueue

logger = logging.getLogger(__name__)

_SettingsT = TypeVar("_SettingsT")


class ConsumerBase(Generic[_SettingsT]):
    """A consumer group member's options, state, client instance and offset store (see the module)."""

    #: ``"push consumer"`` or ``"pull consumer"``, as errors name the consumer
    kind: str
    rebalance: RebalanceImpl

    def __init__(self, options: ConsumerOptions[_SettingsT]) -> None:
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
