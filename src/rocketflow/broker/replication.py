"""`BrokerReplication`: a master's HA service, or a slave's HA client and copier of the master's tables.

A master listens for slaves (its listen port + 1 by default) and, as a SYNC_MASTER, acknowledges a put
once a slave has it (`wait_for_replica`). A slave copies the master's commit log over its HA client
and its config tables with `SlaveSynchronize`; it learns where its master is from the name server's
answer to its registration (`registered`). See docs/design/broker.md#replication.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Coroutine
from typing import Any

from rocketflow.acl import AclClientHook, SessionCredentials
from rocketflow.broker.config import BrokerConfig
from rocketflow.broker.context import BrokerIdentity, ConfigTables
from rocketflow.broker.slave_synchronize import SlaveSynchronize
from rocketflow.net import RemotingClient
from rocketflow.store import AppendResult, BrokerRole, MessageStore, PutMessageStatus
from rocketflow.store.ha import HAClient, HAService

logger = logging.getLogger(__name__)


class BrokerReplication:
    """The replication side of one broker; `start` once its server listens, `stop` before the store closes."""

    def __init__(self, config: BrokerConfig, store: MessageStore, tables: ConfigTables,
                 identity: BrokerIdentity) -> None:
        self._config = config
        self._store = store
        self._tables = tables
        self._identity = identity
        #: a master's replication service (slaves connect to it), None on a slave or before start
        self.ha_service: HAService | None = None
        #: a slave's replication client and its copier of the master's tables, None on a master
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self._slave_client: RemotingClient | None = None

    @property
    def is_slave(self) -> bool:
        return self._config.store.broker_role is BrokerRole.SLAVE

    @property
    def replicates_synchronously(self) -> bool:
        """A SYNC_MASTER with its HA service up: puts are acknowledged once a slave has them."""
        return self.ha_service is not None and self._config.store.broker_role is BrokerRole.SYNC_MASTER

    def ha_server_address(self, server_port: int) -> str:
        """``ip:port`` of the HA service slaves replicate from, the broker's server listening on ``server_port``."""
        ip = self._identity.ip
        if self.ha_service is not None:
            return f"{ip}:{self.ha_service.port}"
        port = self._config.store.ha_listen_port
        return f"{ip}:{server_port + 1 if port is None else port}"

    async def wait_for_replica(self, result: AppendResult) -> AppendResult:
        """SYNC_MASTER: a stored put is acknowledged once a slave has it too (RocketMQ's handleHA);
        FLUSH_SLAVE_TIMEOUT after ``syncFlushTimeout``, SLAVE_NOT_AVAILABLE when no slave is in sync."""
        ha = self.ha_service
        if ha is None or not self.replicates_synchronously or result.status is not PutMessageStatus.PUT_OK:
            return result
        if not ha.is_slave_ok(result.end_offset):
            return dataclasses.replace(result, status=PutMessageStatus.SLAVE_NOT_AVAILABLE)
        timeout_ms = self._config.store.sync_flush_timeout_ms
        if await ha.wait_for_slave(result.end_offset, timeout_ms / 1000):
            return result
        logger.warning("slave did not acknowledge offset %d within %d ms", result.end_offset, timeout_ms)
        return dataclasses.replace(result, status=PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    async def start(self, server_port: int) -> None:
        config = self._config
        store_config = config.store
        if not self.is_slave:
            port = store_config.ha_listen_port
            if port is None:  # RocketMQ's listen port + 1; with a free listen port, a free HA port too
                port = server_port + 1 if config.listen_port else 0
            service = HAService(self._store, config.listen_host, port)
            await service.start()
            self.ha_service = service
            return
        self.ha_client = HAClient(self._store, store_config.ha_master_address)
        await self.ha_client.start()
        self._slave_client = RemotingClient(name="broker-slave-sync", tls=config.tls_client_settings())
        if config.access_key is not None and config.secret_key is not None:
            self._slave_client.rpc_hook = AclClientHook(SessionCredentials(config.access_key, config.secret_key))
        self.slave_sync = SlaveSynchronize(self._tables, self._identity, self._slave_client)

    async def stop(self) -> None:
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

    def registered(self, ha_server_addr: str | None, master_addr: str | None) -> Coroutine[Any, Any, None] | None:
        """A name server's answer to REGISTER_BROKER: a slave learns where its master is. Returns the first
        copy of the master's tables to run now, if this is the first time the master is known."""
        if self.ha_client is not None and ha_server_addr and self._config.store.ha_master_address is None:
            self.ha_client.update_master_address(ha_server_addr)
        sync = self.slave_sync
        if sync is not None and master_addr and master_addr != sync.master_address:
            first = sync.master_address is None
            sync.master_address = master_addr
            if first:  # copy the tables now rather than at the first period
                return sync.sync_all()
        return None

    def runtime_info(self) -> dict[str, str]:
        """The replication rows of GET_BROKER_RUNTIME_INFO."""
        info: dict[str, str] = {}
        if self.ha_service is not None:
            info.update(self.ha_service.stats())
        if self.ha_client is not None:
            info["haMasterAddress"] = self.ha_client.master_address or ""
            info["haConnected"] = str(self.ha_client.connected).lower()
            info["haReportedOffset"] = str(self.ha_client.reported_offset)
        return info


__all__ = ["BrokerReplication"]
