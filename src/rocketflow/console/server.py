"""Serving the console: `run_console` in the foreground (the CLI), `ConsoleThread` beside other work."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Final

import uvicorn

from rocketflow.console.app import create_app
from rocketflow.console.settings import ConsoleSettings, is_wildcard

logger = logging.getLogger(__name__)

EXPOSED_WARNING: Final = (
    "the console listens on {host}, not on a loopback address: other machines can reach it. Anyone who can reach "
    "it reads the cluster through it{writes}; put it behind a proxy with authentication and TLS, or bind 127.0.0.1.")


def console_url(host: str, port: int) -> str:
    """The URL a browser on this machine opens."""
    name = "127.0.0.1" if is_wildcard(host) else host
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"
    return f"http://{name}:{port}/"


def exposed_warning(settings: ConsoleSettings) -> str | None:
    """The warning printed when the bind address is not a loopback one (None when it is)."""
    if not settings.exposed:
        return None
    writes = " and, with this console's ACL account, changes it" if settings.writable else ""
    return EXPOSED_WARNING.format(host=settings.host, writes=writes)


def _config(settings: ConsoleSettings, *, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(create_app(settings), host=settings.host, port=settings.port, log_level=log_level,
                          access_log=log_level in ("info", "debug", "trace"), server_header=False,
                          proxy_headers=False, lifespan="on")


class _Server(uvicorn.Server):
    """uvicorn's server, telling ``on_ready`` the URL once it listens (the port is known then)."""

    def __init__(self, config: uvicorn.Config, settings: ConsoleSettings,
                 on_ready: Callable[[str], None] | None = None) -> None:
        super().__init__(config)
        self.settings = settings
        self.on_ready = on_ready
        self.port = settings.port

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                self.port = int(sock.getsockname()[1])
                break
        if self.started and self.on_ready is not None:
            self.on_ready(console_url(self.settings.host, self.port))


def run_console(settings: ConsoleSettings, *, log_level: str = "warning",
                on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGINT / SIGTERM (uvicorn's handlers); ``on_ready(url)`` once listening."""
    _Server(_config(settings, log_level=log_level), settings, on_ready).run()


class ConsoleThread:
    """The console served by a daemon thread (its own event loop); `start` waits until it listens.

    ``settings.port`` 0 picks a free port: `port` and `url` tell which.
    """

    def __init__(self, settings: ConsoleSettings, *, log_level: str = "warning") -> None:
        self.settings = settings
        self._server = _Server(_config(settings, log_level=log_level), settings)
        self._thread = threading.Thread(target=self._server.run, name="rocketflow-console", daemon=True)
        self.port = settings.port

    @property
    def url(self) -> str:
        return console_url(self.settings.host, self.port)

    def start(self, timeout: float = 30.0) -> ConsoleThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the console did not start on {self.settings.host}:{self.settings.port}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError("the console did not start in time")
            time.sleep(0.02)
        self.port = self._server.port
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and wait for the thread (idempotent)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)

    def __enter__(self) -> ConsoleThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


__all__ = ["ConsoleThread", "console_url", "exposed_warning", "run_console"]
