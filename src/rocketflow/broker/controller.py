"""`BrokerController`: builds one broker's parts and processors, wires them, and runs its lifecycle.

The broker is one asyncio loop. The controller assembles the `BrokerContext` (`BrokerParts`), the put
path, the replication side and the services (delayed delivery, transaction check-back), hands each
processor what it uses and registers it with the server; then it starts and stops everything in
order and runs the periodic tasks. Nothing it builds refers back to it. See
docs/design/broker.md#the-controller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol

from rocketflow.acl import AclClientHook, AclRequestHook, PlainAclFile, PlainAclValidator, SessionCredentials
from rocketflow.broker.config import BrokerConfig, BrokerConfigError
from rocketflow.broker.context import BrokerContext, BrokerParts
from rocketflow.broker.long_polling import PullRequestHoldService
from rocketflow.broker.message_filter import FilterCompiler
from rocketflow.broker.message_put import MessagePut
from rocketflow.broker.metrics import BrokerMetrics, MetricsSource
from rocketflow.broker.namesrv_registrar import NamesrvRegistrar
from rocketflow.broker.processors.admin import AdminBrokerProcessor
from rocketflow.broker.processors.client_manage import ClientManageProcessor
from rocketflow.broker.processors.consumer_manage import ConsumerManageProcessor
from rocketflow.broker.processors.end_transaction import EndTransactionProcessor
from rocketflow.broker.processors.pull import PullMessageProcessor
from rocketflow.broker.processors.query import QueryMessageProcessor
from rocketflow.broker.processors.reply import ReplyMessageProcessor
from rocketflow.broker.processors.send import SendMessageProcessor
from rocketflow.broker.processors.send_back import SendBackProcessor
from rocketflow.broker.replication import BrokerReplication
from rocketflow.broker.schedule_message_service import ScheduleMessageService
from rocketflow.broker.slave_synchronize import SlaveSynchronize
from rocketflow.broker.transaction import TransactionalMessageService
from rocketflow.net import Channel, Processor, RemotingServer
from rocketflow.protocol.bodies import TopicConfigSerializeWrapper
from rocketflow.protocol.names import is_readable, is_writeable
from rocketflow.remoting.command import ROCKETMQ_VERSION
from rocketflow.store import AppendResult, BrokerRole
from rocketflow.store.config_file import ConfigPersister
from rocketflow.store.ha import HAClient, HAService
from rocketflow.version import __version__

logger = logging.getLogger(__name__)

#: The version name 4.9.3 reports (MQVersion.getVersionDesc(399)).
BROKER_VERSION_DESC = "V4_9_3"


class BrokerEndpoint(Protocol):
    """A server run beside the broker's remoting server, on its parts: the gRPC endpoint for RocketMQ 5.x
    clients (`rocketflow.proxy.GrpcServer`). Started once the broker serves, stopped first."""

    @property
    def address(self) -> str: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def stats(self) -> dict[str, str]:
        """Rows added to GET_BROKER_RUNTIME_INFO."""


#: Makes the gRPC endpoint of a broker from its parts, the lookup of its processors by request code, and
#: the host and port to listen on: `rocketflow.proxy.grpc_endpoint` (which needs the ``grpc`` extra). The
#: proxy builds on the broker, so the broker is handed it rather than importing it.
GrpcEndpointFactory = Callable[[BrokerContext, Callable[[int], Processor | None], str, int], BrokerEndpoint]


class BrokerController:
    """One broker: ``await start()``, serve, ``await stop()`` (or ``async with``)."""

    def __init__(self, config: BrokerConfig | None = None, *, grpc_endpoint: GrpcEndpointFactory | None = None) -> None:
        self.config = config = config or BrokerConfig()
        if config.grpc_port is not None and grpc_endpoint is None:
            raise BrokerConfigError("grpc_port is set but the broker was given no gRPC endpoint to serve it "
                                    "(BrokerController(config, grpc_endpoint=rocketflow.proxy.grpc_endpoint))")
        #: the plain ACL file when ``acl_enable`` (checked before any processor runs; see docs/acl.md)
        self.acl_file: PlainAclFile | None = None
        self.acl_hook: AclRequestHook | None = None
        if config.acl_enable:
            self.acl_file = PlainAclFile(config.acl_file_path,
                                         check_interval=config.acl_reload_check_interval_ms / 1000)
            self.acl_hook = AclRequestHook(PlainAclValidator(self.acl_file))
        #: the parts every processor and service works on (their `BrokerContext`)
        self.parts = parts = BrokerParts.create(config, acl_hook=self.acl_hook, on_topics_change=self._topics_changed)
        self.store = parts.store
        self.topics = parts.topics
        self.groups = parts.groups
        self.offsets = parts.offsets
        self.delay_offsets = parts.delay_offsets
        self.clients = parts.clients
        self.locks = parts.locks
        self.stats = parts.stats
        #: messages retention deleted before their groups consumed them (logged, counted, reported)
        self.unconsumed_deletions = parts.unconsumed_deletions
        #: writes topic and group changes off the loop, in batches (see rocketflow.store.config_file)
        self.config_persister = ConfigPersister(name=f"config-persister {config.broker_name}")
        self.config_persister.attach(self.topics.table, self.groups.table)
        self.server = RemotingServer(config.listen_host, config.listen_port, name=f"broker {config.broker_name}",
                                     channel_max_idle_seconds=config.server_channel_max_idle_seconds,
                                     on_close=self._channel_closed, tls=config.tls_server_settings())
        if self.acl_hook is not None:
            self.server.set_request_hook(self.acl_hook)
        self.replication = BrokerReplication(config, parts.store, parts, parts.identity)
        put_path = MessagePut(parts, self.replication)
        filters = FilterCompiler()
        self.send_processor = SendMessageProcessor(parts, put_path)
        self.pull_processor = PullMessageProcessor(parts, filters)
        self.hold_service: PullRequestHoldService = self.pull_processor.hold_service
        self.schedule = ScheduleMessageService(parts, put_path)
        self.transactions = TransactionalMessageService(parts, put_path)
        self.reply_processor = ReplyMessageProcessor(parts, put_path)
        self.admin_processor = AdminBrokerProcessor(parts, runtime_info=self.runtime_info,
                                                    permission_changed=self._topics_changed)
        for processor in (self.send_processor, SendBackProcessor(parts, put_path), self.pull_processor,
                          QueryMessageProcessor(parts), ClientManageProcessor(parts, filters),
                          ConsumerManageProcessor(parts), EndTransactionProcessor(parts, self.transactions),
                          self.reply_processor):
            processor.register_to(self.server)
        self.server.register_default(self.admin_processor.process)
        self.registrar: NamesrvRegistrar | None = None
        #: the Prometheus endpoint, when ``metrics_port`` is set (see rocketflow.broker.metrics)
        self.metrics: BrokerMetrics | None = None
        #: the gRPC endpoint for RocketMQ 5.x clients, when ``grpc_port`` is set (see rocketflow.proxy)
        self.grpc: BrokerEndpoint | None = None
        self._grpc_endpoint = grpc_endpoint
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._stopping = False

    # ------------------------------------------------------------------ identity

    @property
    def broker_ip(self) -> str:
        return self.config.advertised_ip

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> str:
        """``ip:port`` clients and name servers reach this broker at (the real port once started)."""
        return f"{self.broker_ip}:{self.server.port}"

    @property
    def store_host(self) -> bytes:
        """This broker's address as its records store it."""
        return self.parts.identity.store_host

    @property
    def ha_server_address(self) -> str:
        """``ip:port`` of the HA service slaves replicate from (registered with the name servers)."""
        return self.replication.ha_server_address(self.server.port)

    @property
    def is_slave(self) -> bool:
        return self.config.store.broker_role is BrokerRole.SLAVE

    @property
    def replicates_synchronously(self) -> bool:
        """A SYNC_MASTER with its HA service up: puts are acknowledged once a slave has them."""
        return self.replication.replicates_synchronously

    async def wait_for_replica(self, result: AppendResult) -> AppendResult:
        """See `BrokerReplication.wait_for_replica`."""
        return await self.replication.wait_for_replica(result)

    @property
    def ha_service(self) -> HAService | None:
        """A master's replication service (slaves connect to it), None on a slave or before start."""
        return self.replication.ha_service

    @property
    def ha_client(self) -> HAClient | None:
        """A slave's replication client, None on a master."""
        return self.replication.ha_client

    @property
    def slave_sync(self) -> SlaveSynchronize | None:
        """A slave's copier of the master's tables, None on a master."""
        return self.replication.slave_sync

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Load configs, start the store, listen, register with the name servers, start periodic tasks."""
        if self._started:
            raise RuntimeError("broker already started")
        config = self.config
        if self.acl_file is not None:
            self.acl_file.load()
        self.topics.load()
        self.groups.load()
        self.offsets.load()
        self.delay_offsets.load()
        self.topics.persist()
        self.groups.persist()
        self.config_persister.start()
        try:
            await asyncio.to_thread(self.store.start)
        except BaseException:
            await asyncio.to_thread(self.config_persister.stop)
            raise
        try:
            self.store.add_dispatch_run_listener(self.hold_service.notify_messages_arriving)
            self.hold_service.start()
            await self.server.start()
        except BaseException:
            await asyncio.to_thread(self.config_persister.stop)
            await asyncio.to_thread(self.store.shutdown)
            raise
        self.parts.identity.bind(self.server.port)
        try:
            await self.replication.start(self.server.port)
        except BaseException:
            await self.server.stop()
            await asyncio.to_thread(self.config_persister.stop)
            await asyncio.to_thread(self.store.shutdown)
            raise
        self._started = True
        if not self.is_slave:  # a slave neither delivers delayed messages nor checks transactions back
            self.schedule.start()
            self.transactions.start()
        self.registrar = NamesrvRegistrar(
            config.namesrv_addresses, broker_name=config.broker_name, cluster=config.cluster,
            broker_id=config.broker_id, broker_addr=lambda: self.address,
            ha_server_addr=lambda: self.ha_server_address, topics=self._topics_for_registration,
            period_ms=max(10_000, min(config.register_name_server_period_ms, 60_000))
            if config.register_name_server_period_ms >= 10_000 else config.register_name_server_period_ms,
            timeout_ms=config.register_broker_timeout_ms, compressed=config.compressed_register,
            tls=config.tls_client_settings(), on_registered=self._registered,
        )
        if config.access_key is not None and config.secret_key is not None:
            self.registrar.client.rpc_hook = AclClientHook(SessionCredentials(config.access_key, config.secret_key))
        await self.registrar.start()
        slave_sync = self.replication.slave_sync
        if slave_sync is not None:
            self._every(config.slave_synchronize_interval_ms, slave_sync.sync_all, "slave synchronize")
        # file writes with fsyncs (tens of ms on a busy disk) run off the loop
        self._every(config.flush_consumer_offset_interval_ms, self.offsets.persist, "consumer offsets", in_thread=True)
        self._every(config.flush_delay_offset_interval_ms, self.delay_offsets.persist, "delay offsets", in_thread=True)
        self._every(config.flush_config_interval_ms, self._persist_configs, "configs", in_thread=True)
        self._every(config.client_scan_interval_ms, self.clients.scan_not_active_channels, "client scan")
        self._every(1000, self.stats.sample, "stats")
        self.stats.sample()
        if config.grpc_port is not None:
            await self._start_grpc(config.grpc_port)
        if config.metrics_port:
            metrics = BrokerMetrics(MetricsSource(self.parts, held_pulls=lambda: self.hold_service.held_count,
                                                  connections=lambda: len(self.server.channels)))
            try:
                metrics.start()
            except OSError:
                await self.stop()
                raise
            self.metrics = metrics
        logger.info("broker %s (%s) listening on %s, store %s", config.broker_name, config.cluster, self.address,
                    config.store.store_root)

    async def stop(self) -> None:
        """Unregister, stop serving, persist offsets and configs, close the store."""
        if not self._started or self._stopping:
            return
        self._stopping = True
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.stop)
            self.metrics = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.grpc is not None:
            await self.grpc.stop()
            self.grpc = None
        if self.registrar is not None:
            await self.registrar.stop()
        await self.schedule.stop()
        await self.transactions.stop()
        await self.hold_service.stop()
        await self.server.stop()
        await self.replication.stop()
        await asyncio.to_thread(self.config_persister.stop)
        self.persist_all()
        await asyncio.to_thread(self.store.shutdown)
        self._started = False
        logger.info("broker %s stopped", self.config.broker_name)

    async def __aenter__(self) -> BrokerController:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.stop()

    async def _start_grpc(self, port: int) -> None:
        if self._grpc_endpoint is None:  # refused in __init__
            raise BrokerConfigError("grpc_port is set but the broker was given no gRPC endpoint")
        grpc_server = self._grpc_endpoint(self.parts, self.server.processor_for, self.config.listen_host, port)
        try:
            await grpc_server.start()
        except BaseException:
            await grpc_server.stop()
            await self.stop()
            raise
        self.grpc = grpc_server

    def persist_all(self) -> None:
        """Write consumer offsets, delay offsets, topics and subscription groups now."""
        for what, persist in (("consumer offsets", self.offsets.persist), ("delay offsets", self.delay_offsets.persist),
                              ("topics", self.topics.persist), ("subscription groups", self.groups.persist)):
            try:
                persist()
            except OSError:
                logger.exception("cannot persist %s", what)

    def _persist_configs(self) -> None:
        """Fold the topic and group journals into their files (a failed write is retried here)."""
        for what, table in (("topics", self.topics.table), ("subscription groups", self.groups.table)):
            try:
                table.persist_if_changed()
            except OSError as exc:
                logger.error("cannot persist %s (kept in memory, retried at the next persist): %s", what, exc)

    def _every(self, interval_ms: int, action: Callable[[], object], what: str, *, in_thread: bool = False) -> None:
        async def run() -> None:
            while True:
                await asyncio.sleep(max(interval_ms, 10) / 1000)
                try:
                    result = await asyncio.to_thread(action) if in_thread else action()
                    if isinstance(result, Awaitable):
                        await result
                except Exception:
                    logger.exception("periodic task %s failed", what)

        self._tasks.append(asyncio.get_running_loop().create_task(run()))

    def _topics_for_registration(self) -> TopicConfigSerializeWrapper:
        """The topic table as registered: a broker that is not read-write (``brokerPermission``) registers
        every topic with its own permission, so clients route around it (registerBrokerAll)."""
        wrapper = self.topics.snapshot()
        permission = self.config.broker_permission
        if not (is_writeable(permission) and is_readable(permission)):
            for topic_config in wrapper.topic_config_table.values():
                topic_config.perm = permission
        return wrapper

    # ------------------------------------------------------------------ events

    def _registered(self, ha_server_addr: str | None, master_addr: str | None) -> None:
        """A name server's answer to REGISTER_BROKER (a slave learns where its master is)."""
        first_sync = self.replication.registered(ha_server_addr, master_addr)
        if first_sync is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(first_sync))

    def _topics_changed(self) -> None:
        if self.registrar is not None:
            self.registrar.register_soon()

    def _channel_closed(self, channel: Channel) -> None:
        self.clients.channel_closed(channel)
        self.hold_service.release_channel(channel)

    # ------------------------------------------------------------------ info

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table."""
        stats = self.stats
        info = dict(self.store.runtime_info())
        now = time.time_ns() // 1_000_000
        info.update({
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": str(ROCKETMQ_VERSION),
            "rocketflowVersion": __version__,
            "brokerName": self.config.broker_name,
            "brokerClusterName": self.config.cluster,
            "brokerAddr": self.address,
            "msgPutTotalTodayNow": str(stats.put_total),
            "msgGetTotalTodayNow": str(stats.get_total),
            "msgPutBytesTotal": str(stats.put_bytes),
            "msgGetBytesTotal": str(stats.get_bytes),
            "putFailedTotal": str(stats.put_failures),
            "putTps": f"{stats.put_tps():.2f}",
            "getTransferedTps": f"{stats.get_tps():.2f}",
            "bootTimestamp": str(stats.boot_timestamp),
            "runtime": f"{(now - stats.boot_timestamp) / 1000:.0f}s",
            "topicCount": str(len(self.topics.topics)),
            "subscriptionGroupCount": str(len(self.groups.groups)),
            "consumerGroupsOnline": str(len(self.clients.consumer_groups)),
            "producerGroupsOnline": str(len(self.clients.producer_groups)),
            "connections": str(len(self.server.channels)),
            "pullRequestsHeld": str(self.hold_service.held_count),
            # rocketflow's own: how long polling went since the start (a message that found its queue's
            # pull held reached the consumer without waiting for the consumer's next pull)
            "pullRequestsSuspended": str(self.hold_service.suspended),
            "pullRequestsWokenByMessage": str(self.hold_service.woken_by_message),
            "pullRequestsWokenByTimeout": str(self.hold_service.woken_by_timeout),
            "scheduleMessagesDelivered": str(self.schedule.delivered),
            # rocketflow's own: messages retention deleted before the groups with offsets on them consumed them
            "unconsumedMessagesDeleted": str(self.unconsumed_deletions.total),
            "unconsumedMessagesDeletedLast": self.unconsumed_deletions.last,
            "brokerPermission": str(self.config.broker_permission),
            "brokerRole": self.config.store.broker_role.value,
            "brokerId": str(self.config.broker_id),
        })
        info.update(self.replication.runtime_info())
        if self.grpc is not None:
            info.update(self.grpc.stats())
        return info


__all__ = ["BROKER_VERSION_DESC", "BrokerController", "BrokerEndpoint", "GrpcEndpointFactory"]
