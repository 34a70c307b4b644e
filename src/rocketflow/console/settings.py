"""`ConsoleSettings`: what ``rocketflow console`` serves, where, and with which account."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Final

#: The address the console binds by default: only this machine can reach it.
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8080
#: Seconds between two refreshes of the live parts of a page and two lag samples of a watched group.
DEFAULT_REFRESH_SECONDS: Final = 5.0
#: Lag samples kept per group (an hour at the default refresh).
DEFAULT_LAG_POINTS: Final = 720
_LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the console reachable from this machine only."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("", "0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """The console's options (the ``rocketflow console`` flags).

    ``access_key`` / ``secret_key``: the ACL account the console signs its requests with; writes
    (create, update, delete, reset, resend, send) are refused unless both are set. ``client_settings``
    are further `rocketflow.client.ClientConfig` fields (``use_tls``, ``tls_ca``...).
    ``allowed_hosts``: extra ``Host`` header names accepted besides the loopback ones and ``host``.
    """

    namesrv: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    timeout: float = 5.0
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS
    lag_points: int = DEFAULT_LAG_POINTS
    allowed_hosts: tuple[str, ...] = ()
    client_settings: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if (self.access_key is None) != (self.secret_key is None):
            raise ValueError("give both the access key and the secret key, or neither")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        if not self.refresh_seconds > 0 or not self.timeout > 0 or self.lag_points < 2:
            raise ValueError("refresh_seconds and timeout must be positive, lag_points at least 2")

    @property
    def writable(self) -> bool:
        """Whether an account is configured (and so writes are allowed)."""
        return bool(self.access_key) and bool(self.secret_key)

    @property
    def exposed(self) -> bool:
        """Whether the bind address lets other machines reach the console."""
        return not is_loopback(self.host)

    def trusted_hosts(self) -> list[str]:
        """``Host`` header names the console answers (``*`` when bound to every address without a list)."""
        if is_wildcard(self.host) and not self.allowed_hosts:
            return ["*"]
        hosts = [*_LOOPBACK_NAMES, *self.allowed_hosts]
        if not is_wildcard(self.host):
            hosts.append(self.host.strip("[]"))
        return list(dict.fromkeys(hosts))

    def admin_settings(self) -> dict[str, Any]:
        """Keyword arguments of `rocketflow.client.admin.Admin` beyond the name server."""
        settings = dict(self.client_settings)
        if self.writable:
            settings["access_key"] = self.access_key
            settings["secret_key"] = self.secret_key
        return settings


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_LAG_POINTS",
    "DEFAULT_PORT",
    "DEFAULT_REFRESH_SECONDS",
    "ConsoleSettings",
    "is_loopback",
    "is_wildcard",
]
