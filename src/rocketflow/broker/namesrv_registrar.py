"""`NamesrvRegistrar`: REGISTER_BROKER to every configured name server, periodically and on change.

The body is the broker's topic table (`RegisterBrokerBody`, JSON or compressed) with its
``bodyCrc32``; UNREGISTER_BROKER is sent at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rocketflow.net import RemotingClient, RemotingError
from rocketflow.net.tls import TlsClientSettings
from rocketflow.protocol.bodies import RegisterBrokerBody, TopicConfigSerializeWrapper, register_body_crc32
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)

logger = logging.getLogger(__name__)


class NamesrvRegistrar:
    """Keeps this broker registered with its name servers."""

    def __init__(self, namesrv_addresses: list[str], *, broker_name: str, cluster: str, broker_id: int,
                 broker_addr: Callable[[], str], ha_server_addr: Callable[[], str],
                 topics: Callable[[], TopicConfigSerializeWrapper], period_ms: int, timeout_ms: int,
                 compressed: bool = False, tls: TlsClientSettings | None = None,
                 on_registered: Callable[[str | None, str | None], None] | None = None) -> None:
        self.namesrv_addresses = namesrv_addresses
        self.broker_name = broker_name
        self.cluster = cluster
        self.broker_id = broker_id
        self._broker_addr = broker_addr
        self._ha_server_addr = ha_server_addr
        self._topics = topics
        self.period_ms = period_ms
        self.timeout_ms = timeout_ms
        self.compressed = compressed
        #: ``tls``: connect to the name servers over TLS (RocketMQ's BrokerOuterAPI with ``useTLS``)
        self.client = RemotingClient(name="broker-outapi", tls=tls)
        self._task: asyncio.Task[None] | None = None
        self._pending: asyncio.Task[None] | None = None
        self._again = False
        #: successful registrations per name server address
        self.registrations: dict[str, int] = {}
        #: called with the answer's (haServerAddr, masterAddr): a slave learns its master's addresses
        self.on_registered = on_registered

    async def start(self) -> None:
        """Register once now (failures are logged), then every period."""
        await self.register_all()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        for task in (self._task, self._pending):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._task = self._pending = None
        await self.unregister_all()
        await self.client.close()

    def register_soon(self) -> None:
        """Re-register after a topic change (coalesced; safe to call often)."""
        if not self.namesrv_addresses:
            return
        if self._pending is not None and not self._pending.done():
            self._again = True
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._pending = loop.create_task(self._register_pending())

    async def _register_pending(self) -> None:
        while True:
            self._again = False
            await self.register_all()
            if not self._again:
                return

    async def _run(self) -> None:
        period = max(self.period_ms, 1) / 1000
        while True:
            await asyncio.sleep(period)
            await self.register_all()

    def _request(self) -> RemotingCommand:
        body_obj = RegisterBrokerBody(topic_config_serialize_wrapper=self._topics())
        body = body_obj.encode_compressed() if self.compressed else body_obj.encode()
        header = RegisterBrokerRequestHeader(
            broker_name=self.broker_name, broker_addr=self._broker_addr(), cluster_name=self.cluster,
            ha_server_addr=self._ha_server_addr(), broker_id=self.broker_id, compressed=self.compressed,
            body_crc32=register_body_crc32(body),
        )
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body,
                                       language=LanguageCode.JAVA)

    async def register_all(self) -> None:
        if not self.namesrv_addresses:
            return
        # the body encodes the whole topic table (tens of ms for thousands of topics): off the loop
        requests = await asyncio.to_thread(lambda: [self._request() for _ in self.namesrv_addresses])
        await asyncio.gather(*(self._register_one(addr, request)
                               for addr, request in zip(self.namesrv_addresses, requests, strict=True)))

    async def _register_one(self, addr: str, request: RemotingCommand) -> None:
        try:
            response = await self.client.invoke(addr, request, self.timeout_ms / 1000)
        except RemotingError as exc:
            logger.warning("register broker %s to name server %s failed: %s", self.broker_name, addr, exc)
            return
        if response.code != ResponseCode.SUCCESS:
            logger.warning("name server %s refused registration of %s: %s %s", addr, self.broker_name,
                           response.code_name, response.remark)
            return
        self.registrations[addr] = self.registrations.get(addr, 0) + 1
        if self.on_registered is not None:
            try:
                answer = RegisterBrokerResponseHeader.from_command(response)
            except ProtocolError as exc:
                logger.warning("name server %s answered the registration with a bad header: %s", addr, exc)
            else:
                self.on_registered(answer.ha_server_addr or None, answer.master_addr or None)
        logger.debug("registered broker %s to name server %s", self.broker_name, addr)

    async def unregister_all(self) -> None:
        header = UnRegisterBrokerRequestHeader(broker_name=self.broker_name, broker_addr=self._broker_addr(),
                                               cluster_name=self.cluster, broker_id=self.broker_id)

        async def one(addr: str) -> None:
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext_fields(),
                                              language=LanguageCode.JAVA)
            try:
                await self.client.invoke(addr, request, min(self.timeout_ms / 1000, 3.0))
            except RemotingError as exc:
                logger.warning("unregister broker %s from name server %s failed: %s", self.broker_name, addr, exc)

        await asyncio.gather(*(one(addr) for addr in self.namesrv_addresses))


__all__ = ["NamesrvRegistrar"]
