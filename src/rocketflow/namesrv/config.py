"""Name server settings, with RocketMQ 4.9.3's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocketflow.net.tls import ClientAuth, TlsMode, TlsServerSettings

DEFAULT_NAMESRV_PORT = 9876


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
    tls_server_key_password: str | None = None
    tls_server_trust_cert_path: Path | None = None
    tls_server_need_client_auth: ClientAuth = ClientAuth.NONE

    def __post_init__(self) -> None:
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
