"""The broker itself: its runtime info table, and its settings read or changed while it runs."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Final

from rocketflow.acl import redact_settings, redact_value
from rocketflow.broker.config import BrokerConfigError, config_overrides_from_properties
from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import Handler, error
from rocketflow.net import RequestContext
from rocketflow.protocol.bodies import KVTable
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

logger = logging.getLogger(__name__)

#: Settings used only while the broker starts (or baked into files): UPDATE_BROKER_CONFIG refuses them.
_FIXED_AT_START: Final = frozenset({
    "broker_name", "cluster", "broker_id", "broker_ip", "listen_host", "listen_port", "namesrv_addr",
    "message_delay_level", "acl_enable", "acl_file", "metrics_port", "metrics_host", "access_key", "secret_key",
    "server_channel_max_idle_seconds", "store.store_root", "store.commit_log_segment_size",
    "store.consume_queue_segment_units", "store.flush_disk_type", "store.broker_role", "store.max_hash_slot_num",
    "store.max_index_num", "store.message_index_enable", "store.store_host", "store.message_delay_level",
    "store.total_physical_memory", "store.ha_listen_port", "store.ha_master_address", "store.index_build_batch",
    "store.ha_transfer_batch_size", "store.ha_send_heartbeat_interval_ms", "store.ha_housekeeping_interval_ms",
    "slave_synchronize_interval_ms", "grpc_port", "pop_flush_interval_ms",
})


class BrokerAdmin:
    """GET_BROKER_RUNTIME_INFO, GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG.

    ``runtime_info`` gives the runtime table (the controller assembles it from every part);
    ``permission_changed`` is called once ``brokerPermission`` changed (the broker registers again).
    """

    def __init__(self, ctx: BrokerContext, *, runtime_info: Callable[[], dict[str, str]],
                 permission_changed: Callable[[], None]) -> None:
        self.ctx = ctx
        self._runtime_info = runtime_info
        self._permission_changed = permission_changed

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
        }

    def get_broker_runtime_info(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=KVTable(self._runtime_info()).encode())

    def update_broker_config(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG (25): ``key=value`` lines (RocketMQ's names or ours) applied to the running broker.

        Settings read on use (permissions, limits, timeouts, filters, flush intervals...) take effect at
        once; the few fixed at start (addresses, names, paths, segment sizes, TLS, ACL) are refused, all
        or nothing. Changes last until the broker restarts (put them in broker.conf to keep them).
        """
        config = self.ctx.config
        try:
            text = request.body.decode("utf-8")
            overrides = config_overrides_from_properties(text, "UPDATE_BROKER_CONFIG",
                                                         max_lines=config.max_config_lines)
        except (UnicodeDecodeError, BrokerConfigError) as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"string2Properties error: {exc}")
        fixed = sorted(name for name in overrides if _fixed_at_start(name))
        if fixed:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"{', '.join(fixed)} cannot change while the broker runs: set it in broker.conf and restart")
        broker_changes: dict[str, Any] = {name: value for name, value in overrides.items()
                                          if not name.startswith("store.")}
        store_changes: dict[str, Any] = {name[len("store."):]: value for name, value in overrides.items()
                                         if name.startswith("store.")}
        try:  # validate as a whole, on copies, before touching the live settings
            store_copy = dataclasses.replace(config.store, **store_changes)
            dataclasses.replace(config, store=store_copy, **broker_changes)
        except (BrokerConfigError, TypeError, ValueError) as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"invalid broker config: {exc}")
        for name, value in broker_changes.items():
            setattr(config, name, value)
        for name, value in store_changes.items():
            setattr(config.store, name, value)
        if "max_message_size" in broker_changes:
            config.store.max_message_size = config.max_message_size
        logger.info("broker config updated by %s: %s", request_ctx.remote_address, redact_settings(overrides))
        if "broker_permission" in broker_changes:
            self.ctx.topics.data_version.next_version()
            self._permission_changed()
        return request.make_response(ResponseCode.SUCCESS)

    def get_broker_config(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG (26): every setting as ``name=value`` lines; secrets (keys' passwords, the
        broker's ``secretKey``) are redacted, so the answer is safe to show (and it is admin-only with ACL on)."""
        config = self.ctx.config
        lines: list[str] = []

        def add(obj: Any) -> None:
            for item in dataclasses.fields(obj):
                value = getattr(obj, item.name)
                if dataclasses.is_dataclass(value):
                    continue
                if isinstance(value, bool):
                    value = "true" if value else "false"  # as Java prints them
                elif hasattr(value, "value") and not isinstance(value, int | str):
                    value = value.value
                text = "" if value is None else str(value)
                lines.append(f"{_camel(item.name)}={redact_value(item.name, text)}")

        add(config)
        add(config.store)
        version = self.ctx.topics.data_version
        return request.make_response(ResponseCode.SUCCESS,
                                     ext_fields={"version": version.encode().decode()},
                                     body=("\n".join(sorted(lines)) + "\n").encode())


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _fixed_at_start(name: str) -> bool:
    return name in _FIXED_AT_START or name.startswith(("tls_", "store.tls_"))


__all__ = ["BrokerAdmin"]
