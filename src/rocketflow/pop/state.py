"""Consumption by invisibility ("pop"): which messages of a group are out, until when, and how often.

`PopState` knows, for each (group, topic, queue): the *cursor* (the first queue offset never handed
out) and the *in-flight* messages (handed out, not acked yet), each with its delivery attempt, its
sequence number and the wall-clock millisecond it becomes visible again. It knows nothing of the
store: the broker reads the messages and tells `PopState` what it handed out (`record_receive`),
what was acked (`ack`), re-hidden (`change_invisible`) or dead-lettered (`remove`).

Receipt handles name one delivery: ``<queue>.<offset>.<seq>.<mac>``; the MAC (HMAC-SHA256 under a
secret kept beside the state, over group, topic, queue, offset and seq) makes a forged handle fail,
and the sequence number makes a stale one (from an earlier delivery, or before an invisibility
change) fail: only the current delivery's handle acks or re-hides a message.

Persistence (docs/design/pop.md): every change is one line appended to ``pop-<generation>.log`` with
a plain ``write`` before the caller answers, so a killed broker (kill -9) loses nothing (the changes
of one request, made inside `PopState.batch`, go out in one ``write``); the log is
fsynced every ``flush_interval_ms`` (a power loss may forget the acks and receives of that last
interval: those messages are delivered again). A checkpoint writes the whole state to
``pop-snapshot.json`` (atomically) and starts a new log generation; loading reads the snapshot and
replays the logs from its generation on, ignoring a torn last line.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import hmac
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

_keyed_hmac: Callable[[bytes, bytes, str], Any] | None
try:  # OpenSSL's HMAC object itself: copying a keyed one costs half of hmac.new (no Python wrapper)
    from _hashlib import hmac_new as _keyed_hmac
except ImportError:  # pragma: no cover - CPython without OpenSSL
    _keyed_hmac = None

logger = logging.getLogger(__name__)

SNAPSHOT_FILE: Final = "pop-snapshot.json"
SECRET_FILE: Final = "pop-secret"
LOG_PREFIX: Final = "pop-"
LOG_SUFFIX: Final = ".log"
_MAC_BYTES: Final = 8
#: (group, topic) pairs whose keyed HMAC is kept
_MAC_CACHE: Final = 4096


@dataclass(slots=True)
class Inflight:
    """One message handed out and not acked: its offset, attempt (1 = first delivery), the sequence
    number of its current handle, and when (epoch ms) it becomes visible again."""

    offset: int
    attempt: int
    seq: int
    invisible_until: int


@dataclass(slots=True)
class QueueState:
    """A group's progress in one queue of a topic."""

    cursor: int
    inflight: dict[int, Inflight] = field(default_factory=dict)

    @property
    def committed(self) -> int:
        """The offset below which every message is done (acked, dead-lettered or filtered out)."""
        return min(self.inflight, default=self.cursor)


class HandleError(enum.Enum):
    """Why a receipt handle was refused."""

    MALFORMED = "the receipt handle is malformed"
    FORGED = "the receipt handle was not issued by this broker for this group and topic"
    STALE = "the receipt handle is stale: the message was acked, delivered again, or re-hidden since"


@dataclass(frozen=True, slots=True)
class Handle:
    """A parsed receipt handle."""

    queue_id: int
    offset: int
    seq: int


class PopState:
    """Pop bookkeeping of one broker, persisted under ``directory``. Not thread-safe: call it from one
    thread (the broker's loop); `flush` and `finish_checkpoint` may run on another."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._queues: dict[tuple[str, str, int], QueueState] = {}
        self._seq = 0
        self._generation = 0
        self._log_fd: int | None = None
        self._secret = b""
        self._unflushed = False
        self._fd_lock = threading.Lock()
        #: log lines held back by `batch`, written when it ends
        self._held: list[bytes] | None = None
        #: per (group, topic): an HMAC keyed with the secret that has read "group\0topic\0"
        self._macs: dict[tuple[str, str], Any] = {}
        #: log lines since the last checkpoint (a checkpoint is due when they outgrow the state)
        self.lines_since_checkpoint = 0

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Load the snapshot and replay the logs, then start a fresh log generation."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._secret = self._load_secret()
        self._macs.clear()
        snapshot = self.directory / SNAPSHOT_FILE
        start_generation = 0
        if snapshot.exists():
            data = orjson.loads(snapshot.read_bytes())
            start_generation = int(data["generation"])
            self._seq = int(data["seq"])
            for group, topic, queue_id, cursor, entries in data["queues"]:
                state = QueueState(int(cursor))
                for offset, attempt, seq, until in entries:
                    state.inflight[int(offset)] = Inflight(int(offset), int(attempt), int(seq), int(until))
                self._queues[(group, topic, int(queue_id))] = state
        generations = sorted(g for g in self._log_generations() if g >= start_generation)
        for generation in generations:
            self._replay(self._log_path(generation))
        self._generation = max([start_generation - 1, *generations]) + 1
        self._log_fd = os.open(self._log_path(self._generation), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        logger.info("pop state loaded from %s: %d queues, %d messages in flight", self.directory,
                    len(self._queues), self.inflight_count)

    def close(self) -> None:
        """Flush and close the log (the state stays loadable from the snapshot and logs)."""
        self.flush()
        with self._fd_lock:
            if self._log_fd is not None:
                os.close(self._log_fd)
                self._log_fd = None

    def flush(self) -> None:
        """fsync the log (from any thread)."""
        with self._fd_lock:
            if self._log_fd is not None and self._unflushed:
                self._unflushed = False
                os.fsync(self._log_fd)

    def _load_secret(self) -> bytes:
        path = self.directory / SECRET_FILE
        with contextlib.suppress(FileNotFoundError):
            secret = path.read_bytes()
            if len(secret) >= 16:
                return secret
        secret = secrets.token_bytes(32)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(secret)
        os.replace(tmp, path)
        return secret

    def _log_path(self, generation: int) -> Path:
        return self.directory / f"{LOG_PREFIX}{generation}{LOG_SUFFIX}"

    def _log_generations(self) -> list[int]:
        found = []
        for path in self.directory.glob(f"{LOG_PREFIX}*{LOG_SUFFIX}"):
            middle = path.name[len(LOG_PREFIX):-len(LOG_SUFFIX)]
            if middle.isdigit():
                found.append(int(middle))
        return found

    # ------------------------------------------------------------------ the log

    def _append(self, record: list[Any]) -> None:
        if self._log_fd is None:
            raise RuntimeError("pop state is not open")
        line = orjson.dumps(record) + b"\n"
        self.lines_since_checkpoint += 1
        if self._held is not None:
            self._held.append(line)
            return
        os.write(self._log_fd, line)
        self._unflushed = True

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """The changes made inside go to the log in one ``write`` when the block ends (also when it
        raises), as they would one by one. Call no ``await`` inside: the block must end before any
        other request's changes, and before the caller answers."""
        if self._held is not None:  # nested: the outer block writes
            yield
            return
        held: list[bytes] = []
        self._held = held
        try:
            yield
        finally:
            self._held = None
            if held:
                if self._log_fd is None:
                    raise RuntimeError("pop state is not open")
                os.write(self._log_fd, b"".join(held))
                self._unflushed = True

    def _replay(self, path: Path) -> None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        lines = data.split(b"\n")
        for number, line in enumerate(lines):
            if not line:
                continue
            try:
                self._apply(orjson.loads(line))
            except (orjson.JSONDecodeError, ValueError, KeyError, IndexError, TypeError):
                if number >= len(lines) - 2:  # a torn last line: the write the crash interrupted
                    logger.warning("pop log %s: ignoring its torn last line", path.name)
                else:
                    logger.error("pop log %s: skipping unreadable line %d", path.name, number + 1)

    def _apply(self, record: list[Any]) -> None:
        kind = record[0]
        key = (str(record[1]), str(record[2]), int(record[3]))
        if kind == "R":  # receive: new cursor, then (offset, attempt, seq, until) handed out
            state = self._queues.setdefault(key, QueueState(int(record[4])))
            state.cursor = max(state.cursor, int(record[4]))
            for offset, attempt, seq, until in record[5]:
                state.inflight[int(offset)] = Inflight(int(offset), int(attempt), int(seq), int(until))
                self._seq = max(self._seq, int(seq))
        elif kind == "A":  # ack / dead-lettered: offset
            state_or_none = self._queues.get(key)
            if state_or_none is not None:
                state_or_none.inflight.pop(int(record[4]), None)
        elif kind == "C":  # invisibility changed: offset, new seq, new until
            state_or_none = self._queues.get(key)
            entry = state_or_none.inflight.get(int(record[4])) if state_or_none is not None else None
            if entry is not None:
                entry.seq = int(record[5])
                entry.invisible_until = int(record[6])
            self._seq = max(self._seq, int(record[5]))
        elif kind == "S":  # cursor set (start position, filtered-out messages passed)
            state = self._queues.setdefault(key, QueueState(int(record[4])))
            state.cursor = max(state.cursor, int(record[4]))
        else:
            raise ValueError(f"unknown pop log record {kind!r}")

    # ------------------------------------------------------------------ checkpoints

    def begin_checkpoint(self) -> tuple[bytes, int]:
        """Start a new log generation and return (the snapshot that goes with it, its generation);
        hand both to `finish_checkpoint` (which may run on another thread)."""
        generation = self._generation + 1
        fd = os.open(self._log_path(generation), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        with self._fd_lock:
            old = self._log_fd
            self._log_fd = fd
            self._unflushed = False
        if old is not None:
            os.close(old)
        self._generation = generation
        self.lines_since_checkpoint = 0
        queues = [[group, topic, queue_id, state.cursor,
                   [[e.offset, e.attempt, e.seq, e.invisible_until] for e in state.inflight.values()]]
                  for (group, topic, queue_id), state in self._queues.items()]
        return orjson.dumps({"generation": generation, "seq": self._seq, "queues": queues}), generation

    def finish_checkpoint(self, snapshot: bytes, generation: int) -> None:
        """Write the snapshot atomically, then delete the logs it covers."""
        path = self.directory / SNAPSHOT_FILE
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, snapshot)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        for old in self._log_generations():
            if old < generation:
                with contextlib.suppress(FileNotFoundError):
                    self._log_path(old).unlink()

    def checkpoint(self) -> None:
        """`begin_checkpoint` and `finish_checkpoint` in one go."""
        self.finish_checkpoint(*self.begin_checkpoint())

    # ------------------------------------------------------------------ handles

    def _mac(self, group: str, topic: str, queue_id: int, offset: int, seq: int) -> str:
        """HMAC-SHA256 over "group\0topic\0queue\0offset\0seq" under the secret, first bytes in hex."""
        keyed = self._macs.get((group, topic))
        if keyed is None:
            if len(self._macs) >= _MAC_CACHE:
                self._macs.clear()
            prefix = f"{group}\x00{topic}\x00".encode()
            keyed = _keyed_hmac(self._secret, prefix, "sha256") if _keyed_hmac is not None else hmac.new(
                self._secret, prefix, hashlib.sha256)
            self._macs[(group, topic)] = keyed
        mac = keyed.copy()
        mac.update(f"{queue_id}\x00{offset}\x00{seq}".encode())
        return mac.digest()[:_MAC_BYTES].hex()

    def handle(self, group: str, topic: str, queue_id: int, entry: Inflight) -> str:
        """The receipt handle of ``entry``'s current delivery."""
        return f"{queue_id}.{entry.offset}.{entry.seq}.{self._mac(group, topic, queue_id, entry.offset, entry.seq)}"

    def parse_handle(self, group: str, topic: str, text: str) -> Handle | HandleError:
        """A handle of this broker for ``group`` and ``topic``, or why not."""
        parts = text.split(".")
        if len(parts) != 4 or len(text) > 96:
            return HandleError.MALFORMED
        queue_text, offset_text, seq_text, mac = parts
        if not (queue_text.isdigit() and offset_text.isdigit() and seq_text.isdigit()):
            return HandleError.MALFORMED
        queue_id, offset, seq = int(queue_text), int(offset_text), int(seq_text)
        if not hmac.compare_digest(mac, self._mac(group, topic, queue_id, offset, seq)):
            return HandleError.FORGED
        return Handle(queue_id, offset, seq)

    def _current(self, group: str, topic: str, handle: Handle) -> tuple[QueueState, Inflight] | HandleError:
        state = self._queues.get((group, topic, handle.queue_id))
        entry = state.inflight.get(handle.offset) if state is not None else None
        if state is None or entry is None or entry.seq != handle.seq:
            return HandleError.STALE
        return state, entry

    # ------------------------------------------------------------------ queries

    def queue(self, group: str, topic: str, queue_id: int) -> QueueState | None:
        return self._queues.get((group, topic, queue_id))

    def queues(self) -> Iterator[tuple[tuple[str, str, int], QueueState]]:
        return iter(self._queues.items())

    @property
    def inflight_count(self) -> int:
        return sum(len(state.inflight) for state in self._queues.values())

    def visible_again(self, group: str, topic: str, queue_id: int, now_ms: int, *,
                      fifo: bool) -> tuple[list[Inflight], bool]:
        """(in-flight messages visible again at ``now_ms``, in offset order; whether messages past the
        cursor may be handed out too). A FIFO group's queue with a message still invisible gives
        nothing: no message of a queue goes out while an earlier one is out."""
        state = self._queues.get((group, topic, queue_id))
        if state is None or not state.inflight:
            return [], True
        if fifo:
            if any(entry.invisible_until > now_ms for entry in state.inflight.values()):
                return [], False
            return sorted(state.inflight.values(), key=lambda entry: entry.offset), True
        due = [entry for entry in state.inflight.values() if entry.invisible_until <= now_ms]
        due.sort(key=lambda entry: entry.offset)
        return due, True

    def next_visible_ms(self, group: str, topic: str) -> int | None:
        """The earliest time an in-flight message of ``group`` on ``topic`` becomes visible again."""
        earliest: int | None = None
        for (g, t, _), state in self._queues.items():
            if g == group and t == topic:
                for entry in state.inflight.values():
                    if earliest is None or entry.invisible_until < earliest:
                        earliest = entry.invisible_until
        return earliest

    # ------------------------------------------------------------------ changes

    def start_at(self, group: str, topic: str, queue_id: int, offset: int) -> QueueState:
        """The queue's state, created with its cursor at ``offset`` when the group never received from it."""
        key = (group, topic, queue_id)
        state = self._queues.get(key)
        if state is None:
            state = self._queues[key] = QueueState(offset)
            self._append(["S", group, topic, queue_id, offset])
        return state

    def move_cursor(self, group: str, topic: str, queue_id: int, cursor: int) -> None:
        """Pass messages nobody gets (filtered out, or gone from the store) without handing them out."""
        state = self.start_at(group, topic, queue_id, cursor)
        if cursor > state.cursor:
            state.cursor = cursor
            self._append(["S", group, topic, queue_id, cursor])

    def record_receive(self, group: str, topic: str, queue_id: int, handed_out: Iterable[tuple[int, int]],
                       invisible_until: int, cursor: int) -> list[str]:
        """Messages (offset, attempt) of one queue handed out, hidden until ``invisible_until``; the
        cursor moves to ``cursor`` (past the new ones). Returns their receipt handles, in order."""
        state = self.start_at(group, topic, queue_id, cursor)
        entries = []
        for offset, attempt in handed_out:
            self._seq += 1
            entry = Inflight(offset, attempt, self._seq, invisible_until)
            state.inflight[offset] = entry
            entries.append(entry)
        state.cursor = max(state.cursor, cursor)
        self._append(["R", group, topic, queue_id, state.cursor,
                      [[e.offset, e.attempt, e.seq, e.invisible_until] for e in entries]])
        return [self.handle(group, topic, queue_id, entry) for entry in entries]

    def ack(self, group: str, topic: str, handle: Handle) -> Inflight | HandleError:
        """Done with the message ``handle`` names (only its current handle does it)."""
        found = self._current(group, topic, handle)
        if isinstance(found, HandleError):
            return found
        state, entry = found
        del state.inflight[entry.offset]
        self._append(["A", group, topic, handle.queue_id, entry.offset])
        return entry

    def remove(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Drop an in-flight message without a handle (it went to the dead-letter queue)."""
        state = self._queues.get((group, topic, queue_id))
        if state is not None and state.inflight.pop(offset, None) is not None:
            self._append(["A", group, topic, queue_id, offset])

    def change_invisible(self, group: str, topic: str, handle: Handle,
                         invisible_until: int) -> tuple[Inflight, str] | HandleError:
        """Hide the message again until ``invisible_until``; returns it and its new handle (the old one
        is stale from now on)."""
        found = self._current(group, topic, handle)
        if isinstance(found, HandleError):
            return found
        _, entry = found
        self._seq += 1
        entry.seq = self._seq
        entry.invisible_until = invisible_until
        self._append(["C", group, topic, handle.queue_id, entry.offset, entry.seq, invisible_until])
        return entry, self.handle(group, topic, handle.queue_id, entry)


__all__ = ["Handle", "HandleError", "Inflight", "PopState", "QueueState"]
