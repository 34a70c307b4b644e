"""The orders: their state machine and plan, the producer threads sending them, the orderly checker."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import orjson

from rocketflow.client import ConsumeOrderlyContext, ConsumeOrderlyStatus, MQError, Producer, SendStatus
from rocketflow.protocol.message import Message, MessageExt


class OrderState(StrEnum):
    CREATE = "create"
    PAY = "pay"
    SHIP = "ship"
    COMPLETE = "complete"
    CANCEL = "cancel"


#: The order state machine: which state may follow which (None: the order is new).
ALLOWED_NEXT: Final[dict[OrderState | None, frozenset[OrderState]]] = {
    None: frozenset({OrderState.CREATE}),
    OrderState.CREATE: frozenset({OrderState.PAY, OrderState.CANCEL}),
    OrderState.PAY: frozenset({OrderState.SHIP, OrderState.CANCEL}),
    OrderState.SHIP: frozenset({OrderState.COMPLETE}),
}


@dataclass(slots=True, frozen=True)
class PlannedOrder:
    """One order's life as the producer will send it."""

    order_id: str
    amount_cents: int
    steps: tuple[OrderState, ...]

    @property
    def revenue_cents(self) -> int:
        """Paid and not refunded: only completed orders count."""
        return self.amount_cents if self.steps[-1] is OrderState.COMPLETE else 0

    def body(self, step: int, timestamp_ms: int) -> bytes:
        state = self.steps[step]
        refund = self.amount_cents if state is OrderState.CANCEL and OrderState.PAY in self.steps[:step] else 0
        return orjson.dumps({"order_id": self.order_id, "state": state.value, "step": step,
                             "amount_cents": self.amount_cents, "refund_cents": refund, "ts": timestamp_ms})


def plan_orders(count: int, *, seed: int = 7, cancel_ratio: float = 0.2) -> list[PlannedOrder]:
    """``count`` orders with amounts of 5.00 to 500.00; ``cancel_ratio`` of them are cancelled, half
    of those after ``create`` and half after ``pay`` (refunded)."""
    rng = random.Random(seed)
    full = (OrderState.CREATE, OrderState.PAY, OrderState.SHIP, OrderState.COMPLETE)
    orders = []
    for index in range(count):
        amount = rng.randint(500, 50_000)
        roll = rng.random()
        if roll < cancel_ratio / 2:
            steps: tuple[OrderState, ...] = (OrderState.CREATE, OrderState.CANCEL)
        elif roll < cancel_ratio:
            steps = (OrderState.CREATE, OrderState.PAY, OrderState.CANCEL)
        else:
            steps = full
        orders.append(PlannedOrder(f"order-{index:07d}", amount, steps))
    return orders



@dataclass(slots=True)
class Meter:
    """A thread-safe count with the times of its first and last increment (monotonic seconds)."""

    count: int = 0
    first: float | None = None
    last: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, amount: int = 1) -> None:
        now = time.monotonic()
        with self._lock:
            self.count += amount
            if self.first is None:
                self.first = now
            self.last = now

    def rate(self, since: float | None = None) -> float:
        """Per second between ``since`` (default: the first increment) and the last increment."""
        start = self.first if since is None else since
        if start is None or self.last is None or self.last <= start:
            return 0.0
        return self.count / (self.last - start)


class OrderProducer:
    """Producer threads, each owning a share of the orders and keeping ``open_orders`` of them in
    flight at once (their events interleave in the queues, each order's in order)."""

    def __init__(self, producer: Producer, topic: str, orders: Sequence[PlannedOrder], *, threads: int,
                 open_orders: int, rate: float, seed: int) -> None:
        self.producer = producer
        self.topic = topic
        self.orders = orders
        self.threads = threads
        self.open_orders = open_orders
        self.rate = rate
        self.seed = seed
        self.sent = Meter()
        self.failed = 0
        self.errors: list[str] = []
        self.started_at: float | None = None
        self.started_wall = 0.0
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._running = 0

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.started_wall = time.time()
        self._running = self.threads
        for index in range(self.threads):
            share = self.orders[index :: self.threads]
            threading.Thread(target=self._run, args=(index, share), name=f"demo-producer-{index}", daemon=True).start()

    def _run(self, index: int, orders: Sequence[PlannedOrder]) -> None:
        rng = random.Random(self.seed * 1000 + index)
        interval = self.threads / self.rate if self.rate > 0 else 0.0
        next_send = time.monotonic()
        waiting = list(reversed(orders))
        active: list[tuple[PlannedOrder, int]] = []
        try:
            while waiting or active:
                while waiting and len(active) < self.open_orders:
                    active.append((waiting.pop(), 0))
                slot = rng.randrange(len(active))
                order, step = active[slot]
                if interval:
                    next_send += interval
                    delay = next_send - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                self._send(order, step)
                if step + 1 < len(order.steps):
                    active[slot] = (order, step + 1)
                else:
                    active[slot] = active[-1]
                    active.pop()
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self.finished.set()

    def _send(self, order: PlannedOrder, step: int) -> None:
        state = order.steps[step]
        message = Message(self.topic, order.body(step, int(time.time() * 1000)), tags=state.value, keys=order.order_id)
        for attempt in range(3):
            try:
                result = self.producer.send(message, sharding_key=order.order_id)
            except MQError as exc:
                error = f"{order.order_id} {state}: {exc}"
                time.sleep(0.2 * (attempt + 1))
                continue
            if result.send_status is SendStatus.SEND_OK:
                self.sent.add()
                return
            error = f"{order.order_id} {state}: {result.send_status.name}"
            break
        with self._lock:
            self.failed += 1
            if len(self.errors) < 5:
                self.errors.append(error)


class OrderChecker:
    """The orderly listener: every order's events must follow `ALLOWED_NEXT`, step by step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self.states: dict[str, OrderState] = {}
        self._steps: dict[str, int] = {}
        self.consumed = Meter()
        self.duplicates = 0
        self.violations = 0
        self.examples: list[str] = []

    def __call__(self, messages: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        with self._lock:
            fresh = sum(self._check(message) for message in messages)
        if fresh:
            self.consumed.add(fresh)
        return ConsumeOrderlyStatus.SUCCESS

    def _check(self, message: MessageExt) -> int:
        msg_id = message.client_msg_id
        if msg_id in self._seen:
            self.duplicates += 1
            return 0
        self._seen.add(msg_id)
        where = f"queue {message.queue_id} offset {message.queue_offset}"
        try:
            event = orjson.loads(message.body)
            order_id = str(event["order_id"])
            state = OrderState(event["state"])
            step = int(event["step"])
        except (orjson.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
            self._violation(f"{where}: undecodable order event ({exc})")
            return 1
        if message.keys != order_id or message.tags != state.value:
            self._violation(f"{where}: keys/tags {message.keys!r}/{message.tags!r} do not match {order_id} {state}")
        previous = self.states.get(order_id)
        expected_step = self._steps.get(order_id, -1) + 1
        if state not in ALLOWED_NEXT.get(previous, frozenset()) or step != expected_step:
            self._violation(f"{order_id}: {previous or 'new'} -> {state} (step {step}, expected {expected_step}) "
                            f"at {where}")
        self.states[order_id] = state
        self._steps[order_id] = step
        return 1

    def _violation(self, text: str) -> None:
        self.violations += 1
        if len(self.examples) < 5:
            self.examples.append(text)

