"""`rocketflow codec-demo` decodes every captured client frame; `rocketflow demo`'s order plan, checker and settings."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rocketflow.cli.codec_demo import run_codec_demo
from rocketflow.cli.demo import (
    ALLOWED_NEXT,
    DemoError,
    DemoSettings,
    OrderChecker,
    OrderState,
    PlannedOrder,
    plan_orders,
)
from rocketflow.client import ConsumeOrderlyContext, ConsumeOrderlyStatus
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue


def test_codec_demo_decodes_captured_sessions(captured_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_codec_demo(captured_dir)
    out = capsys.readouterr().out
    assert "from 7 sessions" in out
    assert "HEART_BEAT" in out and "LOCK_BATCH_MQ" in out and "SEND_MESSAGE_V2" in out
    assert "decoded back identical" in out


def test_codec_demo_runs_without_captures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_codec_demo(tmp_path / "nowhere")
    out = capsys.readouterr().out
    assert "no captures found" in out and "20 frames" not in out
    assert "22 frames from 1 sessions" in out


# ------------------------------------------------------------------------------ `rocketflow demo`'s parts


def _event(order: PlannedOrder, step: int, *, uniq: str | None = None, offset: int = 0) -> MessageExt:
    state = order.steps[step]
    return MessageExt("Orders", order.body(step, 1_700_000_000_000), queue_offset=offset, properties={
        MessageConst.TAGS: state.value, MessageConst.KEYS: order.order_id,
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq or f"{order.order_id}-{step}"})


def _check(checker: OrderChecker, messages: list[MessageExt]) -> None:
    status = checker(messages, ConsumeOrderlyContext(MessageQueue("Orders", "broker-a", 0)))
    assert status is ConsumeOrderlyStatus.SUCCESS


def test_plan_orders_is_seeded_and_follows_the_state_machine() -> None:
    plan = plan_orders(500, seed=3, cancel_ratio=0.4)
    assert plan == plan_orders(500, seed=3, cancel_ratio=0.4) and plan != plan_orders(500, seed=4, cancel_ratio=0.4)
    finals = {order.steps[-1] for order in plan}
    assert finals == {OrderState.COMPLETE, OrderState.CANCEL}
    cancelled = sum(1 for order in plan if order.steps[-1] is OrderState.CANCEL)
    assert 150 < cancelled < 250
    for order in plan:
        previous = None
        for state in order.steps:
            assert state in ALLOWED_NEXT[previous]
            previous = state
        assert 500 <= order.amount_cents <= 50_000
        assert order.revenue_cents == (order.amount_cents if order.steps[-1] is OrderState.COMPLETE else 0)
    refunded = next(order for order in plan if order.steps == (OrderState.CREATE, OrderState.PAY, OrderState.CANCEL))
    body = orjson.loads(refunded.body(2, 5))
    assert body == {"order_id": refunded.order_id, "state": "cancel", "step": 2,
                    "amount_cents": refunded.amount_cents, "refund_cents": refunded.amount_cents, "ts": 5}
    assert plan_orders(0) == []


def test_order_checker_accepts_interleaved_orders_in_order() -> None:
    first, second = plan_orders(2, cancel_ratio=0.0)
    checker = OrderChecker()
    _check(checker, [_event(first, 0), _event(second, 0), _event(first, 1)])
    _check(checker, [_event(second, 1), _event(second, 2), _event(first, 2), _event(first, 3), _event(second, 3)])
    assert (checker.consumed.count, checker.violations, checker.duplicates) == (8, 0, 0)
    assert checker.states == {first.order_id: OrderState.COMPLETE, second.order_id: OrderState.COMPLETE}


def test_order_checker_counts_violations_and_duplicates() -> None:
    (order,) = plan_orders(1, cancel_ratio=0.0)
    checker = OrderChecker()
    _check(checker, [_event(order, 0), _event(order, 0)])  # redelivered: a duplicate, not a violation
    assert (checker.consumed.count, checker.duplicates, checker.violations) == (1, 1, 0)
    _check(checker, [_event(order, 2)])  # ship before pay
    assert checker.violations == 1 and "create -> ship" in checker.examples[0]
    _check(checker, [_event(order, 1, uniq="resent-pay")])  # pay after ship
    assert checker.violations == 2
    garbage = MessageExt("Orders", b"not json", queue_offset=9,
                         properties={MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "garbage"})
    _check(checker, [garbage])
    assert checker.violations == 3 and "undecodable" in checker.examples[2]

    fresh = OrderChecker()
    wrong_tag = _event(order, 0)
    wrong_tag.tags = "pay"
    _check(fresh, [wrong_tag])
    assert fresh.violations == 1 and "do not match" in fresh.examples[0]
    skipped = OrderChecker()
    _check(skipped, [_event(order, 0), _event(order, 1), _event(order, 3)])  # lost "ship"
    assert skipped.violations == 1 and "pay -> complete" in skipped.examples[0]


def test_demo_settings_reject_bad_values() -> None:
    with pytest.raises(DemoError, match=r"orders must be a number in 1\.\.10000000, got 0"):
        DemoSettings(orders=0)
    with pytest.raises(DemoError, match="cancel_ratio"):
        DemoSettings(cancel_ratio=1.5)
    with pytest.raises(DemoError, match="queues"):
        DemoSettings(queues=True)
