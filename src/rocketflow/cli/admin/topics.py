"""``rocketflow admin topic``: list, create, update and delete topics; their routes and queue stats."""

from __future__ import annotations

import click

from rocketflow.cli.admin.options import (
    admin_session,
    cluster_options,
    common_options,
    echo_warnings,
    group_namesrv_option,
    new_table,
    print_json,
    wide_console,
)
from rocketflow.cli.admin.root import admin
from rocketflow.cli.params import TOPIC
from rocketflow.client.admin import (
    DEFAULT_PERM,
    DEFAULT_QUEUE_NUMS,
    MESSAGE_TYPES,
    QueueLayoutWarning,
    format_timestamp,
    topic_kind,
)
from rocketflow.protocol.names import perm_to_string


@admin.group("topic")
@group_namesrv_option
def topic_group() -> None:
    """List, create, update, delete topics; show routes and queue stats."""


@topic_group.command("list")
@common_options
def topic_list(namesrv: str, json_output: bool, timeout: float) -> None:
    """Every topic the name server knows."""
    with admin_session(namesrv, timeout) as session:
        topics = session.topic_list()
        reserved = session.reserved_topic_names()
    if json_output:
        print_json([{"topic": topic, "kind": topic_kind(topic, reserved)} for topic in topics])
        return
    table = new_table(f"Topics ({len(topics)})", "Topic", "Kind")
    for topic in topics:
        table.add_row(topic, topic_kind(topic, reserved))
    wide_console().print(table)


def _print_targets(action: str, topic: str, addrs: list[str], json_output: bool) -> None:
    if json_output:
        print_json({"topic": topic, "action": action, "brokers": addrs})
    else:
        click.echo(f"{action} {topic} on {', '.join(addrs)}")


@topic_group.command("create")
@click.argument("topic", type=TOPIC)
@cluster_options
@click.option("--read-queues", default=DEFAULT_QUEUE_NUMS, show_default=True, type=click.IntRange(1, 1024))
@click.option("--write-queues", default=DEFAULT_QUEUE_NUMS, show_default=True, type=click.IntRange(1, 1024))
@click.option("--perm", default=DEFAULT_PERM, show_default=True, type=click.IntRange(0, 15),
              help="Permission bits: 2 write, 4 read, 6 both.")
@click.option("--order", is_flag=True, help="An ordered topic (also recorded in the name servers' KV config).")
@click.option("--message-type", type=click.Choice(MESSAGE_TYPES, case_sensitive=False), default=None,
              help="The one kind of message RocketMQ 5.x clients may send (the topic's message.type attribute) "
                   "[default: any].")
@common_options
def topic_create(topic: str, cluster: str | None, broker_addr: str | None, read_queues: int, write_queues: int,
                 perm: int, order: bool, message_type: str | None, namesrv: str, json_output: bool,
                 timeout: float) -> None:
    """Create (or overwrite) TOPIC on a cluster's masters or one broker."""
    with admin_session(namesrv, timeout) as session, echo_warnings(QueueLayoutWarning):
        addrs = session.create_topic(topic, cluster=cluster, broker_addr=broker_addr, read_queue_nums=read_queues,
                                     write_queue_nums=write_queues, perm=perm, order=order,
                                     message_type=message_type)
    _print_targets("created", topic, addrs, json_output)


@topic_group.command("update")
@click.argument("topic", type=TOPIC)
@cluster_options
@click.option("--read-queues", default=None, type=click.IntRange(1, 1024))
@click.option("--write-queues", default=None, type=click.IntRange(1, 1024))
@click.option("--perm", default=None, type=click.IntRange(0, 15), help="Permission bits: 2 write, 4 read, 6 both.")
@click.option("--order/--no-order", default=None, help="Make the topic ordered or not.")
@common_options
def topic_update(topic: str, cluster: str | None, broker_addr: str | None, read_queues: int | None,
                 write_queues: int | None, perm: int | None, order: bool | None, namesrv: str, json_output: bool,
                 timeout: float) -> None:
    """Change settings of an existing TOPIC (on its brokers unless -c/-b); others keep their value."""
    with admin_session(namesrv, timeout) as session, echo_warnings(QueueLayoutWarning):
        addrs = session.update_topic(topic, cluster=cluster, broker_addr=broker_addr, read_queue_nums=read_queues,
                                     write_queue_nums=write_queues, perm=perm, order=order)
    _print_targets("updated", topic, addrs, json_output)


@topic_group.command("delete")
@click.argument("topic", type=TOPIC)
@click.option("-c", "--cluster", default=None, help="Delete on this cluster's masters [default: the topic's brokers].")
@common_options
def topic_delete(topic: str, cluster: str | None, namesrv: str, json_output: bool, timeout: float) -> None:
    """Delete TOPIC from its brokers and from every name server."""
    with admin_session(namesrv, timeout) as session:
        addrs = session.delete_topic(topic, cluster=cluster)
    _print_targets("deleted", topic, addrs, json_output)


@topic_group.command("route")
@click.argument("topic", type=TOPIC)
@common_options
def topic_route(topic: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """TOPIC's route: brokers and their queues."""
    with admin_session(namesrv, timeout) as session:
        route = session.topic_route(topic)
        configs = session.topic_configs(topic)
    types = sorted({config.attributes.get("message.type", "any") for config in configs.values()})
    if json_output:
        print_json({**route.to_json_dict(), "messageType": ",".join(types)})
        return
    brokers = new_table(f"Brokers of {topic}", "Cluster", "Broker", "Id", "Address")
    for broker in sorted(route.broker_datas, key=lambda item: item.broker_name):
        for broker_id, addr in sorted(broker.broker_addrs.items()):
            brokers.add_row(broker.cluster, broker.broker_name, str(broker_id), addr)
    queues = new_table(f"Queues of {topic}", "Broker", "Read queues", "Write queues", "Perm", "Sys flag")
    for data in sorted(route.queue_datas, key=lambda item: item.broker_name):
        queues.add_row(data.broker_name, str(data.read_queue_nums), str(data.write_queue_nums),
                       f"{data.perm} ({perm_to_string(data.perm)})", str(data.topic_sys_flag))
    console = wide_console()
    console.print(brokers)
    console.print(queues)
    if route.order_topic_conf:
        console.print(f"order conf: {route.order_topic_conf}")
    if types:
        console.print(f"message type (5.x clients): {', '.join(types)}")


@topic_group.command("stats")
@click.argument("topic", type=TOPIC)
@common_options
def topic_stats(topic: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """Per queue of TOPIC: min and max offset, store time of the last message."""
    with admin_session(namesrv, timeout) as session:
        rows = session.topic_stats(topic)
    if json_output:
        print_json([{"brokerName": row.broker_name, "queueId": row.queue_id, "minOffset": row.min_offset,
                      "maxOffset": row.max_offset, "lastUpdateTimestamp": row.last_update_timestamp}
                     for row in rows])
        return
    table = new_table(f"Stats of {topic}", "Broker", "Queue", "Min offset", "Max offset", "Last store time")
    for row in rows:
        table.add_row(row.broker_name, str(row.queue_id), str(row.min_offset), str(row.max_offset),
                      format_timestamp(row.last_update_timestamp))
    wide_console().print(table)

