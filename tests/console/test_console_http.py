"""The console's safety over plain HTTP (``rocketflow console`` processes): CSRF and origin checks on
writes, trusted Host names, hardening headers, the secret key never served, and the CLI's warnings."""

from __future__ import annotations

import http.cookiejar
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from console_helpers import ACCESS_KEY, LAGGING_GROUP, ORDERS, SECRET_KEY, ConsoleProcess, start_console, stop_console

from rocketflow.client.admin import Admin


@dataclass
class Answer:
    status: int
    body: str
    headers: dict[str, str]


class Session:
    """A browser-like client: one cookie jar, the page's CSRF token remembered."""

    def __init__(self, console: ConsoleProcess) -> None:
        self.base = console.base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.token = ""

    def request(self, path: str, data: dict[str, str] | None = None, headers: dict[str, str] | None = None) -> Answer:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        request = urllib.request.Request(self.base + path, data=body, headers=headers or {})
        try:
            with self.opener.open(request, timeout=15) as response:
                answer = Answer(response.status, response.read().decode(), dict(response.headers))
        except urllib.error.HTTPError as error:
            answer = Answer(error.code, error.read().decode(), dict(error.headers))
        match = re.search(r'<meta name="csrf-token" content="([^"]+)">', answer.body)
        if match:
            self.token = match.group(1)
        return answer


def test_writes_need_the_sessions_csrf_token_and_this_origin(admin_console: ConsoleProcess, admin: Admin) -> None:
    form = {"name": ORDERS, "body": "csrf probe", "keys": "csrf-probe"}
    session = Session(admin_console)
    no_session = session.request("/topic/send", form)
    assert no_session.status == 403 and "CSRF" in no_session.body
    session.request(f"/topic?{urllib.parse.urlencode({'name': ORDERS})}")
    assert len(session.token) >= 32
    stale = session.request("/topic/send", {**form, "csrf_token": "x" * 43})
    assert stale.status == 403 and "CSRF" in stale.body
    other_site = session.request("/topic/send", {**form, "csrf_token": session.token},
                                 {"Origin": "http://attacker.example"})
    assert other_site.status == 403 and "another site" in other_site.body
    stolen = Session(admin_console)  # another browser with the token but not the session cookie
    stolen.request("/cluster")
    assert stolen.request("/topic/send", {**form, "csrf_token": session.token}).status == 403
    assert not admin.query_messages(ORDERS, "csrf-probe")

    sent = session.request("/topic/send", {**form, "csrf_token": session.token},
                           {"Origin": admin_console.base, "HX-Request": "true"})
    assert sent.status == 200 and "SEND_OK" in sent.body, sent.body
    by_header = session.request("/topic/send", form, {"X-CSRF-Token": session.token, "HX-Request": "true"})
    assert by_header.status == 200 and "SEND_OK" in by_header.body
    assert len(admin.query_messages(ORDERS, "csrf-probe")) == 2


def test_a_read_only_console_refuses_every_write_with_403(readonly_console: ConsoleProcess) -> None:
    session = Session(readonly_console)
    session.request("/cluster")
    writes = {
        "/topics/create": {"name": "NeverMade", "read_queues": "1", "write_queues": "1"},
        "/topic/update": {"name": ORDERS, "read_queues": "1", "write_queues": "1", "perm": "6"},
        "/topic/delete": {"name": ORDERS},
        "/topic/send": {"name": ORDERS, "body": "x"},
        "/group/reset": {"name": LAGGING_GROUP, "topic": ORDERS, "mode": "earliest"},
        "/message/resend": {"id": "7F0000010000000000000000000000FF", "group": LAGGING_GROUP},
    }
    for path, form in writes.items():
        answer = session.request(path, {**form, "csrf_token": session.token}, {"HX-Request": "true"})
        assert answer.status == 403, (path, answer.status)
        assert "read-only" in answer.body and "--access-key" in answer.body, path


def test_hosts_headers_and_the_secret_key(admin_console: ConsoleProcess, admin: Admin) -> None:
    session = Session(admin_console)
    rebound = session.request("/cluster", headers={"Host": "attacker.example"})
    assert rebound.status == 400
    page = session.request("/cluster")
    assert page.status == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
    assert f"writes as {ACCESS_KEY}" in page.body
    broker = admin.cluster_info().broker_addr_table["broker-a"].broker_addrs[0]
    paths = ["/cluster", "/topics", "/groups/table", f"/group?name={LAGGING_GROUP}",
             f"/cluster/broker-config?addr={broker}", f"/topic?name={ORDERS}", "/messages", "/dlq"]
    for path in paths:
        answer = session.request(path)
        assert answer.status == 200, path
        assert SECRET_KEY not in answer.body, path
    assert session.request("/static/vendor/htmx-2.0.11.min.js").status == 200
    assert session.request("/topic?name=NoSuchTopicHere").status == 404


def test_cli_warns_when_listening_beyond_loopback_and_checks_the_keys(cluster_namesrv: str) -> None:
    console = start_console(cluster_namesrv, "--host", "0.0.0.0")
    try:
        banner = "".join(console.banner)
        assert "warning:" in banner and "0.0.0.0" in banner and "read-only" in banner
    finally:
        stop_console(console)
    half = subprocess.run([sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')",
                           "console", "-n", cluster_namesrv, "--access-key", "only-half"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert half.returncode == 2 and "must be given together" in half.stderr


def test_loopback_console_prints_no_warning(readonly_console: ConsoleProcess) -> None:
    banner = "".join(readonly_console.banner)
    assert "warning" not in banner and "read-only" in banner and readonly_console.url.startswith("http://127.0.0.1:")
