"""Store settings, with RocketMQ 4.9.3's `MessageStoreConfig` defaults."""

from __future__ import annotations

import enum
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

#: RocketMQ's `messageDelayLevel` default: the delays of levels 1..18
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: default of `StoreConfig.index_build_batch` (and of `IndexService`'s ``build_batch``)
DEFAULT_INDEX_BUILD_BATCH = 256
_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class FlushDiskType(enum.Enum):
    """When a put is acknowledged relative to its fsync."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@functools.lru_cache(maxsize=16)
def parse_message_delay_level(text: str) -> tuple[int, ...]:
    """``"1s 5s 1m 2h"`` -> delays in milliseconds, level 1 first; ValueError if malformed."""
    levels: list[int] = []
    for word in text.split():
        match = re.fullmatch(r"(\d+)([smhd])", word)
        if match is None:
            raise ValueError(
                f"message_delay_level: {word!r} is not a delay like '10s', '5m', '2h' or '1d' (in {text!r})")
        levels.append(int(match.group(1)) * _DELAY_UNITS_MS[match.group(2)])
    if not levels:
        raise ValueError("message_delay_level: at least one delay level is needed")
    return tuple(levels)


def _default_root() -> Path:
    return Path.home() / "store"


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # pragma: no cover - non-POSIX
        return 8 * 1024**3


@dataclass(slots=True)
class StoreConfig:
    """Every tunable of the store. Sizes are bytes, intervals milliseconds unless the name says otherwise."""

    store_root: Path = field(default_factory=_default_root)
    #: size of one commit-log segment (`mappedFileSizeCommitLog`)
    commit_log_segment_size: int = 1024 * 1024 * 1024
    #: units (20 bytes each) per consume-queue segment (`mappedFileSizeConsumeQueue` / 20)
    consume_queue_segment_units: int = 300_000
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    #: async flush period of the commit log (`flushIntervalCommitLog`)
    flush_interval_commit_log_ms: int = 500
    #: flush only when at least this many 4 KiB pages are dirty, unless `flush_thorough_interval_ms` passed
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval_ms: int = 10_000
    flush_interval_consume_queue_ms: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval_ms: int = 60_000
    #: how long a SYNC_FLUSH put waits for its fsync (`syncFlushTimeout`)
    sync_flush_timeout_ms: int = 5000
    #: hours a commit-log segment is kept after its last write (`fileReservedTime`)
    file_reserved_time_hours: float = 72
    #: hours of the day (`HH`, `;`-separated) at which expired segments are deleted (`deleteWhen`)
    delete_when: str = "04"
    #: percent of disk use above which the oldest segments are deleted regardless of age
    disk_max_used_space_ratio: int = 75
    #: above this percentage deletion is forced immediately (`diskSpaceCleanForciblyRatio`)
    disk_space_clean_forcibly_ratio: int = 85
    #: above this percentage the disk counts as full and puts are refused until use drops below it
    #: (`diskSpaceWarningLevelRatio`, checked every `clean_resource_interval_ms`)
    disk_space_warning_level_ratio: int = 90
    #: at most this many segments deleted per cleaning pass (`deleteCommitLogFilesInterval` pacing)
    delete_files_batch_max: int = 10
    clean_resource_interval_ms: int = 10_000
    max_message_size: int = 4 * 1024 * 1024
    max_properties_size: int = 32767
    #: hash slots and entries per index file (`maxHashSlotNum`, `maxIndexNum`)
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_index_enable: bool = True
    #: fsync the index with the consume queues every `flush_interval_consume_queue_ms`
    #: (`messageIndexSafe`). Off, as in RocketMQ: an index file is fsynced once it is full, at
    #: shutdown and on `MessageStore.flush`, and the kernel writes the rest back in its own time; a
    #: crash of the process loses nothing, a power loss may lose index entries (queries by key miss
    #: those messages; the messages themselves are safe). Each fsync of the index writes back pages
    #: scattered over its 20 MB slot table, and the key inserts that follow fault on them again.
    message_index_safe: bool = False
    #: index keys are written to the index files in runs of this many (or sooner: on a query, a flush
    #: every `flush_interval_consume_queue_ms`, shutdown); RocketMQ indexes behind the commit log too.
    #: A run is written by the put that completes it, on the broker's event loop, and every message in
    #: flight waits for it: short runs keep that stall short, at the price of numpy's per-call overhead
    #: spread over fewer keys (bench/README.md, "Store: index runs", has the measurements).
    index_build_batch: int = DEFAULT_INDEX_BUILD_BATCH
    #: per-pull transfer caps (`maxTransferBytesOnMessageInMemory` etc.)
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    total_physical_memory: int = field(default_factory=_total_physical_memory)
    default_query_max_num: int = 32
    max_msgs_num_batch: int = 64
    #: verify body CRC of every record scanned during recovery (`checkCRCOnRecover`)
    check_crc_on_recover: bool = True
    #: how many trailing segments a clean restart verifies (RocketMQ: from the third-last)
    recover_normally_last_segments: int = 3
    #: next pulls point at the corrected offset on a slave only when this is on (`offsetCheckInSlave`)
    offset_check_in_slave: bool = False
    #: madvise(DONTNEED) commit-log pages once flushed, so resident memory stays flat as the log grows
    release_flushed_pages: bool = True
    #: master/slave replication (RocketMQ's HA service). A slave reports its commit-log end and a master
    #: sends an empty transfer at least this often (`haSendHeartbeatInterval`)
    ha_send_heartbeat_interval_ms: int = 5000
    #: a replication connection that has received nothing for this long is closed (`haHousekeepingInterval`)
    ha_housekeeping_interval_ms: int = 20_000
    #: most commit-log bytes a master sends in one transfer (`haTransferBatchSize`)
    ha_transfer_batch_size: int = 32 * 1024
    #: a slave further behind than this bytes is not waited for by SYNC_MASTER puts (`haSlaveFallbehindMax`)
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    #: the master's HA address (host:port) a slave replicates from (`haMasterAddress`); unset, the one the
    #: name server returns when the slave registers
    ha_master_address: str | None = None
    #: the port a master's HA service listens on (`haListenPort`): None = the broker's listen port + 1
    #: (RocketMQ's rule; any free port when the listen port is 0), 0 = any free port (the name server
    #: tells slaves the real one)
    ha_listen_port: int | None = None
    #: the store host written into records when a put does not name one
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    #: delays of levels 1..N (`messageDelayLevel`); a SCHEDULE_TOPIC_XXXX record's tags code is its store
    #: time plus the delay of its DELAY level
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL

    def __post_init__(self) -> None:
        self.store_root = Path(self.store_root)
        if self.commit_log_segment_size < 4096:
            raise ValueError(f"commit_log_segment_size too small: {self.commit_log_segment_size}")
        if self.consume_queue_segment_units < 1:
            raise ValueError(f"consume_queue_segment_units must be >= 1: {self.consume_queue_segment_units}")
        if self.max_hash_slot_num < 1 or self.max_index_num < 2:
            raise ValueError("index sizes must be positive (max_index_num >= 2)")
        if self.ha_transfer_batch_size < 1 or self.ha_send_heartbeat_interval_ms < 1 or \
                self.ha_housekeeping_interval_ms < 1:
            raise ValueError("ha_transfer_batch_size and the HA intervals must be positive")
        if self.index_build_batch < 1:
            raise ValueError(f"index_build_batch must be >= 1: {self.index_build_batch}")
        parse_message_delay_level(self.message_delay_level)

    # -- derived paths --------------------------------------------------------------------
    @property
    def commit_log_dir(self) -> Path:
        return self.store_root / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.store_root / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.store_root / "index"

    @property
    def config_dir(self) -> Path:
        return self.store_root / "config"

    @property
    def checkpoint_path(self) -> Path:
        return self.store_root / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.store_root / "abort"

    @property
    def lock_path(self) -> Path:
        return self.store_root / "lock"

    @property
    def consume_queue_segment_size(self) -> int:
        return self.consume_queue_segment_units * 20

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """The delay of each level in milliseconds, level 1 first."""
        return parse_message_delay_level(self.message_delay_level)

    @property
    def is_sync_flush(self) -> bool:
        return self.flush_disk_type is FlushDiskType.SYNC_FLUSH
