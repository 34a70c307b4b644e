"""The `rocketflow` command."""

from __future__ import annotations

import click

from rocketflow import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rocketflow")
def cli() -> None:
    """rocketflow: RocketMQ's messaging model in Python (broker, name server, client, Spark source)."""


@cli.command()
def demo() -> None:
    """Run the main job on the embedded default."""
    from rocketflow.cli.demo import run_demo

    run_demo()


_SET_HELP = "Any broker setting as KEY=VALUE (RocketMQ camelCase or snake_case name); repeatable."


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9876, show_default=True, type=click.IntRange(0, 65535), help="Port (0 = free).")
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def namesrv(host: str, port: int, verbose: bool) -> None:
    """Run a name server until SIGTERM / Ctrl-C."""
    from rocketflow.cli.servers import run_namesrv

    run_namesrv(host, port, verbose)


@cli.command()
@click.option("-n", "--namesrv", "namesrv_addr", default=None, help="Name server(s), host:port;host:port.")
@click.option("-c", "--config", "conf_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A RocketMQ-style broker.conf (Java properties).")
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", default=None, type=click.IntRange(0, 65535), help="Port (0 = free) [default: 10911].")
@click.option("--store-dir", default=None, type=click.Path(file_okay=False), help="Store root [default: ~/store].")
@click.option("--broker-name", default=None, help="Broker name [default: broker-a].")
@click.option("--cluster", default=None, help="Cluster name [default: DefaultCluster].")
@click.option("--broker-ip", default=None, help="Address registered with the name servers.")
@click.option("--flush", type=click.Choice(["sync", "async"]), default=None, help="Disk flush mode [default: async].")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def broker(namesrv_addr: str | None, conf_file: str | None, host: str | None, port: int | None,
           store_dir: str | None, broker_name: str | None, cluster: str | None, broker_ip: str | None,
           flush: str | None, settings: tuple[str, ...], verbose: bool) -> None:
    """Run a broker until SIGTERM / Ctrl-C (offsets and configs are persisted at exit)."""
    from pathlib import Path

    from rocketflow.cli.servers import parse_settings, run_broker
    from rocketflow.store import FlushDiskType

    overrides: dict[str, object] = parse_settings(settings)
    explicit: dict[str, object | None] = {
        "namesrv_addr": namesrv_addr,
        "listen_host": host,
        "listen_port": port,
        "store.store_root": Path(store_dir).expanduser() if store_dir else None,
        "broker_name": broker_name,
        "cluster": cluster,
        "broker_ip": broker_ip,
        "store.flush_disk_type": None if flush is None else
        (FlushDiskType.SYNC_FLUSH if flush == "sync" else FlushDiskType.ASYNC_FLUSH),
    }
    overrides.update({key: value for key, value in explicit.items() if value is not None})
    run_broker(conf_file=conf_file, overrides=overrides, verbose=verbose)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address both servers listen on.")
@click.option("--namesrv-port", default=9876, show_default=True, type=click.IntRange(0, 65535))
@click.option("--broker-port", default=10911, show_default=True, type=click.IntRange(0, 65535))
@click.option("--store-dir", default=None, type=click.Path(file_okay=False),
              help="Store root [default: a temporary directory, removed at exit unless --keep].")
@click.option("--keep", is_flag=True, help="Keep the temporary store directory at exit.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def dev(host: str, namesrv_port: int, broker_port: int, store_dir: str | None, keep: bool,
        settings: tuple[str, ...], verbose: bool) -> None:
    """Run a name server and a broker in one process (the embedded default for demos and tests)."""
    from rocketflow.cli.servers import parse_settings, run_dev

    run_dev(host=host, namesrv_port=namesrv_port, broker_port=broker_port, store_dir=store_dir, keep=keep,
            overrides=parse_settings(settings), verbose=verbose)
