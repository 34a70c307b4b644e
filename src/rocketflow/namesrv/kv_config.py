"""The name server's namespaced key/value configuration (RocketMQ's KVConfigManager)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketflow.protocol.bodies import KVTable
from rocketflow.remoting import fastjson
from rocketflow.remoting.errors import BodyDecodeError

logger = logging.getLogger("rocketflow.namesrv.kv")

#: The namespace brokers' order-topic configuration lives in.
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


@dataclass(slots=True)
class KVConfigManager:
    """namespace -> key -> value, persisted as ``{"configTable":{ns:{k:v}}}`` when a path is given."""

    path: Path | None = None
    config_table: dict[str, dict[str, str]] = field(default_factory=dict)

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

    def persist(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_suffix(self.path.suffix + ".tmp")
        temp.write_bytes(fastjson.dumps({"configTable": self.config_table}, pretty=True))
        os.replace(temp, self.path)

    def put(self, namespace: str, key: str, value: str) -> None:
        self.config_table.setdefault(namespace, {})[key] = value
        self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.config_table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        entries = self.config_table.get(namespace)
        if entries is not None and entries.pop(key, None) is not None:
            if not entries:
                del self.config_table[namespace]
            self.persist()

    def namespace_table(self, namespace: str) -> KVTable | None:
        entries = self.config_table.get(namespace)
        return KVTable(table=dict(entries)) if entries else None
