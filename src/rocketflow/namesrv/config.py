"""Name server settings, with RocketMQ 4.9.3's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
