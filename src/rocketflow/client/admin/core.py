"""`AdminCore`: the admin's client instance and lifecycle, raw requests, and the brokers (and group members)
an operation targets."""

from __future__ import annotations

import logging
import os
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from rocketflow.client.admin.results import (
    MASTER_ID,
    instance_counter,
)
from rocketflow.client.api import ADMIN_RPC_TIMEOUT
from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQBrokerError, MQClientError, MQError, MQRemotingError
from rocketflow.client.instance import ClientInstance
from rocketflow.protocol.bodies import (
    ConsumerConnection,
    KVTable,
    TopicRouteData,
    WireBody,
)
from rocketflow.protocol.names import retry_topic
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import (
    CommandHeader,
)

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_BodyT = TypeVar("_BodyT", bound=WireBody)



class AdminCore:
    """The admin's client instance, its lifecycle and the raw requests every admin operation is made of.
    ``timeout`` (seconds) bounds each request."""

    def __init__(self, namesrv: str | None = None, *, timeout: float = ADMIN_RPC_TIMEOUT,
                 client_config: ClientConfig | None = None, **client_settings: Any) -> None:
        """``client_settings`` are `ClientConfig` fields; ``namesrv`` is ``"host:port;host:port"``."""
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise MQClientError(f"timeout must be a positive number of seconds, got {timeout!r}")
        settings = dict(client_settings)
        if namesrv is not None:
            settings["namesrv_addr"] = namesrv
        settings.setdefault("instance_name", f"rocketflow-admin-{os.getpid()}-{next(instance_counter)}")
        settings.setdefault("mq_client_api_timeout", float(timeout))
        try:
            config = client_config.copy(**settings) if client_config is not None else ClientConfig(**settings)
        except TypeError as exc:
            raise MQClientError(f"invalid admin settings: {exc}") from None
        if not config.namesrv_addresses():
            raise MQClientError("no name server address: pass namesrv='host:port' "
                                "(or set the NAMESRV_ADDR environment variable)")
        self.client_config = config
        self.timeout = float(timeout)
        self._instance: ClientInstance | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the admin's client instance (no-op when running)."""
        if self._instance is not None:
            return
        instance = ClientInstance.get_or_create(self.client_config)
        instance.start()
        self._instance = instance

    def shutdown(self) -> None:
        """Release the client instance (idempotent)."""
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.shutdown()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise MQClientError("the admin is not started; call start() or use it as a context manager")
        return self._instance

    @property
    def namesrv_addresses(self) -> list[str]:
        return self.client_config.namesrv_addresses()

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.instance.run(coro)

    # ------------------------------------------------------------------ raw requests (on the loop)

    async def _invoke(self, addr: str, code: int, header: CommandHeader | None = None, body: bytes = b"",
                      *ok_codes: int) -> RemotingCommand:
        api = self.instance.api
        request = RemotingCommand.request(code, header.to_ext_fields() if header is not None else None, body,
                                          language=api.language)
        response = await api.invoke(addr, request, self.timeout)
        if response.code not in (ok_codes or (ResponseCode.SUCCESS,)):
            raise MQBrokerError(response.code, response.remark, addr)
        return response

    @staticmethod
    def _decode(cls: type[_BodyT], response: RemotingCommand, addr: str) -> _BodyT:
        try:
            return cls.decode(response.body)
        except ProtocolError as exc:
            raise MQRemotingError(f"malformed {cls.__name__} from {addr}: {exc}", addr) from exc

    async def _route(self, topic: str) -> TopicRouteData:
        route = await self.instance.api.get_topic_route(topic, self.timeout)
        if route is None:
            raise MQClientError(f"topic {topic!r} does not exist (the name server has no route for it)",
                                ResponseCode.TOPIC_NOT_EXIST)
        return route

    @staticmethod
    def _route_masters(route: TopicRouteData) -> dict[str, str]:
        """Broker name -> master address (or any address when the master is gone) of a route."""
        result: dict[str, str] = {}
        for broker in route.broker_datas:
            addr = broker.broker_addrs.get(MASTER_ID) or broker.select_broker_addr()
            if addr:
                result[broker.broker_name] = addr
        return result

    async def _target_masters(self, cluster: str | None, broker_addr: str | None) -> list[str]:
        """Master addresses for a create/update/delete: ``broker_addr``, the masters of ``cluster``, or
        those of the only cluster there is."""
        if broker_addr is not None:
            if cluster is not None:
                raise MQClientError("pass either a cluster or a broker address, not both")
            return [broker_addr]
        info = await self.instance.api.get_broker_cluster_info(self.timeout)
        if cluster is None:
            clusters = sorted(info.cluster_addr_table)
            if len(clusters) != 1:
                raise MQClientError(f"there are {len(clusters)} clusters ({', '.join(clusters) or 'none'}); "
                                    "name one with -c/--cluster or a broker with -b/--broker")
            cluster = clusters[0]
        names = info.cluster_addr_table.get(cluster)
        if names is None:
            raise MQClientError(f"no cluster named {cluster!r} (known: {', '.join(sorted(info.cluster_addr_table))})")
        masters = [info.broker_addr_table[name].broker_addrs[MASTER_ID] for name in sorted(names)
                   if name in info.broker_addr_table and MASTER_ID in info.broker_addr_table[name].broker_addrs]
        if not masters:
            raise MQClientError(f"cluster {cluster!r} has no master broker online")
        return masters

    async def _runtime_info(self, addr: str) -> dict[str, str]:
        response = await self._invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict(self._decode(KVTable, response, addr).table)

    async def _group_brokers(self, group: str, topic: str | None) -> list[str]:
        """Masters that may hold the group's offsets: the retry topic's and ``topic``'s brokers, else all."""
        api = self.instance.api
        addrs: dict[str, str] = {}
        for name in ([topic] if topic else []) + [retry_topic(group)]:
            route = await api.get_topic_route(name, self.timeout)
            if route is not None:
                addrs.update(self._route_masters(route))
        if not addrs:
            info = await api.get_broker_cluster_info(self.timeout)
            addrs = {name: broker.broker_addrs.get(MASTER_ID) or broker.select_broker_addr() or ""
                     for name, broker in info.broker_addr_table.items()}
        return [addr for _, addr in sorted(addrs.items()) if addr]

    async def _consumer_connections(self, group: str) -> ConsumerConnection:
        last_error: MQError | None = None
        for addr in await self._group_brokers(group, None):
            try:
                return await self.instance.api.get_consumer_connection_list(addr, group, self.timeout)
            except MQError as exc:
                last_error = exc
        if last_error is not None:
            raise last_error
        raise MQClientError("no broker online to ask")


__all__ = ["AdminCore"]
