"""``rocketflow admin consumer-progress``, ``consumer-connections`` and ``reset-offset``: a consumer group's lag
(watched, plotted), its connected clients and its offsets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final

import click
from rich import box
from rich.live import Live
from rich.table import Table

from rocketflow.cli.admin.options import admin_session, common_options, new_table, print_json, wide_console
from rocketflow.cli.admin.root import admin
from rocketflow.cli.params import GROUP, TOPIC
from rocketflow.client.admin import EARLIEST, LATEST, ConsumerProgress, format_timestamp, parse_timestamp, version_desc
from rocketflow.client.errors import MQClientError


def _queue_label(topic: str, broker_name: str, queue_id: int) -> str:
    return f"{topic}@{broker_name}:{queue_id}"


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
    width = wide_console().width if width is None else width
    caption = (f"total: broker offset {progress.broker_offset_total}, consumer offset "
               f"{progress.consumer_offset_total}, lag {progress.total_lag}; consume TPS {progress.consume_tps:.2f}")
    if width >= COMPACT_WIDTH:
        table = new_table(f"Progress of {progress.group}", "Topic", "Broker", "Queue", "Broker offset",
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
@common_options
def consumer_progress(group: str, topic: str | None, watch: bool, interval: float, count: int | None,
                      plot_file: str | None, namesrv: str, json_output: bool, timeout: float) -> None:
    """Per queue of GROUP: broker and consumer offset, lag, owning client, last consume time; totals, TPS."""
    if plot_file is not None:
        watch = True
    if not watch:
        if count is not None:
            raise click.UsageError("--count needs --watch")
        with admin_session(namesrv, timeout) as session:
            progress = session.consumer_progress(group, topic)
        if not progress.queues:
            # as mqadmin: nothing to show is an error, not an empty table
            where = f" on {topic}" if topic else ""
            raise click.ClickException(f"group {group!r} has no consume offsets{where} on any broker: "
                                       "the group is unknown or has not consumed yet")
        if json_output:
            print_json(_progress_json(progress))
        else:
            wide_console().print(_progress_table(progress))
        return
    samples: list[tuple[float, dict[str, int]]] = []
    started = time.monotonic()
    with admin_session(namesrv, timeout) as session:

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
                    print_json(_progress_json(refresh()), indent=None)
                    done += 1
                    if count is not None and done >= count:
                        break
                    time.sleep(interval)
            else:
                with Live(_progress_table(refresh()), console=wide_console(), auto_refresh=False) as live:
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
@common_options
def consumer_connections(group: str, namesrv: str, json_output: bool, timeout: float) -> None:
    """GROUP's connected clients: id, address, language, version, consume settings, subscriptions."""
    with admin_session(namesrv, timeout) as session:
        connection = session.consumer_connections(group)
    if json_output:
        print_json(connection.to_json_dict())
        return
    table = new_table(f"Connections of {group}", "Client id", "Address", "Language", "Version")
    for member in sorted(connection.connection_set, key=lambda item: item.client_id):
        table.add_row(member.client_id, member.client_addr, member.language.name, version_desc(member.version))
    subscriptions = new_table("Subscriptions", "Topic", "Expression", "Type")
    for topic, data in sorted(connection.subscription_table.items()):
        subscriptions.add_row(topic, data.sub_string, data.expression_type)
    console = wide_console()
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
@common_options
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
    with admin_session(namesrv, timeout) as session:
        table = session.reset_offset(group, topic, millis, force=force)
    if json_output:
        print_json({"group": group, "topic": topic, "timestamp": millis,
                     "offsets": [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset}
                                 for mq, offset in table.items()]})
        return
    result = new_table(f"Offsets of {group} on {topic} now", "Broker", "Queue", "Offset")
    for mq, offset in table.items():
        result.add_row(mq.broker_name, str(mq.queue_id), str(offset))
    wide_console().print(result)

