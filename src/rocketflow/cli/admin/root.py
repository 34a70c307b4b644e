"""The ``rocketflow admin`` click group: the command modules of this package add their commands to it."""

from __future__ import annotations

import click

from rocketflow.cli.admin.options import group_namesrv_option


@click.group("admin")
@group_namesrv_option
def admin() -> None:
    """Operate a RocketMQ 4.x cluster (ours or a real one) through its name server, like mqadmin."""
