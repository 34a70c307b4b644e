"""The name server's namespaced key/value configuration (RocketMQ's KVConfigManager).

With a path, the table is written as ``{"configTable":{ns:{k:v}}}`` (temp file, fsync, `.bak`, rename).
A change does not write the file itself: a `ConfigPersister` thread writes the latest table once per
batch of changes, off the name server's loop (without one, the changing thread writes it). RocketMQ
rewrites the file before it answers a PUT_KV_CONFIG; here the answer does not wait for the write, which
follows within milliseconds: one put per whole-file write made N puts cost O(N^2). A clean stop
writes the table.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketflow.protocol.bodies import KVTable
from rocketflow.remoting import fastjson
from rocketflow.remoting.errors import BodyDecodeError
from rocketflow.store.config_file import ConfigPersister, write_atomically

logger = logging.getLogger(__name__)

#: The namespace brokers' order-topic configuration lives in.
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


@dataclass(slots=True, eq=False)
class KVConfigManager:
    """namespace -> key -> value, persisted as ``{"configTable":{ns:{k:v}}}`` when a path is given."""

    path: Path | None = None
    config_table: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the longest namespace and key, and the longest value, `check` lets in (None: no bound)
    max_key_length: int | None = None
    max_value_length: int | None = None
    #: writes the file off the changing thread; None = the changing thread writes it
    persister: ConfigPersister | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _write_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _changes: int = field(default=0, init=False, repr=False)
    _written: int = field(default=0, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else "KV config"

    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            data: Any = fastjson.loads(self.path.read_bytes())
            table = data.get("configTable", {}) if isinstance(data, dict) else {}
            self.config_table = {
                str(ns): {str(k): str(v) for k, v in entries.items()}
                for ns, entries in table.items()
                if isinstance(entries, dict)
            }
        except (OSError, BodyDecodeError) as exc:
            logger.error("cannot load KV config from %s: %s", self.path, exc)

    def check(self, namespace: str, key: str, value: str) -> str | None:
        """Why an entry is refused (past `max_key_length` / `max_value_length`), or None."""
        for what, text, limit, setting in (("namespace", namespace, self.max_key_length, "maxKvKeyLength"),
                                           ("key", key, self.max_key_length, "maxKvKeyLength"),
                                           ("value", value, self.max_value_length, "maxKvValueLength")):
            if limit is not None and len(text) > limit:
                return f"the KV config {what} is {len(text)} characters long, more than {setting} ({limit})"
        return None

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self.config_table.setdefault(namespace, {})[key] = value
            self._changes += 1
        self._changed()

    def get(self, namespace: str, key: str) -> str | None:
        return self.config_table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        with self._lock:
            entries = self.config_table.get(namespace)
            if entries is None or entries.pop(key, None) is None:
                return
            if not entries:
                del self.config_table[namespace]
            self._changes += 1
        self._changed()

    def namespace_table(self, namespace: str) -> KVTable | None:
        entries = self.config_table.get(namespace)
        return KVTable(table=dict(entries)) if entries else None

    def _changed(self) -> None:
        if self.path is None:
            return
        if self.persister is None or not self.persister.wake(self):
            try:
                self.flush()
            except OSError as exc:
                logger.error("cannot persist the KV config to %s (kept in memory): %s", self.path, exc)

    def flush(self, *, block: bool = False) -> None:
        """Write the table if it changed since the last write (see `JournaledTable.flush`). Raises `OSError`."""
        while self.path is not None and self._written < self._changes:
            if not self._write_lock.acquire(blocking=block):
                return
            try:
                with self._lock:
                    target = self._changes
                    snapshot = {namespace: dict(entries) for namespace, entries in self.config_table.items()}
                write_atomically(self.path, fastjson.dumps({"configTable": snapshot}, pretty=True))
                self._written = target
            finally:
                self._write_lock.release()

    def persist(self) -> None:
        """Write the table now (raises `OSError`)."""
        if self.path is None:
            return
        with self._lock:
            self._changes += 1
        self.flush(block=True)

