"""``rocketflow console`` in a real browser: Debian's Chromium, headless, driven by Playwright.

Against a dev cluster with traffic running: every page loads without a console error or a failed
request, the lag chart gets new points that move, a message found by key shows its body, a reset
offset moves the group's committed offsets at the broker, a resend reaches the group's client, and
without an account every write is refused in the page (403) and changes nothing.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from console_helpers import (
    AUDIT_GROUP,
    CHROMIUM,
    CHROMIUM_ARGS,
    DLQ_GROUP,
    LAGGING_GROUP,
    ORDERS,
    PAYMENTS,
    SECRET_KEY,
    ConsoleProcess,
    Traffic,
    unique,
)
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from rocketflow.client.admin import Admin
from testkit import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@dataclass
class Watched:
    """A page with its console errors and failed requests collected."""

    page: Page
    errors: list[str] = field(default_factory=list)

    def goto(self, url: str) -> None:
        response = self.page.goto(url)
        assert response is not None and response.status == 200, (url, response and response.status)
        self.page.wait_for_load_state("load")


@pytest.fixture()
def watched(browser: Browser) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    watched = Watched(page)
    page.on("console", lambda message: watched.errors.append(f"console: {message.text}")
            if message.type == "error" else None)
    page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
    # a request cut short by a navigation or by closing the page (ERR_ABORTED) is not a failure
    page.on("requestfailed", lambda request: watched.errors.append(f"failed: {request.url} {request.failure}")
            if "ERR_ABORTED" not in (request.failure or "") else None)
    page.on("response", lambda response: watched.errors.append(f"status {response.status}: {response.url}")
            if response.status >= 400 else None)
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        yield watched
    finally:
        context.close()


def q(**params: str) -> str:
    return urllib.parse.urlencode(params)


def test_every_page_loads_without_errors(watched: Watched, admin_console: ConsoleProcess, traffic: Traffic,
                                         admin: Admin) -> None:
    base = admin_console.base
    page = watched.page
    wait_until(lambda: any(name.startswith("%DLQ%") for name in admin.topic_list()), what="a dead letter")
    broker_addr = admin.cluster_info().broker_addr_table["broker-a"].broker_addrs[0]

    watched.goto(f"{base}/cluster")
    assert broker_addr in page.inner_text("#broker-table")
    assert "V4_9_3" in page.inner_text("#broker-table") and "%" in page.inner_text("#broker-table td.disk")

    watched.goto(f"{base}/cluster/broker-config?{q(addr=broker_addr)}")
    assert "brokerName" in page.inner_text("#broker-config")

    watched.goto(f"{base}/topics")
    assert ORDERS in page.inner_text("#topic-table")
    page.fill("#topic-filter", "no-such-topic-anywhere")
    page.wait_for_selector("#topic-table >> text=No topic matches.")

    watched.goto(f"{base}/topic?{q(name=ORDERS)}")
    assert "broker-a" in page.inner_text("#route-table")
    assert len(page.query_selector_all("#queue-table tbody tr")) == 2

    watched.goto(f"{base}/groups")
    page.wait_for_selector(f"#group-table >> text={LAGGING_GROUP}")

    watched.goto(f"{base}/group?{q(name=LAGGING_GROUP)}")
    assert ORDERS in page.inner_text("#progress-table")
    assert ORDERS in page.inner_text("#subscription-table")

    watched.goto(f"{base}/messages?{q(mode='time', topic=ORDERS, queue='0', max='5')}")
    assert len(page.query_selector_all("#message-table tbody tr")) == 5
    first_id = page.inner_text("#message-table a.msg-link >> nth=0")
    page.click("#message-table a.msg-link >> nth=0")
    page.wait_for_selector("#message-body")
    assert first_id in page.inner_text("h1") and ORDERS in page.inner_text("#message-headers")
    assert page.inner_text("#message-body").strip()

    watched.goto(f"{base}/messages?{q(mode='id')}")
    watched.goto(f"{base}/dlq")
    assert f"%DLQ%{DLQ_GROUP}" in page.inner_text("#dlq-table")
    watched.goto(f"{base}/dlq/messages?{q(topic=f'%DLQ%{DLQ_GROUP}')}")
    assert "declined" in page.inner_text("#message-table")
    page.click("#message-table form.resend button >> nth=0")  # the group's listener fails it again
    page.wait_for_selector("#message-table .row-result .result.ok")
    assert "CR_LATER" in page.inner_text("#message-table .row-result")

    assert not watched.errors, watched.errors
    assert SECRET_KEY not in page.content()


def test_lag_chart_updates(watched: Watched, readonly_console: ConsoleProcess, traffic: Traffic) -> None:
    watched.goto(f"{readonly_console.base}/group?{q(name=LAGGING_GROUP)}")
    chart = watched.page.locator("#lag-chart")
    watched.page.wait_for_selector("#lag-chart .uplot canvas")
    wait_until(lambda: int(chart.get_attribute("data-points") or 0) >= 1, what="a first lag point")
    first_time = chart.get_attribute("data-last-time")
    first_total = chart.get_attribute("data-last-total")
    totals = {first_total}

    def moved() -> bool:
        totals.add(chart.get_attribute("data-last-total"))
        return int(chart.get_attribute("data-points") or 0) >= 4 and len(totals) >= 2

    wait_until(moved, timeout=15, what="new lag points with a different lag")
    assert chart.get_attribute("data-last-time") != first_time
    assert all(total is not None and int(total) >= 0 for total in totals)
    assert not watched.errors, watched.errors


def test_message_found_by_key_shows_its_body(watched: Watched, readonly_console: ConsoleProcess,
                                             traffic: Traffic) -> None:
    key = unique("invoice-")
    body = {"invoice": key, "customer": "Zoë", "lines": [1, 2, 3]}
    traffic.send(ORDERS, json.dumps(body, ensure_ascii=False).encode(), keys=key, tags="invoice")
    page = watched.page
    watched.goto(f"{readonly_console.base}/messages?mode=key")
    page.fill("#search-key input[name=topic]", ORDERS)
    page.fill("#search-key input[name=key]", key)
    page.click("#search-key button[type=submit]")
    page.wait_for_selector("#message-table a.msg-link")
    assert key in page.inner_text("#message-table")
    page.click("#message-table a.msg-link")
    page.wait_for_selector("#message-body")
    shown = page.inner_text("#message-body")
    assert json.loads(shown) == body and "Zoë" in shown
    assert "json · utf-8" in page.inner_text("#body-meta")
    assert key in page.inner_text("#message-properties")

    def traced() -> bool:  # the producer sends its trace records in the background
        page.reload()
        return page.query_selector("#trace-table") is not None and "PUB" in page.inner_text("#trace-table")

    wait_until(traced, timeout=20, what="the message's trace")
    assert "console-order-service" in page.inner_text("#trace-table")
    assert not watched.errors, watched.errors


def test_reset_offset_moves_the_committed_offsets(watched: Watched, admin_console: ConsoleProcess,
                                                  traffic: Traffic, admin: Admin) -> None:
    def committed() -> int:
        return sum(queue.consumer_offset for queue in admin.consumer_progress(LAGGING_GROUP, ORDERS).queues)

    wait_until(lambda: committed() > 40, what="the group to have consumed some orders")
    before = committed()
    page = watched.page
    watched.goto(f"{admin_console.base}/group?{q(name=LAGGING_GROUP)}")
    page.select_option("#reset-offset select[name=topic]", ORDERS)
    page.select_option("#reset-offset select[name=mode]", "earliest")
    with page.expect_response(lambda response: response.url.endswith("/group/reset")) as answer:
        page.click("#reset-offset button[type=submit]")
    assert answer.value.status == 200
    page.wait_for_selector("#reset-result .result.ok")
    assert "reset" in page.inner_text("#reset-result")
    after = committed()
    assert after < before, (before, after)
    assert not watched.errors, watched.errors


def test_resend_reaches_a_client_of_the_group(watched: Watched, admin_console: ConsoleProcess, traffic: Traffic,
                                              admin: Admin) -> None:
    key = unique("resend-")
    body = json.dumps({"resend": key}).encode()
    traffic.send(ORDERS, body, keys=key)
    wait_until(lambda: bool(admin.query_messages(ORDERS, key)), what="the message to be indexed")
    msg = admin.query_messages(ORDERS, key)[0]
    wait_until(lambda: traffic.seen_count(body) == 1, timeout=30, what="the first delivery")
    page = watched.page
    watched.goto(f"{admin_console.base}/message?{q(id=msg.offset_msg_id, topic=ORDERS)}")
    page.fill("#resend-message input[name=group]", AUDIT_GROUP)
    page.click("#resend-message button[type=submit]")
    page.wait_for_selector("#resend-result .result.ok")
    assert "CR_SUCCESS" in page.inner_text("#resend-result")
    assert traffic.seen_count(body) == 2
    assert not watched.errors, watched.errors


def test_topic_create_update_delete_with_an_account(watched: Watched, admin_console: ConsoleProcess,
                                                    admin: Admin) -> None:
    topic = unique("ConsoleMade")
    page = watched.page
    watched.goto(f"{admin_console.base}/topics")
    page.fill("#create-topic input[name=name]", topic)
    page.fill("#create-topic input[name=read_queues]", "3")
    page.fill("#create-topic input[name=write_queues]", "3")
    page.click("#create-topic button[type=submit]")
    page.wait_for_selector("#create-result .result.ok")
    wait_until(lambda: _queues(admin, topic) == (3, 3), what="the new topic's route")

    watched.goto(f"{admin_console.base}/topic?{q(name=topic)}")
    page.fill("#update-topic input[name=read_queues]", "2")
    page.fill("#update-topic input[name=write_queues]", "2")
    page.click("#update-topic button[type=submit]")
    page.wait_for_selector("#update-result .result.ok")
    wait_until(lambda: _queues(admin, topic) == (2, 2), what="the updated route")

    page.fill("#send-message textarea[name=body]", "made by the console")
    page.click("#send-message button[type=submit]")
    page.wait_for_selector("#send-result .result.ok")
    assert "SEND_OK" in page.inner_text("#send-result")

    page.click("#delete-topic button[type=submit]")
    page.wait_for_selector("#delete-result .result.ok")
    wait_until(lambda: topic not in admin.topic_list(), what="the topic to be gone")
    assert not watched.errors, watched.errors


def _queues(admin: Admin, topic: str) -> tuple[int, int] | None:
    try:
        data = admin.topic_route(topic).queue_datas[0]
    except Exception:
        return None
    return data.read_queue_nums, data.write_queue_nums


def test_writes_without_an_account_are_refused(watched: Watched, readonly_console: ConsoleProcess,
                                               traffic: Traffic, admin: Admin) -> None:
    page = watched.page
    base = readonly_console.base
    watched.goto(f"{base}/topics")
    assert page.inner_text(".badge.readonly") == "read-only"
    topic = unique("Refused")
    page.fill("#create-topic input[name=name]", topic)
    with page.expect_response(lambda response: response.url.endswith("/topics/create")) as answer:
        page.click("#create-topic button[type=submit]")
    assert answer.value.status == 403
    page.wait_for_selector("#create-result .result.failed")
    assert "read-only" in page.inner_text("#create-result") and "--access-key" in page.inner_text("#create-result")
    assert topic not in admin.topic_list()

    before = sorted((queue.queue_id, queue.consumer_offset)
                    for queue in admin.consumer_progress(LAGGING_GROUP, ORDERS).queues)
    watched.goto(f"{base}/group?{q(name=LAGGING_GROUP)}")
    page.select_option("#reset-offset select[name=topic]", ORDERS)
    page.select_option("#reset-offset select[name=mode]", "earliest")
    page.click("#reset-offset button[type=submit]")
    page.wait_for_selector("#reset-result .result.failed")
    after = sorted((queue.queue_id, queue.consumer_offset)
                   for queue in admin.consumer_progress(LAGGING_GROUP, ORDERS).queues)
    assert all(new >= old for (_, old), (_, new) in zip(before, after, strict=True))

    watched.goto(f"{base}/topic?{q(name=PAYMENTS)}")
    page.click("#delete-topic button[type=submit]")
    page.wait_for_selector("#delete-result .result.failed")
    assert PAYMENTS in admin.topic_list()
    refused = [error for error in watched.errors if "403" in error]
    assert refused and watched.errors == refused  # the browser logs each refused POST; nothing else went wrong
