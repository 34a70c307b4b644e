"""A slave's replication client (RocketMQ's HAService.HAClient).

It connects to the master's HA address, reports where its commit log ends, stores the bytes the
master streams (dispatching whole records as they complete), acknowledges after each read, and
reports at least every `ha_send_heartbeat_interval_ms`. A stream that does not continue the log
exactly, or that is silent past `ha_housekeeping_interval_ms`, is dropped and reconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from rocketflow.background import BackgroundTask
from rocketflow.store.errors import StoreNotRunningError
from rocketflow.store.ha.protocol import HAProtocolError, TransferReader, encode_offset_report
from rocketflow.store.message_store import MessageStore

log = logging.getLogger(__name__)

_READ_SIZE = 256 * 1024
#: a slave takes transfers up to this size whatever the master's batch size (RocketMQ's read buffer)
MAX_TRANSFER_SIZE = 4 * 1024 * 1024


class HAClient:
    """Replicates the master at `master_address` (host:port; None until known) into `store`."""

    def __init__(self, store: MessageStore, master_address: str | None = None) -> None:
        self.store = store
        self.master_address = master_address
        config = store.config
        self.heartbeat_interval = config.ha_send_heartbeat_interval_ms / 1000
        self.housekeeping_interval = config.ha_housekeeping_interval_ms / 1000
        self.max_transfer_size = max(MAX_TRANSFER_SIZE, config.ha_transfer_batch_size)
        #: the offset last reported to the master
        self.reported_offset = -1
        #: whether a replication connection is up
        self.connected = False
        self._address_changed = asyncio.Event()
        self._task = BackgroundTask(self._run)
        self._writer: asyncio.StreamWriter | None = None

    def update_master_address(self, address: str | None) -> None:
        """Replicate from `address` from now on (the name server's answer to a registration)."""
        if address == self.master_address:
            return
        log.info("replication master changes from %s to %s", self.master_address, address)
        self.master_address = address
        self._address_changed.set()
        if self._writer is not None:
            self._writer.close()

    async def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        while True:
            address = self.master_address
            if address is None:
                self._address_changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._address_changed.wait()
                continue
            try:
                await self._session(address)
            except asyncio.CancelledError:
                raise
            except (OSError, HAProtocolError, ValueError, StoreNotRunningError) as exc:
                log.warning("replication from %s stopped: %s", address, exc)
            except Exception:
                log.exception("replication from %s failed", address)
            finally:
                self.connected = False
                self._writer = None
            if self.master_address == address:
                self._address_changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(5.0, self.heartbeat_interval)):
                        await self._address_changed.wait()

    async def _session(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        async with asyncio.timeout(5.0):
            reader, writer = await asyncio.open_connection(host, int(port))
        self._writer = writer
        self.connected = True
        store = self.store
        transfers = TransferReader(self.max_transfer_size)
        try:
            log.info("replicating from master %s, commit log ends at %d", address, store.commit_log.max_offset)
            await self._report(writer, store.commit_log.max_offset)
            last_report = last_read = time.monotonic()
            while True:
                timeout = max(0.01, min(self.heartbeat_interval - (time.monotonic() - last_report),
                                        self.housekeeping_interval - (time.monotonic() - last_read)))
                data: bytes | None = None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        data = await reader.read(_READ_SIZE)
                now = time.monotonic()
                if data is not None:
                    if not data:
                        log.info("master %s closed the replication connection", address)
                        return
                    last_read = now
                    for transfer in transfers.feed(data):
                        self._store(transfer.offset, transfer.data)
                elif now - last_read >= self.housekeeping_interval:
                    log.warning("master %s sent nothing for %.0f s: reconnecting", address, self.housekeeping_interval)
                    return
                end = store.commit_log.max_offset
                if end != self.reported_offset or now - last_report >= self.heartbeat_interval:
                    await self._report(writer, end)
                    last_report = now
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _store(self, offset: int, data: bytes) -> None:
        end = self.store.commit_log.max_offset
        if end and offset != end:
            # the master sends what follows the offset the slave reported; anything else is a bug or
            # another master's log: drop the connection (RocketMQ does the same)
            raise HAProtocolError(f"master sent data at {offset}, but this slave's commit log ends at {end}")
        if data:
            self.store.append_to_commit_log(offset, data)

    async def _report(self, writer: asyncio.StreamWriter, offset: int) -> None:
        writer.write(encode_offset_report(offset))
        await writer.drain()
        self.reported_offset = offset


__all__ = ["MAX_TRANSFER_SIZE", "HAClient"]
