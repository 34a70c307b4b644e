"""The `rocketflow` command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from rocketflow.cli.params import NAMESRV
from rocketflow.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rocketflow")
def cli() -> None:
    """rocketflow: RocketMQ's messaging model in Python (broker, name server, client, Spark source)."""


@cli.command()
@click.option("--orders", default=None, type=click.IntRange(1, 10_000_000),
              help="Orders to send (each 2 to 4 messages)  [default: 5000, about a minute on 2 cores].")
@click.option("--queues", default=4, show_default=True, type=click.IntRange(1, 1024), help="Queues of the topic.")
@click.option("--producer-threads", default=4, show_default=True, type=click.IntRange(1, 256),
              help="Sending threads (each owns a share of the orders).")
@click.option("--open-orders", default=32, show_default=True, type=click.IntRange(1, 100_000),
              help="Orders each producer thread keeps open at once (their events interleave).")
@click.option("--cancel-ratio", default=0.2, show_default=True, type=click.FloatRange(0.0, 1.0),
              help="Share of orders cancelled (half after create, half after pay).")
@click.option("--rate", default=0.0, show_default=True, type=click.FloatRange(0.0),
              help="Messages per second the producer sends at most (0 = as fast as it can).")
@click.option("--trigger", "trigger_seconds", default=1.0, show_default=True, type=click.FloatRange(0.0, 3600.0),
              help="Spark micro-batch interval, seconds.")
@click.option("--max-per-batch", default=20_000, show_default=True, type=click.IntRange(1),
              help="Spark's maxMessagesPerTrigger.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(1.0),
              help="Give up after this many seconds.")
@click.option("-n", "--namesrv", type=NAMESRV, default=None,
              help="Use this cluster's name server instead of the embedded one (a new topic is created).")
@click.option("-o", "--output", default=None, type=click.Path(file_okay=False),
              help="Output directory (new or empty)  [default: ./rocketflow-demo/run-<time>].")
@click.option("--no-spark", is_flag=True, help="Skip the Spark job (producer and orderly consumer only).")
@click.option("--seed", default=7, show_default=True, type=int, help="Seed of the order plan.")
@click.option("--codec", is_flag=True, help="Run the foundation-stage codec demo instead (same as codec-demo).")
@click.option("--console", "with_console", is_flag=True,
              help="Also serve the web console (rocketflow console, read-only) for the demo's cluster.")
@click.option("--console-port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port of --console on 127.0.0.1 (0 = free).")
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def demo(orders: int | None, queues: int, producer_threads: int, open_orders: int, cancel_ratio: float, rate: float,
         trigger_seconds: float, max_per_batch: int, timeout: float, namesrv: str | None, output: str | None,
         no_spark: bool, seed: int, codec: bool, with_console: bool, console_port: int, verbose: bool) -> None:
    """Run the main job: orders through the broker to an orderly checker and a Spark streaming job.

    On the embedded default (a name server and a broker in this process, temporary store) unless
    --namesrv is given. Writes Parquet (events, orders per minute, per-queue lag), summary.json and
    a throughput/lag PNG to the output directory. Exit code 1 if an order broke its state machine,
    a message was lost or the revenue does not add up; 2 for bad settings.
    """
    if codec:
        from rocketflow.cli.codec_demo import run_codec_demo

        run_codec_demo()
        return
    from pathlib import Path

    from rocketflow.cli.demo import DEFAULT_ORDERS, DemoSettings, demo_main

    settings = DemoSettings(
        orders=DEFAULT_ORDERS if orders is None else orders, queues=queues, producer_threads=producer_threads,
        open_orders=open_orders, cancel_ratio=cancel_ratio, rate=rate, trigger_seconds=trigger_seconds,
        max_per_batch=max_per_batch, timeout=timeout, namesrv=namesrv,
        output=Path(output) if output is not None else None, spark=not no_spark, seed=seed,
        console_port=console_port if with_console else None)
    raise SystemExit(demo_main(settings, verbose=verbose))


@cli.command("codec-demo")
def codec_demo() -> None:
    """Decode real clients' captured frames with rocketflow's sans-IO codecs (the foundation-stage demo)."""
    from rocketflow.cli.codec_demo import run_codec_demo

    run_codec_demo()


_SET_HELP = "Any broker setting as KEY=VALUE (RocketMQ camelCase or snake_case name); repeatable."
_EVENT_LOOP_HELP = ("The asyncio event loop: uvloop when installed (auto), or the standard library's (asyncio); "
                    "the ROCKETFLOW_EVENT_LOOP environment variable overrides auto.")
#: ``--event-loop`` of the server commands (choices: `rocketflow.net.event_loop.EventLoopKind`)
_event_loop_option = click.option("--event-loop", type=click.Choice(["auto", "uvloop", "asyncio"]), default="auto",
                                  show_default=True, help=_EVENT_LOOP_HELP)
#: ``--gc-freeze/--no-gc-freeze`` of the server commands
_gc_freeze_option = click.option(
    "--gc-freeze/--no-gc-freeze", default=True, show_default=True,
    help="Once started, freeze the objects alive (gc.freeze) so that Python's full collections skip them: "
         "~1 ms pauses instead of 10-15 ms.")
_METRICS_HELP = "Serve Prometheus metrics at http://127.0.0.1:PORT/metrics [default: 0 = off]."


def _acl_option(command: Callable[..., None]) -> Callable[..., None]:
    """``--acl-file PATH``: the same as ``--set aclEnable=true --set aclFile=PATH`` (see docs/acl.md)."""
    import functools
    from pathlib import Path

    @functools.wraps(command)
    def with_acl(*args: object, acl_file: str | None = None, **kwargs: Any) -> None:
        if acl_file is not None:
            settings: tuple[str, ...] = tuple(kwargs.get("settings") or ())
            kwargs["settings"] = (*settings, "aclEnable=true", f"aclFile={Path(acl_file).expanduser().resolve()}")
        command(*args, **kwargs)

    return click.option("--acl-file", type=click.Path(exists=True, dir_okay=False), default=None,
                        help="Check every request against this RocketMQ plain_acl.yml (turns ACL on).")(with_acl)


def _tls_options(command: Callable[..., None]) -> Callable[..., None]:
    """The TLS options of the server commands (RocketMQ's tls.server.* settings; see docs/tls.md)."""
    options = [
        click.option("--tls-mode", type=click.Choice(["disabled", "permissive", "enforcing"]), default=None,
                     help="TLS on the listening port (tls.server.mode); needs --tls-cert [default: permissive]."),
        click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="PEM server certificate chain (tls.server.certPath); without it TLS is off."),
        click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="PEM private key of the certificate (tls.server.keyPath)."),
        click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="PEM CA certificates trusted for client certificates (and, on a broker, for the "
                          "name servers' certificates)."),
        click.option("--tls-client-auth", type=click.Choice(["none", "optional", "require"]), default=None,
                     help="Ask clients for a certificate (tls.server.need.client.auth) [default: none]."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.command()
@click.option("-c", "--config", "conf_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A RocketMQ-style name server properties file (listenPort, kvConfigPath, orderMessageEnable...).")
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", default=None, type=click.IntRange(0, 65535), help="Port (0 = free) [default: 9876].")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Any name server setting as KEY=VALUE (RocketMQ camelCase or snake_case name); repeatable.")
@_event_loop_option
@_gc_freeze_option
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
@_tls_options
@_acl_option
def namesrv(conf_file: str | None, host: str | None, port: int | None, settings: tuple[str, ...], event_loop: str,
            gc_freeze: bool, verbose: bool, **tls: str | None) -> None:
    """Run a name server until SIGTERM / Ctrl-C (settings: -c file, then --set, then the options)."""
    from rocketflow.cli.servers import parse_namesrv_settings, run_namesrv, tls_overrides

    overrides = parse_namesrv_settings(settings)
    overrides.update(tls_overrides(tls, server_only=True))
    explicit: dict[str, object | None] = {"host": host, "port": port}
    overrides.update({key: value for key, value in explicit.items() if value is not None})
    run_namesrv(conf_file=conf_file, overrides=overrides, verbose=verbose, event_loop=event_loop,
                gc_freeze=gc_freeze)


_GRPC_HELP = "Port of the gRPC endpoint for RocketMQ 5.x clients (RocketMQ's proxy port; 0 = free)"


@cli.command()
@click.option("-n", "--namesrv", "namesrv_addr", type=NAMESRV, default=None,
              help="Name server(s), host:port;host:port.")
@click.option("-c", "--config", "conf_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A RocketMQ-style broker.conf (Java properties).")
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", default=None, type=click.IntRange(0, 65535), help="Port (0 = free) [default: 10911].")
@click.option("--store-dir", default=None, type=click.Path(file_okay=False), help="Store root [default: ~/store].")
@click.option("--broker-name", default=None, help="Broker name [default: broker-a].")
@click.option("--cluster", default=None, help="Cluster name [default: DefaultCluster].")
@click.option("--broker-ip", default=None, help="Address registered with the name servers.")
@click.option("--flush", type=click.Choice(["sync", "async"]), default=None, help="Disk flush mode [default: async].")
@click.option("--role", type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"], case_sensitive=False),
              default=None, help="brokerRole: a SLAVE replicates the master of its broker name; a SYNC_MASTER "
              "acknowledges sends once a slave has them [default: ASYNC_MASTER].")
@click.option("--broker-id", default=None, type=click.IntRange(0), help="brokerId: 0 for a master, > 0 for a slave.")
@click.option("--metrics-port", default=None, type=click.IntRange(0, 65535), help=_METRICS_HELP)
@click.option("--grpc-port", default=None, type=click.IntRange(0, 65535), help=_GRPC_HELP + " [default: off]")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
@_event_loop_option
@_gc_freeze_option
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
@_tls_options
@_acl_option
def broker(namesrv_addr: str | None, conf_file: str | None, host: str | None, port: int | None,
           store_dir: str | None, broker_name: str | None, cluster: str | None, broker_ip: str | None,
           flush: str | None, role: str | None, broker_id: int | None, metrics_port: int | None,
           grpc_port: int | None, settings: tuple[str, ...], event_loop: str, gc_freeze: bool, verbose: bool,
           **tls: str | None) -> None:
    """Run a broker until SIGTERM / Ctrl-C (offsets and configs are persisted at exit)."""
    from pathlib import Path

    from rocketflow.cli.servers import parse_settings, run_broker, tls_overrides
    from rocketflow.store import BrokerRole, FlushDiskType

    overrides: dict[str, object] = parse_settings(settings)
    overrides.update(tls_overrides(tls))
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
        "metrics_port": metrics_port,
        "grpc_port": grpc_port,
        "store.broker_role": None if role is None else BrokerRole[role.upper()],
        "broker_id": broker_id,
    }
    overrides.update({key: value for key, value in explicit.items() if value is not None})
    run_broker(conf_file=conf_file, overrides=overrides, verbose=verbose, event_loop=event_loop, gc_freeze=gc_freeze)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address both servers listen on.")
@click.option("--namesrv-port", default=9876, show_default=True, type=click.IntRange(0, 65535))
@click.option("--broker-port", default=10911, show_default=True, type=click.IntRange(0, 65535))
@click.option("--store-dir", default=None, type=click.Path(file_okay=False),
              help="Store root [default: a temporary directory, removed at exit unless --keep; the next "
                   "dev removes one that a killed dev left].")
@click.option("--keep", is_flag=True, help="Keep the temporary store directory at exit.")
@click.option("--slaves", default=0, show_default=True, type=click.IntRange(0, 8),
              help="Also run this many slaves of the broker (free ports; see docs/replication.md).")
@click.option("--metrics-port", default=None, type=click.IntRange(0, 65535), help=_METRICS_HELP)
@click.option("--grpc-port", default=None, type=click.IntRange(0, 65535),
              help=_GRPC_HELP + " [default: 8081, or a free port with --broker-port 0]")
@click.option("--grpc/--no-grpc", "grpc_enabled", default=True, show_default=True,
              help="Serve RocketMQ 5.x clients over gRPC (needs the grpc extra: pip install 'rocketflow[grpc]').")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
@_event_loop_option
@_gc_freeze_option
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
@click.option("--ns-acl", is_flag=True,
              help="The name server checks the --acl-file too; the broker then signs its registrations with an "
                   "admin account's keys (--set accessKey=... --set secretKey=...).")
@_tls_options
@_acl_option
def dev(host: str, namesrv_port: int, broker_port: int, store_dir: str | None, keep: bool, slaves: int,
        metrics_port: int | None, grpc_port: int | None, grpc_enabled: bool, settings: tuple[str, ...],
        event_loop: str, gc_freeze: bool, verbose: bool, ns_acl: bool, **tls: str | None) -> None:
    """Run a name server and a broker in one process (the embedded default for demos and tests)."""
    from rocketflow.cli.servers import namesrv_acl_overrides, parse_settings, run_dev, tls_overrides

    overrides = parse_settings(settings)
    overrides.update(tls_overrides(tls))
    if metrics_port is not None:
        overrides["metrics_port"] = metrics_port
    if not grpc_enabled:
        overrides["grpc_port"] = None
    elif grpc_port is not None:
        overrides["grpc_port"] = grpc_port
    elif "grpc_port" not in overrides:
        from importlib.util import find_spec

        if find_spec("grpc") is not None:
            overrides["grpc_port"] = 8081 if broker_port else 0
        else:
            click.echo("note: no gRPC endpoint for RocketMQ 5.x clients (pip install 'rocketflow[grpc]' for one)")
    namesrv_overrides = namesrv_acl_overrides(overrides) if ns_acl else {}
    run_dev(host=host, namesrv_port=namesrv_port, broker_port=broker_port, store_dir=store_dir, keep=keep,
            overrides=overrides, verbose=verbose, slaves=slaves, event_loop=event_loop, gc_freeze=gc_freeze,
            namesrv_overrides=namesrv_overrides)


@cli.command()
@click.option("-n", "--namesrv", type=NAMESRV, envvar="ROCKETFLOW_NAMESRV", default="127.0.0.1:9876",
              show_default=True, show_envvar=True, help="Name server(s) of the cluster, host:port;host:port.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but a loopback address lets other machines in (a warning says so).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="Port (0 = free).")
@click.option("--access-key", envvar="ROCKETFLOW_ACCESS_KEY", show_envvar=True, default=None,
              help="ACL access key the console signs with; writes are refused without an account.")
@click.option("--secret-key", envvar="ROCKETFLOW_SECRET_KEY", show_envvar=True, default=None,
              help="ACL secret key (prefer the environment variable: arguments are visible to other users).")
@click.option("--tls", "use_tls", is_flag=True, envvar="ROCKETFLOW_TLS", show_envvar=True,
              help="Connect to the cluster over TLS.")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), envvar="ROCKETFLOW_TLS_CA", default=None,
              show_envvar=True, help="PEM file of the CAs the servers' certificates must chain to (implies --tls).")
@click.option("--timeout", default=5.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds each request to the cluster may take.")
@click.option("--refresh", "refresh_seconds", default=5.0, show_default=True, type=click.FloatRange(min=0.2),
              help="Seconds between refreshes of live tables and lag samples.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Another Host header name to answer (a DNS name of this machine); repeatable.")
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level (and every HTTP request).")
def console(namesrv: str, host: str, port: int, access_key: str | None, secret_key: str | None, use_tls: bool,
            tls_ca: str | None, timeout: float, refresh_seconds: float, allowed_hosts: tuple[str, ...],
            verbose: bool) -> None:
    """Serve a web console (cluster, topics, groups and lag, messages, dead letters) for any RocketMQ 4.x cluster.

    Reads need nothing; writes (create/update/delete topic, reset offsets, resend, send) need the
    console's ACL account. See docs/console.md.
    """
    import logging

    if (access_key is None) != (secret_key is None):
        raise click.UsageError("--access-key and --secret-key (ROCKETFLOW_ACCESS_KEY / ROCKETFLOW_SECRET_KEY) "
                               "must be given together")
    try:
        from rocketflow.console import ConsoleSettings, exposed_warning, run_console
    except ModuleNotFoundError as exc:
        raise click.ClickException(f"rocketflow console needs the 'console' extra ({exc.name} is missing): "
                                   "pip install 'rocketflow[console]'") from None
    client_settings: dict[str, Any] = {}
    if use_tls or tls_ca:
        client_settings["use_tls"] = True
    if tls_ca:
        client_settings["tls_ca"] = tls_ca
    settings = ConsoleSettings(namesrv, host=host, port=port, access_key=access_key, secret_key=secret_key,
                               timeout=timeout, refresh_seconds=refresh_seconds, allowed_hosts=allowed_hosts,
                               client_settings=client_settings)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    warning = exposed_warning(settings)
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)
    mode = f"writes signed as {access_key}" if settings.writable else "read-only (no ACL account)"

    def ready(url: str) -> None:
        click.echo(f"rocketflow console for {namesrv}: {url} ({mode}); Ctrl-C stops it", err=True)

    run_console(settings, log_level="info" if verbose else "warning", on_ready=ready)


from rocketflow.cli.admin import admin as _admin_group  # noqa: E402  (after the other commands, on purpose)

cli.add_command(_admin_group)
