"""Name server settings, with RocketMQ 4.9.3's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rocketflow.errors import RocketflowError
from rocketflow.net.tls import ClientAuth, TlsConfigError, TlsMode, TlsServerSettings
from rocketflow.properties_file import (
    convert_setting,
    field_types,
    file_then_overrides,
    make_settings,
    parse_properties,
    snake_case,
)

DEFAULT_NAMESRV_PORT = 9876


class NamesrvConfigError(RocketflowError, ValueError):
    """A name-server setting that is unknown or has a value of the wrong type."""


@dataclass(slots=True)
class NamesrvConfig:
    """Every name-server setting; the defaults are RocketMQ's."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_NAMESRV_PORT
    #: A broker not heard from for this long is dropped from the routes (BROKER_CHANNEL_EXPIRED_TIME).
    broker_channel_expired_seconds: float = 120.0
    #: How often brokers are checked for expiry (first check after `scan_initial_delay_seconds`).
    scan_not_active_broker_interval_seconds: float = 10.0
    scan_initial_delay_seconds: float = 5.0
    #: Put the ORDER_TOPIC_CONFIG KV entry of a topic into its route (namesrv `orderMessageEnable`).
    order_message_enable: bool = False
    #: Where the KV config is persisted; None keeps it in memory only.
    kv_config_path: Path | None = None
    #: Idle connections are closed after this long (server channel max idle, 120 s).
    channel_max_idle_seconds: float = 120.0
    #: PUT_KV_CONFIG bounds RocketMQ does not have (rocketflow's own; see docs/limits.md): characters of a
    #: namespace or key, and of a value
    max_kv_key_length: int = 1024
    max_kv_value_length: int = 65536
    #: Check every request against a plain ACL file (rocketflow's own: RocketMQ 4.9.3's name server has no ACL).
    acl_enable: bool = False
    #: The ACL file; None = ``~/conf/plain_acl.yml``.
    acl_file: Path | None = None
    #: The ACL file is checked for changes (mtime) at most this often, on use.
    acl_reload_check_interval_seconds: float = 1.0
    #: TLS of the listening port (``tls.server.mode``); TLS stays off until ``tls_server_cert_path`` is set.
    tls_mode: TlsMode = TlsMode.PERMISSIVE
    #: ``tls.server.certPath`` / ``keyPath`` / ``keyPassword`` / ``trustCertPath`` / ``need.client.auth``
    tls_server_cert_path: Path | None = None
    tls_server_key_path: Path | None = None
    tls_server_key_password: str | None = field(default=None, repr=False)
    tls_server_trust_cert_path: Path | None = None
    tls_server_need_client_auth: ClientAuth = ClientAuth.NONE
    #: Refuse a REGISTER_BROKER that would move a live broker (registered within the expiry window, its
    #: connection open) to another address, and an UNREGISTER_BROKER of it, from any other connection
    #: than the one it registered over, unless from an admin account (ACL on). rocketflow's own
    #: (RocketMQ's name server takes them); false for brokers that change address faster than the name
    #: server sees their old connection close.
    protect_live_brokers: bool = True

    def __post_init__(self) -> None:
        for name in ("max_kv_key_length", "max_kv_value_length"):
            if getattr(self, name) <= 0:
                raise NamesrvConfigError(f"{name} must be positive, got {getattr(self, name)}")
        self.tls_server_settings()

    @property
    def acl_file_path(self) -> Path:
        """`acl_file`, or ``~/conf/plain_acl.yml``."""
        return Path(self.acl_file) if self.acl_file is not None else Path.home() / "conf" / "plain_acl.yml"

    def tls_server_settings(self) -> TlsServerSettings:
        """TLS settings of the listening port (raises `TlsConfigError` for bad ones)."""
        return TlsServerSettings(mode=self.tls_mode, cert_path=self.tls_server_cert_path,
                                 key_path=self.tls_server_key_path, key_password=self.tls_server_key_password,
                                 trust_cert_path=self.tls_server_trust_cert_path,
                                 need_client_auth=self.tls_server_need_client_auth)


# --------------------------------------------------------------------------- namesrv.properties

#: RocketMQ property names (NamesrvConfig, NettyServerConfig, TlsSystemConfig) whose
#: camel-to-snake form is not our field name.
_ALIASES: Final[Mapping[str, str]] = {
    "listenPort": "port",
    "listenHost": "host",
    "serverChannelMaxIdleTimeSeconds": "channel_max_idle_seconds",
    "tls.server.mode": "tls_mode",
    "tls.server.need.client.auth": "tls_server_need_client_auth",
    "tls.server.certPath": "tls_server_cert_path",
    "tls.server.keyPath": "tls_server_key_path",
    "tls.server.keyPassword": "tls_server_key_password",
    "tls.server.trustCertPath": "tls_server_trust_cert_path",
}

#: RocketMQ name-server settings accepted and ignored (no meaning here), so stock files load.
_IGNORED: Final = frozenset({
    "rocketmqHome", "configStorePath", "productEnvName", "clusterTest", "serverWorkerThreads",
    "serverCallbackExecutorThreads", "serverSelectorThreads", "serverOnewaySemaphoreValue",
    "serverAsyncSemaphoreValue", "serverSocketSndBufSize", "serverSocketRcvBufSize",
    "serverPooledByteBufAllocatorEnable", "useEpollNativeSelector", "serverSocketBacklog",
    "writeBufferHighWaterMark", "writeBufferLowWaterMark",
})


def _convert_tls(text: str, hint: Any) -> object:
    """The TLS settings' types beyond the scalars."""
    if hint is TlsMode:
        return TlsMode.parse(text)
    if hint is ClientAuth:
        return ClientAuth.parse(text)
    return NotImplemented


def namesrv_overrides_from_properties(text: str, source: str = "namesrv.properties") -> dict[str, object]:
    """Settings of a RocketMQ-style name-server properties file as `NamesrvConfig` field values.

    Keys are RocketMQ's names (``listenPort``, ``kvConfigPath``, ``orderMessageEnable``,
    ``tls.server.*``...) or our own in camelCase or snake_case; unknown keys are an error.
    """
    types_by_name = field_types(NamesrvConfig)
    result: dict[str, object] = {}
    for number, key, value in parse_properties(text, NamesrvConfigError, source):
        if key in _IGNORED:
            continue
        name = _ALIASES.get(key) or snake_case(key)
        if name not in types_by_name:
            raise NamesrvConfigError(f"{source}:{number}: {key}: unknown setting (not a name-server setting)")
        result[name] = convert_setting(value, types_by_name[name], f"{source}:{number}: {key}", NamesrvConfigError,
                                       _convert_tls)
    return result


def build_namesrv_config(overrides: Mapping[str, object] | None = None, *,
                         conf_file: str | Path | None = None) -> NamesrvConfig:
    """A `NamesrvConfig` from defaults, then a properties file (if given), then ``overrides`` (field names)."""
    values = file_then_overrides(conf_file, overrides, namesrv_overrides_from_properties, NamesrvConfigError)
    unknown = sorted(set(values) - set(field_types(NamesrvConfig)))
    if unknown:
        raise NamesrvConfigError(f"unknown name-server setting(s) {', '.join(unknown)}")
    port = values.get("port", DEFAULT_NAMESRV_PORT)
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise NamesrvConfigError(f"port must be in 0..65535, got {port!r}")
    return make_settings(lambda: NamesrvConfig(**values), NamesrvConfigError,  # type: ignore[arg-type]
                         TlsConfigError)


__all__ = [
    "DEFAULT_NAMESRV_PORT",
    "NamesrvConfig",
    "NamesrvConfigError",
    "build_namesrv_config",
    "namesrv_overrides_from_properties",
]
