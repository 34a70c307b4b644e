"""Broker settings (`BrokerConfig`) with RocketMQ 4.9.3's defaults, loadable from a ``broker.conf``.

A ``broker.conf`` is a Java properties file (``key=value``, ``#``/``!`` comments) using RocketMQ's
camelCase names (``brokerClusterName``, ``listenPort``, ``storePathRootDir``, ``flushDiskType``...).
Names are mapped to our settings (broker settings first, then store settings); an unknown name or
a value of the wrong type raises `BrokerConfigError` naming the key and the line.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, get_origin

from rocketflow import properties_file
from rocketflow.errors import RocketflowError
from rocketflow.net.tls import ClientAuth, TlsClientSettings, TlsConfigError, TlsMode, TlsServerSettings
from rocketflow.properties_file import field_types, file_then_overrides, make_settings, snake_case
from rocketflow.store.config import BrokerRole, FlushDiskType, StoreConfig

DEFAULT_BROKER_PORT: Final = 10911
DEFAULT_MESSAGE_DELAY_LEVEL: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


#: Settings bounding one request (each must be positive).
REQUEST_BOUNDS: Final = ("max_groups_per_heartbeat", "max_subscriptions_per_group", "max_tags_per_subscription",
                         "max_subscription_length", "max_queues_per_request", "max_config_lines")


class BrokerConfigError(RocketflowError, ValueError):
    """A setting that cannot be used (unknown name, bad value)."""


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m 2h"`` -> delays in milliseconds, level 1 first (RocketMQ's parseDelayLevel)."""
    levels: list[int] = []
    for word in text.split():
        match = re.fullmatch(r"(\d+)([smhd])", word)
        if match is None:
            raise BrokerConfigError(
                f"message_delay_level: {word!r} is not a delay like '10s', '5m', '2h' or '1d' (in {text!r})"
            )
        levels.append(int(match.group(1)) * _DELAY_UNITS_MS[match.group(2)])
    if not levels:
        raise BrokerConfigError("message_delay_level: at least one delay level is needed")
    return levels


@dataclass(slots=True)
class BrokerConfig:
    """Every broker setting. Durations are milliseconds unless the name says otherwise."""

    broker_name: str = "broker-a"
    #: ``brokerClusterName``
    cluster: str = "DefaultCluster"
    #: 0 = the master; a slave (``brokerRole=SLAVE``) has an id > 0 (masters are always 0, as in RocketMQ)
    broker_id: int = 0
    #: the address registered with the name servers and written into records (``brokerIP1``);
    #: None = the listen host, or 127.0.0.1 when listening on a wildcard address
    broker_ip: str | None = None
    listen_host: str = "127.0.0.1"
    #: 0 picks a free port (the registered address then uses the real one)
    listen_port: int = DEFAULT_BROKER_PORT
    #: name servers, ``host:port`` separated by ``;`` (``namesrvAddr``); None = do not register
    namesrv_addr: str | None = None
    store: StoreConfig = field(default_factory=StoreConfig)
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    #: queues of TBW102 (the template of auto-created topics)
    default_topic_queue_nums: int = 8
    #: PermName bits of the whole broker (6 = read + write)
    broker_permission: int = 6
    long_polling_enable: bool = True
    short_polling_time_ms: int = 1000
    #: safety sweep of held pulls (new data normally wakes them at once)
    long_polling_check_interval_ms: int = 5000
    notify_consumer_ids_changed_enable: bool = True
    #: ``registerNameServerPeriod``
    register_name_server_period_ms: int = 30_000
    register_broker_timeout_ms: int = 6000
    #: send REGISTER_BROKER bodies in the compressed form (``compressedRegister``)
    compressed_register: bool = False
    flush_consumer_offset_interval_ms: int = 5000
    flush_delay_offset_interval_ms: int = 10_000
    #: fold the topic / group journals into topics.json / subscriptionGroup.json this often (changes reach
    #: the journals at once, in batches; see rocketflow.store.config_file)
    flush_config_interval_ms: int = 5000
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    #: a client channel silent this long is closed (ClientHousekeepingService)
    channel_expired_timeout_ms: int = 120_000
    client_scan_interval_ms: int = 10_000
    #: largest message body (and record) accepted
    max_message_size: int = 4 * 1024 * 1024
    enable_property_filter: bool = False
    #: broker lock lifetime (``rocketmq.broker.rebalance.lockMaxLiveTime``)
    rebalance_lock_max_live_time_ms: int = 60_000
    slave_read_enable: bool = False
    #: a slave copies the master's topics, consumer offsets, delay offsets and subscription groups this
    #: often (RocketMQ's SlaveSynchronize, every 10 s)
    slave_synchronize_interval_ms: int = 10_000
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    reject_transaction_message: bool = False
    #: also store reply messages (in ``<cluster>_REPLY_TOPIC``) besides pushing them to the requester
    store_reply_message_enable: bool = True
    #: a half (prepared) message younger than this is not checked back yet (``transactionTimeOut``)
    transaction_timeout_ms: int = 6000
    #: check-backs of one half message before it is discarded to TRANS_CHECK_MAX_TIME_TOPIC
    transaction_check_max: int = 15
    #: how often the broker looks for half messages to check back (``transactionCheckInterval``)
    transaction_check_interval_ms: int = 60_000
    #: server channels idle (both ways) this long are closed by the net layer
    server_channel_max_idle_seconds: float = 120.0
    #: timeout of broker -> client calls (GET_CONSUMER_RUNNING_INFO relay)
    client_call_timeout_ms: int = 5000
    #: Prometheus ``/metrics`` HTTP port (``metricsPort``); 0 = metrics off (rocketflow's own setting)
    metrics_port: int = 0
    #: address the metrics endpoint listens on (``metricsHost``)
    metrics_host: str = "127.0.0.1"
    #: check every request against a plain ACL file (``aclEnable``; see docs/acl.md)
    acl_enable: bool = False
    #: the ACL file; None = ``<store_root>/conf/plain_acl.yml`` (RocketMQ: ``$ROCKETMQ_HOME/conf/plain_acl.yml``)
    acl_file: Path | None = None
    #: the ACL file is checked for changes (mtime) at most this often, on use (rocketflow's own setting)
    acl_reload_check_interval_ms: int = 1000
    #: keys this broker signs its own requests to the name servers with (REGISTER_BROKER...), for name
    #: servers with ACL on (rocketflow's own settings; None = unsigned)
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    #: TLS of the listening port (``tls.server.mode``: disabled | permissive | enforcing); TLS stays off
    #: until ``tls_server_cert_path`` is set
    tls_mode: TlsMode = TlsMode.PERMISSIVE
    #: PEM certificate chain and key (``tls.server.certPath`` / ``keyPath`` / ``keyPassword``)
    tls_server_cert_path: Path | None = None
    tls_server_key_path: Path | None = None
    tls_server_key_password: str | None = field(default=None, repr=False)
    #: CAs client certificates must chain to (``tls.server.trustCertPath``)
    tls_server_trust_cert_path: Path | None = None
    #: ask clients for a certificate (``tls.server.need.client.auth``: none | optional | require)
    tls_server_need_client_auth: ClientAuth = ClientAuth.NONE
    #: the broker's own connections to name servers use TLS (``tls.enable``); None = when tls_mode is enforcing
    tls_enable: bool | None = None
    #: the broker's certificate for those connections and the CAs it trusts (``tls.client.*``)
    tls_client_cert_path: Path | None = None
    tls_client_key_path: Path | None = None
    tls_client_key_password: str | None = field(default=None, repr=False)
    tls_client_trust_cert_path: Path | None = None
    #: do not verify name-server certificates (``tls.test.mode.enable``; RocketMQ's default is true, ours false)
    tls_test_mode_enable: bool = False
    # Bounds of one request where RocketMQ has none besides the frame size (rocketflow's own settings;
    # a request past one is refused with a remark naming it; see docs/limits.md)
    #: consumer groups, and producer groups, one HEART_BEAT may list
    max_groups_per_heartbeat: int = 1024
    #: topic subscriptions of one consumer group in a HEART_BEAT
    max_subscriptions_per_group: int = 1024
    #: distinct tags of one subscription (``"TagA || TagB"``: a pull's, a heartbeat's, CHECK_CLIENT_CONFIG's)
    max_tags_per_subscription: int = 1024
    #: characters of one subscription expression (a tag or SQL92 subscription)
    max_subscription_length: int = 65536
    #: queues one LOCK_BATCH_MQ / UNLOCK_BATCH_MQ may name
    max_queues_per_request: int = 4096
    #: lines of one UPDATE_BROKER_CONFIG body
    max_config_lines: int = 1024
    # The gRPC endpoint for RocketMQ 5.x clients (rocketflow.proxy, docs/grpc.md; needs the `grpc` extra)
    #: its port (RocketMQ's proxy: ``grpcServerPort``, 8081); None = no endpoint, 0 = a free port
    grpc_port: int | None = None
    #: the shortest invisible time a receive may ask for (RocketMQ's proxy refuses under 10 s)
    grpc_min_invisible_time_ms: int = 1000
    grpc_max_invisible_time_ms: int = 12 * 3600 * 1000
    #: invisible time of messages a push consumer receives (it asks for none: it acks or changes them)
    grpc_default_invisible_time_ms: int = 60_000
    #: long polling time of a receive that names none, and what push consumers are told to use
    grpc_long_polling_timeout_ms: int = 20_000
    #: largest batch a receive may ask for
    grpc_max_receive_batch: int = 1024
    #: the furthest delivery time a DELAY message may name
    grpc_max_delay_ms: int = 3 * 24 * 3600 * 1000
    #: the backoff consumers are told to wait between attempts (the nth failure waits the nth step)
    grpc_consumer_backoff: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: how often the pop state's log is fsynced (a power loss may redeliver what was acked since)
    pop_flush_interval_ms: int = 200

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise BrokerConfigError(f"listen_port must be in 0..65535, got {self.listen_port}")
        if self.grpc_port is not None and not 0 <= self.grpc_port <= 65535:
            raise BrokerConfigError(f"grpc_port must be in 0..65535, got {self.grpc_port}")
        if not 0 < self.grpc_min_invisible_time_ms <= self.grpc_max_invisible_time_ms:
            raise BrokerConfigError("grpc_min_invisible_time_ms must be positive and at most "
                                    "grpc_max_invisible_time_ms")
        if not 0 <= self.metrics_port <= 65535:
            raise BrokerConfigError(f"metrics_port must be in 0..65535 (0 = off), got {self.metrics_port}")
        if self.default_topic_queue_nums <= 0:
            raise BrokerConfigError(f"default_topic_queue_nums must be positive, got {self.default_topic_queue_nums}")
        if not 0 <= self.broker_permission <= 15:
            raise BrokerConfigError(f"broker_permission must be PermName bits 0..15, got {self.broker_permission}")
        if self.max_message_size <= 0:
            raise BrokerConfigError(f"max_message_size must be positive, got {self.max_message_size}")
        for name in REQUEST_BOUNDS:
            if getattr(self, name) <= 0:
                raise BrokerConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.broker_name or not self.cluster:
            raise BrokerConfigError("broker_name and cluster must not be empty")
        if self.store.broker_role is BrokerRole.SLAVE:
            if self.broker_id <= 0:
                raise BrokerConfigError(f"a slave's broker_id (brokerId) must be > 0, got {self.broker_id}")
        else:
            self.broker_id = 0  # BrokerStartup's rule: a master is id 0 whatever the file says
        if self.slave_synchronize_interval_ms <= 0:
            raise BrokerConfigError(
                f"slave_synchronize_interval_ms must be positive, got {self.slave_synchronize_interval_ms}")
        parse_delay_levels(self.message_delay_level)
        self.store.max_message_size = self.max_message_size
        self.store.message_delay_level = self.message_delay_level
        if self.acl_reload_check_interval_ms < 0:
            raise BrokerConfigError(
                f"acl_reload_check_interval_ms must be >= 0, got {self.acl_reload_check_interval_ms}")
        if (self.access_key is None) != (self.secret_key is None):
            raise BrokerConfigError("access_key and secret_key must be set together")
        try:
            self.tls_mode = TlsMode.parse(self.tls_mode)
            self.tls_server_need_client_auth = ClientAuth.parse(self.tls_server_need_client_auth)
        except TlsConfigError as exc:
            raise BrokerConfigError(str(exc)) from None
        for name in ("tls_server_cert_path", "tls_server_key_path", "tls_server_trust_cert_path",
                     "tls_client_cert_path", "tls_client_key_path", "tls_client_trust_cert_path"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, Path(value).expanduser() if value else None)
        self.tls_server_settings()
        self.tls_client_settings()

    def tls_server_settings(self) -> TlsServerSettings:
        """TLS settings of the broker's listening port."""
        try:
            return TlsServerSettings(mode=self.tls_mode, cert_path=self.tls_server_cert_path,
                                     key_path=self.tls_server_key_path, key_password=self.tls_server_key_password,
                                     trust_cert_path=self.tls_server_trust_cert_path,
                                     need_client_auth=self.tls_server_need_client_auth)
        except TlsConfigError as exc:
            raise BrokerConfigError(str(exc)) from None

    def tls_client_settings(self) -> TlsClientSettings | None:
        """TLS settings of the broker's connections to name servers (None = plain), as RocketMQ's
        BrokerStartup: ``tls.enable``, else TLS when the broker itself enforces TLS."""
        enabled = self.tls_mode is TlsMode.ENFORCING if self.tls_enable is None else self.tls_enable
        if not enabled:
            return None
        try:
            return TlsClientSettings(trust_cert_path=self.tls_client_trust_cert_path,
                                     cert_path=self.tls_client_cert_path, key_path=self.tls_client_key_path,
                                     key_password=self.tls_client_key_password, verify=not self.tls_test_mode_enable)
        except TlsConfigError as exc:
            raise BrokerConfigError(str(exc)) from None

    @property
    def advertised_ip(self) -> str:
        """The IP other processes reach this broker at."""
        if self.broker_ip:
            return self.broker_ip
        if self.listen_host in ("", "0.0.0.0", "::"):
            return "127.0.0.1"
        return self.listen_host

    @property
    def namesrv_addresses(self) -> list[str]:
        if not self.namesrv_addr:
            return []
        return [addr.strip() for addr in self.namesrv_addr.split(";") if addr.strip()]

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def acl_file_path(self) -> Path:
        """`acl_file`, or ``conf/plain_acl.yml`` under the store root."""
        return Path(self.acl_file) if self.acl_file is not None else self.store.store_root / "conf" / "plain_acl.yml"


# --------------------------------------------------------------------------- broker.conf

#: RocketMQ property names whose camel-to-snake form is not our name.
_ALIASES: Final[Mapping[str, tuple[str, str]]] = {
    "brokerClusterName": ("broker", "cluster"),
    "brokerIP1": ("broker", "broker_ip"),
    "namesrvAddr": ("broker", "namesrv_addr"),
    "registerNameServerPeriod": ("broker", "register_name_server_period_ms"),
    "registerBrokerTimeoutMills": ("broker", "register_broker_timeout_ms"),
    "compressedRegister": ("broker", "compressed_register"),
    "shortPollingTimeMills": ("broker", "short_polling_time_ms"),
    "flushConsumerOffsetInterval": ("broker", "flush_consumer_offset_interval_ms"),
    "flushDelayOffsetInterval": ("broker", "flush_delay_offset_interval_ms"),
    "messageDelayLevel": ("broker", "message_delay_level"),
    "regionId": ("broker", "region_id"),
    "traceOn": ("broker", "trace_on"),
    "channelExpiredTimeout": ("broker", "channel_expired_timeout_ms"),
    "maxMessageSize": ("broker", "max_message_size"),
    "rocketmq.broker.rebalance.lockMaxLiveTime": ("broker", "rebalance_lock_max_live_time_ms"),
    "transactionTimeOut": ("broker", "transaction_timeout_ms"),
    "transactionCheckInterval": ("broker", "transaction_check_interval_ms"),
    "grpcServerPort": ("broker", "grpc_port"),
    "storePathRootDir": ("store", "store_root"),
    "mappedFileSizeCommitLog": ("store", "commit_log_segment_size"),
    "flushIntervalCommitLog": ("store", "flush_interval_commit_log_ms"),
    "flushCommitLogLeastPages": ("store", "flush_commit_log_least_pages"),
    "flushCommitLogThoroughInterval": ("store", "flush_commit_log_thorough_interval_ms"),
    "flushIntervalConsumeQueue": ("store", "flush_interval_consume_queue_ms"),
    "flushConsumeQueueLeastPages": ("store", "flush_consume_queue_least_pages"),
    "flushConsumeQueueThoroughInterval": ("store", "flush_consume_queue_thorough_interval_ms"),
    "syncFlushTimeout": ("store", "sync_flush_timeout_ms"),
    "haSendHeartbeatInterval": ("store", "ha_send_heartbeat_interval_ms"),
    "haHousekeepingInterval": ("store", "ha_housekeeping_interval_ms"),
    "fileReservedTime": ("store", "file_reserved_time_hours"),
    "deleteWhen": ("store", "delete_when"),
    "diskMaxUsedSpaceRatio": ("store", "disk_max_used_space_ratio"),
    "defaultQueryMaxNum": ("store", "default_query_max_num"),
    "messageIndexEnable": ("store", "message_index_enable"),
    "messageIndexSafe": ("store", "message_index_safe"),
    "maxTransferBytesOnMessageInMemory": ("store", "max_transfer_bytes_on_message_in_memory"),
    "maxTransferCountOnMessageInMemory": ("store", "max_transfer_count_on_message_in_memory"),
    "maxTransferBytesOnMessageInDisk": ("store", "max_transfer_bytes_on_message_in_disk"),
    "maxTransferCountOnMessageInDisk": ("store", "max_transfer_count_on_message_in_disk"),
    "accessMessageInMemoryMaxRatio": ("store", "access_message_in_memory_max_ratio"),
    "checkCRCOnRecover": ("store", "check_crc_on_recover"),
    "offsetCheckInSlave": ("store", "offset_check_in_slave"),
    # RocketMQ's TLS system properties (TlsSystemConfig)
    "tls.server.mode": ("broker", "tls_mode"),
    "tls.enable": ("broker", "tls_enable"),
    "tls.test.mode.enable": ("broker", "tls_test_mode_enable"),
    "tls.server.need.client.auth": ("broker", "tls_server_need_client_auth"),
    "tls.server.certPath": ("broker", "tls_server_cert_path"),
    "tls.server.keyPath": ("broker", "tls_server_key_path"),
    "tls.server.keyPassword": ("broker", "tls_server_key_password"),
    "tls.server.trustCertPath": ("broker", "tls_server_trust_cert_path"),
    "tls.client.certPath": ("broker", "tls_client_cert_path"),
    "tls.client.keyPath": ("broker", "tls_client_key_path"),
    "tls.client.keyPassword": ("broker", "tls_client_key_password"),
    "tls.client.trustCertPath": ("broker", "tls_client_trust_cert_path"),
}

#: RocketMQ settings accepted and ignored (they have no meaning here), so stock files load.
_IGNORED: Final = frozenset({
    "brokerRole_", "deleteWhen_", "storePathCommitLog", "storePathConsumeQueue",
    "storePathIndex", "storeCheckpoint", "abortFile", "sendMessageThreadPoolNums",
    "pullMessageThreadPoolNums", "brokerIP2", "transientStorePoolEnable",
    "fetchNamesrvAddrByAddressServer", "useEpollNativeSelector", "waitTimeMillsInSendQueue",
    "brokerFastFailureEnable", "osPageCacheBusyTimeOutMills", "useReentrantLockWhenPutMessage",
    "autoDeleteUnusedStats", "serverWorkerThreads", "serverSelectorThreads", "clientWorkerThreads",
    "warmMapedFileEnable", "enableDLegerCommitLog", "transferMsgByHeap",
})


def _convert_other(text: str, hint: Any) -> object:
    """The broker's setting types beyond the scalars: an enum by its name, a ``host:port`` address."""
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint[text.upper()]
    if get_origin(hint) is tuple:
        host, _, port = text.rpartition(":")
        return (host, int(port))
    return NotImplemented


def _convert(raw: str, hint: Any, key: str) -> object:
    return properties_file.convert_setting(raw, hint, key, BrokerConfigError, _convert_other)


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """Java properties (``key=value`` or ``key: value``, ``#``/``!`` comments) -> (line, key, value)."""
    return properties_file.parse_properties(text, BrokerConfigError)


def config_overrides_from_properties(text: str, source: str = "broker.conf", *,
                                     max_lines: int | None = None) -> dict[str, object]:
    """Settings of a ``broker.conf`` as ``{"broker_field": value, "store.store_field": value}``; more than
    ``max_lines`` lines (None: no bound) raise `BrokerConfigError` before any is parsed."""
    if max_lines is not None:
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines > max_lines:
            raise BrokerConfigError(f"{source}: {lines} lines, more than {max_lines} (maxConfigLines)")
    broker_types = field_types(BrokerConfig)
    store_types = field_types(StoreConfig)
    result: dict[str, object] = {}
    for number, key, value in parse_properties(text):
        where = f"{source}:{number}: {key}"
        if key in _IGNORED:
            continue
        if key == "brokerRole":
            result["store.broker_role"] = _convert(value, BrokerRole, where)
            continue
        if key == "flushDiskType":
            result["store.flush_disk_type"] = _convert(value, FlushDiskType, where)
            continue
        if key == "listenPort":
            result["listen_port"] = _convert(value, int, where)
            continue
        if key == "mappedFileSizeConsumeQueue":
            # bytes in RocketMQ (rounded up to whole 20-byte units), units in the store
            size = _convert(value, int, where)
            if not isinstance(size, int) or size <= 0:
                raise BrokerConfigError(f"{where}: must be a positive number of bytes, got {value!r}")
            result["store.consume_queue_segment_units"] = -(-size // 20)
            continue
        target, name = _ALIASES.get(key, ("", snake_case(key)))
        if target in ("", "broker") and name in broker_types and name != "store":
            result[name] = _convert(value, broker_types[name], where)
        elif target in ("", "store") and name in store_types:
            result["store." + name] = _convert(value, store_types[name], where)
        else:
            raise BrokerConfigError(f"{where}: unknown setting (not a broker or store setting of rocketflow)")
    return result


def build_broker_config(overrides: Mapping[str, object] | None = None, *,
                        conf_file: str | Path | None = None) -> BrokerConfig:
    """A `BrokerConfig` from defaults, then a ``broker.conf`` (if given), then ``overrides``.

    Keys of ``overrides`` are field names; ``"store.<name>"`` sets a store field.
    """
    values = file_then_overrides(conf_file, overrides, config_overrides_from_properties, BrokerConfigError)
    store_values = {key[len("store."):]: value for key, value in values.items() if key.startswith("store.")}
    broker_values = {key: value for key, value in values.items() if not key.startswith("store.")}
    broker_fields = set(field_types(BrokerConfig))
    store_fields = set(field_types(StoreConfig))
    for name in broker_values:
        if name not in broker_fields:
            raise BrokerConfigError(f"unknown broker setting {name!r}")
    for name in store_values:
        if name not in store_fields:
            raise BrokerConfigError(f"unknown store setting {name!r}")
    if "max_message_size" in broker_values and "max_message_size" in store_values:
        store_values.pop("max_message_size")
    # one delay table (messageDelayLevel) for the broker and the store's deliver times; the broker's wins
    if "message_delay_level" in broker_values:
        store_values["message_delay_level"] = broker_values["message_delay_level"]
    elif "message_delay_level" in store_values:
        broker_values["message_delay_level"] = store_values["message_delay_level"]

    def make() -> BrokerConfig:
        store = StoreConfig(**store_values)  # type: ignore[arg-type]
        return BrokerConfig(store=store, **broker_values)  # type: ignore[arg-type]

    return make_settings(make, BrokerConfigError, BrokerConfigError)


__all__ = [
    "DEFAULT_BROKER_PORT",
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "BrokerConfig",
    "BrokerConfigError",
    "build_broker_config",
    "config_overrides_from_properties",
    "parse_delay_levels",
    "parse_properties",
]
