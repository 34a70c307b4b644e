"""`MetricsEndpoint`: one Prometheus registry served over HTTP at ``/metrics``, for a broker or a client.

prometheus_client's WSGI server answers scrapes on a daemon thread of its own, so serving never
touches the caller's event loop. This module imports prometheus_client: import it only where metrics
are served.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import start_wsgi_server


class MetricsEndpoint:
    """Serves ``registry`` at ``http://host:port/metrics`` between `serve` and `stop`."""

    def __init__(self, registry: CollectorRegistry, what: str) -> None:
        """``what`` names the metrics in errors (``"broker metrics"``)."""
        self.registry = registry
        self.what = what
        #: the host last served on ("" before)
        self.host = ""
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def serving(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        """The port ``/metrics`` is served on (0 when not serving)."""
        return self._server.server_port if self._server is not None else 0

    def serve(self, port: int, host: str) -> None:
        """Serve on ``host:port``; raises `OSError` naming the address if it cannot bind."""
        try:
            self._server, self._thread = start_wsgi_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve {self.what} on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host

    def stop(self) -> None:
        """Stop serving (idempotent; blocks briefly while the server thread ends)."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(5)


__all__ = ["MetricsEndpoint"]
