"""``rocketflow admin cluster`` and ``admin broker``: the brokers of each cluster, one broker's settings and figures."""

from __future__ import annotations

import click

from rocketflow.acl import redact_settings
from rocketflow.cli.admin.options import (
    admin_session,
    common_options,
    group_namesrv_option,
    new_table,
    print_json,
    wide_console,
)
from rocketflow.cli.admin.root import admin


@admin.command("cluster")
@common_options
def cluster_command(namesrv: str, json_output: bool, timeout: float) -> None:
    """Brokers per cluster: name, id, address, version, put/get TPS."""
    with admin_session(namesrv, timeout) as session:
        statuses = session.cluster_overview()
    if json_output:
        print_json([{"cluster": status.cluster, "brokerName": status.broker_name, "brokerId": status.broker_id,
                      "addr": status.addr, "version": status.version, "putTps": status.put_tps,
                      "getTps": status.get_tps, "error": status.error} for status in statuses])
        return
    table = new_table("Brokers", "Cluster", "Broker", "Id", "Address", "Version", "Put TPS", "Get TPS")
    for status in statuses:
        if status.error is not None:
            table.add_row(status.cluster, status.broker_name, str(status.broker_id), status.addr,
                          f"[red]unreachable: {status.error}[/red]", "", "")
        else:
            table.add_row(status.cluster, status.broker_name, str(status.broker_id), status.addr, status.version,
                          f"{status.put_tps:.2f}", f"{status.get_tps:.2f}")
    wide_console().print(table)


@admin.group("broker")
@group_namesrv_option
def broker_group() -> None:
    """A broker's settings (show them, change them while it runs) and runtime figures."""


@broker_group.command("config")
@click.argument("broker_addr")
@common_options
def broker_config_command(broker_addr: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """Every setting of the broker at BROKER_ADDR (host:port), by RocketMQ name (secrets shown as ******)."""
    with admin_session(namesrv, timeout) as session:
        settings = redact_settings(session.broker_config(broker_addr))  # a RocketMQ broker sends them in clear
    if json_output:
        print_json(settings)
        return
    table = new_table(f"Broker {broker_addr}", "Setting", "Value")
    for key, value in sorted(settings.items()):
        table.add_row(key, value)
    wide_console().print(table)


@broker_group.command("status")
@click.argument("broker_addr")
@common_options
def broker_status_command(broker_addr: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """Runtime figures of the broker at BROKER_ADDR (mqadmin brokerStatus): store, TPS, role, replication."""
    with admin_session(namesrv, timeout) as session:
        info = session.broker_runtime_info(broker_addr)
    if json_output:
        print_json(info)
        return
    table = new_table(f"Broker {broker_addr}", "Figure", "Value")
    for key, value in sorted(info.items()):
        table.add_row(key, value)
    wide_console().print(table)


@broker_group.command("set")
@click.argument("broker_addr")
@click.argument("settings", nargs=-1, required=True, metavar="KEY=VALUE...")
@common_options
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
    with admin_session(namesrv, timeout) as session:
        session.update_broker_config(broker_addr, changes)
    shown = redact_settings(changes)
    if json_output:
        print_json({"updated": shown})
        return
    wide_console().print(f"updated {', '.join(f'{key}={value}' for key, value in shown.items())} on {broker_addr}")

