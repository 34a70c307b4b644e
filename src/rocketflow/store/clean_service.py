"""Retention: delete old commit-log segments, then the consume-queue and index files they orphan."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rocketflow.store.commit_log import CommitLog
from rocketflow.store.config import StoreConfig
from rocketflow.store.consume_queue import ConsumeQueueTable
from rocketflow.store.flush import ServiceThread
from rocketflow.store.index import IndexService

log = logging.getLogger(__name__)

#: disk_usage(path) -> percent (0..100) of the file system holding `path` that is in use
DiskUsage = Callable[[Path], float]


@dataclass(frozen=True, slots=True)
class QueueTrim:
    """Retention moved a queue's minimum logical offset: messages ``old_min .. new_min - 1`` are gone."""

    topic: str
    queue_id: int
    old_min: int
    new_min: int


#: listener(trims, reason): called from the clean thread after a pass deleted messages of queues
TrimListener = Callable[[list[QueueTrim], str], object]


def disk_usage_percent(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return 100.0 * usage.used / usage.total if usage.total else 0.0


def is_delete_hour(delete_when: str, now_ms: int) -> bool:
    """Whether the local hour of `now_ms` is one of `delete_when`'s `HH` entries (`;`-separated)."""
    hour = datetime.fromtimestamp(now_ms / 1000).strftime("%H")
    return any(part.strip() == hour for part in delete_when.split(";"))


class CleanService(ServiceThread):
    """RocketMQ's CleanCommitLogService + CleanConsumeQueueService.

    Expired segments (last written more than `file_reserved_time_hours` ago) are deleted at the
    `delete_when` hour, or at any time once disk use passes `disk_max_used_space_ratio`; past
    `disk_space_clean_forcibly_ratio` the oldest segments go even if not expired. The last segment
    is never deleted. Consume queues and index files below the new minimum offset follow.
    """

    name = "clean"

    def __init__(self, config: StoreConfig, commit_log: CommitLog, consume_queues: ConsumeQueueTable,
                 index: IndexService, disk_usage: DiskUsage = disk_usage_percent) -> None:
        super().__init__(config.clean_resource_interval_ms / 1000)
        self.config = config
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index
        self.disk_usage = disk_usage
        self.manual_delete_requested = False
        #: disk use was above `disk_space_warning_level_ratio` at the last check: the store refuses puts
        self.disk_full = False
        #: percent of the store's disk in use at the last check
        self.disk_used_percent = 0.0
        #: why the last pass deleted segments: "expired", "manual" or "forced ..." (disk over the forcible ratio)
        self.last_reason = ""
        #: told which queues lost messages after each pass that deleted segments (see `QueueTrim`)
        self.trim_listeners: list[TrimListener] = []

    def run_once(self) -> None:
        self.clean()

    def clean(self, now_ms: int | None = None) -> int:
        """One pass: delete expired segments, then orphaned consume-queue/index files; returns segments deleted."""
        listeners = self.trim_listeners
        before = {(queue.topic, queue.queue_id): queue.min_offset for queue in self.consume_queues} if listeners \
            else {}
        deleted = self.delete_expired_commit_log(now_ms)
        self.clean_consume_queues()
        if deleted and listeners:
            trims = [QueueTrim(queue.topic, queue.queue_id, before[(queue.topic, queue.queue_id)], queue.min_offset)
                     for queue in self.consume_queues
                     if queue.min_offset > before.get((queue.topic, queue.queue_id), queue.min_offset)]
            for listener in listeners:
                try:
                    listener(trims, self.last_reason)
                except Exception:
                    log.exception("retention listener failed")
        return deleted

    def delete_expired_commit_log(self, now_ms: int | None = None) -> int:
        config = self.config
        now = int(time.time() * 1000) if now_ms is None else now_ms
        time_up = is_delete_hour(config.delete_when, now)
        try:
            usage = self.disk_usage(config.store_root)
        except OSError:
            usage = 0.0
        self._check_disk_full(usage)
        space_full = usage > config.disk_max_used_space_ratio
        clean_at_once = usage > config.disk_space_clean_forcibly_ratio
        manual = self.manual_delete_requested
        if not (time_up or space_full or manual):
            return 0
        self.manual_delete_requested = False
        reserved_ms = int(config.file_reserved_time_hours * 3600 * 1000)
        files = self.commit_log.files.files
        count = 0
        for mapped in files[:-1]:
            if count >= config.delete_files_batch_max:
                break
            if now >= mapped.last_modified_ms + reserved_ms or clean_at_once:
                count += 1
            else:
                break
        if count:
            if any(now < mapped.last_modified_ms + reserved_ms for mapped in files[:count]):
                self.last_reason = (f"forced: disk {usage:.1f}% used, over diskSpaceCleanForciblyRatio "
                                    f"{config.disk_space_clean_forcibly_ratio}%")
            else:
                self.last_reason = "manual" if manual and not (time_up or space_full) else "expired"
            removed = self.commit_log.files.delete_first(count)
            log.info("retention deleted %d commit-log segments (%s): %s", len(removed), self.last_reason,
                     [m.path.name for m in removed])
        return count

    def _check_disk_full(self, usage: float) -> None:
        self.disk_used_percent = usage
        full = usage > self.config.disk_space_warning_level_ratio
        if full and not self.disk_full:
            log.error("disk of %s is %.1f%% used, above diskSpaceWarningLevelRatio %d%%: refusing puts",
                      self.config.store_root, usage, self.config.disk_space_warning_level_ratio)
        elif self.disk_full and not full:
            log.warning("disk of %s is %.1f%% used again: accepting puts", self.config.store_root, usage)
        self.disk_full = full

    def clean_consume_queues(self) -> None:
        min_phys = self.commit_log.min_offset
        for queue in self.consume_queues:
            queue.delete_expired(min_phys)
        self.index.delete_expired(min_phys)
