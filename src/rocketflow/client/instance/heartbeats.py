"""`Heartbeats`: how a client instance keeps the brokers knowing its producers and consumers.

A HEART_BEAT to every known broker every ``heartbeat_broker_interval`` (all addresses when consumers
run, masters only otherwise) announces the producer groups, the inner producer group and each
consumer's subscriptions; its answer records the broker's version. Out of turn (`heartbeat_soon`,
at most once per ``heartbeat_on_demand_interval``): after reconnecting to a broker that may have
restarted, when a new broker joins a route, or when a pull finds the broker has forgotten a
subscription. `broker_reachable` probes a broker that went down so its pulls resume as soon as it
is back. Unregistering a group sends UNREGISTER_CLIENT to every known broker.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Final

from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.instance.routes import RouteTables
from rocketflow.client.instance.runtime import LIFECYCLE_TIMEOUT, maybe_await
from rocketflow.client.route import MASTER_ID
from rocketflow.net import RemotingError
from rocketflow.protocol.bodies import ConsumerData, HeartbeatData, ProducerData

logger = logging.getLogger(__name__)

#: The producer group every instance announces (RocketMQ's ``MixAll.CLIENT_INNER_PRODUCER_GROUP``).
CLIENT_INNER_PRODUCER_GROUP: Final = "CLIENT_INNER_PRODUCER"


class Heartbeats(RouteTables):
    """Heartbeats to the brokers, out of turn when needed, and unregistering from them."""

    def __init__(self, config: ClientConfig, client_id: str | None = None) -> None:
        super().__init__(config, client_id)
        self._heartbeat_lock: asyncio.Lock | None = None
        #: the heartbeats out of turn waiting to start and running (see `heartbeat_soon`)
        self._pending_heartbeat: asyncio.Future[None] | None = None
        self._running_heartbeat: asyncio.Future[None] | None = None
        self._last_on_demand_heartbeat = -math.inf
        #: broker addresses this instance had a connection to (a new one to them is a reconnection)
        self._connected_before: set[str] = set()
        #: broker address -> resolved when a connection to it opens (see `broker_reachable`)
        self._reconnect_waiters: dict[str, asyncio.Future[bool]] = {}

    # ------------------------------------------------------------------ heartbeats

    async def _prepare_heartbeat(self) -> HeartbeatData:
        producers = [ProducerData(group) for group in sorted(self.producers())]
        if CLIENT_INNER_PRODUCER_GROUP not in self.producers():
            producers.append(ProducerData(CLIENT_INNER_PRODUCER_GROUP))
        consumers: list[ConsumerData] = []
        for group, consumer in sorted(self.consumers().items()):
            try:
                data = await maybe_await(consumer.consumer_data())
            except Exception:
                logger.exception("%s: consumer_data() of %s failed", self.client_id, group)
                continue
            if isinstance(data, ConsumerData):
                consumers.append(data)
        return HeartbeatData(self.client_id, producers, consumers)

    async def send_heartbeat_to_all_brokers(self) -> None:
        """HEART_BEAT to every known broker: all addresses if there are consumers, masters otherwise."""
        lock = self._heartbeat_lock
        if lock is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        async with lock:
            if not self.producers() and not self.consumers():
                return
            data = await self._prepare_heartbeat()
            targets = [
                (broker_name, addr)
                for broker_name, addrs in list(self.broker_addr_table.items())
                for broker_id, addr in sorted(addrs.items())
                if data.consumer_data_set or broker_id == MASTER_ID
            ]
            results = await asyncio.gather(
                *(self.api.heartbeat(addr, data, self.config.mq_client_api_timeout) for _, addr in targets),
                return_exceptions=True)
            for (broker_name, addr), result in zip(targets, results, strict=True):
                if isinstance(result, int):
                    self.broker_version_table.setdefault(broker_name, {})[addr] = result
                elif isinstance(result, MQError):
                    logger.warning("%s: heartbeat to %s (%s) failed: %s", self.client_id, broker_name, addr, result)
                elif isinstance(result, BaseException):
                    raise result


    def heartbeat_soon(self, reason: str, *, join_running: bool = False) -> asyncio.Future[None]:
        """A heartbeat to every broker out of turn (on the loop), done when the returned future is.

        Callers asking before it starts share it; with ``join_running``, a caller may also share one that
        already runs (its data and targets were taken before the call). One starts at most once per
        ``heartbeat_on_demand_interval``, so a broker that keeps refusing costs a heartbeat a second, not
        one per failed pull. Failures are logged; the future completes either way.
        """
        running = self._running_heartbeat
        if join_running and running is not None and not running.done():
            return running
        pending = self._pending_heartbeat
        if pending is not None and not pending.done():
            return pending
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending_heartbeat = future
        delay = self._last_on_demand_heartbeat + self.config.heartbeat_on_demand_interval - loop.time()

        async def run() -> None:
            if delay > 0:
                await asyncio.sleep(delay)
            self._pending_heartbeat = None
            self._running_heartbeat = future
            self._last_on_demand_heartbeat = loop.time()
            logger.info("%s: heartbeat to every broker out of turn (%s)", self.client_id, reason)
            await self._heartbeat_quietly()

        def settle(_task: asyncio.Task[None]) -> None:
            if self._pending_heartbeat is future:
                self._pending_heartbeat = None
            if not future.done():
                future.set_result(None)

        task = loop.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(settle)
        return future

    def broker_reachable(self, addr: str, within: float) -> asyncio.Future[bool]:
        """Resolves True as soon as a connection to ``addr`` opens (a probe tries to connect every
        ``broker_reconnect_probe_interval``), or False after ``within`` seconds: so the pulls of a broker
        that went down resume as soon as it is back rather than at their next retry."""
        waiter = self._reconnect_waiters.get(addr)
        if waiter is not None and not waiter.done():
            return waiter
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._reconnect_waiters[addr] = waiter
        self._spawn(self._probe_broker(addr, waiter, loop.time() + within))
        return waiter

    async def _probe_broker(self, addr: str, waiter: asyncio.Future[bool], deadline: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not waiter.done() and not self._stopping:
                pause = min(self.config.broker_reconnect_probe_interval, deadline - loop.time())
                if pause <= 0:
                    break
                await asyncio.sleep(pause)
                if waiter.done():
                    break
                try:
                    await self.api.remoting.get_channel(addr)
                except RemotingError:
                    continue
                if not waiter.done():  # the connection was open already (no `_on_connect`)
                    waiter.set_result(True)
        finally:
            if self._reconnect_waiters.get(addr) is waiter:
                del self._reconnect_waiters[addr]
            if not waiter.done():
                waiter.set_result(False)

    def _on_connect(self, addr: str) -> None:
        """A new connection: to a broker we were connected to before, it may have restarted and forgotten
        our producers and consumers, so introduce ourselves now (not at the next periodic round)."""
        waiter = self._reconnect_waiters.pop(addr, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(True)
        if not any(addr in addrs.values() for addrs in self.broker_addr_table.values()):
            return
        if addr in self._connected_before and (self.consumers() or self.producers()) and not self._stopping:
            self.heartbeat_soon(f"reconnected to {addr}")
        self._connected_before.add(addr)

    async def _heartbeat_quietly(self) -> None:
        try:
            await self.send_heartbeat_to_all_brokers()
        except Exception as exc:  # the periodic round retries
            logger.warning("%s: heartbeat out of turn failed: %s", self.client_id, exc)

    async def _heartbeat_round(self) -> None:
        self.clean_offline_brokers()
        await self.send_heartbeat_to_all_brokers()

    async def unregister_client(self, *, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        """UNREGISTER_CLIENT to every known broker address (failures are logged)."""
        addrs = [addr for addrs in list(self.broker_addr_table.values()) for addr in addrs.values()]
        if not addrs or self._api is None:
            return
        results = await asyncio.gather(
            *(self._api.unregister_client(addr, self.client_id, producer_group=producer_group,
                                          consumer_group=consumer_group, timeout=self.config.mq_client_api_timeout)
              for addr in addrs),
            return_exceptions=True)
        for addr, result in zip(addrs, results, strict=True):
            if isinstance(result, BaseException):
                logger.info("%s: unregister from %s failed: %s", self.client_id, addr, result)

    def _broker_joined(self) -> None:
        # a broker learns of a producer group from its heartbeat, and looks there for whom to ask when it
        # checks a transaction back: introduce ourselves now rather than at the next periodic round
        self.heartbeat_soon("a broker joined a route")

    # ------------------------------------------------------------------ unregistering

    def unregister_producer(self, group: str) -> None:
        """Forget a producer group and tell the brokers (UNREGISTER_CLIENT), best effort."""
        with self._clients_lock:
            removed = self._producers.pop(group, None) is not None
        if removed:
            self._unregister_remote(producer_group=group)

    def unregister_consumer(self, group: str) -> None:
        """Forget a consumer group and tell the brokers (UNREGISTER_CLIENT), best effort."""
        with self._clients_lock:
            removed = self._consumers.pop(group, None) is not None
        if removed:
            self._unregister_remote(consumer_group=group)

    def _unregister_remote(self, *, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        if not self.started:
            return
        coro = self.unregister_client(producer_group=producer_group, consumer_group=consumer_group)
        if self.in_loop_thread():
            self._spawn(coro)
        else:
            try:
                self.run(coro, LIFECYCLE_TIMEOUT)
            except MQError as exc:
                logger.warning("%s: unregistering %s from the brokers failed: %s", self.client_id,
                               producer_group or consumer_group, exc)


__all__ = ["CLIENT_INNER_PRODUCER_GROUP", "Heartbeats"]
