"""Broker config files under `<store root>/config/`, persisted atomically with a `.bak` fallback.

Writes go to `<file>.tmp`, are fsynced, the current content is kept as `<file>.bak`, then the
temp file is renamed over the main one. Loading falls back to `.bak` when the main file is
missing, empty or unparsable (RocketMQ's ConfigManager). Content is fastjson's pretty format.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from rocketflow.protocol.bodies import (
    ConsumerOffsetTable,
    DataVersion,
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    WireBody,
)
from rocketflow.remoting.errors import ProtocolError

log = logging.getLogger(__name__)

BodyT = TypeVar("BodyT", bound=WireBody)

TOPICS_FILE = "topics.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
DELAY_OFFSET_FILE = "delayOffset.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: temp file + fsync, previous content to `.bak`, rename, fsync dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    bak = path.with_name(path.name + ".bak")
    _write_synced(tmp, data)
    with contextlib.suppress(FileNotFoundError):
        previous = path.read_bytes()
        if previous:
            _write_synced(bak, previous)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class JsonConfigFile(Generic[BodyT]):
    """One config file holding one fastjson body type."""

    def __init__(self, path: Path, body_type: type[BodyT], default: Callable[[], BodyT]) -> None:
        self.path = path
        self.body_type = body_type
        self.default = default
        #: which file the last `load` used: "main", "bak" or "default"
        self.loaded_from = "default"
        self._write_lock = threading.Lock()

    @property
    def backup_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def load(self) -> BodyT:
        """The main file's content, else the `.bak`'s, else the default (both missing or damaged)."""
        for source, path in (("main", self.path), ("bak", self.backup_path)):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot read %s: %s", path, exc)
                continue
            if not data.strip():
                log.warning("%s is empty", path)
                continue
            try:
                body = self.body_type.decode(data)
            except (ProtocolError, ValueError) as exc:
                log.warning("%s is damaged: %s", path, exc)
                continue
            self.loaded_from = source
            return body
        self.loaded_from = "default"
        return self.default()

    def write_with(self, encoded: Callable[[], bytes]) -> None:
        """Write what ``encoded()`` returns, one writer at a time, taking it once the file is ours: a
        newer snapshot is never overwritten by an older one, whichever thread writes it. Callers
        snapshot under their table's lock and write outside it, so the broker's loop, which only
        takes the table lock, never waits for a writer's fsyncs."""
        with self._write_lock:
            write_atomically(self.path, encoded())


class _Persistable(Protocol):
    def persist(self) -> None: ...


def persist_after_change(table: _Persistable) -> None:
    """Persist a table after an in-memory change; a write error (e.g. a full disk) is logged, not raised.

    The change stands in memory and reaches the file with the next successful persist (the broker
    persists its tables periodically), as RocketMQ's ConfigManager does: a request that created a
    topic or group must not fail because the disk is full.
    """
    try:
        table.persist()
    except OSError as exc:
        log.error("cannot persist %s (kept in memory, retried at the next persist): %s", type(table).__name__, exc)


class TopicConfigTable:
    """`topics.json`: topic name -> TopicConfig, with a data version bumped on every change."""

    def __init__(self, config_dir: Path) -> None:
        self.file = JsonConfigFile(config_dir / TOPICS_FILE, TopicConfigSerializeWrapper, TopicConfigSerializeWrapper)
        self._lock = threading.RLock()
        self.wrapper = TopicConfigSerializeWrapper()

    def load(self) -> None:
        with self._lock:
            self.wrapper = self.file.load()

    def persist(self) -> None:
        def encoded() -> bytes:
            with self._lock:
                return self.wrapper.encode(pretty=True)

        self.file.write_with(encoded)

    @property
    def data_version(self) -> DataVersion:
        return self.wrapper.data_version

    @property
    def topics(self) -> dict[str, TopicConfig]:
        return self.wrapper.topic_config_table

    def get(self, topic: str) -> TopicConfig | None:
        return self.wrapper.topic_config_table.get(topic)

    def put(self, config: TopicConfig, *, persist: bool = True) -> None:
        with self._lock:
            self.wrapper.topic_config_table[config.topic_name] = config
            self.wrapper.data_version.next_version()
            if persist:
                persist_after_change(self)

    def replace(self, wrapper: TopicConfigSerializeWrapper) -> None:
        """Take over a whole table with its data version (a slave copying its master's), and persist."""
        with self._lock:
            self.wrapper = wrapper
            persist_after_change(self)

    def remove(self, topic: str, *, persist: bool = True) -> TopicConfig | None:
        with self._lock:
            removed = self.wrapper.topic_config_table.pop(topic, None)
            if removed is not None:
                self.wrapper.data_version.next_version()
                if persist:
                    persist_after_change(self)
            return removed


class ConsumerOffsetManager:
    """`consumerOffset.json`: `"topic@group"` -> queue id -> committed offset."""

    def __init__(self, config_dir: Path) -> None:
        self.file = JsonConfigFile(config_dir / CONSUMER_OFFSET_FILE, ConsumerOffsetTable, ConsumerOffsetTable)
        self._lock = threading.Lock()
        self.table: dict[str, dict[int, int]] = {}

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def load(self) -> None:
        with self._lock:
            self.table = self.file.load().offset_table

    def persist(self) -> None:
        def encoded() -> bytes:
            with self._lock:
                snapshot = {key: dict(queues) for key, queues in self.table.items()}
            return ConsumerOffsetTable(offset_table=snapshot).encode(pretty=True)

        self.file.write_with(encoded)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self.table.setdefault(self.key(topic, group), {})[queue_id] = offset

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 if none."""
        return self.table.get(self.key(topic, group), {}).get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(self.key(topic, group), {}))

    def topics_of(self, group: str) -> set[str]:
        """Topics ``group`` has committed offsets of (whichTopicByConsumer)."""
        suffix = "@" + group
        return {key[:-len(suffix)] for key in self.table if key.endswith(suffix)}

    def clone_offsets(self, source_group: str, target_group: str, topic: str) -> None:
        """Give ``target_group`` the offsets ``source_group`` has on ``topic`` (cloneOffset)."""
        with self._lock:
            offsets = self.table.get(self.key(topic, source_group))
            if offsets is not None:
                self.table[self.key(topic, target_group)] = dict(offsets)

    def take_over(self, table: dict[str, dict[int, int]]) -> None:
        """Set the offsets of every topic@group in `table` (a slave copying its master's; others stay)."""
        with self._lock:
            self.table = {**self.table, **{key: dict(queues) for key, queues in table.items()}}

    def remove_group(self, group: str) -> None:
        with self._lock:
            self.table = {key: value for key, value in self.table.items() if not key.endswith("@" + group)}


class DelayOffsetManager:
    """`delayOffset.json`: delay level -> consume offset in SCHEDULE_TOPIC_XXXX queue (level - 1)."""

    def __init__(self, config_dir: Path) -> None:
        self.file = JsonConfigFile(config_dir / DELAY_OFFSET_FILE, DelayOffsetTable, DelayOffsetTable)
        self._lock = threading.Lock()
        self.table: dict[int, int] = {}

    def load(self) -> None:
        with self._lock:
            self.table = self.file.load().offset_table

    def persist(self) -> None:
        def encoded() -> bytes:
            with self._lock:
                snapshot = dict(self.table)
            return DelayOffsetTable(offset_table=snapshot).encode(pretty=True)

        self.file.write_with(encoded)

    def take_over(self, table: dict[int, int]) -> None:
        """Replace the table (a slave copying its master's)."""
        with self._lock:
            self.table = dict(table)

    def update(self, level: int, offset: int) -> None:
        with self._lock:
            self.table[level] = offset

    def get(self, level: int) -> int:
        return self.table.get(level, 0)


class SubscriptionGroupTable:
    """`subscriptionGroup.json`: group name -> SubscriptionGroupConfig, with a data version."""

    def __init__(self, config_dir: Path) -> None:
        self.file = JsonConfigFile(config_dir / SUBSCRIPTION_GROUP_FILE, SubscriptionGroupWrapper,
                                   SubscriptionGroupWrapper)
        self._lock = threading.RLock()
        self.wrapper = SubscriptionGroupWrapper()

    def load(self) -> None:
        with self._lock:
            self.wrapper = self.file.load()

    def persist(self) -> None:
        def encoded() -> bytes:
            with self._lock:
                return self.wrapper.encode(pretty=True)

        self.file.write_with(encoded)

    @property
    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        return self.wrapper.subscription_group_table

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.wrapper.subscription_group_table.get(group)

    def put(self, config: SubscriptionGroupConfig, *, persist: bool = True) -> None:
        with self._lock:
            self.wrapper.subscription_group_table[config.group_name] = config
            self.wrapper.data_version.next_version()
            if persist:
                persist_after_change(self)

    def replace(self, wrapper: SubscriptionGroupWrapper) -> None:
        """Take over a whole table with its data version (a slave copying its master's), and persist."""
        with self._lock:
            self.wrapper = wrapper
            persist_after_change(self)

    def remove(self, group: str, *, persist: bool = True) -> SubscriptionGroupConfig | None:
        with self._lock:
            removed = self.wrapper.subscription_group_table.pop(group, None)
            if removed is not None:
                self.wrapper.data_version.next_version()
                if persist:
                    persist_after_change(self)
            return removed
