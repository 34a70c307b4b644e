"""Screenshots of ``rocketflow console`` for docs/console.md, against a dev cluster with traffic.

    .venv/bin/python scripts/console_screenshots.py            # writes docs/images/console-*.png
    .venv/bin/python scripts/console_screenshots.py --serve 600 # or keep it running to look around

Starts a dev cluster in this process (message tracing on), a producer whose rate rises and falls
(orders, JSON bodies, keyed by order id), a slower consumer group (so that it lags), a group that
dead-letters declined payments, and the console (with an ACL account, on a free port); then
headless Chromium (Debian's ``chromium``, driven by Playwright) takes a picture of each main page.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import threading
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from rocketflow import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from rocketflow.client import ConsumeConcurrentlyContext
from rocketflow.client.admin import Admin
from rocketflow.console import ConsoleSettings, ConsoleThread
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


class Traffic:
    """Orders at a rate that swings between ~40 and ~160 a second; declined payments go to a DLQ."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.stop = threading.Event()
        self.producer = Producer("order-service", namesrv_addr=namesrv, enable_msg_trace=True)
        self.consumers: list[PushConsumer] = []
        self.sent = 0
        self.thread = threading.Thread(target=self._produce, name="traffic", daemon=True)

    def start(self) -> None:
        self.producer.start()
        checker = PushConsumer("order-checker", namesrv_addr=self.namesrv, consume_thread_min=1,
                               consume_thread_max=1, enable_msg_trace=True)
        checker.subscribe("Orders", "*")
        checker.register_concurrent_listener(self._check_order)
        payments = PushConsumer("payment-service", namesrv_addr=self.namesrv, enable_msg_trace=True)
        payments.subscribe("Payments", "*")
        payments.register_concurrent_listener(self._pay)
        for consumer in (checker, payments):
            consumer.start()
            self.consumers.append(consumer)
        self.thread.start()

    @staticmethod
    def _check_order(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        time.sleep(0.011 * len(msgs))  # ~90 a second
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    @staticmethod
    def _pay(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        if any(b"declined" in msg.body for msg in msgs):
            context.delay_level_when_next_consume = -1  # straight to the dead-letter queue
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def _produce(self) -> None:
        rng = random.Random(7)
        start = time.monotonic()
        while not self.stop.is_set():
            rate = 100 + 60 * math.sin((time.monotonic() - start) / 6)
            order = self.sent
            body = {"orderId": f"order-{order}", "customer": f"c{rng.randrange(500)}",
                    "amount": round(rng.uniform(5, 400), 2), "currency": "EUR", "state": "created"}
            self.producer.send(Message("Orders", json.dumps(body).encode(), keys=f"order-{order}", tags="created"))
            if order % 10 == 0:
                outcome = "declined" if order % 30 == 0 else "accepted"
                payment = {"orderId": f"order-{order}", "outcome": outcome, "card": "**** 4242"}
                self.producer.send(Message("Payments", json.dumps(payment).encode(), keys=f"order-{order}",
                                           tags=outcome))
            self.sent += 1
            time.sleep(1 / rate)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for consumer in self.consumers:
            consumer.shutdown()
        self.producer.shutdown()


def take_screenshots(console: ConsoleThread, out_dir: Path, warmup: float) -> list[Path]:
    time.sleep(warmup)
    base = console.url.rstrip("/")
    shots: list[Path] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1360, "height": 860}, device_scale_factor=1)
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)

        def shot(name: str, path: str, wait: float = 1.0) -> None:
            page.goto(base + path)
            page.wait_for_timeout(wait * 1000)
            target = out_dir / f"console-{name}.png"
            page.screenshot(path=str(target), full_page=True)
            shots.append(target)

        shot("cluster", "/cluster")
        shot("topic", "/topic?name=Orders")
        page.goto(base + "/group?name=order-checker")  # starts the lag samples; the chart fills in
        page.wait_for_timeout(14_000)
        target = out_dir / "console-group.png"
        page.screenshot(path=str(target), full_page=True)
        shots.append(target)
        shot("messages", "/messages?mode=key&topic=Orders&key=order-30")
        page.click("#message-table a.msg-link >> nth=0")
        page.wait_for_load_state()
        page.wait_for_timeout(500)
        target = out_dir / "console-message.png"
        page.screenshot(path=str(target), full_page=True)
        shots.append(target)
        shot("dlq", "/dlq/messages?topic=%25DLQ%25payment-service&max=10")
        browser.close()
        if errors:
            raise SystemExit(f"console errors in the browser: {errors}")
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds of traffic before the first picture")
    parser.add_argument("--serve", type=float, default=0.0,
                        help="instead of screenshots, serve this many seconds (the URL is printed)")
    args = parser.parse_args()
    cluster = DevCluster.start_in_thread(broker_settings={"trace_topic_enable": True})
    traffic: Traffic | None = None
    try:
        with Admin(cluster.namesrv_addr) as admin:
            admin.ensure_topic("Orders", queues=4)
            admin.ensure_topic("Payments", queues=2)
        traffic = Traffic(cluster.namesrv_addr)
        traffic.start()
        settings = ConsoleSettings(cluster.namesrv_addr, port=0, refresh_seconds=1.0, access_key="console-admin",
                                   secret_key="not-shown-anywhere")
        with ConsoleThread(settings) as console:
            if args.serve:
                print(f"console: {console.url} (name server {cluster.namesrv_addr})", flush=True)
                time.sleep(args.serve)
                return
            args.out.mkdir(parents=True, exist_ok=True)
            for path in take_screenshots(console, args.out, args.warmup):
                print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    finally:
        if traffic is not None:
            traffic.close()
        cluster.close()


if __name__ == "__main__":
    main()
