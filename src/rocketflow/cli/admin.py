"""``rocketflow admin``: an operator CLI (like RocketMQ's mqadmin) for any RocketMQ 4.x name server.

Every command takes ``-n/--namesrv`` (default: ``$ROCKETFLOW_NAMESRV`` or 127.0.0.1:9876), ``--json``
for machine output (one JSON document; one per line for ``--watch`` and ``message tail``),
``--timeout``, the ACL keys ``--access-key`` / ``--secret-key`` and TLS (``--tls``, ``--tls-ca``), each
with an environment variable. A refused request exits 1 with the server's code and remark on stderr,
as does an unreachable server; bad arguments exit 2.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

import click
from click.core import ParameterSource
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from rocketflow.acl import redact_settings
from rocketflow.cli.params import GROUP, NAMESRV, TOPIC
from rocketflow.client.admin import (
    DEFAULT_PERM,
    DEFAULT_QUERY_MAX_NUM,
    DEFAULT_QUEUE_NUMS,
    EARLIEST,
    LATEST,
    MESSAGE_TYPES,
    Admin,
    ConsumerProgress,
    QueueLayoutWarning,
    format_timestamp,
    parse_timestamp,
    topic_kind,
    version_desc,
)
from rocketflow.client.api import ADMIN_RPC_TIMEOUT, SendResult
from rocketflow.client.errors import MQClientError, MQConnectError, MQError
from rocketflow.protocol.bodies import SubscriptionGroupConfig
from rocketflow.protocol.message import MessageExt
from rocketflow.protocol.names import TRACE_TOPIC, perm_to_string

#: The environment variable naming the default name server(s).
NAMESRV_ENV: Final = "ROCKETFLOW_NAMESRV"
#: Environment variables of the connection options (ACL keys, TLS).
ACCESS_KEY_ENV: Final = "ROCKETFLOW_ACCESS_KEY"
SECRET_KEY_ENV: Final = "ROCKETFLOW_SECRET_KEY"
TLS_ENV: Final = "ROCKETFLOW_TLS"
TLS_CA_ENV: Final = "ROCKETFLOW_TLS_CA"
DEFAULT_NAMESRV: Final = "127.0.0.1:9876"
#: Body characters shown in message tables.
BODY_PREVIEW: Final = 60

_F = TypeVar("_F", bound=Callable[..., Any])


_SETTINGS_META_KEY: Final = "rocketflow.admin.client_settings"
_NAMESRV_META_KEY: Final = "rocketflow.admin.namesrv"


def _remember(setting: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A callback keeping an option's value as the `ClientConfig` field ``setting`` (read by `_session`)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            ctx.meta.setdefault(_SETTINGS_META_KEY, {})[setting] = value

    return callback


def _client_settings() -> dict[str, Any]:
    """`ClientConfig` fields from the connection options; usage errors for incomplete ones."""
    ctx = click.get_current_context(silent=True)
    given: dict[str, Any] = dict(ctx.meta.get(_SETTINGS_META_KEY, {})) if ctx is not None else {}
    if ("access_key" in given) != ("secret_key" in given):
        raise click.UsageError(f"--access-key and --secret-key (${ACCESS_KEY_ENV} / ${SECRET_KEY_ENV}) "
                               "must be given together")
    if given.pop("use_tls", False) or "tls_ca" in given:
        given["use_tls"] = True
    return given


def _common_options(func: _F) -> _F:
    """``-n/--namesrv``, ``--json``, ``--timeout`` and the connection options, on every command."""
    # the connection options go to `_session` through the context, not into every command's signature
    func = click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), envvar=TLS_CA_ENV,
                        show_envvar=True, expose_value=False, callback=_remember("tls_ca"),
                        help="PEM file of the CAs the servers' certificates must chain to (implies --tls) "
                             "[default: the system's CAs].")(func)
    func = click.option("--tls", is_flag=True, default=None, envvar=TLS_ENV, show_envvar=True, expose_value=False,
                        callback=_remember("use_tls"), help="Connect over TLS.")(func)
    func = click.option("--secret-key", envvar=SECRET_KEY_ENV, show_envvar=True, expose_value=False,
                        callback=_remember("secret_key"),
                        help="ACL secret key (prefer the environment variable: arguments are visible to "
                             "other users).")(func)
    func = click.option("--access-key", envvar=ACCESS_KEY_ENV, show_envvar=True, expose_value=False,
                        callback=_remember("access_key"),
                        help="ACL access key: sign every request (brokers with aclEnable=true).")(func)
    func = click.option("--timeout", default=ADMIN_RPC_TIMEOUT, show_default=True, type=click.FloatRange(min=0.1),
                        help="Seconds each request may take.")(func)
    func = click.option("--json", "json_output", is_flag=True, help="Print JSON instead of tables.")(func)
    func = click.option("-n", "--namesrv", type=NAMESRV, envvar=NAMESRV_ENV, default=DEFAULT_NAMESRV,
                        show_default=True, show_envvar=True, callback=_namesrv_given_before,
                        help="Name server(s), host:port;host:port.")(func)
    return func


def _namesrv_given_before(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A command's -n, unless it was not typed there but before the command (``admin -n X topic list``)."""
    if ctx.get_parameter_source(param.name or "") in (ParameterSource.COMMANDLINE, ParameterSource.PROMPT):
        return value
    earlier: str | None = ctx.meta.get(_NAMESRV_META_KEY)
    return value if earlier is None else earlier


def _remember_namesrv(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[_NAMESRV_META_KEY] = value


def _group_namesrv_option(func: _F) -> _F:
    """``-n/--namesrv`` on a command group too, so that it may come before the command."""
    return click.option("-n", "--namesrv", type=NAMESRV, default=None, expose_value=False, is_eager=True,
                        callback=_remember_namesrv,
                        help="Name server(s), host:port;host:port (here, or after the command).")(func)


def _cluster_options(func: _F) -> _F:
    func = click.option("-b", "--broker", "broker_addr", default=None,
                        help="Only this broker address (host:port).")(func)
    func = click.option("-c", "--cluster", default=None,
                        help="The masters of this cluster [default: the only cluster].")(func)
    return func


@contextmanager
def _session(namesrv: str, timeout: float) -> Iterator[Admin]:
    """A started `Admin` (with the connection options); client errors become a clean exit 1 with their message."""
    settings = _client_settings()
    try:
        with Admin(namesrv, timeout=timeout, **settings) as admin:
            yield admin
    except MQConnectError as exc:
        raise click.ClickException(f"{exc} (is the server running? name server: {namesrv})") from None
    except MQError as exc:
        raise click.ClickException(str(exc)) from None


@contextmanager
def _echo_warnings(category: type[Warning]) -> Iterator[None]:
    """Print warnings of ``category`` raised inside as ``warning: ...`` lines on stderr (once each)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", category)
        yield
    for warning in caught:
        if issubclass(warning.category, category):
            click.echo(f"warning: {warning.message}", err=True)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _console() -> Console:
    # pipes and captured output get a wide console so that ids and addresses are never cut
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 200))
    return console


def _print_json(data: Any, *, indent: int | None = 2) -> None:
    click.echo(json.dumps(data, indent=indent, ensure_ascii=False, sort_keys=False))


def _table(title: str | None, *columns: str) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _queue_label(topic: str, broker_name: str, queue_id: int) -> str:
    return f"{topic}@{broker_name}:{queue_id}"


# --------------------------------------------------------------------------- the group


@click.group("admin")
@_group_namesrv_option
def admin() -> None:
    """Operate a RocketMQ 4.x cluster (ours or a real one) through its name server, like mqadmin."""


@admin.command("cluster")
@_common_options
def cluster_command(namesrv: str, json_output: bool, timeout: float) -> None:
    """Brokers per cluster: name, id, address, version, put/get TPS."""
    with _session(namesrv, timeout) as session:
        statuses = session.cluster_overview()
    if json_output:
        _print_json([{"cluster": status.cluster, "brokerName": status.broker_name, "brokerId": status.broker_id,
                      "addr": status.addr, "version": status.version, "putTps": status.put_tps,
                      "getTps": status.get_tps, "error": status.error} for status in statuses])
        return
    table = _table("Brokers", "Cluster", "Broker", "Id", "Address", "Version", "Put TPS", "Get TPS")
    for status in statuses:
        if status.error is not None:
            table.add_row(status.cluster, status.broker_name, str(status.broker_id), status.addr,
                          f"[red]unreachable: {status.error}[/red]", "", "")
        else:
            table.add_row(status.cluster, status.broker_name, str(status.broker_id), status.addr, status.version,
                          f"{status.put_tps:.2f}", f"{status.get_tps:.2f}")
    _console().print(table)


@admin.group("broker")
@_group_namesrv_option
def broker_group() -> None:
    """A broker's settings (show them, change them while it runs) and runtime figures."""


@broker_group.command("config")
@click.argument("broker_addr")
@_common_options
def broker_config_command(broker_addr: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """Every setting of the broker at BROKER_ADDR (host:port), by RocketMQ name (secrets shown as ******)."""
    with _session(namesrv, timeout) as session:
        settings = redact_settings(session.broker_config(broker_addr))  # a RocketMQ broker sends them in clear
    if json_output:
        _print_json(settings)
        return
    table = _table(f"Broker {broker_addr}", "Setting", "Value")
    for key, value in sorted(settings.items()):
        table.add_row(key, value)
    _console().print(table)


@broker_group.command("status")
@click.argument("broker_addr")
@_common_options
def broker_status_command(broker_addr: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """Runtime figures of the broker at BROKER_ADDR (mqadmin brokerStatus): store, TPS, role, replication."""
    with _session(namesrv, timeout) as session:
        info = session.broker_runtime_info(broker_addr)
    if json_output:
        _print_json(info)
        return
    table = _table(f"Broker {broker_addr}", "Figure", "Value")
    for key, value in sorted(info.items()):
        table.add_row(key, value)
    _console().print(table)


@broker_group.command("set")
@click.argument("broker_addr")
@click.argument("settings", nargs=-1, required=True, metavar="KEY=VALUE...")
@_common_options
def broker_set_command(broker_addr: str, settings: tuple[str, ...], namesrv: str, json_output: bool,
                       timeout: float) -> None:
    """Change settings of the running broker at BROKER_ADDR, e.g. brokerPermission=4 (read only).

    They last until the broker restarts; settings fixed at start (ports, paths, names) are refused.
    """
    changes: dict[str, str] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="SETTINGS")
        changes[key.strip()] = value.strip()
    with _session(namesrv, timeout) as session:
        session.update_broker_config(broker_addr, changes)
    shown = redact_settings(changes)
    if json_output:
        _print_json({"updated": shown})
        return
    _console().print(f"updated {', '.join(f'{key}={value}' for key, value in shown.items())} on {broker_addr}")


# --------------------------------------------------------------------------- topics


@admin.group("topic")
@_group_namesrv_option
def topic_group() -> None:
    """List, create, update, delete topics; show routes and queue stats."""


@topic_group.command("list")
@_common_options
def topic_list(namesrv: str, json_output: bool, timeout: float) -> None:
    """Every topic the name server knows."""
    with _session(namesrv, timeout) as session:
        topics = session.topic_list()
        reserved = session.reserved_topic_names()
    if json_output:
        _print_json([{"topic": topic, "kind": topic_kind(topic, reserved)} for topic in topics])
        return
    table = _table(f"Topics ({len(topics)})", "Topic", "Kind")
    for topic in topics:
        table.add_row(topic, topic_kind(topic, reserved))
    _console().print(table)


def _print_targets(action: str, topic: str, addrs: list[str], json_output: bool) -> None:
    if json_output:
        _print_json({"topic": topic, "action": action, "brokers": addrs})
    else:
        click.echo(f"{action} {topic} on {', '.join(addrs)}")


@topic_group.command("create")
@click.argument("topic", type=TOPIC)
@_cluster_options
@click.option("--read-queues", default=DEFAULT_QUEUE_NUMS, show_default=True, type=click.IntRange(1, 1024))
@click.option("--write-queues", default=DEFAULT_QUEUE_NUMS, show_default=True, type=click.IntRange(1, 1024))
@click.option("--perm", default=DEFAULT_PERM, show_default=True, type=click.IntRange(0, 15),
              help="Permission bits: 2 write, 4 read, 6 both.")
@click.option("--order", is_flag=True, help="An ordered topic (also recorded in the name servers' KV config).")
@click.option("--message-type", type=click.Choice(MESSAGE_TYPES, case_sensitive=False), default=None,
              help="The one kind of message RocketMQ 5.x clients may send (the topic's message.type attribute) "
                   "[default: any].")
@_common_options
def topic_create(topic: str, cluster: str | None, broker_addr: str | None, read_queues: int, write_queues: int,
                 perm: int, order: bool, message_type: str | None, namesrv: str, json_output: bool,
                 timeout: float) -> None:
    """Create (or overwrite) TOPIC on a cluster's masters or one broker."""
    with _session(namesrv, timeout) as session, _echo_warnings(QueueLayoutWarning):
        addrs = session.create_topic(topic, cluster=cluster, broker_addr=broker_addr, read_queue_nums=read_queues,
                                     write_queue_nums=write_queues, perm=perm, order=order,
                                     message_type=message_type)
    _print_targets("created", topic, addrs, json_output)


@topic_group.command("update")
@click.argument("topic", type=TOPIC)
@_cluster_options
@click.option("--read-queues", default=None, type=click.IntRange(1, 1024))
@click.option("--write-queues", default=None, type=click.IntRange(1, 1024))
@click.option("--perm", default=None, type=click.IntRange(0, 15), help="Permission bits: 2 write, 4 read, 6 both.")
@click.option("--order/--no-order", default=None, help="Make the topic ordered or not.")
@_common_options
def topic_update(topic: str, cluster: str | None, broker_addr: str | None, read_queues: int | None,
                 write_queues: int | None, perm: int | None, order: bool | None, namesrv: str, json_output: bool,
                 timeout: float) -> None:
    """Change settings of an existing TOPIC (on its brokers unless -c/-b); others keep their value."""
    with _session(namesrv, timeout) as session, _echo_warnings(QueueLayoutWarning):
        addrs = session.update_topic(topic, cluster=cluster, broker_addr=broker_addr, read_queue_nums=read_queues,
                                     write_queue_nums=write_queues, perm=perm, order=order)
    _print_targets("updated", topic, addrs, json_output)


@topic_group.command("delete")
@click.argument("topic", type=TOPIC)
@click.option("-c", "--cluster", default=None, help="Delete on this cluster's masters [default: the topic's brokers].")
@_common_options
def topic_delete(topic: str, cluster: str | None, namesrv: str, json_output: bool, timeout: float) -> None:
    """Delete TOPIC from its brokers and from every name server."""
    with _session(namesrv, timeout) as session:
        addrs = session.delete_topic(topic, cluster=cluster)
    _print_targets("deleted", topic, addrs, json_output)


@topic_group.command("route")
@click.argument("topic", type=TOPIC)
@_common_options
def topic_route(topic: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """TOPIC's route: brokers and their queues."""
    with _session(namesrv, timeout) as session:
        route = session.topic_route(topic)
        configs = session.topic_configs(topic)
    types = sorted({config.attributes.get("message.type", "any") for config in configs.values()})
    if json_output:
        _print_json({**route.to_json_dict(), "messageType": ",".join(types)})
        return
    brokers = _table(f"Brokers of {topic}", "Cluster", "Broker", "Id", "Address")
    for broker in sorted(route.broker_datas, key=lambda item: item.broker_name):
        for broker_id, addr in sorted(broker.broker_addrs.items()):
            brokers.add_row(broker.cluster, broker.broker_name, str(broker_id), addr)
    queues = _table(f"Queues of {topic}", "Broker", "Read queues", "Write queues", "Perm", "Sys flag")
    for data in sorted(route.queue_datas, key=lambda item: item.broker_name):
        queues.add_row(data.broker_name, str(data.read_queue_nums), str(data.write_queue_nums),
                       f"{data.perm} ({perm_to_string(data.perm)})", str(data.topic_sys_flag))
    console = _console()
    console.print(brokers)
    console.print(queues)
    if route.order_topic_conf:
        console.print(f"order conf: {route.order_topic_conf}")
    if types:
        console.print(f"message type (5.x clients): {', '.join(types)}")


@topic_group.command("stats")
@click.argument("topic", type=TOPIC)
@_common_options
def topic_stats(topic: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """Per queue of TOPIC: min and max offset, store time of the last message."""
    with _session(namesrv, timeout) as session:
        rows = session.topic_stats(topic)
    if json_output:
        _print_json([{"brokerName": row.broker_name, "queueId": row.queue_id, "minOffset": row.min_offset,
                      "maxOffset": row.max_offset, "lastUpdateTimestamp": row.last_update_timestamp}
                     for row in rows])
        return
    table = _table(f"Stats of {topic}", "Broker", "Queue", "Min offset", "Max offset", "Last store time")
    for row in rows:
        table.add_row(row.broker_name, str(row.queue_id), str(row.min_offset), str(row.max_offset),
                      format_timestamp(row.last_update_timestamp))
    _console().print(table)


# --------------------------------------------------------------------------- groups


@admin.group("group")
@_group_namesrv_option
def group_group() -> None:
    """List, create and delete subscription (consumer) groups."""


def _group_json(config: SubscriptionGroupConfig) -> dict[str, Any]:
    return config.to_json_dict()


@group_group.command("list")
@_cluster_options
@_common_options
def group_list(cluster: str | None, broker_addr: str | None, namesrv: str, json_output: bool, timeout: float) -> None:
    """The subscription groups of a cluster's masters (or one broker)."""
    with _session(namesrv, timeout) as session:
        groups = session.group_list(cluster=cluster, broker_addr=broker_addr)
    if json_output:
        _print_json([_group_json(config) for config in groups])
        return
    table = _table(f"Subscription groups ({len(groups)})", "Group", "Consume", "Broadcast", "From min",
                   "Retry queues", "Retry max", "Broker id", "Slow broker", "FIFO")
    for config in groups:
        table.add_row(config.group_name, str(config.consume_enable).lower(),
                      str(config.consume_broadcast_enable).lower(), str(config.consume_from_min_enable).lower(),
                      str(config.retry_queue_nums), str(config.retry_max_times), str(config.broker_id),
                      str(config.which_broker_when_consume_slowly), str(config.consume_message_orderly).lower())
    _console().print(table)


@group_group.command("create")
@click.argument("group", type=GROUP)
@_cluster_options
@click.option("--retry-max-times", default=16, show_default=True, type=click.IntRange(-1),
              help="Retries before a message goes to the DLQ (-1: the client decides).")
@click.option("--retry-queue-nums", default=1, show_default=True, type=click.IntRange(0))
@click.option("--consume-enable/--no-consume-enable", default=True, show_default=True)
@click.option("--consume-broadcast-enable/--no-consume-broadcast-enable", default=True, show_default=True)
@click.option("--consume-from-min-enable/--no-consume-from-min-enable", default=True, show_default=True)
@click.option("--broker-id", default=0, show_default=True, type=click.IntRange(0),
              help="The broker id consumers pull from.")
@click.option("--which-broker-when-consume-slowly", default=1, show_default=True, type=click.IntRange(0))
@click.option("--notify-consumer-ids-changed/--no-notify-consumer-ids-changed", default=True, show_default=True)
@click.option("--fifo", is_flag=True,
              help="A FIFO group (consumeMessageOrderly): RocketMQ 5.x clients get each message group in order.")
@_common_options
def group_create(group: str, cluster: str | None, broker_addr: str | None, retry_max_times: int,
                 retry_queue_nums: int, consume_enable: bool, consume_broadcast_enable: bool,
                 consume_from_min_enable: bool, broker_id: int, which_broker_when_consume_slowly: int,
                 notify_consumer_ids_changed: bool, fifo: bool, namesrv: str, json_output: bool,
                 timeout: float) -> None:
    """Create (or overwrite) subscription group GROUP."""
    config = SubscriptionGroupConfig(
        group, consume_enable=consume_enable, consume_from_min_enable=consume_from_min_enable,
        consume_broadcast_enable=consume_broadcast_enable, retry_queue_nums=retry_queue_nums,
        retry_max_times=retry_max_times, broker_id=broker_id,
        which_broker_when_consume_slowly=which_broker_when_consume_slowly,
        notify_consumer_ids_changed_enable=notify_consumer_ids_changed, consume_message_orderly=fifo)
    with _session(namesrv, timeout) as session:
        addrs = session.create_group(config, cluster=cluster, broker_addr=broker_addr)
    if json_output:
        _print_json({"group": group, "action": "created", "brokers": addrs, "config": _group_json(config)})
    else:
        click.echo(f"created {group} on {', '.join(addrs)}")


@group_group.command("delete")
@click.argument("group", type=GROUP)
@_cluster_options
@click.option("--remove-offset", is_flag=True, help="Also drop the group's committed offsets.")
@_common_options
def group_delete(group: str, cluster: str | None, broker_addr: str | None, remove_offset: bool, namesrv: str,
                 json_output: bool, timeout: float) -> None:
    """Delete subscription group GROUP."""
    with _session(namesrv, timeout) as session:
        addrs = session.delete_group(group, cluster=cluster, broker_addr=broker_addr, remove_offset=remove_offset)
    if json_output:
        _print_json({"group": group, "action": "deleted", "brokers": addrs})
    else:
        click.echo(f"deleted {group} on {', '.join(addrs)}")


@group_group.command("clone-offsets")
@click.argument("source_group", type=GROUP)
@click.argument("target_group", type=GROUP)
@click.option("-t", "--topic", type=TOPIC, default=None,
              help="Only this topic [default: every topic SOURCE_GROUP has offsets of].")
@click.option("--offline", is_flag=True, help="Also topics the source group's online members do not subscribe to.")
@_common_options
def group_clone_offsets(source_group: str, target_group: str, topic: str | None, offline: bool, namesrv: str,
                        json_output: bool, timeout: float) -> None:
    """Make TARGET_GROUP start where SOURCE_GROUP is (mqadmin cloneGroupOffset)."""
    with _session(namesrv, timeout) as session:
        addrs = session.clone_group_offsets(source_group, target_group, topic=topic, offline=offline)
    if json_output:
        _print_json({"source": source_group, "target": target_group, "topic": topic, "brokers": addrs})
    else:
        click.echo(f"cloned the offsets of {source_group} to {target_group} on {', '.join(addrs) or 'no broker'}")


# --------------------------------------------------------------------------- consumers


def _progress_json(progress: ConsumerProgress) -> dict[str, Any]:
    return {
        "group": progress.group,
        "queues": [{"topic": row.topic, "brokerName": row.broker_name, "queueId": row.queue_id,
                    "brokerOffset": row.broker_offset, "consumerOffset": row.consumer_offset, "lag": row.lag,
                    "clientId": row.client_id, "lastTimestamp": row.last_timestamp} for row in progress.queues],
        "brokerOffsetTotal": progress.broker_offset_total,
        "consumerOffsetTotal": progress.consumer_offset_total,
        "totalLag": progress.total_lag,
        "consumeTps": progress.consume_tps,
    }


#: Below this console width tables take a compact layout (an 80-column terminal fits a row on one line).
COMPACT_WIDTH: Final = 110


def _progress_table(progress: ConsumerProgress, width: int | None = None) -> Table:
    width = _console().width if width is None else width
    caption = (f"total: broker offset {progress.broker_offset_total}, consumer offset "
               f"{progress.consumer_offset_total}, lag {progress.total_lag}; consume TPS {progress.consume_tps:.2f}")
    if width >= COMPACT_WIDTH:
        table = _table(f"Progress of {progress.group}", "Topic", "Broker", "Queue", "Broker offset",
                       "Consumer offset", "Lag", "Client", "Last consumed (store time)")
        for row in progress.queues:
            table.add_row(row.topic, row.broker_name, str(row.queue_id), str(row.broker_offset),
                          str(row.consumer_offset), str(row.lag), row.client_id, format_timestamp(row.last_timestamp))
        table.caption = caption
        return table
    # compact: one queue label, short headers, light borders, the client's instance name and the time of day
    topics = {row.topic for row in progress.queues}
    brokers = {row.broker_name for row in progress.queues}
    title = f"Progress of {progress.group}" + (f" on {next(iter(topics))}" if len(topics) == 1 else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, caption=caption)
    table.add_column("Queue", overflow="fold")
    for header in ("Broker", "Consumer", "Lag"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("Client", overflow="ellipsis", no_wrap=True, max_width=24)
    table.add_column("Last", no_wrap=True)
    for row in progress.queues:
        label = str(row.queue_id) if len(brokers) == 1 else f"{row.broker_name}:{row.queue_id}"
        if len(topics) > 1:
            label = f"{row.topic}:{label}"
        client = row.client_id.partition("@")[2] or row.client_id
        last = format_timestamp(row.last_timestamp)[11:19]
        table.add_row(label, str(row.broker_offset), str(row.consumer_offset), str(row.lag), client, last)
    return table


@admin.command("consumer-progress")
@click.argument("group", type=GROUP)
@click.option("-t", "--topic", type=TOPIC, default=None, help="Only this topic.")
@click.option("--watch", is_flag=True, help="Refresh in place until Ctrl-C (or --count refreshes).")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between refreshes.")
@click.option("--count", default=None, type=click.IntRange(1), help="Stop after this many refreshes.")
@click.option("--plot", "plot_file", default=None, type=click.Path(dir_okay=False),
              help="Draw lag per queue over the watch period to this PNG (implies --watch; needs matplotlib).")
@_common_options
def consumer_progress(group: str, topic: str | None, watch: bool, interval: float, count: int | None,
                      plot_file: str | None, namesrv: str, json_output: bool, timeout: float) -> None:
    """Per queue of GROUP: broker and consumer offset, lag, owning client, last consume time; totals, TPS."""
    if plot_file is not None:
        watch = True
    if not watch:
        if count is not None:
            raise click.UsageError("--count needs --watch")
        with _session(namesrv, timeout) as session:
            progress = session.consumer_progress(group, topic)
        if not progress.queues:
            # as mqadmin: nothing to show is an error, not an empty table
            where = f" on {topic}" if topic else ""
            raise click.ClickException(f"group {group!r} has no consume offsets{where} on any broker: "
                                       "the group is unknown or has not consumed yet")
        if json_output:
            _print_json(_progress_json(progress))
        else:
            _console().print(_progress_table(progress))
        return
    samples: list[tuple[float, dict[str, int]]] = []
    started = time.monotonic()
    with _session(namesrv, timeout) as session:

        def refresh() -> ConsumerProgress:
            progress = session.consumer_progress(group, topic)
            samples.append((time.monotonic() - started,
                            {_queue_label(row.topic, row.broker_name, row.queue_id): row.lag
                             for row in progress.queues}))
            return progress

        done = 0
        try:
            if json_output:
                while True:
                    _print_json(_progress_json(refresh()), indent=None)
                    done += 1
                    if count is not None and done >= count:
                        break
                    time.sleep(interval)
            else:
                with Live(_progress_table(refresh()), console=_console(), auto_refresh=False) as live:
                    done = 1
                    while count is None or done < count:
                        time.sleep(interval)
                        live.update(_progress_table(refresh()), refresh=True)
                        done += 1
        except KeyboardInterrupt:
            pass
    if plot_file is not None:
        _plot_lag(group, samples, Path(plot_file))
        if not json_output:
            click.echo(f"lag plot written to {plot_file}", err=True)


def _plot_lag(group: str, samples: list[tuple[float, dict[str, int]]], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise click.ClickException("--plot needs matplotlib: pip install 'rocketflow[demo]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({label for _, lags in samples for label in lags})
    figure, axes = plt.subplots(figsize=(10, 5))
    times = [elapsed for elapsed, _ in samples]
    for label in labels:
        axes.plot(times, [lags.get(label, 0) for _, lags in samples], marker="o", markersize=3, label=label)
    axes.set_title(f"Lag per queue of {group}")
    axes.set_xlabel("seconds")
    axes.set_ylabel("messages behind")
    if labels and len(labels) <= 32:
        axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=100)
    except OSError as exc:
        raise click.ClickException(f"cannot write the plot to {path}: {exc}") from None
    finally:
        plt.close(figure)


@admin.command("consumer-connections")
@click.argument("group", type=GROUP)
@_common_options
def consumer_connections(group: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """GROUP's connected clients: id, address, language, version, consume settings, subscriptions."""
    with _session(namesrv, timeout) as session:
        connection = session.consumer_connections(group)
    if json_output:
        _print_json(connection.to_json_dict())
        return
    table = _table(f"Connections of {group}", "Client id", "Address", "Language", "Version")
    for member in sorted(connection.connection_set, key=lambda item: item.client_id):
        table.add_row(member.client_id, member.client_addr, member.language.name, version_desc(member.version))
    subscriptions = _table("Subscriptions", "Topic", "Expression", "Type")
    for topic, data in sorted(connection.subscription_table.items()):
        subscriptions.add_row(topic, data.sub_string, data.expression_type)
    console = _console()
    console.print(table)
    console.print(subscriptions)
    console.print(f"consume type: {_name(connection.consume_type)}, message model: {_name(connection.message_model)}, "
                  f"consume from: {_name(connection.consume_from_where)}")


def _name(value: Any) -> str:
    return "" if value is None else str(getattr(value, "name", value))


@admin.command("reset-offset")
@click.argument("group", type=GROUP)
@click.argument("topic", type=TOPIC)
@click.option("--timestamp", default=None, metavar="MS|ISO",
              help="Epoch ms, 'now' or an ISO 8601 time (local time unless it has a zone).")
@click.option("--to-earliest", is_flag=True, help="To the first retained message.")
@click.option("--to-latest", is_flag=True, help="To the end of each queue (skip everything stored).")
@click.option("--force", is_flag=True, help="Also move offsets forward (without it an offset only moves back).")
@_common_options
def reset_offset(group: str, topic: str, timestamp: str | None, to_earliest: bool, to_latest: bool, force: bool,
                 namesrv: str, json_output: bool, timeout: float) -> None:
    """Reset GROUP's offsets of TOPIC through the brokers, which tell the running consumers."""
    chosen = [name for name, given in (("--timestamp", timestamp is not None), ("--to-earliest", to_earliest),
                                       ("--to-latest", to_latest)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --timestamp, --to-earliest, --to-latest")
    if to_earliest:
        millis = EARLIEST
    elif to_latest:
        millis = LATEST
    else:
        assert timestamp is not None
        try:
            millis = parse_timestamp(timestamp)
        except MQClientError as exc:
            raise click.BadParameter(str(exc), param_hint="--timestamp") from None
    with _session(namesrv, timeout) as session:
        table = session.reset_offset(group, topic, millis, force=force)
    if json_output:
        _print_json({"group": group, "topic": topic, "timestamp": millis,
                     "offsets": [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset}
                                 for mq, offset in table.items()]})
        return
    result = _table(f"Offsets of {group} on {topic} now", "Broker", "Queue", "Offset")
    for mq, offset in table.items():
        result.add_row(mq.broker_name, str(mq.queue_id), str(offset))
    _console().print(result)


# --------------------------------------------------------------------------- messages


def _body_json(body: bytes) -> tuple[str, str]:
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


def _body_preview(body: bytes) -> str:
    text, encoding = _body_json(body)
    if encoding != "utf-8":
        return f"<{len(body)} bytes>"
    return text if len(text) <= BODY_PREVIEW else text[:BODY_PREVIEW] + "..."


def _message_json(msg: MessageExt) -> dict[str, Any]:
    body, encoding = _body_json(msg.body)
    return {
        "topic": msg.topic, "msgId": msg.client_msg_id, "offsetMsgId": msg.msg_id, "brokerName": msg.broker_name,
        "queueId": msg.queue_id, "queueOffset": msg.queue_offset, "commitLogOffset": msg.commit_log_offset,
        "tags": msg.tags, "keys": msg.keys, "bornTimestamp": msg.born_timestamp,
        "bornHost": f"{msg.born_host[0]}:{msg.born_host[1]}", "storeTimestamp": msg.store_timestamp,
        "storeHost": f"{msg.store_host[0]}:{msg.store_host[1]}", "reconsumeTimes": msg.reconsume_times,
        "sysFlag": msg.sys_flag, "flag": msg.flag, "properties": dict(msg.properties), "body": body,
        "bodyEncoding": encoding,
    }


def _messages_table(title: str, messages: list[MessageExt]) -> Table:
    table = _table(title, "Msg id", "Queue", "Offset", "Store time", "Tags", "Keys", "Body")
    for msg in messages:
        table.add_row(msg.client_msg_id, f"{msg.broker_name}:{msg.queue_id}", str(msg.queue_offset),
                      format_timestamp(msg.store_timestamp), msg.tags or "", msg.keys or "", _body_preview(msg.body))
    return table


@admin.group("message")
@_group_namesrv_option
def message_group() -> None:
    """Show, query and tail messages."""


@message_group.command("show")
@click.argument("msg_id")
@click.option("-t", "--topic", type=TOPIC, default=None,
              help="The topic of a UNIQ_KEY id [default: search every topic].")
@_common_options
def message_show(msg_id: str, topic: str | None, namesrv: str, json_output: bool, timeout: float) -> None:
    """One message by offset msg id or UNIQ_KEY (the msg id a producer gets)."""
    with _session(namesrv, timeout) as session:
        msg = session.view_message(msg_id, topic=topic)
    data = _message_json(msg)
    if json_output:
        _print_json(data)
        return
    table = _table(f"Message {msg_id}", "Field", "Value")
    for name, value in data.items():
        if name == "properties":
            value = ", ".join(f"{key}={item}" for key, item in sorted(msg.properties.items()))
        elif name.endswith("Timestamp"):
            value = f"{value} ({format_timestamp(int(value))})"
        table.add_row(name, "" if value is None else str(value))
    _console().print(table)


@message_group.command("query")
@click.argument("topic", type=TOPIC)
@click.argument("key")
@click.option("--begin", default=None, metavar="MS|ISO", help="Stored at or after [default: the beginning].")
@click.option("--end", default=None, metavar="MS|ISO", help="Stored at or before [default: now].")
@click.option("--max", "max_num", default=DEFAULT_QUERY_MAX_NUM, show_default=True, type=click.IntRange(1, 10_000))
@_common_options
def message_query(topic: str, key: str, begin: str | None, end: str | None, max_num: int, namesrv: str,
                  json_output: bool, timeout: float) -> None:
    """Messages of TOPIC with KEY among their keys."""
    try:
        begin_ms = parse_timestamp(begin) if begin is not None else 0
        end_ms = parse_timestamp(end) if end is not None else None
    except MQClientError as exc:
        raise click.BadParameter(str(exc)) from None
    with _session(namesrv, timeout) as session:
        messages = session.query_messages(topic, key, begin_ms=begin_ms, end_ms=end_ms, max_num=max_num)
    if json_output:
        _print_json([_message_json(msg) for msg in messages])
        return
    _console().print(_messages_table(f"{len(messages)} message(s) of {topic} with key {key}", messages))


@message_group.command("trace")
@click.argument("msg_id")
@click.option("--trace-topic", default=TRACE_TOPIC, show_default=True, help="Where the clients write traces.")
@_common_options
def message_trace(msg_id: str, trace_topic: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """The trace of a message (clients with enable_msg_trace): its sends and every consume of it."""
    with _session(namesrv, timeout) as session:
        records = session.message_trace(msg_id, trace_topic=trace_topic)
    if json_output:
        _print_json([{"type": record.type.value, "timestamp": record.timestamp, "group": record.group,
                      "topic": record.topic, "costMs": record.cost_ms, "success": record.success,
                      "storeHost": record.store_host, "retryTimes": record.retry_times,
                      "requestId": record.request_id} for record in records])
        return
    table = _table(f"Trace of {msg_id}: {len(records)} record(s)", "Type", "Time", "Group", "Where", "Cost ms",
                   "Status")
    for record in records:
        where = record.topic + (f" @ {record.store_host}" if record.store_host else "") if record.type.value in (
            "Pub", "EndTransaction") else f"request {record.request_id[:8]}, retry {record.retry_times}"
        table.add_row(record.type.value, format_timestamp(record.timestamp) if record.timestamp else "",
                      record.group, where, str(record.cost_ms) if record.type.value != "SubBefore" else "",
                      "" if record.type.value == "SubBefore" else ("ok" if record.success else "failed"))
    _console().print(table)


@message_group.command("tail")
@click.argument("topic", type=TOPIC)
@click.option("--from-now", is_flag=True, help="Only messages stored from now on [default: from the first one].")
@click.option("--count", default=None, type=click.IntRange(1), help="Stop after this many messages.")
@_common_options
def message_tail(topic: str, from_now: bool, count: int | None, namesrv: str, json_output: bool,
                 timeout: float) -> None:
    """Follow TOPIC's messages as they arrive (like tail -f) until Ctrl-C or --count."""
    console = _console()
    seen = 0
    with _session(namesrv, timeout) as session, session.open_tail(topic, from_now=from_now) as tail:
        click.echo(f"tailing {topic} ({len(tail.queues)} queues, {'from now' if from_now else 'from the start'}); "
                   "Ctrl-C to stop", err=True)
        try:
            while count is None or seen < count:
                for msg in tail.poll(0.5):
                    if json_output:
                        _print_json(_message_json(msg), indent=None)
                    else:
                        console.print(f"[dim]{format_timestamp(msg.store_timestamp)}[/dim] "
                                      f"{msg.broker_name}:{msg.queue_id}@{msg.queue_offset} "
                                      f"[cyan]{msg.client_msg_id}[/cyan] tags={msg.tags or ''} "
                                      f"keys={msg.keys or ''} {_body_preview(msg.body)}", markup=True,
                                      highlight=False, soft_wrap=True)
                    seen += 1
                    if count is not None and seen >= count:
                        break
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass


# --------------------------------------------------------------------------- send


def _parse_properties(items: tuple[str, ...]) -> dict[str, str]:
    properties: dict[str, str] = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--property")
        properties[key.strip()] = value
    return properties


def _send_result_json(result: SendResult) -> dict[str, Any]:
    mq = result.message_queue
    return {"sendStatus": result.send_status.value, "msgId": result.msg_id, "offsetMsgId": result.offset_msg_id,
            "topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
            "queueOffset": result.queue_offset, "regionId": result.region_id}


@admin.command("send")
@click.argument("topic", type=TOPIC)
@click.argument("body")
@click.option("--keys", default=None, help="Message keys (space separated).")
@click.option("--tags", default=None, help="The message tag.")
@click.option("--sharding-key", default=None, help="Send to the queue this key hashes to (ordered).")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE", help="A user property; repeatable.")
@click.option("--group", type=GROUP, default="rocketflow_admin_producer", show_default=True, help="The producer group.")
@_common_options
def send(topic: str, body: str, keys: str | None, tags: str | None, sharding_key: str | None,
         properties: tuple[str, ...], group: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """Send one message with BODY (UTF-8 text; '-' reads the body from stdin) and print the send result."""
    user_properties = _parse_properties(properties)
    data = sys.stdin.buffer.read() if body == "-" else body.encode("utf-8")
    with _session(namesrv, timeout) as session:
        result = session.send(topic, data, keys=keys, tags=tags, sharding_key=sharding_key,
                              properties=user_properties, group=group)
    if json_output:
        _print_json(_send_result_json(result))
        return
    table = _table("Send result", "Field", "Value")
    for name, value in _send_result_json(result).items():
        table.add_row(name, str(value))
    _console().print(table)


def default_namesrv() -> str:
    """The name server the admin commands use without ``-n``."""
    return os.environ.get(NAMESRV_ENV) or DEFAULT_NAMESRV


__all__ = ["DEFAULT_NAMESRV", "NAMESRV_ENV", "admin", "default_namesrv"]
