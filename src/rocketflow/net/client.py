"""`RemotingClient`: one lazily opened connection per ``host:port``, request/response by opaque."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from types import TracebackType
from typing import Final

from rocketflow.net.connection import (
    Channel,
    Processor,
    RequestDispatcher,
    run_channel_callback,
    sweep_idle_channels,
)
from rocketflow.net.errors import (
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingError,
    RemotingTimeoutError,
)
from rocketflow.net.tls import TlsClientSettings, TlsHandshakeError, describe_tls_error
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.frame import DEFAULT_MAX_FRAME_SIZE

logger = logging.getLogger(__name__)

#: NettyClientConfig.connectTimeoutMillis.
DEFAULT_CONNECT_TIMEOUT: Final = 3.0
#: NettyClientConfig.clientChannelMaxIdleTimeSeconds.
DEFAULT_CLIENT_CHANNEL_MAX_IDLE_SECONDS: Final = 120.0


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 hosts may be bracketed); raise `RemotingConnectError` if malformed."""
    host, separator, port_text = address.strip().rpartition(":")
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not separator or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise RemotingConnectError(f"invalid address {address!r}: expected 'host:port'")
    return host, int(port_text)


class RemotingClient:
    """An asyncio remoting client.

    ``invoke(addr, request, timeout)`` connects on first use (``connect_timeout``), reconnects on the
    next use after the connection closed, and matches the response by opaque. Requests the server
    sends to us (e.g. NOTIFY_CONSUMER_IDS_CHANGED) go to handlers added with `register`; other codes
    are answered REQUEST_CODE_NOT_SUPPORTED unless oneway. ``on_disconnect(addr)`` is called whenever
    a connection closes, ``on_connect(addr)`` whenever one opens (before the request that opened it is
    sent). With ``tls`` settings every connection uses TLS (`TlsHandshakeError` when the handshake fails).
    """

    def __init__(
        self,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        channel_max_idle_seconds: float | None = DEFAULT_CLIENT_CHANNEL_MAX_IDLE_SECONDS,
        name: str = "client",
        on_disconnect: Callable[[str], object] | None = None,
        on_connect: Callable[[str], object] | None = None,
        tls: TlsClientSettings | None = None,
        rpc_hook: Callable[[str, RemotingCommand], None] | None = None,
    ) -> None:
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout}")
        if max_frame_size < 8:
            raise ValueError(f"max_frame_size must be at least 8 bytes, got {max_frame_size}")
        if channel_max_idle_seconds is not None and channel_max_idle_seconds <= 0:
            raise ValueError(
                f"channel_max_idle_seconds must be positive or None, got {channel_max_idle_seconds}"
            )
        self.name = name
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self.channel_max_idle_seconds = channel_max_idle_seconds
        self.on_disconnect = on_disconnect
        self.on_connect = on_connect
        #: called as ``rpc_hook(addr, request)`` before each request of ours is sent (e.g. ACL signing)
        self.rpc_hook = rpc_hook
        self.tls = tls
        self._tls_context = tls.build_context() if tls is not None else None
        self._dispatcher = RequestDispatcher(name)
        self._channels: dict[str, Channel] = {}
        self._connect_locks: dict[str, asyncio.Lock] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._callback_tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    # ------------------------------------------------------------------ configuration

    def register(self, code: int, handler: Processor) -> None:
        """Handle server-initiated requests with ``code`` (handler returns a response or None)."""
        self._dispatcher.register(code, handler)

    def register_default(self, handler: Processor | None) -> None:
        """Handle server-initiated requests of every unregistered code (None removes it)."""
        self._dispatcher.default_processor = handler

    # ------------------------------------------------------------------ calls

    async def invoke(self, addr: str, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``command`` to ``addr`` and await its response; ``timeout`` includes connecting.

        Raises `RemotingConnectError`, `RemotingTimeoutError` or `RemotingConnectionClosedError`.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if self.rpc_hook is not None:
            self.rpc_hook(addr, command)
        channel = self._channels.get(addr)
        if channel is None or channel.closed:
            loop = asyncio.get_running_loop()
            started = loop.time()
            channel = await self.get_channel(addr)
            remaining = timeout - (loop.time() - started)
            if remaining <= 0:
                raise RemotingTimeoutError(f"connecting to {addr} used up the whole {timeout:.3g}s timeout")
        else:
            remaining = timeout
        try:
            return await channel.invoke(command, remaining)
        except RemotingConnectionClosedError as exc:
            raise self._explain_closed(addr, channel, exc) from None

    async def invoke_oneway(self, addr: str, command: RemotingCommand) -> None:
        """Send ``command`` to ``addr`` as a oneway request (its oneway flag is set)."""
        if self.rpc_hook is not None:
            self.rpc_hook(addr, command)
        channel = await self.get_channel(addr)
        await channel.send_oneway(command)

    async def get_channel(self, addr: str) -> Channel:
        """The open connection to ``addr``, connecting first if there is none."""
        channel = self._channels.get(addr)
        if channel is not None and not channel.closed:
            return channel
        if self._closed:
            raise RemotingConnectError(f"{self.name}: client is closed, cannot connect to {addr}")
        lock = self._connect_locks.setdefault(addr, asyncio.Lock())
        async with lock:
            channel = self._channels.get(addr)
            if channel is not None and not channel.closed:
                return channel
            channel = await self._connect(addr)
            if self._closed:
                channel.abort()
                raise RemotingConnectError(f"{self.name}: client closed while connecting to {addr}")
            self._channels[addr] = channel
            if self.on_connect is not None:
                try:
                    self.on_connect(addr)
                except Exception:
                    logger.exception("%s: on_connect(%s) failed", self.name, addr)
            return channel

    async def _connect(self, addr: str) -> Channel:
        host, port = parse_address(addr)
        loop = asyncio.get_running_loop()
        context = self._tls_context
        try:
            async with asyncio.timeout(self.connect_timeout):
                if context is None:
                    _, channel = await loop.create_connection(lambda: self._make_channel(addr), host, port)
                else:
                    assert self.tls is not None
                    _, channel = await loop.create_connection(
                        lambda: self._make_channel(addr), host, port, ssl=context,
                        server_hostname=host if context.check_hostname else None,
                        ssl_handshake_timeout=self.tls.handshake_timeout)
        except TimeoutError:
            raise RemotingConnectError(
                f"connecting to {addr} timed out after {self.connect_timeout:.3g}s"
            ) from None
        except ssl.SSLError as exc:
            raise TlsHandshakeError(f"TLS handshake with {addr} failed: {describe_tls_error(exc)}") from None
        except OSError as exc:
            if context is not None and isinstance(exc, ConnectionError):
                raise TlsHandshakeError(f"TLS handshake with {addr} failed: the server closed the connection "
                                        f"({exc.strerror or exc}); does it accept TLS?") from None
            raise RemotingConnectError(f"cannot connect to {addr}: {exc.strerror or exc}") from None
        logger.debug("%s: connected to %s from %s", self.name, addr, channel.local_address)
        if self.channel_max_idle_seconds is not None and self._sweeper is None:
            self._sweeper = loop.create_task(
                sweep_idle_channels(self._channels.values, self.channel_max_idle_seconds, self.name)
            )
        return channel

    def _make_channel(self, addr: str) -> Channel:
        return _ClientChannel(self._dispatcher, max_frame_size=self.max_frame_size,
                              on_lost=lambda channel: self._channel_lost(addr, channel))

    def _explain_closed(self, addr: str, channel: Channel, exc: RemotingConnectionClosedError) -> RemotingError:
        """Say why a connection closed under a call when the cause is TLS (or likely a missing TLS)."""
        if not isinstance(channel, _ClientChannel):
            return exc
        reason = channel.lost_reason
        if isinstance(reason, ssl.SSLError):
            return RemotingConnectionClosedError(f"{exc}: TLS error: {describe_tls_error(reason)}")
        if channel.received_data:
            return exc
        if self.tls is None:
            return RemotingConnectionClosedError(
                f"{exc}; {addr} closed the connection without answering anything: if that server only accepts "
                "TLS (tls.server.mode=enforcing), enable TLS on this client")
        # a server that rejects our certificate (or its absence) after the handshake just drops the connection
        if self.tls.cert_path is None:
            hint = "it may require a client certificate (tls.server.need.client.auth=require): set one on this client"
        else:
            hint = "it may not trust our client certificate"
        return RemotingConnectionClosedError(
            f"{exc}; {addr} closed the TLS connection without answering anything: {hint}")

    def _channel_lost(self, addr: str, channel: Channel) -> None:
        if self._channels.get(addr) is channel:
            del self._channels[addr]
        logger.debug("%s: connection to %s closed", self.name, addr)
        callback = self.on_disconnect
        if callback is not None:
            run_channel_callback(lambda _channel: callback(addr), channel, "on_disconnect",
                                 self._callback_tasks)

    # ------------------------------------------------------------------ lifecycle

    def connected_addresses(self) -> list[str]:
        """Addresses with an open connection."""
        return [addr for addr, channel in self._channels.items() if not channel.closed]

    async def close_connection(self, addr: str) -> None:
        """Close the connection to ``addr`` (if any); the next call to it reconnects."""
        channel = self._channels.pop(addr, None)
        if channel is not None:
            await channel.close_and_wait()

    async def close(self) -> None:
        """Close every connection and stop handlers of server-initiated requests."""
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        await asyncio.gather(*(channel.close_and_wait() for channel in channels))
        tasks = set(self._dispatcher.tasks)
        if self._sweeper is not None:
            tasks.add(self._sweeper)
            self._sweeper = None
        tasks |= self._callback_tasks
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()


class _ClientChannel(Channel):
    """A client connection that remembers whether anything came back and why it closed."""

    def __init__(self, dispatcher: RequestDispatcher, *, max_frame_size: int,
                 on_lost: Callable[[Channel], None]) -> None:
        super().__init__(dispatcher, max_frame_size=max_frame_size, on_lost=on_lost)
        self.received_data = False
        self.lost_reason: Exception | None = None

    def data_received(self, data: bytes) -> None:
        self.received_data = True
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost_reason = exc
        super().connection_lost(exc)


__all__ = [
    "DEFAULT_CLIENT_CHANNEL_MAX_IDLE_SECONDS",
    "DEFAULT_CONNECT_TIMEOUT",
    "RemotingClient",
    "parse_address",
]
