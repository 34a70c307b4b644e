"""Click parameter types shared by the commands: a bad value is a usage error (exit 2) that names the
option or argument, checked before anything connects."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from rocketflow.protocol.names import InvalidNameError, validate_group, validate_topic

if TYPE_CHECKING:  # generic in click's type hints, not at run time in every click 8 release
    _StrParamType = click.ParamType[str]
else:
    _StrParamType = click.ParamType


def check_namesrv_addresses(text: str) -> str:
    """``text`` if it is ``host:port`` items separated by ``;``, else `ValueError` saying what is wrong."""
    if not text.strip():
        raise ValueError("is blank: give host:port (several separated by ';')")
    items = [item.strip() for item in text.split(";") if item.strip()]
    if not items:
        raise ValueError(f"{text!r} names no address: give host:port (several separated by ';')")
    for item in items:
        host, separator, port = item.rpartition(":")
        if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} is not host:port (e.g. 127.0.0.1:9876)")
    return text


class NamesrvAddresses(_StrParamType):
    """One or more name server addresses, ``host:port;host:port``."""

    name = "host:port"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not isinstance(value, str):
            self.fail(f"{value!r} is not host:port", param, ctx)
        try:
            return check_namesrv_addresses(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ResourceName(_StrParamType):
    """A topic or consumer-group name, checked as the brokers check it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = kind

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            if self.kind == "topic":
                validate_topic(value)  # type: ignore[arg-type]
            else:
                validate_group(value)  # type: ignore[arg-type]
        except InvalidNameError as exc:
            self.fail(str(exc), param, ctx)
        assert isinstance(value, str)
        return value


NAMESRV = NamesrvAddresses()
TOPIC = ResourceName("topic")
GROUP = ResourceName("group")

__all__ = ["GROUP", "NAMESRV", "TOPIC", "NamesrvAddresses", "ResourceName", "check_namesrv_addresses"]
