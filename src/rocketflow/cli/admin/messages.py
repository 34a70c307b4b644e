"""``rocketflow admin message`` (show, query, trace, tail) and ``admin send``: one message, a key's messages,
a message's trace, a topic followed live; sending one message."""

from __future__ import annotations

import base64
import sys
from typing import Any, Final

import click
from rich.table import Table

from rocketflow.cli.admin.options import (
    admin_session,
    common_options,
    group_namesrv_option,
    new_table,
    print_json,
    wide_console,
)
from rocketflow.cli.admin.root import admin
from rocketflow.cli.params import GROUP, TOPIC
from rocketflow.client.admin import DEFAULT_QUERY_MAX_NUM, format_timestamp, parse_timestamp
from rocketflow.client.api import SendResult
from rocketflow.client.errors import MQClientError
from rocketflow.protocol.message import MessageExt
from rocketflow.protocol.names import TRACE_TOPIC

#: Body characters shown in message tables.
BODY_PREVIEW: Final = 60


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
    table = new_table(title, "Msg id", "Queue", "Offset", "Store time", "Tags", "Keys", "Body")
    for msg in messages:
        table.add_row(msg.client_msg_id, f"{msg.broker_name}:{msg.queue_id}", str(msg.queue_offset),
                      format_timestamp(msg.store_timestamp), msg.tags or "", msg.keys or "", _body_preview(msg.body))
    return table


@admin.group("message")
@group_namesrv_option
def message_group() -> None:
    """Show, query and tail messages."""


@message_group.command("show")
@click.argument("msg_id")
@click.option("-t", "--topic", type=TOPIC, default=None,
              help="The topic of a UNIQ_KEY id [default: search every topic].")
@common_options
def message_show(msg_id: str, topic: str | None, namesrv: str, json_output: bool, timeout: float) -> None:
    """One message by offset msg id or UNIQ_KEY (the msg id a producer gets)."""
    with admin_session(namesrv, timeout) as session:
        msg = session.view_message(msg_id, topic=topic)
    data = _message_json(msg)
    if json_output:
        print_json(data)
        return
    table = new_table(f"Message {msg_id}", "Field", "Value")
    for name, value in data.items():
        if name == "properties":
            value = ", ".join(f"{key}={item}" for key, item in sorted(msg.properties.items()))
        elif name.endswith("Timestamp"):
            value = f"{value} ({format_timestamp(int(value))})"
        table.add_row(name, "" if value is None else str(value))
    wide_console().print(table)


@message_group.command("query")
@click.argument("topic", type=TOPIC)
@click.argument("key")
@click.option("--begin", default=None, metavar="MS|ISO", help="Stored at or after [default: the beginning].")
@click.option("--end", default=None, metavar="MS|ISO", help="Stored at or before [default: now].")
@click.option("--max", "max_num", default=DEFAULT_QUERY_MAX_NUM, show_default=True, type=click.IntRange(1, 10_000))
@common_options
def message_query(topic: str, key: str, begin: str | None, end: str | None, max_num: int, namesrv: str,
                  json_output: bool, timeout: float) -> None:
    """Messages of TOPIC with KEY among their keys."""
    try:
        begin_ms = parse_timestamp(begin) if begin is not None else 0
        end_ms = parse_timestamp(end) if end is not None else None
    except MQClientError as exc:
        raise click.BadParameter(str(exc)) from None
    with admin_session(namesrv, timeout) as session:
        messages = session.query_messages(topic, key, begin_ms=begin_ms, end_ms=end_ms, max_num=max_num)
    if json_output:
        print_json([_message_json(msg) for msg in messages])
        return
    wide_console().print(_messages_table(f"{len(messages)} message(s) of {topic} with key {key}", messages))


@message_group.command("trace")
@click.argument("msg_id")
@click.option("--trace-topic", default=TRACE_TOPIC, show_default=True, help="Where the clients write traces.")
@common_options
def message_trace(msg_id: str, trace_topic: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """The trace of a message (clients with enable_msg_trace): its sends and every consume of it."""
    with admin_session(namesrv, timeout) as session:
        records = session.message_trace(msg_id, trace_topic=trace_topic)
    if json_output:
        print_json([{"type": record.type.value, "timestamp": record.timestamp, "group": record.group,
                      "topic": record.topic, "costMs": record.cost_ms, "success": record.success,
                      "storeHost": record.store_host, "retryTimes": record.retry_times,
                      "requestId": record.request_id} for record in records])
        return
    table = new_table(f"Trace of {msg_id}: {len(records)} record(s)", "Type", "Time", "Group", "Where", "Cost ms",
                   "Status")
    for record in records:
        where = record.topic + (f" @ {record.store_host}" if record.store_host else "") if record.type.value in (
            "Pub", "EndTransaction") else f"request {record.request_id[:8]}, retry {record.retry_times}"
        table.add_row(record.type.value, format_timestamp(record.timestamp) if record.timestamp else "",
                      record.group, where, str(record.cost_ms) if record.type.value != "SubBefore" else "",
                      "" if record.type.value == "SubBefore" else ("ok" if record.success else "failed"))
    wide_console().print(table)


@message_group.command("tail")
@click.argument("topic", type=TOPIC)
@click.option("--from-now", is_flag=True, help="Only messages stored from now on [default: from the first one].")
@click.option("--count", default=None, type=click.IntRange(1), help="Stop after this many messages.")
@common_options
def message_tail(topic: str, from_now: bool, count: int | None, namesrv: str, json_output: bool,
                 timeout: float) -> None:
    """Follow TOPIC's messages as they arrive (like tail -f) until Ctrl-C or --count."""
    console = wide_console()
    seen = 0
    with admin_session(namesrv, timeout) as session, session.open_tail(topic, from_now=from_now) as tail:
        click.echo(f"tailing {topic} ({len(tail.queues)} queues, {'from now' if from_now else 'from the start'}); "
                   "Ctrl-C to stop", err=True)
        try:
            while count is None or seen < count:
                for msg in tail.poll(0.5):
                    if json_output:
                        print_json(_message_json(msg), indent=None)
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
@common_options
def send(topic: str, body: str, keys: str | None, tags: str | None, sharding_key: str | None,
         properties: tuple[str, ...], group: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """Send one message with BODY (UTF-8 text; '-' reads the body from stdin) and print the send result."""
    user_properties = _parse_properties(properties)
    data = sys.stdin.buffer.read() if body == "-" else body.encode("utf-8")
    with admin_session(namesrv, timeout) as session:
        result = session.send(topic, data, keys=keys, tags=tags, sharding_key=sharding_key,
                              properties=user_properties, group=group)
    if json_output:
        print_json(_send_result_json(result))
        return
    table = new_table("Send result", "Field", "Value")
    for name, value in _send_result_json(result).items():
        table.add_row(name, str(value))
    wide_console().print(table)

