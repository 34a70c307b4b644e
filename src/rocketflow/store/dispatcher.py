"""The dispatcher (RocketMQ's ReputMessageService role): commit-log records -> consume queues and index.

Puts dispatch synchronously right after their append; recovery feeds the records it re-reads
from the commit log through the same `dispatch`, which is how consume queues and the index can
always be rebuilt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.sysflag import TRANSACTION_TYPE_MASK, MessageSysFlag
from rocketflow.store.consume_queue import ConsumeQueueTable, units_struct
from rocketflow.store.index import IndexService

log = logging.getLogger(__name__)

_PREPARED: Final = int(MessageSysFlag.TRANSACTION_PREPARED)
_ROLLBACK: Final = int(MessageSysFlag.TRANSACTION_ROLLBACK)


def enters_consume_queue(sys_flag: int) -> bool:
    """Whether a record with `sys_flag` gets a consume-queue unit (not a prepared or rolled-back half)."""
    transaction = sys_flag & TRANSACTION_TYPE_MASK
    return transaction != _PREPARED and transaction != _ROLLBACK


def schedule_tags_code(properties: Mapping[str, str], store_timestamp: int,
                       delay_levels_ms: Sequence[int]) -> int | None:
    """Tags code of a SCHEDULE_TOPIC_XXXX record: its deliver time, store time + the delay of its DELAY level.

    The level is clamped to the highest one (as RocketMQ); None when the record has no usable level.
    """
    text = properties.get(MessageConst.DELAY_TIME_LEVEL)
    if not text or not delay_levels_ms:
        return None
    try:
        level = int(text)
    except ValueError:
        return None
    if level <= 0:
        return None
    return store_timestamp + delay_levels_ms[min(level, len(delay_levels_ms)) - 1]


@dataclass(slots=True)
class DispatchBatch:
    """Consume-queue units and index keys of a batch of stored records, grouped for cheap dispatch.

    ``runs`` maps (topic, queue id) to ``[first queue offset, flat [phys, size, tags code, ...]]``
    with consecutive queue offsets; ``index_keys`` (``b"topic#key"``), ``index_offsets`` (phys) and
    ``index_timestamps`` (store time) are the index entries, in parallel lists.
    """

    runs: dict[tuple[str, int], list[Any]] = field(default_factory=dict)
    index_keys: list[bytes] = field(default_factory=list)
    index_offsets: list[int] = field(default_factory=list)
    index_timestamps: list[int] = field(default_factory=list)
    store_timestamp: int = 0
    end_offset: int = 0
    #: records the batch covers (with those that enter no consume queue)
    record_count: int = 0


#: listener(topic, queue_id, queue_offset, tags_code, store_timestamp), called per dispatched message
DispatchListener = Callable[[str, int, int, int, int], None]
#: listener(topic, queue_id, first_queue_offset, tags_codes, store_timestamp), called per run of one queue
DispatchRunListener = Callable[[str, int, int, Sequence[int], int], None]


class Dispatcher:
    """Builds consume-queue units and index entries for stored records and notifies listeners."""

    def __init__(self, consume_queues: ConsumeQueueTable, index: IndexService | None) -> None:
        self.consume_queues = consume_queues
        self.index = index
        self.listeners: list[DispatchListener] = []
        self.run_listeners: list[DispatchRunListener] = []
        #: commit-log offset just past the last dispatched record
        self.dispatched_offset = 0

    def add_listener(self, listener: DispatchListener) -> None:
        self.listeners = [*self.listeners, listener]

    def add_run_listener(self, listener: DispatchRunListener) -> None:
        self.run_listeners = [*self.run_listeners, listener]

    def dispatch(self, batch: DispatchBatch, *, notify: bool = True) -> None:
        """Write a batch's index entries and consume-queue units, then notify listeners.

        The index goes first: when its run cannot be written (a full disk) the put is refused, and its
        messages must not be readable through their consume queues before a retry dispatches them.
        """
        runs = batch.runs
        if self.index is not None and batch.index_keys:
            self.index.build(batch.index_keys, batch.index_offsets, batch.index_timestamps)
        for (topic, queue_id), (first_offset, values) in runs.items():
            queue = self.consume_queues.find_or_create(topic, queue_id)
            count = len(values) // 3
            queue.put_units(first_offset, units_struct(count).pack(*values), count, values[-3] + values[-2])
        if batch.end_offset > self.dispatched_offset:
            self.dispatched_offset = batch.end_offset
        if notify and self.run_listeners:
            store_timestamp = batch.store_timestamp
            for (topic, queue_id), (first_offset, values) in runs.items():
                tags_codes = values[2::3]
                for run_listener in self.run_listeners:
                    try:
                        run_listener(topic, queue_id, first_offset, tags_codes, store_timestamp)
                    except Exception:  # a listener's bug must not break the store
                        log.exception("dispatch listener failed")
        listeners = self.listeners
        if notify and listeners:
            store_timestamp = batch.store_timestamp
            for (topic, queue_id), (first_offset, values) in runs.items():
                for i in range(len(values) // 3):
                    for listener in listeners:
                        try:
                            listener(topic, queue_id, first_offset + i, values[3 * i + 2], store_timestamp)
                        except Exception:  # a listener's bug must not break the store
                            log.exception("dispatch listener failed")
