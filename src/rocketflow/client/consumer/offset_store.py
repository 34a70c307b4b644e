"""Consumer offset stores (RocketMQ's ``OffsetStore``).

* `RemoteBrokerOffsetStore` (clustering): offsets in memory, committed to the queue's master broker
  (periodically, oneway, by `persist_all`) and read back from it.
* `LocalFileOffsetStore` (broadcasting): offsets in a JSON file per instance name and group.

Memory operations (`update_offset`, `remove_offset`, `clone_offset_table`) are synchronous and
thread-safe (consume threads call them); operations that may do I/O are coroutines meant for the
client instance's loop.

`read_offset` returns an offset >= 0, ``-1`` when the group has none (nothing in memory for
READ_FROM_MEMORY; the broker answered QUERY_NOT_FOUND for READ_FROM_STORE), or ``-2`` when the
broker could not tell (no address, transport failure, timeout, any other error code such as
SYSTEM_BUSY or NO_PERMISSION) - the rebalance then skips the queue this round. RocketMQ 4.9.3 maps
every error code to -1, so a transient broker error made a new queue start from its last offset
and skip messages; later versions map only QUERY_NOT_FOUND (``OffsetNotFoundException``) to -1, as here.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

from rocketflow.client.errors import MQClientError, MQError
from rocketflow.client.instance import ClientInstance
from rocketflow.protocol.bodies import OffsetSerializeWrapper
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.errors import ProtocolError

logger = logging.getLogger(__name__)

#: Default root of the local offset files (RocketMQ's ``rocketmq.client.localOffsetStoreDir``).
DEFAULT_LOCAL_OFFSET_STORE_DIR: Final = Path.home() / ".rocketmq_offsets"
#: RocketMQ's timeout of offset RPCs.
OFFSET_RPC_TIMEOUT: Final = 5.0


class ReadOffsetType(Enum):
    """Where `OffsetStore.read_offset` looks."""

    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


@runtime_checkable
class OffsetStore(Protocol):
    """What a consumer needs from an offset store."""

    def load(self) -> None:
        """Load persisted offsets into memory (no-op for the remote store)."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Set the in-memory offset (with ``increase_only`` it never moves backwards)."""

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        """The offset, -1 if the group has none, -2 if the store could not tell (retry later)."""
        ...

    def memory_offset(self, mq: MessageQueue) -> int | None:
        """The in-memory offset (what ``read_offset`` with READ_FROM_MEMORY reads), None when there is none."""
        ...

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Persist the offsets of ``mqs``; the remote store forgets the others."""

    async def persist(self, mq: MessageQueue) -> None:
        """Persist one queue's offset."""

    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget a queue's in-memory offset."""

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """A copy of the in-memory offsets (of ``topic`` only, when given)."""
        ...

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, is_oneway: bool = True) -> None:
        """Commit ``offset`` of ``mq`` to its broker (no-op for the local store)."""


class _OffsetCell:
    """One queue's in-memory offset and the lock its compare-and-set takes."""

    __slots__ = ("lock", "value")

    def __init__(self, value: int) -> None:
        self.value = value
        self.lock = threading.Lock()


class _MemoryTable:
    """The thread-safe in-memory part both stores share.

    Every queue has its own cell and lock, so consume threads committing different queues do not
    queue behind one lock (under the GIL a contended lock costs far more than the update). The
    table's lock guards only adding and removing queues; reads take an offset as one attribute read.
    """

    def __init__(self) -> None:
        self._offsets: dict[MessageQueue, _OffsetCell] = {}
        self._lock = threading.Lock()

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        if not isinstance(mq, MessageQueue):
            raise MQClientError(f"expected a MessageQueue, got {type(mq).__name__}")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise MQClientError(f"an offset must be an int, got {offset!r}")
        cell = self._offsets.get(mq)
        if cell is None:
            with self._lock:
                cell = self._offsets.get(mq)
                if cell is None:
                    self._offsets[mq] = _OffsetCell(offset)
                    return
        with cell.lock:
            if not increase_only or offset > cell.value:
                cell.value = offset

    def memory_offset(self, mq: MessageQueue) -> int | None:
        cell = self._offsets.get(mq)
        return None if cell is None else cell.value

    def answer_from_memory(self, mq: MessageQueue, read_type: ReadOffsetType) -> int | None:
        """What `read_offset` answers without asking the store: the in-memory offset (unless
        READ_FROM_STORE), -1 for READ_FROM_MEMORY without one; None when the store must be asked."""
        if read_type is ReadOffsetType.READ_FROM_STORE:
            return None
        offset = self.memory_offset(mq)
        if offset is not None:
            return offset
        return -1 if read_type is ReadOffsetType.READ_FROM_MEMORY else None

    def remove_offset(self, mq: MessageQueue) -> None:
        with self._lock:
            self._offsets.pop(mq, None)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        with self._lock:
            return {mq: cell.value for mq, cell in self._offsets.items() if not topic or mq.topic == topic}


class RemoteBrokerOffsetStore(_MemoryTable):
    """Offsets of a clustering consumer group, kept by the brokers."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    def load(self) -> None:
        """Nothing to load: offsets are read from the broker on demand."""

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        answer = self.answer_from_memory(mq, read_type)
        if answer is not None:
            return answer
        try:
            offset = await self.fetch_consume_offset_from_broker(mq)
        except (MQError, TimeoutError) as exc:
            if getattr(exc, "code", None) == ResponseCode.QUERY_NOT_FOUND:
                logger.debug("%s: no committed offset for %s: %s", self.group, mq, exc)
                return -1
            logger.warning("%s: reading the offset of %s failed: %s", self.group, mq, exc)
            return -2
        self.update_offset(mq, offset, False)
        return offset

    async def _broker_addr(self, mq: MessageQueue) -> str:
        """The master of ``mq``'s broker; once the master is gone from the route, a slave (which keeps the
        offset until its master is back and copies the master's over it, as in RocketMQ)."""
        found = self.instance.find_broker_address_in_admin(mq.broker_name)
        if found is None:
            await self.instance.update_topic_route(mq.topic)
            found = self.instance.find_broker_address_in_admin(mq.broker_name)
        if found is None:
            raise MQClientError(f"the broker {mq.broker_name!r} does not exist (no address for {mq})")
        return found.broker_addr

    async def fetch_consume_offset_from_broker(self, mq: MessageQueue) -> int:
        """QUERY_CONSUMER_OFFSET of ``mq`` on its master (an error code, QUERY_NOT_FOUND included, raises
        `MQBrokerError`)."""
        addr = await self._broker_addr(mq)
        return await self.instance.api.query_consumer_offset(addr, self.group, mq, OFFSET_RPC_TIMEOUT)

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, is_oneway: bool = True) -> None:
        addr = await self._broker_addr(mq)
        api = self.instance.api
        if is_oneway:
            await api.update_consumer_offset_oneway(addr, self.group, mq, offset)
        else:
            await api.update_consumer_offset(addr, self.group, mq, offset, OFFSET_RPC_TIMEOUT)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Commit (oneway) every in-memory offset of ``mqs``; drop the entries of other queues.
        An empty ``mqs`` does nothing (as in RocketMQ)."""
        wanted = set(mqs)
        if not wanted:
            return
        unused: list[MessageQueue] = []
        for mq, offset in self.clone_offset_table().items():
            if mq not in wanted:
                unused.append(mq)
                continue
            try:
                await self.update_consume_offset_to_broker(mq, offset, True)
            except MQError as exc:
                logger.warning("%s: persisting offset %d of %s failed: %s", self.group, offset, mq, exc)
        for mq in unused:
            self.remove_offset(mq)

    async def persist(self, mq: MessageQueue) -> None:
        offset = self.memory_offset(mq)
        if offset is None:
            return
        try:
            await self.update_consume_offset_to_broker(mq, offset, True)
        except MQError as exc:
            logger.warning("%s: persisting offset %d of %s failed: %s", self.group, offset, mq, exc)


class LocalFileOffsetStore(_MemoryTable):
    """Offsets of a broadcasting consumer, in ``<store_dir>/<instance name>/<group>/offsets.json``.

    The file has fastjson's ``OffsetSerializeWrapper`` shape (MessageQueue objects as keys). Writes
    are atomic: the new content goes to ``offsets.json.tmp`` and replaces the file by rename, after
    the previous content was saved to ``offsets.json.bak``; reads fall back to the ``.bak`` when the
    file is missing, empty or unreadable. Persisting merges with what the file holds (RocketMQ
    4.9.8+), so queues persisted earlier are kept.

    Deviation from RocketMQ, on purpose: the directory is keyed by the *instance name* (plus
    ``@unit`` when set) rather than the full client id ``ip@instance``, so a changed IP address (or
    pid-based client id) does not lose the offsets.
    """

    FILE_NAME: Final = "offsets.json"

    def __init__(self, group: str, instance_name: str, *, store_dir: str | os.PathLike[str] | None = None,
                 unit_name: str | None = None) -> None:
        super().__init__()
        if not instance_name or any(sep in instance_name for sep in ("/", "\\")) or instance_name in (".", ".."):
            raise MQClientError(f"instance_name {instance_name!r} cannot name a directory")
        if not group or any(sep in group for sep in ("/", "\\")) or group in (".", ".."):
            raise MQClientError(f"group {group!r} cannot name a directory")
        self.group = group
        key = f"{instance_name}@{unit_name}" if unit_name else instance_name
        root = Path(store_dir) if store_dir is not None else DEFAULT_LOCAL_OFFSET_STORE_DIR
        self.store_path = root / key / group / self.FILE_NAME
        self._file_lock = threading.Lock()

    @property
    def backup_path(self) -> Path:
        return self.store_path.with_name(self.FILE_NAME + ".bak")

    @property
    def temp_path(self) -> Path:
        return self.store_path.with_name(self.FILE_NAME + ".tmp")

    # ------------------------------------------------------------------ file I/O

    def read_local_offsets(self) -> dict[MessageQueue, int]:
        """The offsets the file (else its backup) holds; {} when neither is readable."""
        with self._file_lock:
            for path in (self.store_path, self.backup_path):
                table = self._read_file(path)
                if table is not None:
                    return table
        return {}

    @staticmethod
    def _read_file(path: Path) -> dict[MessageQueue, int] | None:
        try:
            content = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("cannot read offsets file %s: %s", path, exc)
            return None
        if not content.strip():
            return None
        try:
            return dict(OffsetSerializeWrapper.decode(content).offset_table)
        except ProtocolError as exc:
            logger.warning("offsets file %s is corrupt (%s); trying the backup", path, exc)
            return None

    def _write(self, table: dict[MessageQueue, int]) -> None:
        data = OffsetSerializeWrapper(offset_table=table).encode(pretty=True)
        path = self.store_path
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.temp_path
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            previous = path.read_bytes()
        except FileNotFoundError:
            previous = None
        if previous:
            backup_temp = self.backup_path.with_name(self.FILE_NAME + ".bak.tmp")
            backup_temp.write_bytes(previous)
            os.replace(backup_temp, self.backup_path)
        os.replace(temp, path)

    def _merge_and_write(self, updates: dict[MessageQueue, int]) -> None:
        with self._file_lock:
            table: dict[MessageQueue, int] = {}
            for path in (self.store_path, self.backup_path):
                found = self._read_file(path)
                if found is not None:
                    table = found
                    break
            table.update(updates)
            self._write(table)

    # ------------------------------------------------------------------ the store

    def load(self) -> None:
        """Read the file into memory (overwriting in-memory values of the same queues)."""
        for mq, offset in self.read_local_offsets().items():
            self.update_offset(mq, offset, False)

    async def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        answer = self.answer_from_memory(mq, read_type)
        if answer is not None:
            return answer
        offset = self.read_local_offsets().get(mq)
        if offset is None:
            return -1
        self.update_offset(mq, offset, False)
        return offset

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Write the in-memory offsets of ``mqs`` into the file, keeping its other entries."""
        wanted = set(mqs)
        if not wanted:
            return
        updates = {mq: offset for mq, offset in self.clone_offset_table().items() if mq in wanted}
        try:
            self._merge_and_write(updates)
        except OSError as exc:
            logger.warning("%s: writing %s failed: %s", self.group, self.store_path, exc)

    async def persist(self, mq: MessageQueue) -> None:
        offset = self.memory_offset(mq)
        if offset is None:
            return
        try:
            self._merge_and_write({mq: offset})
        except OSError as exc:
            logger.warning("%s: writing %s failed: %s", self.group, self.store_path, exc)

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, is_oneway: bool = True) -> None:
        """Broadcasting offsets never go to a broker."""


async def commit_offsets_to_brokers(store: OffsetStore, mqs: Iterable[MessageQueue], group: str) -> list[str]:
    """UPDATE_CONSUMER_OFFSET, each acknowledged, of the in-memory offset of every queue of ``mqs`` that
    has one (a consumer's last commit, at shutdown or `PullConsumer.commit_sync`); the failures, each
    logged, as ``"<queue>: <error>"``."""
    offsets = store.clone_offset_table()
    failures: list[str] = []
    for mq in mqs:
        offset = offsets.get(mq)
        if offset is None:
            continue
        try:
            await store.update_consume_offset_to_broker(mq, offset, False)
        except MQError as exc:
            logger.warning("%s: committing offset %d of %s failed: %s", group, offset, mq, exc)
            failures.append(f"{mq}: {exc}")
    return failures


__all__ = [
    "DEFAULT_LOCAL_OFFSET_STORE_DIR",
    "LocalFileOffsetStore",
    "OffsetStore",
    "ReadOffsetType",
    "RemoteBrokerOffsetStore",
    "commit_offsets_to_brokers",
]
