"""The console's web application (Starlette, Jinja2 templates, htmx): pages, fragments and writes.

Security, for a web app that runs on an operator's machine:

- reads need nothing; writes (POST) need the console's own ACL account (``--access-key`` /
  ``--secret-key``): without it they are answered 403 with the reason, shown in the page;
- every POST carries the session's CSRF token (a hidden field, or the ``X-CSRF-Token`` header htmx
  sends) and, when the browser says where it comes from, an ``Origin`` of this console;
- only the ``Host`` names of `ConsoleSettings.trusted_hosts` are answered (DNS rebinding);
- a Content-Security-Policy allows this origin's scripts and styles only (no inline script, no
  frame), and pages are not cached; the secret key is never put in a page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rocketflow.client import MQBrokerError, MQClientError, MQError
from rocketflow.client.admin import (
    DEFAULT_PERM,
    DEFAULT_QUERY_MAX_NUM,
    DEFAULT_QUEUE_NUMS,
    EARLIEST,
    LATEST,
    format_timestamp,
    parse_timestamp,
)
from rocketflow.console.bodies import preview_body
from rocketflow.console.service import DLQ_PREFIX, ConsoleService
from rocketflow.console.settings import ConsoleSettings
from rocketflow.version import __version__

logger = logging.getLogger(__name__)

#: Response codes of "not found" (TOPIC_NOT_EXIST, QUERY_NOT_FOUND).
_NOT_FOUND_CODES: Final = frozenset({17, 22})
CSRF_SESSION_KEY: Final = "csrf"
CSRF_HEADER: Final = "x-csrf-token"
CSRF_FIELD: Final = "csrf_token"
READ_ONLY_MESSAGE: Final = ("This console is read-only: writes need an ACL account. Start it with --access-key and "
                            "--secret-key (or ROCKETFLOW_ACCESS_KEY / ROCKETFLOW_SECRET_KEY).")
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
#: Default window of the message searches by time, milliseconds back from now.
DEFAULT_SEARCH_WINDOW_MS: Final = 3_600_000


class WriteRefused(Exception):
    """A POST that may not be carried out: ``status`` and a message for the page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _package_dir(name: str) -> Path:
    return Path(str(files("rocketflow.console").joinpath(name)))


# --------------------------------------------------------------------------- formatting


def _perm_text(perm: int) -> str:
    text = ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-")
    return text + ("X" if perm & 1 else "")


def _thousands(value: int | float) -> str:
    return f"{value:,.0f}" if isinstance(value, int) else f"{value:,.1f}"


def _form_time(millis: int) -> str:
    """Epoch ms as a ``datetime-local`` input value (local time, seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(millis / 1000))


def _make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(_package_dir("templates")))
    env = templates.env
    env.filters["ts"] = format_timestamp
    env.filters["perm"] = _perm_text
    env.filters["num"] = _thousands
    env.filters["body"] = preview_body
    env.globals["version"] = __version__
    env.globals["DLQ_PREFIX"] = DLQ_PREFIX
    env.globals["urlencode"] = urlencode
    return templates


# --------------------------------------------------------------------------- security middleware


class SecurityHeaders:
    """Adds the CSP and the other hardening headers to every response; pages are not cached."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope.get("path", "").startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cross-origin-opener-policy", b"same-origin"),
                ]
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def csrf_token(request: Request) -> str:
    """The session's CSRF token (made on first use)."""
    token = request.session.get(CSRF_SESSION_KEY)
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        request.session[CSRF_SESSION_KEY] = token
    return token


def _check_origin(request: Request) -> None:
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        if origin == "null":
            raise WriteRefused(403, "refused: a request from an opaque origin")
        return
    if urlsplit(origin).netloc != request.headers.get("host", ""):
        raise WriteRefused(403, f"refused: a request from another site ({origin})")


async def _checked_form(request: Request, settings: ConsoleSettings) -> FormData:
    """The POST's form once the request passed the origin, CSRF and account checks (`WriteRefused` if not)."""
    _check_origin(request)
    form = await request.form()
    expected = request.session.get(CSRF_SESSION_KEY)
    given = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)
    if not isinstance(expected, str) or not isinstance(given, str) or not secrets.compare_digest(expected, given):
        raise WriteRefused(403, "refused: the form's CSRF token is missing or stale; reload the page and try again")
    if not settings.writable:
        raise WriteRefused(403, READ_ONLY_MESSAGE)
    return form


# --------------------------------------------------------------------------- the app


class ConsoleApp:
    """The routes over one `ConsoleService`; `app` is the ASGI application."""

    def __init__(self, settings: ConsoleSettings, service: ConsoleService | None = None) -> None:
        self.settings = settings
        self.service = service if service is not None else ConsoleService(settings)
        self.templates = _make_templates()
        routes = [
            Route("/", self.home),
            Route("/cluster", self.cluster_page),
            Route("/cluster/brokers", self.brokers_fragment),
            Route("/cluster/broker-config", self.broker_config_page),
            Route("/topics", self.topics_page),
            Route("/topics/table", self.topics_fragment),
            Route("/topics/create", self.topic_create, methods=["POST"]),
            Route("/topic", self.topic_page),
            Route("/topic/update", self.topic_update, methods=["POST"]),
            Route("/topic/delete", self.topic_delete, methods=["POST"]),
            Route("/topic/send", self.topic_send, methods=["POST"]),
            Route("/groups", self.groups_page),
            Route("/groups/table", self.groups_fragment),
            Route("/group", self.group_page),
            Route("/group/progress", self.progress_fragment),
            Route("/group/reset", self.group_reset, methods=["POST"]),
            Route("/api/lag", self.lag_json),
            Route("/messages", self.messages_page),
            Route("/message", self.message_page),
            Route("/message/resend", self.message_resend, methods=["POST"]),
            Route("/dlq", self.dlq_page),
            Route("/dlq/messages", self.dlq_messages_page),
            Mount("/static", StaticFiles(directory=str(_package_dir("static"))), name="static"),
        ]
        middleware = [
            Middleware(SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=settings.trusted_hosts()),
            Middleware(SessionMiddleware, secret_key=secrets.token_urlsafe(32), session_cookie="rocketflow_console",
                       same_site="strict", https_only=False, max_age=None),
        ]
        self.app = Starlette(routes=routes, middleware=middleware, lifespan=self._lifespan,
                             exception_handlers={MQError: self._mq_error, WriteRefused: self._refused,
                                                 HTTPException: self._http_error})

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(self.service.start)
        sampler = asyncio.create_task(self.service.run_lag_sampler(), name="rocketflow-console-lag")
        try:
            yield
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            await asyncio.to_thread(self.service.close)

    # ------------------------------------------------------------------ rendering

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("settings", self.settings)
        context["csrf_token"] = csrf_token(request)
        context["writable"] = self.settings.writable
        context["access_key"] = self.settings.access_key if self.settings.writable else None
        context["refresh_ms"] = int(self.settings.refresh_seconds * 1000)
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def result(self, request: Request, ok: bool, message: str, status: int = 200, **extra: Any) -> Response:
        """A write's outcome: a fragment for htmx, else a page."""
        name = "_result.html" if request.headers.get("hx-request") == "true" else "result.html"
        return self.render(request, name, status, ok=ok, message=message, **extra)

    async def _mq_error(self, request: Request, exc: Exception) -> Response:
        status = 502
        if isinstance(exc, MQClientError):
            status = 404 if exc.code in _NOT_FOUND_CODES else 400
        elif isinstance(exc, MQBrokerError):
            status = 404 if exc.code in _NOT_FOUND_CODES else 502
        if request.method == "POST":
            return self.result(request, False, str(exc), status)
        return self.render(request, "error.html", status, message=str(exc))

    async def _refused(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, WriteRefused)
        return self.result(request, False, exc.message, exc.status)

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self.render(request, "error.html", exc.status_code, message=str(exc.detail))

    async def _write(self, request: Request, action: Callable[[FormData], Awaitable[str]],
                     **extra: Any) -> Response:
        form = await _checked_form(request, self.settings)
        message = await action(form)
        return self.result(request, True, message, **extra)

    # ------------------------------------------------------------------ pages

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/cluster", status_code=303)

    async def cluster_page(self, request: Request) -> Response:
        return self.render(request, "cluster.html", view=await self.service.cluster(), page="cluster")

    async def brokers_fragment(self, request: Request) -> Response:
        return self.render(request, "_brokers.html", view=await self.service.cluster())

    async def broker_config_page(self, request: Request) -> Response:
        addr = _required(request, "addr")
        config = await self.service.broker_config(addr)
        return self.render(request, "broker_config.html", addr=addr, config=config, page="cluster")

    async def topics_page(self, request: Request) -> Response:
        view = await self.service.cluster()
        return self.render(request, "topics.html", page="topics", clusters=view.clusters,
                           rows=await self._topic_rows(request), query=request.query_params.get("q", ""),
                           kind=request.query_params.get("kind", "normal"), default_queues=DEFAULT_QUEUE_NUMS)

    async def topics_fragment(self, request: Request) -> Response:
        return self.render(request, "_topics.html", rows=await self._topic_rows(request))

    async def _topic_rows(self, request: Request) -> list[Any]:
        query = request.query_params.get("q", "").strip().lower()
        kind = request.query_params.get("kind", "normal")
        return [row for row in await self.service.topics()
                if (kind == "all" or row.kind == kind) and query in row.name.lower()]

    async def topic_page(self, request: Request) -> Response:
        name = _required(request, "name")
        view = await self.service.topic(name)
        groups = [row.name for row in await self._safe_groups()]
        return self.render(request, "topic.html", page="topics", topic=view, groups=groups)

    async def groups_page(self, request: Request) -> Response:
        return self.render(request, "groups.html", page="groups",
                           show_system=request.query_params.get("system") == "1")

    async def groups_fragment(self, request: Request) -> Response:
        show_system = request.query_params.get("system") == "1"
        rows = [row for row in await self.service.groups() if show_system or not row.system]
        return self.render(request, "_groups.html", rows=rows)

    async def group_page(self, request: Request) -> Response:
        name = _required(request, "name")
        view = await self.service.group(name)
        return self.render(request, "group.html", page="groups", group=view,
                           now=_form_time(time.time_ns() // 1_000_000))

    async def progress_fragment(self, request: Request) -> Response:
        name = _required(request, "name")
        return self.render(request, "_progress.html", group=await self.service.group(name))

    async def lag_json(self, request: Request) -> Response:
        name = _required(request, "group")
        return JSONResponse(await self.service.lag_series(name))

    async def messages_page(self, request: Request) -> Response:
        params = request.query_params
        mode = params.get("mode", "key")
        now = time.time_ns() // 1_000_000
        begin_text = params.get("begin") or _form_time(now - DEFAULT_SEARCH_WINDOW_MS)
        end_text = params.get("end") or _form_time(now + 60_000)
        context: dict[str, Any] = {"page": "messages", "mode": mode, "params": params, "begin": begin_text,
                                   "end": end_text, "messages": None, "topics": await self._safe_topic_names()}
        topic = params.get("topic", "").strip()
        if mode == "id" and params.get("id", "").strip():
            query = {"id": params["id"].strip(), **({"topic": topic} if topic else {})}
            return RedirectResponse(f"/message?{urlencode(query)}", status_code=303)
        if mode in ("key", "time") and topic:
            begin, end = _time_range(begin_text, end_text)
            max_num = _int_param(params.get("max"), DEFAULT_QUERY_MAX_NUM, 1, 1024, "max")
            if mode == "key":
                key = params.get("key", "").strip()
                if not key:
                    raise MQClientError("give a key to search for")
                context["messages"] = await self.service.messages_by_key(topic, key, begin, end, max_num)
            else:
                broker = params.get("broker", "").strip() or None
                queue_text = params.get("queue", "").strip()
                queue_id = _int_param(queue_text, 0, 0, 1 << 20, "queue") if queue_text else None
                context["messages"] = await self.service.messages_by_time(
                    topic, begin, end, broker_name=broker, queue_id=queue_id, max_num=max_num)
        return self.render(request, "messages.html", **context)

    async def message_page(self, request: Request) -> Response:
        msg_id = _required(request, "id")
        topic = request.query_params.get("topic", "").strip() or None
        msg = await self.service.message(msg_id, topic)
        trace, trace_note = await self.service.trace(msg.uniq_key or msg.msg_id)
        groups = [row.name for row in await self._safe_groups() if not row.system]
        default_group = msg.topic[len(DLQ_PREFIX):] if msg.topic.startswith(DLQ_PREFIX) else ""
        return self.render(request, "message.html", page="messages", msg=msg, body=preview_body(msg.body),
                           properties=sorted(msg.properties.items()), trace=trace, trace_note=trace_note,
                           groups=groups, default_group=default_group)

    async def dlq_page(self, request: Request) -> Response:
        return self.render(request, "dlq.html", page="dlq", rows=await self.service.dlq())

    async def dlq_messages_page(self, request: Request) -> Response:
        topic = _required(request, "topic")
        if not topic.startswith(DLQ_PREFIX):
            raise MQClientError(f"{topic!r} is not a dead-letter topic (they start with {DLQ_PREFIX})")
        params = request.query_params
        now = time.time_ns() // 1_000_000
        begin_text = params.get("begin", "")
        end_text = params.get("end") or _form_time(now + 60_000)
        begin, end = _time_range(begin_text, end_text) if begin_text else (EARLIEST, parse_timestamp(end_text))
        max_num = _int_param(params.get("max"), DEFAULT_QUERY_MAX_NUM, 1, 1024, "max")
        messages = await self.service.messages_by_time(topic, begin, end, broker_name=None, queue_id=None,
                                                       max_num=max_num)
        return self.render(request, "dlq_messages.html", page="dlq", topic=topic, group=topic[len(DLQ_PREFIX):],
                           messages=messages, begin=begin_text, end=end_text, max_num=max_num)

    async def _safe_groups(self) -> list[Any]:
        try:
            return await self.service.groups()
        except MQError as exc:
            logger.info("group list unavailable: %s", exc)
            return []

    async def _safe_topic_names(self) -> list[str]:
        try:
            return [row.name for row in await self.service.topics() if row.kind in ("normal", "dlq", "retry")]
        except MQError as exc:
            logger.info("topic list unavailable: %s", exc)
            return []

    # ------------------------------------------------------------------ writes

    async def topic_create(self, request: Request) -> Response:
        async def create(form: FormData) -> str:
            name = _field(form, "name")
            cluster = _field(form, "cluster", required=False) or None
            read = _int_param(_field(form, "read_queues"), DEFAULT_QUEUE_NUMS, 1, 1024, "read queues")
            write = _int_param(_field(form, "write_queues"), DEFAULT_QUEUE_NUMS, 1, 1024, "write queues")
            perm = _int_param(_field(form, "perm", required=False), DEFAULT_PERM, 0, 15, "perm")
            addrs = await self.service.write(self.service.admin.create_topic, name, cluster=cluster,
                                             read_queue_nums=read, write_queue_nums=write, perm=perm,
                                             order=form.get("order") == "on")
            return f"topic {name} created on {', '.join(addrs)}"

        return await self._write(request, create)

    async def topic_update(self, request: Request) -> Response:
        async def update(form: FormData) -> str:
            name = _field(form, "name")
            read = _int_param(_field(form, "read_queues"), 0, 1, 1024, "read queues")
            write = _int_param(_field(form, "write_queues"), 0, 1, 1024, "write queues")
            perm = _int_param(_field(form, "perm"), DEFAULT_PERM, 0, 15, "perm")
            addrs = await self.service.write(self.service.admin.update_topic, name, read_queue_nums=read,
                                             write_queue_nums=write, perm=perm, order=form.get("order") == "on")
            return f"topic {name} updated on {', '.join(addrs)}"

        return await self._write(request, update)

    async def topic_delete(self, request: Request) -> Response:
        async def delete(form: FormData) -> str:
            name = _field(form, "name")
            addrs = await self.service.write(self.service.admin.delete_topic, name)
            return f"topic {name} deleted from {', '.join(addrs)} and the name servers"

        return await self._write(request, delete)

    async def topic_send(self, request: Request) -> Response:
        async def send(form: FormData) -> str:
            name = _field(form, "name")
            result = await self.service.write(
                self.service.admin.send, name, _field(form, "body", required=False),
                keys=_field(form, "keys", required=False) or None, tags=_field(form, "tags", required=False) or None)
            return (f"sent: {result.send_status.name}, msg id {result.msg_id}, queue "
                    f"{result.message_queue.broker_name}:{result.message_queue.queue_id} offset {result.queue_offset}")

        return await self._write(request, send)

    async def group_reset(self, request: Request) -> Response:
        async def reset(form: FormData) -> str:
            group = _field(form, "name")
            topic = _field(form, "topic")
            mode = _field(form, "mode", required=False) or "time"
            if mode == "earliest":
                timestamp = EARLIEST
            elif mode == "latest":
                timestamp = LATEST
            else:
                timestamp = parse_timestamp(_field(form, "time"))
            table = await self.service.write(self.service.admin.reset_offset, group, topic, timestamp,
                                             force=form.get("force") == "on")
            offsets = ", ".join(f"{mq.broker_name}:{mq.queue_id}={offset}" for mq, offset in table.items())
            return f"offsets of {group} on {topic} reset: {offsets or 'no queue'}"

        return await self._write(request, reset)

    async def message_resend(self, request: Request) -> Response:
        async def resend(form: FormData) -> str:
            msg_id = _field(form, "id")
            group = _field(form, "group")
            client_id = _field(form, "client_id", required=False) or None
            topic = _field(form, "topic", required=False) or None
            result = await self.service.resend(group, msg_id, client_id, topic)
            outcome = result.consume_result.name if result.consume_result is not None else "no result"
            remark = f" ({result.remark})" if result.remark else ""
            return f"consumed by a client of {group}: {outcome}{remark} in {result.spent_time_mills} ms"

        return await self._write(request, resend)


# --------------------------------------------------------------------------- request helpers


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name, "").strip()
    if not value:
        raise HTTPException(400, f"the {name!r} parameter is missing")
    return value


def _field(form: FormData, name: str, *, required: bool = True) -> str:
    value = form.get(name)
    text = value.strip() if isinstance(value, str) else ""
    if required and not text:
        raise MQClientError(f"the form field {name!r} is missing")
    return text


def _int_param(text: str | None, default: int, low: int, high: int, what: str) -> int:
    if text is None or not text.strip():
        return default
    try:
        value = int(text)
    except ValueError:
        raise MQClientError(f"{what} must be a whole number, got {text!r}") from None
    if not low <= value <= high:
        raise MQClientError(f"{what} must be in {low}..{high}, got {value}")
    return value


def _time_range(begin_text: str, end_text: str) -> tuple[int, int]:
    begin = parse_timestamp(begin_text)
    end = parse_timestamp(end_text)
    if end < begin:
        raise MQClientError("the end of the time range is before its beginning")
    return begin, end


def create_app(settings: ConsoleSettings, service: ConsoleService | None = None) -> Starlette:
    """The console's ASGI application for ``settings``."""
    return ConsoleApp(settings, service).app


__all__ = ["CONTENT_SECURITY_POLICY", "READ_ONLY_MESSAGE", "ConsoleApp", "WriteRefused", "create_app", "csrf_token"]
