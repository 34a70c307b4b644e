"""What every ``rocketflow admin`` command shares: the environment variables and options (``-n``, ``--json``,
``--timeout``, ACL keys, TLS), the `Admin` session they open and the console, JSON and table output."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import click
from click.core import ParameterSource
from rich.console import Console
from rich.table import Table

from rocketflow.cli.params import NAMESRV
from rocketflow.client.admin import Admin
from rocketflow.client.api import ADMIN_RPC_TIMEOUT
from rocketflow.client.errors import MQConnectError, MQError

#: The environment variable naming the default name server(s).
NAMESRV_ENV: Final = "ROCKETFLOW_NAMESRV"
#: Environment variables of the connection options (ACL keys, TLS).
ACCESS_KEY_ENV: Final = "ROCKETFLOW_ACCESS_KEY"
SECRET_KEY_ENV: Final = "ROCKETFLOW_SECRET_KEY"
TLS_ENV: Final = "ROCKETFLOW_TLS"
TLS_CA_ENV: Final = "ROCKETFLOW_TLS_CA"
DEFAULT_NAMESRV: Final = "127.0.0.1:9876"

_F = TypeVar("_F", bound=Callable[..., Any])


_SETTINGS_META_KEY: Final = "rocketflow.admin.client_settings"
_NAMESRV_META_KEY: Final = "rocketflow.admin.namesrv"


def _remember(setting: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A callback keeping an option's value as the `ClientConfig` field ``setting`` (read by `admin_session`)."""

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


def common_options(func: _F) -> _F:
    """``-n/--namesrv``, ``--json``, ``--timeout`` and the connection options, on every command."""
    # the connection options go to `admin_session` through the context, not into every command's signature
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


def group_namesrv_option(func: _F) -> _F:
    """``-n/--namesrv`` on a command group too, so that it may come before the command."""
    return click.option("-n", "--namesrv", type=NAMESRV, default=None, expose_value=False, is_eager=True,
                        callback=_remember_namesrv,
                        help="Name server(s), host:port;host:port (here, or after the command).")(func)


def cluster_options(func: _F) -> _F:
    func = click.option("-b", "--broker", "broker_addr", default=None,
                        help="Only this broker address (host:port).")(func)
    func = click.option("-c", "--cluster", default=None,
                        help="The masters of this cluster [default: the only cluster].")(func)
    return func


@contextmanager
def admin_session(namesrv: str, timeout: float) -> Iterator[Admin]:
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
def echo_warnings(category: type[Warning]) -> Iterator[None]:
    """Print warnings of ``category`` raised inside as ``warning: ...`` lines on stderr (once each)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", category)
        yield
    for warning in caught:
        if issubclass(warning.category, category):
            click.echo(f"warning: {warning.message}", err=True)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def wide_console() -> Console:
    # pipes and captured output get a wide console so that ids and addresses are never cut
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 200))
    return console


def print_json(data: Any, *, indent: int | None = 2) -> None:
    click.echo(json.dumps(data, indent=indent, ensure_ascii=False, sort_keys=False))


def new_table(title: str | None, *columns: str) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def default_namesrv() -> str:
    """The name server the admin commands use without ``-n``."""
    return os.environ.get(NAMESRV_ENV) or DEFAULT_NAMESRV

