"""`ClusterAdmin`: the cluster's brokers, their settings and runtime figures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from rocketflow.client.admin.core import AdminCore
from rocketflow.client.admin.results import (
    BrokerStatus,
    first_number,
)
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.protocol.bodies import (
    ClusterInfo,
)
from rocketflow.remoting.codes import RequestCode

logger = logging.getLogger(__name__)

class ClusterAdmin(AdminCore):
    """Cluster and broker operations."""

    # ------------------------------------------------------------------ cluster

    def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO from the name server."""
        return self._run(self.instance.api.get_broker_cluster_info(self.timeout))

    def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO of one broker."""
        return self._run(self._runtime_info(addr))

    def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG of one broker: its settings by RocketMQ name (``mqadmin getBrokerConfig``)."""
        response = self._run(self._invoke(addr, RequestCode.GET_BROKER_CONFIG))
        settings: dict[str, str] = {}
        for line in response.body.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.lstrip().startswith(("#", "!")):
                settings[key.strip()] = value.strip()
        return settings

    def update_broker_config(self, addr: str, settings: Mapping[str, object]) -> None:
        """UPDATE_BROKER_CONFIG: change settings of a running broker (``mqadmin updateBrokerConfig``).

        Keys are RocketMQ's names (``brokerPermission``, ``maxMessageSize``...); `MQBrokerError` if the
        broker refuses them (unknown, invalid, or fixed at start).
        """
        if not settings:
            raise MQClientError("no settings to update")
        lines = []
        for key, value in settings.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            if not key or any(ch in key for ch in "=:\n\r") or "\n" in text or "\r" in text:
                raise MQClientError(f"cannot send the setting {key!r}={text!r} as a property line")
            lines.append(f"{key}={text}")
        self._run(self._invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, None, ("\n".join(lines) + "\n").encode()))

    def cluster_overview(self) -> list[BrokerStatus]:
        """Every broker address of every cluster with its version and put/get TPS (unreachable ones with ``error``)."""
        return self._run(self._cluster_overview())

    async def _cluster_overview(self) -> list[BrokerStatus]:
        info = await self.instance.api.get_broker_cluster_info(self.timeout)
        entries = [(cluster, name, broker_id, addr)
                   for cluster in sorted(info.cluster_addr_table)
                   for name in sorted(info.cluster_addr_table[cluster]) if name in info.broker_addr_table
                   for broker_id, addr in sorted(info.broker_addr_table[name].broker_addrs.items())]
        results = await asyncio.gather(*(self._runtime_info(addr) for *_, addr in entries), return_exceptions=True)
        statuses: list[BrokerStatus] = []
        for (cluster, name, broker_id, addr), result in zip(entries, results, strict=True):
            if isinstance(result, MQError):
                statuses.append(BrokerStatus(cluster, name, broker_id, addr, error=str(result)))
            elif isinstance(result, BaseException):
                raise result
            else:
                statuses.append(BrokerStatus(cluster, name, broker_id, addr, result.get("brokerVersionDesc", ""),
                                             first_number(result.get("putTps")),
                                             first_number(result.get("getTransferedTps"))))
        return statuses

    def reserved_topic_names(self) -> set[str]:
        """The cluster and broker names (brokers register them as topics)."""
        info = self.cluster_info()
        return set(info.cluster_addr_table) | set(info.broker_addr_table)


__all__ = ["ClusterAdmin"]
