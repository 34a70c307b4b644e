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
