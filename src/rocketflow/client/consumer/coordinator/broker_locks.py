"""The broker's queue locks a consumer takes for orderly consumption (LOCK_BATCH_MQ, UNLOCK_BATCH_MQ).

In clustering mode an orderly consumer holds a queue only while the queue's master broker has it
locked for the consumer's client id: the rebalance locks a new queue before taking it (`lock`), the
orderly consume service renews the locks of every held queue (`lock_all`, 1 s after start and then
every ``lock_interval``) and a queue given up is unlocked (`unlock`; at shutdown `unlock_all`). Each
process queue records whether its lock is held (``locked``) and when it was last confirmed
(``last_lock_timestamp``); a lock not renewed for ``lock_max_live_time`` counts as lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.errors import MQError
from rocketflow.client.instance import ClientInstance
from rocketflow.client.route import MASTER_ID
from rocketflow.protocol.bodies import LockBatchRequestBody, UnlockBatchRequestBody
from rocketflow.protocol.message import MessageQueue

logger = logging.getLogger(__name__)

#: Timeout of LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (seconds).
LOCK_TIMEOUT: Final = 1.0


class BrokerQueueLocks:
    """The broker locks of a rebalance's held queues (a base of `RebalanceImpl`, which provides the
    group, the client instance and the process-queue table)."""

    consumer_group: str
    process_queue_table: dict[MessageQueue, ProcessQueue]
    instance: ClientInstance

    def build_process_queue_table_by_broker_name(self) -> dict[str, set[MessageQueue]]:
        """The held queues grouped by broker name."""
        result: dict[str, set[MessageQueue]] = {}
        for mq in list(self.process_queue_table):
            result.setdefault(mq.broker_name, set()).add(mq)
        return result

    def _master_addr(self, broker_name: str) -> str | None:
        found = self.instance.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)
        return found.broker_addr if found is not None else None

    async def lock(self, mq: MessageQueue) -> bool:
        """Lock one queue at its master; True if this client holds it now."""
        addr = self._master_addr(mq.broker_name)
        if addr is None:
            return False
        instance = self.instance
        body = LockBatchRequestBody(self.consumer_group, instance.client_id, {mq})
        try:
            locked = await instance.api.lock_batch_mq(addr, body, LOCK_TIMEOUT)
        except MQError as exc:
            logger.warning("%s: locking %s failed: %s", self.consumer_group, mq, exc)
            return False
        for locked_mq in locked:
            pq = self.process_queue_table.get(locked_mq)
            if pq is not None:
                pq.locked = True
                pq.last_lock_timestamp = pq.now_ms()
        return mq in locked

    async def lock_all(self) -> None:
        """Lock (or renew) every held queue, one LOCK_BATCH_MQ per broker; flag each process queue."""
        instance = self.instance
        for broker_name, mqs in self.build_process_queue_table_by_broker_name().items():
            addr = self._master_addr(broker_name)
            if addr is None or not mqs:
                continue
            body = LockBatchRequestBody(self.consumer_group, instance.client_id, set(mqs))
            try:
                locked = await instance.api.lock_batch_mq(addr, body, LOCK_TIMEOUT)
            except MQError as exc:
                logger.warning("%s: locking %d queues of %s failed: %s", self.consumer_group, len(mqs),
                               broker_name, exc)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in locked:
                    if not pq.locked:
                        logger.info("%s: %s locked", self.consumer_group, mq)
                    pq.locked = True
                    pq.last_lock_timestamp = pq.now_ms()
                else:
                    if pq.locked:
                        logger.warning("%s: lost the lock of %s", self.consumer_group, mq)
                    pq.locked = False

    async def unlock(self, mq: MessageQueue, oneway: bool) -> None:
        """Release one queue's broker lock (failures are logged)."""
        await self._unlock_batch(mq.broker_name, {mq}, oneway)

    async def unlock_all(self, oneway: bool) -> None:
        """Release the broker locks of every held queue, one UNLOCK_BATCH_MQ per broker."""
        for broker_name, mqs in self.build_process_queue_table_by_broker_name().items():
            if mqs and await self._unlock_batch(broker_name, mqs, oneway):
                for mq in mqs:
                    pq = self.process_queue_table.get(mq)
                    if pq is not None:
                        pq.locked = False

    async def _unlock_batch(self, broker_name: str, mqs: Iterable[MessageQueue], oneway: bool) -> bool:
        addr = self._master_addr(broker_name)
        if addr is None:
            return False
        instance = self.instance
        body = UnlockBatchRequestBody(self.consumer_group, instance.client_id, set(mqs))
        try:
            await instance.api.unlock_batch_mq(addr, body, LOCK_TIMEOUT, oneway=oneway)
        except MQError as exc:
            logger.warning("%s: unlocking %s failed: %s", self.consumer_group, sorted(body.mq_set), exc)
            return False
        logger.info("%s: unlocked %s", self.consumer_group, sorted(body.mq_set))
        return True


__all__ = ["LOCK_TIMEOUT", "BrokerQueueLocks"]
