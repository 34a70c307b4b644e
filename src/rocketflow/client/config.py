"""`ClientConfig`: the settings one client instance (and every producer/consumer on it) shares.

Times are in seconds unless the name says ``mills`` (kept from RocketMQ for that one setting).
Defaults are RocketMQ 4.9.3's.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from rocketflow.acl.signing import SessionCredentials
from rocketflow.client.errors import MQClientError
from rocketflow.net.event_loop import parse_event_loop_kind
from rocketflow.net.tls import TlsClientSettings, TlsConfigError
from rocketflow.protocol.names import InvalidNameError, validate_group
from rocketflow.remoting.codes import LanguageCode

#: The instance name every client starts with (``rocketmq.client.name``).
DEFAULT_INSTANCE_NAME: Final = "DEFAULT"
#: Environment variables RocketMQ's tools read too.
NAMESRV_ADDR_ENV: Final = "NAMESRV_ADDR"
CLIENT_NAME_ENV: Final = "ROCKETMQ_CLIENT_NAME"


class _UnsetMillis(int):
    """A default that was not chosen: it behaves as its int value, but consumers whose RocketMQ
    counterpart has a different default can tell it from an explicit setting."""

    __slots__ = ()


@dataclass(slots=True)
class ClientConfig:
    """Settings of a client instance (RocketMQ's ``ClientConfig``)."""

    #: ``"host:port;host:port"``; None falls back to the ``NAMESRV_ADDR`` environment variable.
    namesrv_addr: str | None = None
    #: The address announced in the client id; None = the local address used to reach the name server.
    client_ip: str | None = None
    instance_name: str = DEFAULT_INSTANCE_NAME
    unit_name: str | None = None
    unit_mode: bool = False
    #: Route refresh period (``pollNameServerInterval``); the first refresh runs after `route_first_delay`.
    poll_name_server_interval: float = 30.0
    route_first_delay: float = 0.010
    #: Heartbeat period (``heartbeatBrokerInterval``); the first heartbeat runs after `heartbeat_first_delay`.
    heartbeat_broker_interval: float = 30.0
    heartbeat_first_delay: float = 1.0
    #: Fewest seconds between two heartbeats sent out of turn: on reconnecting to a broker, or when a pull is
    #: answered SUBSCRIPTION_NOT_EXIST (a restarted broker has forgotten the subscriptions); rocketflow's own.
    heartbeat_on_demand_interval: float = 1.0
    #: While pulls wait to retry after a broker could not be reached, try to connect to it this often (seconds),
    #: and retry them at once when it answers; rocketflow's own.
    broker_reconnect_probe_interval: float = 0.5
    #: A failure that repeats (a pull to a broker that is down, say) is logged once per this many seconds,
    #: with how many times it happened meanwhile; rocketflow's own.
    repeated_failure_log_interval: float = 30.0
    #: Consumer offset persistence period (``persistConsumerOffsetInterval``), first after `persist_first_delay`.
    persist_consumer_offset_interval: float = 5.0
    persist_first_delay: float = 10.0
    #: Rebalance period (``rocketmq.client.rebalance.waitInterval``).
    rebalance_interval: float = 20.0
    #: Timeout of the client's own RPCs (routes, heartbeats, consumer lists): ``mqClientApiTimeout``.
    mq_client_api_timeout: float = 3.0
    #: Delay before a failed pull is retried, in milliseconds (``pullTimeDelayMillsWhenException``).
    #: Left unset, the push consumer uses 3000 instead (RocketMQ's ``DefaultMQPushConsumerImpl``).
    pull_time_delay_mills_when_exception: int = _UnsetMillis(1000)
    #: Send to the broker's VIP port (listen port - 2), as ``vipChannelEnabled``.
    vip_channel_enabled: bool = False
    language: LanguageCode = LanguageCode.PYTHON
    #: Serve this client instance's Prometheus metrics at ``http://metrics_host:metrics_port/metrics``;
    #: 0 = off (rocketflow's own setting; see `ClientInstance.enable_metrics`).
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    #: ACL credentials: with both keys set every request is signed (RocketMQ's ``AclClientRPCHook``).
    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    #: Optional ``SecurityToken`` sent (and signed) with every request.
    security_token: str | None = dataclasses.field(default=None, repr=False)
    #: Connect to name servers and brokers over TLS (``useTLS``; RocketMQ's ``tls.enable``).
    use_tls: bool = False
    #: PEM file of the CAs the server certificates must chain to (``tls.client.trustCertPath``); None = system CAs.
    tls_ca: str | None = None
    #: Our certificate and key for mutual TLS (``tls.client.certPath`` / ``keyPath`` / ``keyPassword``).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_key_password: str | None = dataclasses.field(default=None, repr=False)
    #: Verify the server certificate and host name; False = RocketMQ's ``tls.test.mode.enable`` (no checks).
    tls_verify: bool = True
    #: The instance's event loop: ``auto`` (uvloop when installed), ``uvloop`` or ``asyncio``
    #: (rocketflow's own setting; see `rocketflow.net.event_loop`).
    event_loop: str = "auto"

    def __post_init__(self) -> None:
        if self.namesrv_addr is None:
            self.namesrv_addr = os.environ.get(NAMESRV_ADDR_ENV) or None
        if self.instance_name == DEFAULT_INSTANCE_NAME:
            self.instance_name = os.environ.get(CLIENT_NAME_ENV) or DEFAULT_INSTANCE_NAME
        self.validate()

    def validate(self) -> None:
        """Raise `MQClientError` naming the first invalid setting."""
        for name in ("poll_name_server_interval", "heartbeat_broker_interval", "persist_consumer_offset_interval",
                     "rebalance_interval", "mq_client_api_timeout", "heartbeat_on_demand_interval",
                     "broker_reconnect_probe_interval", "repeated_failure_log_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise MQClientError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("route_first_delay", "heartbeat_first_delay", "persist_first_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise MQClientError(f"{name} must be a number of seconds >= 0, got {value!r}")
        delay = self.pull_time_delay_mills_when_exception
        if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
            raise MQClientError(f"pull_time_delay_mills_when_exception must be an int >= 0 (ms), got {delay!r}")
        port = self.metrics_port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise MQClientError(f"metrics_port must be an int in 0..65535 (0 = off), got {port!r}")
        if not isinstance(self.metrics_host, str) or not self.metrics_host:
            raise MQClientError(f"metrics_host must be a non-empty host name or address, got {self.metrics_host!r}")
        if not isinstance(self.instance_name, str) or not self.instance_name.strip():
            raise MQClientError(f"instance_name must be a non-empty string, got {self.instance_name!r}")
        if "@" in self.instance_name:
            raise MQClientError(f"instance_name must not contain '@' (it separates client id parts): "
                                f"{self.instance_name!r}")
        try:
            parse_event_loop_kind(self.event_loop)
        except ValueError as exc:
            raise MQClientError(f"event_loop: {exc}") from None
        if self.client_ip is not None:
            try:
                ipaddress.ip_address(self.client_ip)
            except ValueError:
                raise MQClientError(f"client_ip must be an IP address, got {self.client_ip!r}") from None
        if self.namesrv_addr is not None:
            self.namesrv_addresses()
        for name in ("access_key", "secret_key", "security_token"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise MQClientError(f"{name} must be a non-empty string or None, got {type(value).__name__}")
        if (self.access_key is None) != (self.secret_key is None):
            raise MQClientError("access_key and secret_key must be set together (or neither)")
        if self.security_token is not None and self.access_key is None:
            raise MQClientError("security_token needs access_key and secret_key")
        for name in ("use_tls", "tls_verify"):
            if not isinstance(getattr(self, name), bool):
                raise MQClientError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("tls_ca", "tls_cert", "tls_key", "tls_key_password"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str | os.PathLike) or not str(value)):
                raise MQClientError(f"{name} must be a non-empty path string or None, got {value!r}")
        settings = self.tls_settings()
        if settings is not None:
            try:
                settings.build_context()
            except TlsConfigError as exc:
                raise MQClientError(f"unusable TLS settings: {exc}") from None

    def pull_time_delay_is_default(self) -> bool:
        """Whether `pull_time_delay_mills_when_exception` was left at its default (not chosen, even as 1000)."""
        return type(self.pull_time_delay_mills_when_exception) is _UnsetMillis

    def tls_settings(self) -> TlsClientSettings | None:
        """The TLS settings of this client's connections (None when `use_tls` is off)."""
        if not self.use_tls:
            return None
        try:
            return TlsClientSettings(trust_cert_path=self.tls_ca, cert_path=self.tls_cert, key_path=self.tls_key,
                                     key_password=self.tls_key_password, verify=self.tls_verify)
        except TlsConfigError as exc:
            raise MQClientError(f"unusable TLS settings: {exc}") from None

    def credentials(self) -> SessionCredentials | None:
        """The ACL credentials requests are signed with, or None."""
        if self.access_key is None or self.secret_key is None:
            return None
        return SessionCredentials(self.access_key, self.secret_key, self.security_token)

    def namesrv_addresses(self) -> list[str]:
        """The name server addresses (``;``-separated ``host:port`` items)."""
        text = self.namesrv_addr
        if not text:
            return []
        addresses = [item.strip() for item in text.split(";") if item.strip()]
        for addr in addresses:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise MQClientError(f"invalid name server address {addr!r} in {text!r}: expected 'host:port'")
        return addresses

    def resolved_client_ip(self) -> str:
        """`client_ip`, or the local address used to reach the first name server (resolved once)."""
        if self.client_ip is None:
            self.client_ip = local_address_towards(self.namesrv_addresses())
        return self.client_ip

    def build_client_id(self) -> str:
        """``ip@instance[@unit]`` (RocketMQ's ``buildMQClientId``)."""
        client_id = f"{self.resolved_client_ip()}@{self.instance_name}"
        if self.unit_name:
            client_id += f"@{self.unit_name}"
        return client_id

    def change_instance_name_to_pid(self, *, unique: bool = True) -> None:
        """Replace the ``DEFAULT`` instance name by a per-process (``unique=False``: ``<pid>``) or a
        per-client (``<pid>#<monotonic ns>``, as 4.9.3 does for clustering consumers) one."""
        if self.instance_name == DEFAULT_INSTANCE_NAME:
            pid = os.getpid()
            self.instance_name = f"{pid}#{time.monotonic_ns()}" if unique else str(pid)

    def copy(self, **changes: Any) -> ClientConfig:
        """A copy with some settings changed (validated)."""
        return dataclasses.replace(self, **changes)


CLIENT_CONFIG_FIELDS: Final = frozenset(field.name for field in dataclasses.fields(ClientConfig))

_SettingsT = TypeVar("_SettingsT")


def check_group(role: str, group: str, reserved: str) -> None:
    """Raise `MQClientError` unless ``group`` is a legal group name other than the ``role``'s (``"producer"``,
    ``"consumer"``) ``reserved`` default, which RocketMQ refuses for user clients."""
    try:
        validate_group(group)
    except InvalidNameError as exc:
        raise MQClientError(f"{role} group: {exc}") from None
    if group == reserved:
        raise MQClientError(f"the {role} group cannot be {reserved!r}; choose another name")


def split_settings(kind: str, settings_type: type[_SettingsT], settings: Mapping[str, Any], namesrv: str | None,
                   client_config: ClientConfig | None) -> tuple[ClientConfig, _SettingsT]:
    """A ``kind``'s (``"producer"``, ``"push consumer"``) keyword ``settings``, split between its `ClientConfig`
    (a copy of ``client_config`` when given; ``namesrv`` sets ``namesrv_addr``) and its own ``settings_type``
    dataclass. Raises `MQClientError` naming unknown or invalid settings."""
    own_fields = frozenset(field.name for field in dataclasses.fields(settings_type))  # type: ignore[arg-type]
    unknown = set(settings) - own_fields - CLIENT_CONFIG_FIELDS
    if unknown:
        raise MQClientError(f"unknown {kind} settings {sorted(unknown)}; known: "
                            f"{sorted(own_fields | CLIENT_CONFIG_FIELDS)}")
    client_settings = {name: value for name, value in settings.items() if name in CLIENT_CONFIG_FIELDS}
    if namesrv is not None:
        client_settings["namesrv_addr"] = namesrv
    try:
        config = client_config.copy(**client_settings) if client_config is not None \
            else ClientConfig(**client_settings)
        own = settings_type(**{name: value for name, value in settings.items() if name in own_fields})
    except TypeError as exc:
        raise MQClientError(f"invalid {kind} settings: {exc}") from None
    return config, own


def local_address_towards(addresses: list[str]) -> str:
    """The local IP the OS would use to reach the first reachable-looking ``host:port`` in
    ``addresses`` (a UDP "connect" sends nothing); falls back to a non-loopback address of this
    host, then 127.0.0.1."""
    for addr in addresses:
        host, _, port = addr.rpartition(":")
        host = host.strip("[]")
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_DGRAM)
        except (OSError, ValueError):
            continue
        for family, kind, proto, _, sockaddr in infos:
            try:
                with socket.socket(family, kind, proto) as probe:
                    probe.connect(sockaddr)
                    local = probe.getsockname()[0]
            except OSError:
                continue
            if isinstance(local, str) and local not in ("0.0.0.0", "::"):
                return local
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            candidate = info[4][0]
            if isinstance(candidate, str) and not candidate.startswith("127."):
                return candidate
    except OSError:
        pass
    return "127.0.0.1"


__all__ = [
    "CLIENT_CONFIG_FIELDS",
    "CLIENT_NAME_ENV",
    "DEFAULT_INSTANCE_NAME",
    "NAMESRV_ADDR_ENV",
    "ClientConfig",
    "check_group",
    "local_address_towards",
    "split_settings",
]
