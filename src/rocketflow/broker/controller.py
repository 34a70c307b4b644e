"""`BrokerController`: wires the store, managers, processors and periodic tasks of one broker.

The broker is one asyncio loop. Store puts are made from the loop thread (under SYNC_FLUSH the
flush is awaited through `asyncio.wrap_future`, so the loop never blocks on fsync), which is
also where the store's dispatch listener wakes held long-polling pulls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING

from rocketflow import __version__
from rocketflow.acl import AclClientHook, AclRequestHook, PlainAclFile, PlainAclValidator, SessionCredentials
from rocketflow.broker.client_manager import ClientManager
from rocketflow.broker.config import BrokerConfig
from rocketflow.broker.long_polling import PullRequestHoldService
from rocketflow.broker.metrics import BrokerMetrics
from rocketflow.broker.namesrv_registrar import NamesrvRegistrar
from rocketflow.broker.processors.admin import AdminBrokerProcessor
from rocketflow.broker.processors.client_manage import ClientManageProcessor
from rocketflow.broker.processors.consumer_manage import ConsumerManageProcessor
from rocketflow.broker.processors.end_transaction import EndTransactionProcessor
from rocketflow.broker.processors.pull import PullMessageProcessor
from rocketflow.broker.processors.query import QueryMessageProcessor
from rocketflow.broker.processors.reply import ReplyMessageProcessor
from rocketflow.broker.processors.send import SendMessageProcessor
from rocketflow.broker.rebalance_lock_manager import RebalanceLockManager
from rocketflow.broker.schedule_message_service import ScheduleMessageService
from rocketflow.broker.slave_synchronize import SlaveSynchronize
from rocketflow.broker.subscription_group_manager import SubscriptionGroupManager
from rocketflow.broker.topic_config_manager import TopicConfigManager
from rocketflow.broker.transaction import TransactionalMessageService
from rocketflow.broker.unconsumed_deletions import UnconsumedDeletions
from rocketflow.net import Channel, RemotingClient, RemotingServer
from rocketflow.protocol.bodies import TopicConfigSerializeWrapper
from rocketflow.protocol.ids import pack_host
from rocketflow.protocol.names import is_readable, is_writeable
from rocketflow.remoting.command import ROCKETMQ_VERSION
from rocketflow.store import AppendResult, BrokerRole, MessageStore, PutMessageStatus
from rocketflow.store.config_file import ConfigPersister, ConsumerOffsetManager, DelayOffsetManager
from rocketflow.store.ha import HAClient, HAService

if TYPE_CHECKING:
    from rocketflow.proxy import GrpcServer

logger = logging.getLogger("rocketflow.broker")

#: The version name 4.9.3 reports (MQVersion.getVersionDesc(399)).
BROKER_VERSION_DESC = "V4_9_3"


class BrokerStats:
    """Put/get counters and their recent rates (for GET_BROKER_RUNTIME_INFO and GET_CONSUME_STATS)."""

    WINDOW_SECONDS = 10

    def __init__(self) -> None:
        self.put_total = 0
        self.put_bytes = 0
        self.put_failures = 0
        self.get_total = 0
        self.get_bytes = 0
        self.group_get_total: dict[str, int] = {}
        self._samples: deque[tuple[float, int, int, dict[str, int]]] = deque(maxlen=self.WINDOW_SECONDS + 1)
        self.boot_timestamp = time.time_ns() // 1_000_000

    def put_messages(self, count: int, size: int) -> None:
        self.put_total += count
        self.put_bytes += size

    def get_messages(self, count: int, size: int, group: str | None = None) -> None:
        self.get_total += count
        self.get_bytes += size
        if group is not None:
            self.group_get_total[group] = self.group_get_total.get(group, 0) + count

    def sample(self) -> None:
        self._samples.append((time.monotonic(), self.put_total, self.get_total, dict(self.group_get_total)))

    def _rate(self, pick: Callable[[tuple[float, int, int, dict[str, int]]], int]) -> float:
        if len(self._samples) < 2:
            return 0.0
        first, last = self._samples[0], self._samples[-1]
        elapsed = last[0] - first[0]
        return (pick(last) - pick(first)) / elapsed if elapsed > 0 else 0.0

    def put_tps(self) -> float:
        return self._rate(lambda sample: sample[1])

    def get_tps(self) -> float:
        return self._rate(lambda sample: sample[2])

    def group_get_tps(self, group: str) -> float:
        return self._rate(lambda sample: sample[3].get(group, 0))


class BrokerController:
    """One broker: ``await start()``, serve, ``await stop()`` (or ``async with``)."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.config = config = config or BrokerConfig()
        self.delay_levels_ms = config.delay_levels_ms
        self.store = MessageStore(config.store)
        self.topics = TopicConfigManager(config, on_change=self._topics_changed)
        self.groups = SubscriptionGroupManager(config)
        self.offsets = ConsumerOffsetManager(config.store.config_dir)
        self.delay_offsets = DelayOffsetManager(config.store.config_dir)
        #: writes topic and group changes off the loop, in batches (see rocketflow.store.config_file)
        self.config_persister = ConfigPersister(name=f"config-persister {config.broker_name}")
        self.config_persister.attach(self.topics.table, self.groups.table)
        self.clients = ClientManager(notify_enabled=lambda: config.notify_consumer_ids_changed_enable,
                                     channel_expired_ms=config.channel_expired_timeout_ms)
        self.locks = RebalanceLockManager(config.rebalance_lock_max_live_time_ms)
        self.stats = BrokerStats()
        #: messages retention deleted before their groups consumed them (logged, counted, reported)
        self.unconsumed_deletions = UnconsumedDeletions(lambda: self.offsets.table)
        self.store.clean_service.trim_listeners.append(self.unconsumed_deletions.on_trimmed)
        self.server = RemotingServer(config.listen_host, config.listen_port, name=f"broker {config.broker_name}",
                                     channel_max_idle_seconds=config.server_channel_max_idle_seconds,
                                     on_close=self._channel_closed, tls=config.tls_server_settings())
        self.send_processor = SendMessageProcessor(self)
        self.pull_processor = PullMessageProcessor(self)
        self.hold_service = PullRequestHoldService(
            self.pull_processor.run_without_suspend,
            long_polling_enable=config.long_polling_enable,
            short_polling_time_ms=config.short_polling_time_ms,
            check_interval_ms=config.long_polling_check_interval_ms if config.long_polling_enable
            else config.short_polling_time_ms,
            max_offset=self.store.get_max_offset_in_queue,
        )
        self.schedule = ScheduleMessageService(self, self.delay_offsets, self.delay_levels_ms)
        self.transactions = TransactionalMessageService(self)
        self.admin_processor = AdminBrokerProcessor(self)
        self.send_processor.register_to(self.server)
        self.pull_processor.register_to(self.server)
        QueryMessageProcessor(self).register_to(self.server)
        ClientManageProcessor(self).register_to(self.server)
        ConsumerManageProcessor(self).register_to(self.server)
        EndTransactionProcessor(self).register_to(self.server)
        self.reply_processor = ReplyMessageProcessor(self)
        self.reply_processor.register_to(self.server)
        self.server.register_default(self.admin_processor.process)
        #: the plain ACL file when ``acl_enable`` (checked before any processor runs; see docs/acl.md)
        self.acl_file: PlainAclFile | None = None
        self.acl_hook: AclRequestHook | None = None
        if config.acl_enable:
            self.acl_file = PlainAclFile(config.acl_file_path,
                                         check_interval=config.acl_reload_check_interval_ms / 1000)
            self.acl_hook = AclRequestHook(PlainAclValidator(self.acl_file))
            self.server.set_request_hook(self.acl_hook)
        self.registrar: NamesrvRegistrar | None = None
        #: the Prometheus endpoint, when ``metrics_port`` is set (see rocketflow.broker.metrics)
        self.metrics: BrokerMetrics | None = None
        #: the gRPC endpoint for RocketMQ 5.x clients, when ``grpc_port`` is set (see rocketflow.proxy)
        self.grpc: GrpcServer | None = None
        self.store_host = pack_host(config.advertised_ip, config.listen_port)
        #: a master's replication service (slaves connect to it), None on a slave or before start
        self.ha_service: HAService | None = None
        #: a slave's replication client and its copier of the master's tables, None on a master
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self._slave_client: RemotingClient | None = None
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
    def ha_server_address(self) -> str:
        """``ip:port`` of the HA service slaves replicate from (registered with the name servers)."""
        if self.ha_service is not None:
            return f"{self.broker_ip}:{self.ha_service.port}"
        port = self.config.store.ha_listen_port
        return f"{self.broker_ip}:{self.server.port + 1 if port is None else port}"  # before start

    @property
    def is_slave(self) -> bool:
        return self.config.store.broker_role is BrokerRole.SLAVE

    @property
    def replicates_synchronously(self) -> bool:
        """A SYNC_MASTER with its HA service up: puts are acknowledged once a slave has them."""
        return self.ha_service is not None and self.config.store.broker_role is BrokerRole.SYNC_MASTER

    async def wait_for_replica(self, result: AppendResult) -> AppendResult:
        """SYNC_MASTER: a stored put is acknowledged once a slave has it too (RocketMQ's handleHA);
        FLUSH_SLAVE_TIMEOUT after ``syncFlushTimeout``, SLAVE_NOT_AVAILABLE when no slave is in sync."""
        ha = self.ha_service
        if ha is None or not self.replicates_synchronously or result.status is not PutMessageStatus.PUT_OK:
            return result
        if not ha.is_slave_ok(result.end_offset):
            return dataclasses.replace(result, status=PutMessageStatus.SLAVE_NOT_AVAILABLE)
        if await ha.wait_for_slave(result.end_offset, self.config.store.sync_flush_timeout_ms / 1000):
            return result
        logger.warning("slave did not acknowledge offset %d within %d ms", result.end_offset,
                       self.config.store.sync_flush_timeout_ms)
        return dataclasses.replace(result, status=PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

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
        self.store_host = pack_host(self.broker_ip, self.server.port)
        try:
            await self._start_replication()
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
        if self.slave_sync is not None:
            self._every(config.slave_synchronize_interval_ms, self.slave_sync.sync_all, "slave synchronize")
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
            metrics = BrokerMetrics(self)
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
        await self._stop_replication()
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
        from rocketflow.proxy import BrokerAccess, GrpcServer  # needs the `grpc` extra

        grpc_server = GrpcServer(BrokerAccess(self), self.config.listen_host, port)
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

    # ------------------------------------------------------------------ replication

    async def _start_replication(self) -> None:
        config = self.config
        store_config = config.store
        if not self.is_slave:
            port = store_config.ha_listen_port
            if port is None:  # RocketMQ's listen port + 1; with a free listen port, a free HA port too
                port = self.server.port + 1 if config.listen_port else 0
            service = HAService(self.store, config.listen_host, port)
            await service.start()
            self.ha_service = service
            return
        self.ha_client = HAClient(self.store, store_config.ha_master_address)
        await self.ha_client.start()
        self._slave_client = RemotingClient(name="broker-slave-sync", tls=config.tls_client_settings())
        if config.access_key is not None and config.secret_key is not None:
            self._slave_client.rpc_hook = AclClientHook(SessionCredentials(config.access_key, config.secret_key))
        self.slave_sync = SlaveSynchronize(self, self._slave_client)

    async def _stop_replication(self) -> None:
        if self.ha_service is not None:
            await self.ha_service.stop()
            self.ha_service = None
        if self.ha_client is not None:
            await self.ha_client.stop()
            self.ha_client = None
        if self._slave_client is not None:
            await self._slave_client.close()
            self._slave_client = None
        self.slave_sync = None

    def _registered(self, ha_server_addr: str | None, master_addr: str | None) -> None:
        """A name server's answer to REGISTER_BROKER: a slave learns where its master is."""
        if self.ha_client is not None and ha_server_addr and self.config.store.ha_master_address is None:
            self.ha_client.update_master_address(ha_server_addr)
        sync = self.slave_sync
        if sync is not None and master_addr and master_addr != sync.master_address:
            first = sync.master_address is None
            sync.master_address = master_addr
            if first:  # copy the tables now rather than at the first period
                task = asyncio.get_running_loop().create_task(sync.sync_all())
                self._tasks.append(task)

    # ------------------------------------------------------------------ events

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
        if self.ha_service is not None:
            info.update(self.ha_service.stats())
        if self.grpc is not None:
            info.update(self.grpc.stats())
        if self.ha_client is not None:
            info["haMasterAddress"] = self.ha_client.master_address or ""
            info["haConnected"] = str(self.ha_client.connected).lower()
            info["haReportedOffset"] = str(self.ha_client.reported_offset)
        return info


__all__ = ["BROKER_VERSION_DESC", "BrokerController", "BrokerStats"]
