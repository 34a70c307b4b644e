"""Broker config files under `<store root>/config/`: RocketMQ's JSON files, written off the event loop.

Files. Each table is a JSON file in fastjson's pretty format, written atomically: `<file>.tmp`,
fsynced, the current content kept as `<file>.bak`, then renamed over the main one; loading falls back
to `.bak` when the main file is missing, empty or unparsable (RocketMQ's ConfigManager). Consumer and
delay offsets are written whole, periodically and at stop (as RocketMQ does).

Topics and subscription groups change one entry at a time (admin creates, auto-created topics, retry
topics and groups on heartbeats), and rewriting a whole file per change made N creates cost O(N^2)
and held the loop tens of ms each. So their changes go to a journal, `<file>.journal`: one JSON line
per changed entry (the entry or its removal, with the table's data version), appended and fsynced in
batches by one `ConfigPersister` thread; changes made while a write is under way share the next one.
The journal is folded into a new snapshot of the main file once it outgrows it (so the bytes written
stay linear in the changes), every ``flush_config_interval_ms`` when it is not empty, and at stop.
Loading reads the snapshot, then replays the journal's lines newer than it (a torn last line, from a
crash during an append, is ignored). The main file is always a complete table in RocketMQ's format; it
lags the journal by at most ``flush_config_interval_ms`` while the broker runs.

Durability: RocketMQ persists a table synchronously on every change before it answers. Here an
admin change (UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
DELETE_SUBSCRIPTIONGROUP) is answered once the journal append that holds it is fsynced (the request
waits asynchronously; concurrent requests share one append), so an acknowledged change survives a
crash, and a journal append costs O(1) per change. Entries created on the way of other requests
(auto-created topics and groups, retry topics on heartbeats) are written within one append of their
creation without holding up the request, as they are created again when missing. A write that fails
(a full disk) is logged; the change stays in memory, the request still succeeds, and the table is
written whole at the next periodic persist.

Locks. A table's lock guards its entries and is a leaf: whoever holds it takes no other lock, does
no I/O and awaits nothing. A writer takes the table's write lock (one writer at a time), takes a
snapshot or the pending journal lines under the table lock, releases it, and writes. The loop only
ever takes table locks, so it never waits for a write.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

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
from rocketflow.remoting import fastjson
from rocketflow.remoting.errors import ProtocolError
from rocketflow.store.checkpoint import fsync_dir

log = logging.getLogger(__name__)

BodyT = TypeVar("BodyT", bound=WireBody)

TOPICS_FILE = "topics.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
DELAY_OFFSET_FILE = "delayOffset.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
#: suffix of a table's journal (``topics.json.journal``)
JOURNAL_SUFFIX = ".journal"


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
    fsync_dir(path.parent)


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
        newer snapshot is never overwritten by an older one, whichever thread writes it. ``encoded``
        may take its table's lock (a leaf), so the broker's loop, which only takes the table lock,
        never waits for a writer's fsyncs."""
        with self._write_lock:
            write_atomically(self.path, encoded())



ConfigT = TypeVar("ConfigT", TopicConfig, SubscriptionGroupConfig)
WrapperT = TypeVar("WrapperT", TopicConfigSerializeWrapper, SubscriptionGroupWrapper)


class JournaledTable(Generic[ConfigT, WrapperT]):
    """A named-entry table (topics, subscription groups) kept in a snapshot file plus a journal.

    A change takes only the table lock (a leaf: nothing else is locked, awaited or written while it is
    held), records a journal line and hands the write to the table's `ConfigPersister` (without one,
    the changing thread writes it). A writer takes the table's write lock, drains the pending lines
    under the table lock and writes outside it. See the module docstring.
    """

    #: the journal is folded into a new snapshot once it outgrows the snapshot, or this size
    CHECKPOINT_MIN_BYTES = 64 * 1024

    def __init__(self, path: Path, wrapper_type: type[WrapperT], entry_type: type[ConfigT], what: str) -> None:
        """``entry_type``'s entries (each ``what``, named by `_name`) in ``wrapper_type``'s table at ``path``."""
        self.file: JsonConfigFile[WrapperT] = JsonConfigFile(path, wrapper_type, wrapper_type)
        self._entry_type: type[ConfigT] = entry_type
        self._what = what
        self.journal_path = path.with_name(path.name + JOURNAL_SUFFIX)
        self.wrapper: WrapperT = wrapper_type()
        #: writes this table's changes off the caller's thread; None = the changing thread writes them
        self.persister: ConfigPersister | None = None
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        # under _lock: changes made, changes durable, journal lines not yet written, waiters
        self._changes = 0
        self._written = 0
        self._lines: list[bytes] = []
        self._checkpoint_due = True
        self._waiters: list[tuple[int, concurrent.futures.Future[bool]]] = []
        # under _write_lock: what the files hold
        self._journal_bytes = 0
        self._journal_max_counter = -1
        self._snapshot_bytes = 0

    # ------------------------------------------------------------------ entries (per table type)

    def _entries(self, wrapper: WrapperT) -> dict[str, ConfigT]:
        raise NotImplementedError

    def _decode_entry(self, data: object, where: str) -> ConfigT:
        config: ConfigT = self._entry_type.from_json_dict(data, where)
        if not self._name(config):
            raise ValueError(f"a {self._what} without a name")
        return config

    def _copy(self) -> WrapperT:
        """A snapshot: the entry map copied (entries are replaced, never changed in place) and the version."""
        version = self.wrapper.data_version
        # typed loosely: mypy checks every pairing of the two constrained type variables, not just the two used
        entries: dict[str, Any] = dict(self._entries(self.wrapper))
        return self.file.body_type(entries, DataVersion(version.timestamp, version.counter))

    @property
    def name(self) -> str:
        return self.file.path.name

    @staticmethod
    def _name(config: ConfigT) -> str:
        return config.topic_name if isinstance(config, TopicConfig) else config.group_name

    # ------------------------------------------------------------------ reads

    @property
    def data_version(self) -> DataVersion:
        return self.wrapper.data_version

    def get(self, name: str) -> ConfigT | None:
        return self._entries(self.wrapper).get(name)

    def snapshot(self) -> WrapperT:
        """A copy of the table safe to read from any thread (the entries themselves are shared)."""
        with self._lock:
            return self._copy()

    # ------------------------------------------------------------------ changes

    def put(self, config: ConfigT, *, persist: bool = True) -> None:
        with self._lock:
            self._entries(self.wrapper)[self._name(config)] = config
            self._record({"put": config.to_json_dict()})
        if persist:
            self._changed()

    def remove(self, name: str, *, persist: bool = True) -> ConfigT | None:
        with self._lock:
            removed = self._entries(self.wrapper).pop(name, None)
            if removed is not None:
                self._record({"remove": name})
        if removed is not None and persist:
            self._changed()
        return removed

    def replace(self, wrapper: WrapperT) -> None:
        """Take over a whole table with its data version (a slave copying its master's), and persist."""
        with self._lock:
            self.wrapper = wrapper
            self._changes += 1
            self._lines.clear()
            self._checkpoint_due = True
        self._changed()

    def _record(self, entry: dict[str, Any]) -> None:
        """Under the table lock: count a change to one entry and keep its journal line."""
        version = self.wrapper.data_version
        version.next_version()
        self._changes += 1
        if not self._checkpoint_due:  # a due checkpoint writes the whole table anyway
            entry["dataVersion"] = version.to_json_dict()
            self._lines.append(fastjson.dumps(entry) + b"\n")

    def _changed(self) -> None:
        persister = self.persister
        if persister is None or not persister.wake(self):
            try:
                self.flush()
            except OSError as exc:
                log.error("cannot persist %s (kept in memory, retried at the next persist): %s", self.name, exc)

    def when_written(self) -> concurrent.futures.Future[bool]:
        """Done once every change made so far is on disk (True) or its write failed (False: the change
        stays in memory and is written by the next successful persist)."""
        future: concurrent.futures.Future[bool] = concurrent.futures.Future()
        with self._lock:
            if self._written >= self._changes:
                future.set_result(True)
            else:
                self._waiters.append((self._changes, future))
        return future

    # ------------------------------------------------------------------ writes

    def flush(self, *, block: bool = False) -> None:
        """Write the changes not yet written: their journal lines, or a new snapshot when one is due.

        Without ``block``, returns at once when another thread is writing this table: that writer
        checks for new changes once it is done, so it writes these too. Raises `OSError`.
        """
        while self._written < self._changes:
            if not self._write_lock.acquire(blocking=block):
                return
            try:
                self._write_locked(checkpoint=False)
            finally:
                self._write_lock.release()

    def persist(self) -> None:
        """Write the whole table as a new snapshot now and empty the journal. Raises `OSError`."""
        with self._write_lock:
            self._write_locked(checkpoint=True)
        self.flush()  # changes made while the snapshot was written, if their thread left them to us

    def persist_if_changed(self) -> None:
        """`persist` when the journal holds changes, a change is not written yet, or a write failed."""
        with self._lock:
            changed = self._written < self._changes or self._checkpoint_due
        if changed or self._journal_bytes:
            self.persist()

    def _write_locked(self, *, checkpoint: bool) -> None:
        snapshot: WrapperT | None = None
        with self._lock:
            target = self._changes
            counter = self.wrapper.data_version.counter
            lines = self._lines
            self._lines = []
            pending = sum(map(len, lines))
            if (checkpoint or self._checkpoint_due
                    or self._journal_bytes + pending > max(self._snapshot_bytes, self.CHECKPOINT_MIN_BYTES)):
                snapshot = self._copy()
                self._checkpoint_due = False
        try:
            if snapshot is not None:
                self._write_snapshot(snapshot)
            elif lines:
                self._append(lines, counter)
        except OSError:
            with self._lock:
                # an append may have left a torn line: only a snapshot (which empties the journal) is written next
                self._checkpoint_due = True
                self._lines.clear()
            self._resolve(target, written=False)
            raise
        self._resolve(target, written=True)

    def _write_snapshot(self, snapshot: WrapperT) -> None:
        data = snapshot.encode(pretty=True)
        if self._journal_max_counter > snapshot.data_version.counter:
            # a table taken over with an older version: a journal line newer than the snapshot must not
            # survive it (replay skips only lines at or below the snapshot's version)
            self._truncate_journal()
        write_atomically(self.file.path, data)
        self._snapshot_bytes = len(data)
        self._truncate_journal()

    def _truncate_journal(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.truncate(self.journal_path, 0)
        self._journal_bytes = 0
        self._journal_max_counter = -1

    def _append(self, lines: list[bytes], counter: int) -> None:
        created = not self.journal_path.exists()
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(b"".join(lines))
            size = len(view)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.journal_path.parent)
        self._journal_bytes += size
        self._journal_max_counter = max(self._journal_max_counter, counter)

    def _resolve(self, target: int, *, written: bool) -> None:
        with self._lock:
            if written:
                self._written = max(self._written, target)
            done = [future for wanted, future in self._waiters if wanted <= target]
            self._waiters = [(wanted, future) for wanted, future in self._waiters if wanted > target]
        for future in done:
            future.set_result(written)

    # ------------------------------------------------------------------ load

    def load(self) -> None:
        """The snapshot (or its `.bak`, or an empty table), then the journal's changes newer than it."""
        with self._write_lock, self._lock:
            self.wrapper = self.file.load()
            clean = self._replay()
            self._changes = self._written = 0
            self._lines.clear()
            self._checkpoint_due = not clean or self.file.loaded_from != "main"
            with contextlib.suppress(OSError):
                self._snapshot_bytes = self.file.path.stat().st_size

    def _replay(self) -> bool:
        """Apply the journal's lines newer than the loaded snapshot; False when a line is torn or damaged
        (the lines after it are ignored: only the tail of a crashed append can be torn)."""
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return True
        except OSError as exc:
            log.warning("cannot read %s: %s", self.journal_path, exc)
            return False
        entries = self._entries(self.wrapper)
        version = self.wrapper.data_version
        base = version.counter
        position = 0
        applied = 0
        while position < len(data):
            end = data.find(b"\n", position)
            where = f"{self.journal_path.name} at byte {position}"
            if end < 0:
                log.warning("%s: the last change is torn (a crash while it was written); ignored", where)
                return False
            try:
                line = fastjson.loads(data[position:end])
                if not isinstance(line, dict):
                    raise ValueError("not an object")
                line_version = DataVersion.from_json_dict(line.get("dataVersion"), where)
                if line_version.counter > base:
                    if "put" in line:
                        config = self._decode_entry(line["put"], where)
                        entries[self._name(config)] = config
                    else:
                        name = line.get("remove")
                        if not isinstance(name, str):
                            raise ValueError("neither a put nor a remove")
                        entries.pop(name, None)
                    if line_version.counter > version.counter:
                        version.assign_from(line_version)
                    applied += 1
            except (ProtocolError, ValueError) as exc:
                log.warning("%s is damaged (%s); it and the changes after it are ignored", where, exc)
                return False
            position = end + 1
        if applied:
            log.info("%s: %d changes replayed from %s", self.file.path.name, applied, self.journal_path.name)
        self._journal_bytes = len(data)
        self._journal_max_counter = version.counter
        return True


class TopicConfigTable(JournaledTable[TopicConfig, TopicConfigSerializeWrapper]):
    """`topics.json`: topic name -> TopicConfig, with a data version bumped on every change."""

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir / TOPICS_FILE, TopicConfigSerializeWrapper, TopicConfig, "topic")

    def _entries(self, wrapper: TopicConfigSerializeWrapper) -> dict[str, TopicConfig]:
        return wrapper.topic_config_table

    @property
    def topics(self) -> dict[str, TopicConfig]:
        return self.wrapper.topic_config_table


class SubscriptionGroupTable(JournaledTable[SubscriptionGroupConfig, SubscriptionGroupWrapper]):
    """`subscriptionGroup.json`: group name -> SubscriptionGroupConfig, with a data version."""

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir / SUBSCRIPTION_GROUP_FILE, SubscriptionGroupWrapper, SubscriptionGroupConfig,
                         "group")

    def _entries(self, wrapper: SubscriptionGroupWrapper) -> dict[str, SubscriptionGroupConfig]:
        return wrapper.subscription_group_table

    @property
    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        return self.wrapper.subscription_group_table


class Flushable(Protocol):
    """What a `ConfigPersister` writes: something that writes its pending changes with `flush`."""

    @property
    def name(self) -> str: ...

    def flush(self, *, block: bool = False) -> None: ...


class ConfigPersister:
    """One thread that writes the changes of its tables, so the server's loop never does.

    `wake` queues a changed table; the thread writes each queued table's pending changes in one go,
    so changes made while a write is under way share the next one (no fixed delay: a lone change is
    written at once). `stop` writes what is queued and ends the thread.
    """

    def __init__(self, name: str = "config-persister") -> None:
        self.name = name
        self._cond = threading.Condition()
        self._queued: dict[Flushable, None] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False

    def attach(self, *tables: JournaledTable[Any, Any]) -> None:
        for table in tables:
            table.persister = self

    def start(self) -> None:
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def wake(self, table: Flushable) -> bool:
        """Queue ``table`` for writing; False when the thread is not running (the caller writes)."""
        with self._cond:
            if self._thread is None or self._stopping:
                return False
            self._queued[table] = None
            self._cond.notify()
        return True

    def stop(self, timeout: float = 30.0) -> None:
        """Write what is queued, then end the thread (blocks: call it off the event loop)."""
        with self._cond:
            thread = self._thread
            self._stopping = True
            self._cond.notify()
        if thread is not None:
            thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queued and not self._stopping:
                    self._cond.wait()
                if not self._queued:
                    return
                tables = list(self._queued)
                self._queued.clear()
            for table in tables:
                try:
                    table.flush(block=True)
                except OSError as exc:
                    log.error("cannot persist %s (kept in memory, retried at the next persist): %s", table.name, exc)
                except Exception:
                    log.exception("persisting %s failed", table.name)


class _OffsetsFile(Generic[BodyT]):
    """An offsets table kept under a lock and written whole to one file (periodically and at stop)."""

    def __init__(self, path: Path, body_type: type[BodyT]) -> None:
        self.file = JsonConfigFile(path, body_type, body_type)
        self._lock = threading.Lock()

    def _write(self, snapshot: Callable[[], BodyT]) -> None:
        """Write the body ``snapshot()`` makes of the table under the lock (encoded outside it)."""
        def encoded() -> bytes:
            with self._lock:
                body = snapshot()
            return body.encode(pretty=True)

        self.file.write_with(encoded)


class ConsumerOffsetManager(_OffsetsFile[ConsumerOffsetTable]):
    """`consumerOffset.json`: `"topic@group"` -> queue id -> committed offset."""

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir / CONSUMER_OFFSET_FILE, ConsumerOffsetTable)
        self.table: dict[str, dict[int, int]] = {}

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def load(self) -> None:
        with self._lock:
            self.table = self.file.load().offset_table

    def persist(self) -> None:
        self._write(lambda: ConsumerOffsetTable(offset_table={key: dict(queues) for key, queues in self.table.items()}))

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


class DelayOffsetManager(_OffsetsFile[DelayOffsetTable]):
    """`delayOffset.json`: delay level -> consume offset in SCHEDULE_TOPIC_XXXX queue (level - 1)."""

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir / DELAY_OFFSET_FILE, DelayOffsetTable)
        self.table: dict[int, int] = {}

    def load(self) -> None:
        with self._lock:
            self.table = self.file.load().offset_table

    def persist(self) -> None:
        self._write(lambda: DelayOffsetTable(offset_table=dict(self.table)))

    def take_over(self, table: dict[int, int]) -> None:
        """Replace the table (a slave copying its master's)."""
        with self._lock:
            self.table = dict(table)

    def update(self, level: int, offset: int) -> None:
        with self._lock:
            self.table[level] = offset

    def get(self, level: int) -> int:
        return self.table.get(level, 0)
