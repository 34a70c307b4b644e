"""A master's replication service (RocketMQ's HAService, HAConnection and GroupTransferService).

It listens on the HA port, streams the commit log to every slave that connects from the offset
the slave reports, and keeps the highest offset a slave has acknowledged, which SYNC_MASTER puts
wait for. It runs on the broker's event loop; the store tells it about new data through an
append listener, which may fire on any thread.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import threading
import time

from rocketflow.store.ha.protocol import HAProtocolError, OffsetReportReader, encode_transfer_header
from rocketflow.store.message_store import MessageStore

log = logging.getLogger(__name__)

_READ_SIZE = 64 * 1024


class HAService:
    """Serves slaves on ``host:port`` (port 0 = any free port) for one master store."""

    def __init__(self, store: MessageStore, host: str, port: int) -> None:
        self.store = store
        self.host = host
        self._port = port
        config = store.config
        self.transfer_batch_size = config.ha_transfer_batch_size
        self.heartbeat_interval = config.ha_send_heartbeat_interval_ms / 1000
        self.housekeeping_interval = config.ha_housekeeping_interval_ms / 1000
        #: the highest commit-log offset any slave has acknowledged (RocketMQ's push2SlaveMaxOffset)
        self.push_to_slave_max_offset = 0
        self.connections: set[HAConnection] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        # SYNC_MASTER puts waiting for an acknowledgement: (offset, sequence, future), by offset
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._sequence = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The port listened on (the real one once started)."""
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._server = await asyncio.start_server(self._accept, self.host, self._port)
        self.store.add_append_listener(self._on_append)
        log.info("HA service listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        for connection in list(self.connections):
            connection.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for _, _, future in self._waiters:
            if not future.done():
                future.set_result(False)
        self._waiters.clear()

    # -- SYNC_MASTER ------------------------------------------------------------------------
    def is_slave_ok(self, master_put_where: int) -> bool:
        """A slave is connected and less than `ha_slave_fallbehind_max` bytes behind `master_put_where`."""
        return bool(self.connections) and \
            master_put_where - self.push_to_slave_max_offset < self.store.config.ha_slave_fallbehind_max

    async def wait_for_slave(self, offset: int, timeout: float) -> bool:
        """True once a slave has acknowledged everything below `offset`, False after `timeout` seconds."""
        if self.push_to_slave_max_offset >= offset:
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (offset, next(self._sequence), future)
        bisect.insort(self._waiters, entry, key=lambda item: (item[0], item[1]))
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            return False
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    def _acknowledged(self, offset: int) -> None:
        if offset <= self.push_to_slave_max_offset:
            return
        self.push_to_slave_max_offset = offset
        waiters = self._waiters
        done = 0
        while done < len(waiters) and waiters[done][0] <= offset:
            future = waiters[done][2]
            if not future.done():
                future.set_result(True)
            done += 1
        del waiters[:done]

    # -- new data ---------------------------------------------------------------------------
    def _on_append(self, _end_offset: int) -> None:
        if not self.connections:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake_senders()
        elif self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake_senders)

    def _wake_senders(self) -> None:
        for connection in self.connections:
            connection.new_data.set()

    # -- connections ------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = HAConnection(self, reader, writer)
        self.connections.add(connection)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        log.info("slave %s connected for replication", connection.peer)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            if task is not None:
                self._tasks.discard(task)
            log.info("slave %s disconnected (acknowledged up to %d)", connection.peer, connection.ack_offset)

    def stats(self) -> dict[str, str]:
        """Replication figures for the broker's runtime info."""
        return {
            "haConnections": str(len(self.connections)),
            "haPushToSlaveMaxOffset": str(self.push_to_slave_max_offset),
            "haSlaveFallBehindBytes": str(max(0, self.store.commit_log.max_offset - self.push_to_slave_max_offset))
            if self.connections else "",
        }


class HAConnection:
    """One slave: reads its offset reports, sends it the commit log from where it asked."""

    def __init__(self, service: HAService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        #: where the slave asked to start (its log's end when it connected); -1 until it reports
        self.request_offset = -1
        #: the newest offset the slave acknowledged
        self.ack_offset = -1
        self._requested = asyncio.Event()
        #: set when the store has new data to send
        self.new_data = asyncio.Event()
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.writer.close()

    async def run(self) -> None:
        sender = asyncio.get_running_loop().create_task(self._send())
        try:
            await self._receive()
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            self.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _receive(self) -> None:
        service = self.service
        reports = OffsetReportReader()
        while not self._closed:
            try:
                async with asyncio.timeout(service.housekeeping_interval):
                    data = await self.reader.read(_READ_SIZE)
            except TimeoutError:
                log.warning("slave %s sent nothing for %.0f s: closing its replication connection", self.peer,
                            service.housekeeping_interval)
                return
            except OSError as exc:
                log.info("slave %s: %s", self.peer, exc)
                return
            if not data:
                return
            try:
                offset = reports.feed(data)
            except HAProtocolError as exc:
                log.warning("slave %s: %s; closing its replication connection", self.peer, exc)
                return
            if offset is None:
                continue
            end = service.store.commit_log.max_offset
            if offset > end:
                # a slave ahead of its master has another log (or this master lost data): never serve it
                log.warning("slave %s %s offset %d, beyond this master's commit log end %d: closing", self.peer,
                            "asked for" if self.request_offset < 0 else "acknowledged", offset, end)
                return
            if self.request_offset < 0:
                self.request_offset = offset
                self._requested.set()
                log.info("slave %s asks for the commit log from offset %d", self.peer, offset)
            self.ack_offset = offset
            service._acknowledged(offset)

    async def _send(self) -> None:
        service = self.service
        commit_log = service.store.commit_log
        await self._requested.wait()
        if self.request_offset == 0:
            # an empty slave starts at the master's last segment, as in RocketMQ
            end = commit_log.max_offset
            next_offset = max(0, end - end % commit_log.segment_size)
        else:
            next_offset = self.request_offset
        log.info("sending the commit log to slave %s from offset %d", self.peer, next_offset)
        if next_offset < commit_log.min_offset:
            log.warning("slave %s asks for offset %d, but this master's commit log starts at %d (older segments "
                        "were deleted): it cannot catch up; give it an empty store", self.peer, next_offset,
                        commit_log.min_offset)
        last_write = time.monotonic()
        writer = self.writer
        try:
            while not self._closed:
                self.new_data.clear()  # before looking: an append from now on wakes the wait below
                data = commit_log.data_from(next_offset, service.transfer_batch_size)
                if data:
                    writer.write(encode_transfer_header(next_offset, len(data)))
                    writer.write(data)
                    next_offset += len(data)
                    last_write = time.monotonic()
                    await writer.drain()
                    continue
                if time.monotonic() - last_write >= service.heartbeat_interval:
                    writer.write(encode_transfer_header(next_offset, 0))
                    last_write = time.monotonic()
                    await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(1.0, service.heartbeat_interval)):
                        await self.new_data.wait()
        except (ConnectionError, OSError) as exc:
            log.info("slave %s: %s", self.peer, exc)
            self.close()


__all__ = ["HAConnection", "HAService"]
