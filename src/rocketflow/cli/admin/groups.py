"""``rocketflow admin group``: list, create and delete subscription groups; clone one group's offsets to another."""

from __future__ import annotations

from typing import Any

import click

from rocketflow.cli.admin.options import (
    admin_session,
    cluster_options,
    common_options,
    group_namesrv_option,
    new_table,
    print_json,
    wide_console,
)
from rocketflow.cli.admin.root import admin
from rocketflow.cli.params import GROUP, TOPIC
from rocketflow.protocol.bodies import SubscriptionGroupConfig


@admin.group("group")
@group_namesrv_option
def group_group() -> None:
    """List, create and delete subscription (consumer) groups."""


def _group_json(config: SubscriptionGroupConfig) -> dict[str, Any]:
    return config.to_json_dict()


@group_group.command("list")
@cluster_options
@common_options
def group_list(cluster: str | None, broker_addr: str | None, namesrv: str, json_output: bool, timeout: float) -> None:
    """The subscription groups of a cluster's masters (or one broker)."""
    with admin_session(namesrv, timeout) as session:
        groups = session.group_list(cluster=cluster, broker_addr=broker_addr)
    if json_output:
        print_json([_group_json(config) for config in groups])
        return
    table = new_table(f"Subscription groups ({len(groups)})", "Group", "Consume", "Broadcast", "From min",
                   "Retry queues", "Retry max", "Broker id", "Slow broker", "FIFO")
    for config in groups:
        table.add_row(config.group_name, str(config.consume_enable).lower(),
                      str(config.consume_broadcast_enable).lower(), str(config.consume_from_min_enable).lower(),
                      str(config.retry_queue_nums), str(config.retry_max_times), str(config.broker_id),
                      str(config.which_broker_when_consume_slowly), str(config.consume_message_orderly).lower())
    wide_console().print(table)


@group_group.command("create")
@click.argument("group", type=GROUP)
@cluster_options
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
@common_options
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
    with admin_session(namesrv, timeout) as session:
        addrs = session.create_group(config, cluster=cluster, broker_addr=broker_addr)
    if json_output:
        print_json({"group": group, "action": "created", "brokers": addrs, "config": _group_json(config)})
    else:
        click.echo(f"created {group} on {', '.join(addrs)}")


@group_group.command("delete")
@click.argument("group", type=GROUP)
@cluster_options
@click.option("--remove-offset", is_flag=True, help="Also drop the group's committed offsets.")
@common_options
def group_delete(group: str, cluster: str | None, broker_addr: str | None, remove_offset: bool, namesrv: str,
                 json_output: bool, timeout: float) -> None:
    """Delete subscription group GROUP."""
    with admin_session(namesrv, timeout) as session:
        addrs = session.delete_group(group, cluster=cluster, broker_addr=broker_addr, remove_offset=remove_offset)
    if json_output:
        print_json({"group": group, "action": "deleted", "brokers": addrs})
    else:
        click.echo(f"deleted {group} on {', '.join(addrs)}")


@group_group.command("clone-offsets")
@click.argument("source_group", type=GROUP)
@click.argument("target_group", type=GROUP)
@click.option("-t", "--topic", type=TOPIC, default=None,
              help="Only this topic [default: every topic SOURCE_GROUP has offsets of].")
@click.option("--offline", is_flag=True, help="Also topics the source group's online members do not subscribe to.")
@common_options
def group_clone_offsets(source_group: str, target_group: str, topic: str | None, offline: bool, namesrv: str,
                        json_output: bool, timeout: float) -> None:
    """Make TARGET_GROUP start where SOURCE_GROUP is (mqadmin cloneGroupOffset)."""
    with admin_session(namesrv, timeout) as session:
        addrs = session.clone_group_offsets(source_group, target_group, topic=topic, offline=offline)
    if json_output:
        print_json({"source": source_group, "target": target_group, "topic": topic, "brokers": addrs})
    else:
        click.echo(f"cloned the offsets of {source_group} to {target_group} on {', '.join(addrs) or 'no broker'}")

