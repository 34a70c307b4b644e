"""The event loop choice: uvloop by default when installed, asyncio's own on request."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from rocketflow.client import ClientConfig
from rocketflow.client.errors import MQClientError
from rocketflow.net.event_loop import (
    EVENT_LOOP_ENV,
    EventLoopKind,
    new_event_loop,
    parse_event_loop_kind,
    resolve_event_loop_kind,
    run,
)


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)


def test_names_parse_in_any_case_and_unknown_ones_are_refused() -> None:
    assert parse_event_loop_kind(" UVLoop ") is EventLoopKind.UVLOOP
    assert parse_event_loop_kind("asyncio") is EventLoopKind.ASYNCIO
    assert parse_event_loop_kind(EventLoopKind.AUTO) is EventLoopKind.AUTO
    with pytest.raises(ValueError, match=r"unknown event loop 'trio' \(expected one of: auto, asyncio, uvloop\)"):
        parse_event_loop_kind("trio")


def test_auto_is_uvloop_when_installed_and_the_environment_can_override_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_event_loop_kind() is EventLoopKind.UVLOOP
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert resolve_event_loop_kind() is EventLoopKind.ASYNCIO
    # an explicit choice is not overridden
    assert resolve_event_loop_kind("uvloop") is EventLoopKind.UVLOOP
    monkeypatch.setenv(EVENT_LOOP_ENV, "nonsense")
    with pytest.raises(ValueError, match="unknown event loop 'nonsense'"):
        resolve_event_loop_kind()


def test_without_uvloop_auto_falls_back_and_an_explicit_uvloop_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` raise ImportError
    assert resolve_event_loop_kind() is EventLoopKind.ASYNCIO
    with pytest.raises(ValueError, match="uvloop is not installed"):
        resolve_event_loop_kind("uvloop")


@pytest.mark.parametrize(("kind", "loop_type"), [("uvloop", uvloop.Loop), ("asyncio", asyncio.BaseEventLoop)])
def test_loops_of_each_kind_run_coroutines(kind: str, loop_type: type) -> None:
    loop = new_event_loop(kind)
    try:
        assert isinstance(loop, loop_type)
        if kind == "asyncio":
            assert not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()

    async def main() -> str:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop()).__module__

    module = run(main(), kind)
    assert module.startswith("uvloop") == (kind == "uvloop")


def test_run_refuses_an_unknown_kind_without_leaving_the_coroutine_unawaited() -> None:
    async def main() -> None:
        raise AssertionError("must not run")

    coroutine = main()
    with pytest.raises(ValueError, match="unknown event loop"):
        run(coroutine, "nonsense")
    assert coroutine.cr_frame is None  # closed, so no "never awaited" warning


def test_client_config_validates_its_event_loop() -> None:
    assert ClientConfig(event_loop="asyncio").event_loop == "asyncio"
    with pytest.raises(MQClientError, match="event_loop: unknown event loop 'gevent'"):
        ClientConfig(event_loop="gevent")
