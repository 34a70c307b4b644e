"""`RemotingServer`: accepts remoting connections and routes requests to processors by code."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Final

from rocketflow.net.connection import (
    Channel,
    ChannelCallback,
    GroupProcessor,
    Processor,
    RequestDispatcher,
    RequestHook,
    run_channel_callback,
    sweep_idle_channels,
)
from rocketflow.net.tls import TlsListener, TlsServerSettings
from rocketflow.remoting.frame import DEFAULT_MAX_FRAME_SIZE

logger = logging.getLogger(__name__)

#: NettyServerConfig.serverChannelMaxIdleTimeSeconds.
DEFAULT_CHANNEL_MAX_IDLE_SECONDS: Final = 120.0
#: Requests whose async processors may run at once before new ones get SYSTEM_BUSY.
DEFAULT_MAX_INFLIGHT_REQUESTS: Final = 20_000
DEFAULT_SHUTDOWN_GRACE_SECONDS: Final = 1.0


class RemotingServer:
    """An asyncio remoting server on one event loop.

    Register processors with `register` / `register_default`, then `start()` (or ``async with``).
    Requests without a processor are answered REQUEST_CODE_NOT_SUPPORTED; a processor that raises
    yields SYSTEM_ERROR; oneway requests are never answered. ``on_connect`` / ``on_close`` are called
    with the `Channel` when a client connects / goes away (sync or async callables). With ``tls``
    settings that have a certificate, the server accepts TLS connections as their mode says (see
    `rocketflow.net.tls`).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        name: str = "server",
        channel_max_idle_seconds: float | None = DEFAULT_CHANNEL_MAX_IDLE_SECONDS,
        max_inflight_requests: int | None = DEFAULT_MAX_INFLIGHT_REQUESTS,
        shutdown_grace_seconds: float = DEFAULT_SHUTDOWN_GRACE_SECONDS,
        on_connect: ChannelCallback | None = None,
        on_close: ChannelCallback | None = None,
        tls: TlsServerSettings | None = None,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
        if max_frame_size < 8:
            raise ValueError(f"max_frame_size must be at least 8 bytes, got {max_frame_size}")
        if channel_max_idle_seconds is not None and channel_max_idle_seconds <= 0:
            raise ValueError(
                f"channel_max_idle_seconds must be positive or None, got {channel_max_idle_seconds}"
            )
        if shutdown_grace_seconds < 0:
            raise ValueError(f"shutdown_grace_seconds must not be negative, got {shutdown_grace_seconds}")
        self.host = host
        self.name = name
        self.max_frame_size = max_frame_size
        self.channel_max_idle_seconds = channel_max_idle_seconds
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.on_connect = on_connect
        self.on_close = on_close
        self._requested_port = port
        self._port: int | None = None
        self._dispatcher = RequestDispatcher(name, max_inflight_requests=max_inflight_requests)
        self._server: asyncio.Server | TlsListener | None = None
        self.tls = tls
        # built now so that unusable certificate files fail the constructor, not the first client
        self._tls_context = tls.build_context() if tls is not None and tls.enabled else None
        self._channels: dict[int, Channel] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._callback_tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ configuration

    def register(self, code: int, processor: Processor, *, group: GroupProcessor | None = None) -> None:
        """Route requests with ``code`` to ``processor`` (replacing any earlier one).

        With ``group``, neighbouring requests of ``code`` that arrive in one read from a channel go to
        ``group`` together (each still passes the request hook on its own).
        """
        self._dispatcher.register(code, processor, group=group)

    def register_default(self, processor: Processor | None) -> None:
        """Route requests of every unregistered code to ``processor`` (None removes it)."""
        self._dispatcher.default_processor = processor

    def processor_for(self, code: int) -> Processor | None:
        """The processor requests with ``code`` go to (the default one when none is registered)."""
        return self._dispatcher.processor_for(code)

    def set_request_hook(self, hook: RequestHook | None) -> None:
        """Call ``hook(channel, request)`` before routing each request; a response it returns is sent
        instead (the request is not processed). None removes it."""
        self._dispatcher.request_hook = hook

    # ------------------------------------------------------------------ state

    @property
    def port(self) -> int:
        """The bound port (after `start`)."""
        if self._port is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` of the listening socket (after `start`)."""
        return f"{self.host}:{self.port}"

    @property
    def is_serving(self) -> bool:
        return self._server is not None

    @property
    def channels(self) -> tuple[Channel, ...]:
        """The open client connections."""
        return tuple(self._channels.values())

    @property
    def inflight_requests(self) -> int:
        """Requests whose async processors are still running."""
        return len(self._dispatcher.tasks)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind and start accepting connections."""
        if self._server is not None:
            raise RuntimeError(f"{self.name}: already started")
        loop = asyncio.get_running_loop()
        if self.tls is not None and self._tls_context is not None:
            listener = TlsListener(self._make_channel, self.tls, context=self._tls_context, name=self.name,
                                   first_byte_timeout=self.channel_max_idle_seconds)
            await listener.start(self.host, self._requested_port)
            self._server = listener
        else:
            self._server = await loop.create_server(self._make_channel, self.host, self._requested_port,
                                                    reuse_address=True)
        sockets = self._server.sockets
        self._port = int(sockets[0].getsockname()[1]) if sockets else self._requested_port
        if self.channel_max_idle_seconds is not None:
            self._sweeper = loop.create_task(
                sweep_idle_channels(self._channels.values, self.channel_max_idle_seconds, self.name)
            )
        logger.info("%s: listening on %s%s", self.name, self.address,
                    f" (TLS {self.tls.mode.value})" if self.tls is not None and self._tls_context else "")

    async def stop(self, grace_seconds: float | None = None) -> None:
        """Stop accepting, let running handlers finish (within the grace period), close every connection."""
        server = self._server
        if server is None:
            return
        self._server = None
        grace = self.shutdown_grace_seconds if grace_seconds is None else grace_seconds
        server.close()
        channels = list(self._channels.values())
        for channel in channels:
            channel.stop_reading()
        handlers = set(self._dispatcher.tasks)
        if handlers and grace > 0:
            await asyncio.wait(handlers, timeout=grace)
        await _cancel_all(handlers)
        await asyncio.gather(*(channel.close_and_wait(timeout=max(grace, 0.1)) for channel in channels))
        if self._sweeper is not None:
            await _cancel_all({self._sweeper})
            self._sweeper = None
        await server.wait_closed()
        await _cancel_all(set(self._callback_tasks))
        logger.info("%s: stopped (was %s)", self.name, f"{self.host}:{self._port}")

    async def __aenter__(self) -> RemotingServer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.stop()

    # ------------------------------------------------------------------ connections

    def _make_channel(self) -> Channel:
        return Channel(self._dispatcher, max_frame_size=self.max_frame_size,
                       pause_reading_on_backpressure=True, on_open=self._channel_opened,
                       on_lost=self._channel_lost)

    def _channel_opened(self, channel: Channel) -> None:
        if self._server is None:
            channel.close()
            return
        self._channels[channel.id] = channel
        logger.debug("%s: client connected from %s", self.name, channel.remote_address)
        run_channel_callback(self.on_connect, channel, "on_connect", self._callback_tasks)

    def _channel_lost(self, channel: Channel) -> None:
        if self._channels.pop(channel.id, None) is None:
            return
        logger.debug("%s: client %s disconnected", self.name, channel.remote_address)
        run_channel_callback(self.on_close, channel, "on_close", self._callback_tasks)


async def _cancel_all(tasks: set[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = [
    "DEFAULT_CHANNEL_MAX_IDLE_SECONDS",
    "DEFAULT_MAX_INFLIGHT_REQUESTS",
    "RemotingServer",
]
