"""`NameServer`: the routing service brokers register with and clients ask for routes."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging

from rocketflow.acl import NAMESRV_ADMIN_CODES, AclRequestHook, PlainAclFile, PlainAclValidator
from rocketflow.namesrv.config import NamesrvConfig
from rocketflow.namesrv.kv_config import KVConfigManager
from rocketflow.namesrv.processor import NamesrvProcessor
from rocketflow.namesrv.route_info_manager import RouteInfoManager
from rocketflow.net import Channel, RemotingServer
from rocketflow.store.config_file import ConfigPersister

logger = logging.getLogger(__name__)


class NameServer:
    """A RocketMQ 4.x compatible name server on one asyncio loop."""

    def __init__(self, config: NamesrvConfig | None = None) -> None:
        self.config = config or NamesrvConfig()
        self.routes = RouteInfoManager()
        self.kv_config = KVConfigManager(path=self.config.kv_config_path,
                                         max_key_length=self.config.max_kv_key_length,
                                         max_value_length=self.config.max_kv_value_length)
        #: writes the KV config off the loop
        self.kv_persister = ConfigPersister(name="namesrv-kv-persister")
        self.kv_config.persister = self.kv_persister
        self.server = RemotingServer(
            self.config.host,
            self.config.port,
            name="namesrv",
            channel_max_idle_seconds=self.config.channel_max_idle_seconds,
            on_close=self._on_channel_close,
            tls=self.config.tls_server_settings(),
        )
        #: the plain ACL file when ``acl_enable`` (see docs/acl.md)
        self.acl_file: PlainAclFile | None = None
        self.acl_hook: AclRequestHook | None = None
        if self.config.acl_enable:
            self.acl_file = PlainAclFile(self.config.acl_file_path,
                                         check_interval=self.config.acl_reload_check_interval_seconds)
            self.acl_hook = AclRequestHook(PlainAclValidator(self.acl_file, admin_codes=NAMESRV_ADMIN_CODES))
            self.server.set_request_hook(self.acl_hook)
        NamesrvProcessor(self.config, self.routes, self.kv_config, acl_hook=self.acl_hook).register_to(self.server)
        self._scanner: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        if self.acl_file is not None:
            self.acl_file.load()
        self.kv_config.load()
        self.kv_persister.start()
        try:
            await self.server.start()
        except BaseException:
            await asyncio.to_thread(self.kv_persister.stop)
            raise
        self._scanner = asyncio.get_running_loop().create_task(self._scan_loop())
        logger.info("name server listening on %s", self.address)
        if not self.config.acl_enable and not is_loopback_host(self.config.host):
            logger.warning("name server listens on %s without ACL: anyone who reaches it can register brokers and "
                           "redirect or remove topic routes. Turn ACL on (--acl-file / aclEnable, brokers signing "
                           "with an admin account's accessKey / secretKey) or listen on 127.0.0.1; see docs/acl.md",
                           self.address)

    async def stop(self) -> None:
        if self._scanner is not None:
            self._scanner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scanner
            self._scanner = None
        await self.server.stop()
        await asyncio.to_thread(self.kv_persister.stop)
        try:
            self.kv_config.flush(block=True)
        except OSError as exc:
            logger.error("cannot persist the KV config: %s", exc)
        logger.info("name server on %s stopped", self.address)

    async def __aenter__(self) -> NameServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _on_channel_close(self, channel: Channel) -> None:
        self.routes.on_channel_destroy(channel.remote_address, channel.id)

    async def _scan_loop(self) -> None:
        await asyncio.sleep(self.config.scan_initial_delay_seconds)
        expired_ms = int(self.config.broker_channel_expired_seconds * 1000)
        while True:
            try:
                expired = self.routes.scan_not_active_brokers(expired_ms)
                if expired:
                    ids = {channel_id for live in expired for channel_id in live.channel_ids}
                    for channel in self.server.channels:
                        if channel.id in ids:
                            channel.close()
            except Exception:
                logger.exception("broker expiry scan failed")
            await asyncio.sleep(self.config.scan_not_active_broker_interval_seconds)


def is_loopback_host(host: str) -> bool:
    """Whether a listen address only takes connections from this machine (a wildcard address does not)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False
