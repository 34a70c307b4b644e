"""TLS for remoting connections, modelled on RocketMQ 4.x (``TlsSystemConfig`` / ``TlsHelper``).

A server runs in one `TlsMode`: ``disabled`` (plain only), ``permissive`` (TLS and plain on the same
port, told apart by the first byte a client sends: 0x16 starts a TLS handshake) or ``enforcing``
(TLS only). `TlsListener` is the accept loop of the last two modes: it peeks at the first byte of
each connection without consuming it, then hands the socket to asyncio with or without TLS.
Clients use TLS when given `TlsClientSettings`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from rocketflow.errors import RocketflowError
from rocketflow.net.errors import RemotingConnectError

logger = logging.getLogger(__name__)

#: The first byte of a TLS record carrying a handshake message (the ClientHello).
TLS_HANDSHAKE_RECORD_TYPE: Final = 0x16
#: Netty's SslHandler handshake timeout (10 s).
DEFAULT_TLS_HANDSHAKE_TIMEOUT: Final = 10.0
#: asyncio's default listen backlog.
DEFAULT_BACKLOG: Final = 100


class TlsConfigError(RocketflowError, ValueError):
    """TLS settings that cannot be used (unknown mode, unreadable or mismatched certificate/key)."""


class TlsHandshakeError(RemotingConnectError):
    """The TLS handshake with a server failed (certificate not trusted, protocol mismatch...)."""


_NamedT = TypeVar("_NamedT", bound=enum.Enum)


def _parse_named(cls: type[_NamedT], value: _NamedT | str, what: str) -> _NamedT:
    """A member of ``cls`` from its value, case-insensitive; `TlsConfigError` names the allowed ones."""
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).strip().lower())
    except ValueError:
        *first, last = (member.value for member in cls)
        raise TlsConfigError(f"unknown {what} {value!r}: expected {', '.join(first)} or {last}") from None


class TlsMode(enum.Enum):
    """How a server treats TLS (``tls.server.mode``)."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def parse(cls, value: TlsMode | str) -> TlsMode:
        """A mode from its name (case-insensitive); `TlsConfigError` names the allowed ones."""
        return _parse_named(cls, value, "TLS mode")


class ClientAuth(enum.Enum):
    """Whether a TLS server asks clients for a certificate (``tls.server.need.client.auth``)."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"

    @classmethod
    def parse(cls, value: ClientAuth | str) -> ClientAuth:
        """A client-auth setting from its name (case-insensitive)."""
        return _parse_named(cls, value, "client auth")


def _load_cert_chain(context: ssl.SSLContext, cert_path: str | Path, key_path: str | Path | None,
                     password: str | None, role: str) -> None:
    try:
        context.load_cert_chain(cert_path, key_path, password)
    except FileNotFoundError as exc:
        raise TlsConfigError(f"{role} certificate or key file not found: {exc.filename}") from None
    except ssl.SSLError as exc:
        raise TlsConfigError(f"cannot use {role} certificate {cert_path} with key {key_path or cert_path}: "
                             f"{exc.reason or exc} (wrong file, wrong key or wrong password?)") from None
    except OSError as exc:
        raise TlsConfigError(f"cannot read {role} certificate {cert_path}: {exc.strerror or exc}") from None


def _load_trust(context: ssl.SSLContext, trust_cert_path: str | Path, role: str) -> None:
    try:
        context.load_verify_locations(cafile=trust_cert_path)
    except FileNotFoundError:
        raise TlsConfigError(f"{role} trust certificate file not found: {trust_cert_path}") from None
    except ssl.SSLError as exc:
        raise TlsConfigError(f"cannot use {role} trust certificates {trust_cert_path}: {exc.reason or exc}") from None
    except OSError as exc:
        raise TlsConfigError(f"cannot read {role} trust certificates {trust_cert_path}: "
                             f"{exc.strerror or exc}") from None


@dataclass(slots=True)
class TlsServerSettings:
    """TLS settings of a server. Without a certificate TLS is off whatever the mode (except enforcing,
    which then is an error)."""

    #: ``tls.server.mode`` (RocketMQ's default: permissive).
    mode: TlsMode = TlsMode.PERMISSIVE
    #: ``tls.server.certPath``: PEM certificate chain.
    cert_path: str | Path | None = None
    #: ``tls.server.keyPath``: PEM private key (None = in the certificate file).
    key_path: str | Path | None = None
    #: ``tls.server.keyPassword``
    key_password: str | None = field(default=None, repr=False)
    #: ``tls.server.trustCertPath``: CAs client certificates are verified against (None = system CAs).
    trust_cert_path: str | Path | None = None
    #: ``tls.server.need.client.auth``
    need_client_auth: ClientAuth = ClientAuth.NONE
    handshake_timeout: float = DEFAULT_TLS_HANDSHAKE_TIMEOUT

    def __post_init__(self) -> None:
        self.mode = TlsMode.parse(self.mode)
        self.need_client_auth = ClientAuth.parse(self.need_client_auth)
        if not self.handshake_timeout > 0:
            raise TlsConfigError(f"TLS handshake timeout must be positive, got {self.handshake_timeout!r}")
        if self.key_path is not None and self.cert_path is None:
            raise TlsConfigError("a TLS server key is set but no certificate (tls.server.certPath)")
        if self.mode is TlsMode.ENFORCING and self.cert_path is None:
            raise TlsConfigError("TLS mode enforcing needs a server certificate (tls.server.certPath)")

    @property
    def enabled(self) -> bool:
        """True when the server accepts TLS connections."""
        return self.mode is not TlsMode.DISABLED and self.cert_path is not None

    def build_context(self) -> ssl.SSLContext:
        """The server-side `ssl.SSLContext`; raises `TlsConfigError` for unusable files."""
        if self.cert_path is None:
            raise TlsConfigError("no TLS server certificate configured (tls.server.certPath)")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_cert_chain(context, self.cert_path, self.key_path, self.key_password, "server")
        if self.need_client_auth is ClientAuth.NONE:
            context.verify_mode = ssl.CERT_NONE
            return context
        if self.trust_cert_path is not None:
            _load_trust(context, self.trust_cert_path, "server")
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        context.verify_mode = ssl.CERT_REQUIRED if self.need_client_auth is ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
        return context


@dataclass(slots=True)
class TlsClientSettings:
    """TLS settings of a client connection (``tls.client.*``)."""

    #: ``tls.client.trustCertPath``: CAs the server certificate is verified against (None = system CAs).
    trust_cert_path: str | Path | None = None
    #: ``tls.client.certPath`` / ``keyPath`` / ``keyPassword``: our certificate, for mutual TLS.
    cert_path: str | Path | None = None
    key_path: str | Path | None = None
    key_password: str | None = field(default=None, repr=False)
    #: Verify the server certificate and host name; False is RocketMQ's ``tls.test.mode.enable``.
    verify: bool = True
    handshake_timeout: float = DEFAULT_TLS_HANDSHAKE_TIMEOUT

    def __post_init__(self) -> None:
        if not self.handshake_timeout > 0:
            raise TlsConfigError(f"TLS handshake timeout must be positive, got {self.handshake_timeout!r}")
        if self.key_path is not None and self.cert_path is None:
            raise TlsConfigError("a TLS client key is set but no client certificate (tls.client.certPath)")

    def build_context(self) -> ssl.SSLContext:
        """The client-side `ssl.SSLContext`; raises `TlsConfigError` for unusable files."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.verify:
            if self.trust_cert_path is not None:
                _load_trust(context, self.trust_cert_path, "client")
            else:
                context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_path is not None:
            _load_cert_chain(context, self.cert_path, self.key_path, self.key_password, "client")
        return context


def describe_tls_error(exc: BaseException) -> str:
    """A short description of a TLS failure, with a hint for the common causes."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"server certificate verification failed: {exc.verify_message or exc.reason or exc}"
    reason = (exc.reason if isinstance(exc, ssl.SSLError) else None) or str(exc) or type(exc).__name__
    upper = reason.upper()
    if "CERTIFICATE_REQUIRED" in upper:
        return f"{reason} (the server requires a client certificate)"
    if "UNKNOWN_CA" in upper or "BAD_CERTIFICATE" in upper or "CERTIFICATE_UNKNOWN" in upper:
        return f"{reason} (the server did not accept our client certificate)"
    if "WRONG_VERSION_NUMBER" in upper or "RECORD_LAYER_FAILURE" in upper:
        return f"{reason} (does the server accept TLS?)"
    if "EOF" in upper:
        return f"{reason} (the peer closed the connection during the TLS handshake: does it accept TLS?)"
    return reason


def _format_peer(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


class TlsListener:
    """A listening socket serving TLS (and, in permissive mode, plain) connections on one port.

    Each accepted connection is classified by its first byte, read with ``MSG_PEEK`` so nothing is
    consumed; TLS connections are then handshaken by asyncio, plain ones used as they are. A bad
    handshake, a plain connection under ``enforcing`` or a client that sends nothing within
    ``first_byte_timeout`` only closes that connection (with a log line).
    """

    def __init__(self, protocol_factory: Callable[[], asyncio.Protocol], settings: TlsServerSettings, *,
                 context: ssl.SSLContext | None = None, name: str = "server",
                 first_byte_timeout: float | None = None, backlog: int = DEFAULT_BACKLOG) -> None:
        self.settings = settings
        self.name = name
        self.first_byte_timeout = first_byte_timeout
        self.backlog = backlog
        self._protocol_factory = protocol_factory
        self._context = context if context is not None else settings.build_context()
        self._socket: socket.socket | None = None
        self._accepter: asyncio.Task[None] | None = None
        self._connecting: set[asyncio.Task[None]] = set()
        self._stopping: set[asyncio.Task[None]] = set()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        """The listening socket (empty once closed)."""
        return () if self._socket is None else (self._socket,)

    async def start(self, host: str, port: int) -> None:
        """Bind ``host:port`` and start accepting."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        if not infos:
            raise OSError(f"cannot resolve {host!r}")
        family, kind, proto, _, address = infos[0]
        listener = socket.socket(family, kind, proto)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(address)
            listener.listen(self.backlog)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        self._socket = listener
        self._accepter = loop.create_task(self._accept_loop(listener))

    def close(self) -> None:
        """Stop accepting; connections still being classified or handshaken are dropped."""
        for task in (self._accepter, *self._connecting):
            if task is not None:
                task.cancel()
                self._stopping.add(task)
        self._accepter = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def wait_closed(self) -> None:
        """Wait until the accept loop and pending handshakes are gone."""
        tasks, self._stopping = self._stopping | self._connecting, set()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, address = await loop.sock_accept(listener)
            except OSError as exc:  # e.g. out of file descriptors: keep the listener alive
                logger.error("%s: accept failed: %s", self.name, exc.strerror or exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._serve(connection, _format_peer(address)))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    async def _serve(self, connection: socket.socket, peer: str) -> None:
        loop = asyncio.get_running_loop()
        use_tls = False
        try:
            try:
                async with asyncio.timeout(self.first_byte_timeout):
                    first = await _peek_first_byte(connection)
            except TimeoutError:
                logger.info("%s: closing connection from %s: nothing received within %.3gs", self.name, peer,
                            self.first_byte_timeout)
                connection.close()
                return
            except OSError as exc:
                logger.debug("%s: connection from %s failed before sending anything: %s", self.name, peer, exc)
                connection.close()
                return
            if first is None:
                connection.close()
                return
            use_tls = first == TLS_HANDSHAKE_RECORD_TYPE
            if not use_tls and self.settings.mode is TlsMode.ENFORCING:
                logger.warning("%s: closing plain (non-TLS) connection from %s: TLS is enforced", self.name, peer)
                connection.close()
                return
            if use_tls:
                await loop.connect_accepted_socket(self._protocol_factory, connection, ssl=self._context,
                                                   ssl_handshake_timeout=self.settings.handshake_timeout)
            else:
                await loop.connect_accepted_socket(self._protocol_factory, connection)
        except asyncio.CancelledError:
            connection.close()
            raise
        except Exception as exc:  # never let one bad client disturb the listener
            if use_tls:
                logger.warning("%s: TLS handshake with %s failed: %s", self.name, peer, describe_tls_error(exc))
            else:
                logger.warning("%s: cannot set up the connection from %s: %s", self.name, peer, exc)
            connection.close()


async def _peek_first_byte(connection: socket.socket) -> int | None:
    """The first byte waiting on ``connection`` without consuming it; None at end of stream."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data = connection.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        else:
            return data[0] if data else None
        readable: asyncio.Future[None] = loop.create_future()
        fd = connection.fileno()
        loop.add_reader(fd, _set_ready, readable)
        try:
            await readable
        finally:
            loop.remove_reader(fd)


def _set_ready(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


__all__ = [
    "DEFAULT_TLS_HANDSHAKE_TIMEOUT",
    "TLS_HANDSHAKE_RECORD_TYPE",
    "ClientAuth",
    "TlsClientSettings",
    "TlsConfigError",
    "TlsHandshakeError",
    "TlsListener",
    "TlsMode",
    "TlsServerSettings",
    "describe_tls_error",
]
