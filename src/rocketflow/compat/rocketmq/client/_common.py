"""Argument coercion, connection settings and lifecycle states shared by the compat clients."""

from __future__ import annotations

import abc
import enum
import urllib.parse
import urllib.request
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

#: How long fetching a name server list from a ``set_name_server_domain`` URL may take (seconds).
DOMAIN_FETCH_TIMEOUT: Final = 5.0

# Python 2 compatibility names the original module exports.
PY2: Final = False
text_type = str
binary_type = bytes


def as_text(value: object, what: str) -> str:
    """A str argument, or bytes decoded as UTF-8 (the original took either)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8")
    raise TypeError(f"{what} must be str or bytes, got {type(value).__name__}")


def as_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    return value


def maybe_decode(val: str | bytes) -> str:
    """``val`` as str (bytes are decoded as UTF-8); raises TypeError for anything else."""
    if isinstance(val, bytes):
        return val.decode("utf-8")
    if isinstance(val, str):
        return val
    raise TypeError(f"Expects string types, but got {type(val)}")


@dataclass(slots=True)
class Connection:
    """Where and as whom a client connects; applied when it starts."""

    namesrv_addr: str | None = None
    namesrv_domain: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    channel: str | None = None
    instance_name: str | None = None

    def client_settings(self) -> dict[str, Any]:
        """`rocketflow.client.ClientConfig` fields; raises ValueError when the domain serves no list."""
        settings: dict[str, Any] = {}
        addr = self.namesrv_addr or (fetch_namesrv_addr(self.namesrv_domain) if self.namesrv_domain else None)
        if addr:
            settings["namesrv_addr"] = addr
        if self.access_key and self.secret_key:
            settings["access_key"] = self.access_key
            settings["secret_key"] = self.secret_key
        if self.instance_name:
            settings["instance_name"] = self.instance_name
        return settings

    def set_credentials(self, access_key: str | bytes, access_secret: str | bytes, channel: str | bytes) -> None:
        # empty keys mean "no signing", as in the C++ client; the channel (an Aliyun ONS hint) is kept only
        self.access_key = as_text(access_key, "access_key") or None
        self.secret_key = as_text(access_secret, "access_secret") or None
        self.channel = as_text(channel, "channel")


def fetch_namesrv_addr(domain: str) -> str:
    """The name server list a ``set_name_server_domain`` URL serves: the first line of an HTTP GET,
    ``host:port;host:port`` (as the C++ client's TopAddressing reads it). Raises ValueError."""
    url = domain if "://" in domain else f"http://{domain}"
    if urllib.parse.urlparse(url).scheme not in ("http", "https"):
        raise ValueError(f"the name server domain {domain!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=DOMAIN_FETCH_TIMEOUT) as response:
            raw: bytes = response.read(65536)
        text = raw.decode("utf-8", "replace")
    except OSError as exc:
        raise ValueError(f"cannot fetch the name server list from {url}: {exc}") from exc
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise ValueError(f"{url} served no name server address")
    return lines[0].strip()


class ClientSettings(abc.ABC):
    """What every compat client has: where and as whom it connects, and ``with`` to start and shut it down."""

    _connection: Connection

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def shutdown(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    def set_name_server_address(self, addr: str | bytes) -> None:
        """``"host:port"`` or ``"host:port;host:port"``."""
        self._connection.namesrv_addr = as_text(addr, "addr")

    def set_name_server_domain(self, domain: str | bytes) -> None:
        """A URL serving the name server list (fetched once, at ``start()``, when no address is set)."""
        self._connection.namesrv_domain = as_text(domain, "domain")

    def set_session_credentials(self, access_key: str | bytes, access_secret: str | bytes,
                                channel: str | bytes) -> None:
        """ACL keys: every request is signed with them (``channel`` is accepted and not used)."""
        self._connection.set_credentials(access_key, access_secret, channel)

    def set_instance_name(self, name: str | bytes) -> None:
        """The client instance name (part of the client id); the C library had it, the wrapper did not."""
        self._connection.instance_name = as_text(name, "name")


class ClientState(enum.Enum):
    """Where a compat client is in its life: it starts once and shuts down once."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    SHUT_DOWN = "SHUT_DOWN"
