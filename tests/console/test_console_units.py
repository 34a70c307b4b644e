"""The console's pieces without a cluster: body previews, settings, the cache, the lag history."""

from __future__ import annotations

import asyncio
import json

import pytest

from rocketflow.client.admin import ConsumerProgress, QueueProgress
from rocketflow.console.bodies import BodyKind, preview_body
from rocketflow.console.server import console_url, exposed_warning
from rocketflow.console.service import LagHistory, TtlCache, is_system_group
from rocketflow.console.settings import ConsoleSettings


def test_body_previews_guess_the_encoding() -> None:
    data = {"name": "Zoë", "items": [1, 2]}
    as_json = preview_body(json.dumps(data, ensure_ascii=False).encode())
    assert as_json.kind is BodyKind.JSON and as_json.encoding == "utf-8" and json.loads(as_json.text) == data
    assert "\n  " in as_json.text  # indented
    chinese = "订单已支付\uff0c请尽快发货。客户要求周末送达\uff0c并附上发票。谢谢\uff01" * 3
    gb = preview_body(chinese.encode("gb18030"))
    assert gb.kind is BodyKind.TEXT and gb.text == chinese and gb.encoding.lower() in ("gb18030", "gbk", "gb2312")
    binary = preview_body(bytes(range(256)) * 2)
    assert binary.kind is BodyKind.BINARY and binary.text.startswith("00000000  00 01 02")
    assert binary.short == "<512 bytes of binary>"
    assert preview_body(b"").kind is BodyKind.EMPTY
    long_text = preview_body(("é" * 50_000).encode(), limit=1001)  # the limit cuts a character in two
    assert long_text.kind is BodyKind.TEXT and long_text.truncated and long_text.size == 100_000
    assert len(preview_body(b"x" * 500).short) == 80


def test_settings_keep_the_console_local_and_read_only_by_default() -> None:
    local = ConsoleSettings("127.0.0.1:9876")
    assert local.host == "127.0.0.1" and not local.exposed and not local.writable
    assert exposed_warning(local) is None
    assert "*" not in local.trusted_hosts() and "localhost" in local.trusted_hosts()
    assert "access_key" not in local.admin_settings()
    wide = ConsoleSettings("127.0.0.1:9876", host="0.0.0.0", access_key="ak", secret_key="sk-secret")
    assert wide.exposed and wide.writable and wide.trusted_hosts() == ["*"]
    warning = exposed_warning(wide)
    assert warning is not None and "changes it" in warning
    assert "sk-secret" not in repr(wide)
    named = ConsoleSettings("n:9876", host="0.0.0.0", allowed_hosts=("console.internal",))
    assert named.trusted_hosts()[-1] == "console.internal" and "*" not in named.trusted_hosts()
    assert console_url("0.0.0.0", 8080) == "http://127.0.0.1:8080/"
    assert console_url("::1", 81) == "http://[::1]:81/"
    with pytest.raises(ValueError, match="both"):
        ConsoleSettings("n:9876", access_key="ak")


def test_cache_computes_once_for_concurrent_askers_and_forgets_failures() -> None:
    calls: list[str] = []

    async def scenario() -> None:
        cache = TtlCache()

        async def compute() -> int:
            calls.append("ok")
            await asyncio.sleep(0.05)
            return 42

        assert await asyncio.gather(*(cache.get("k", 10.0, compute) for _ in range(5))) == [42] * 5
        assert await cache.get("k", 10.0, compute) == 42
        assert calls == ["ok"]
        cache.invalidate()
        assert await cache.get("k", 10.0, compute) == 42 and len(calls) == 2

        async def fail() -> int:
            calls.append("fail")
            raise RuntimeError("cluster down")

        for _ in range(2):
            with pytest.raises(RuntimeError):
                await cache.get("bad", 10.0, fail)
        assert calls.count("fail") == 2

    asyncio.run(scenario())


def test_lag_history_series_and_system_groups() -> None:
    history = LagHistory(max_points=3)

    def progress(lag_a: int, lag_b: int) -> ConsumerProgress:
        return ConsumerProgress("g", [QueueProgress("A", "b", 0, 100, 100 - lag_a, "", 0),
                                      QueueProgress("B", "b", 0, 50, 50 - lag_b, "", 0)])

    for step in range(5):
        history.add(progress(step, 2 * step), at=1000.0 + step)
    series = history.series("g")
    assert series["t"] == [1002.0, 1003.0, 1004.0]
    assert series["series"][0] == {"label": "total", "values": [6, 9, 12]}
    assert series["series"][1] == {"label": "A", "values": [2, 3, 4]}
    history.watch("g")
    assert history.watched_groups() == ["g"]
    assert is_system_group("TOOLS_CONSUMER") and is_system_group("CID_RMQ_SYS_X") and not is_system_group("orders")
