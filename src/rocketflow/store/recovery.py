"""Bringing a store's files back in line when it starts: the commit log's valid end, the consume queues and
index behind it, and the next queue offsets.

After a clean shutdown only the last few segments are checked; after a crash (the abort marker was
left behind) the walk starts at the checkpoint's segment and re-dispatches every record it passes,
then consume queues that lag the commit log (one deleted, say) are rebuilt from it.
docs/design/store.md, "Recovery", gives the rules.
"""

from __future__ import annotations

import logging

from rocketflow.store.commit_log import CommitLog
from rocketflow.store.config import StoreConfig
from rocketflow.store.consume_queue import ConsumeQueueTable
from rocketflow.store.dispatcher import DispatchBatch, Dispatcher
from rocketflow.store.index import IndexService

log = logging.getLogger(__name__)


def recover(config: StoreConfig, commit_log: CommitLog, consume_queues: ConsumeQueueTable, index: IndexService,
            dispatcher: Dispatcher, recover_from_offset: int, last_exit_ok: bool) -> None:
    """Recover loaded files: cut the commit log after its last valid record, consume queues and index at the
    same place, re-dispatch what they lack, and rebuild the next queue offsets.

    ``recover_from_offset`` is the checkpoint's (where a crash recovery starts walking).
    """

    def dispatch_recovered(batch: DispatchBatch) -> None:
        # no listeners: no pull waits for these records yet
        dispatcher.dispatch(batch, notify=False)

    for queue in consume_queues:
        queue.recover(check_units=not last_exit_ok)
    files = commit_log.files.files
    if not files:
        end = 0
    elif last_exit_ok:
        # clean shutdown: verify the last few segments only
        first_checked = files[max(0, len(files) - config.recover_normally_last_segments)]
        end = commit_log.scan(first_checked.file_from_offset, config.check_crc_on_recover, None)
    else:
        start = _abnormal_recovery_start(commit_log, recover_from_offset)
        log.warning("store %s did not shut down cleanly: recovering from commit-log offset %d",
                    config.store_root, start)
        for queue in consume_queues:
            queue.truncate_dirty(start)
        end = commit_log.scan(start, config.check_crc_on_recover, dispatch_recovered, after_crash=True)
    commit_log.set_max_offset(end)
    for queue in consume_queues:
        queue.truncate_dirty(end)
    index.recovered(end)
    # rebuild consume queues that lag the commit log (e.g. consumequeue/ was deleted)
    dispatch_from = max((queue.max_physic_offset for queue in consume_queues), default=0)
    dispatch_from = max(dispatch_from, commit_log.min_offset)
    if dispatch_from < end:
        log.info("re-dispatching commit log from %d to %d", dispatch_from, end)
        # `dispatch_from` may be mid-segment (a consume queue's end): walk from the segment start, dispatching
        # only records at or after it; units already present are skipped by the queues
        segment_start = max(dispatch_from - dispatch_from % commit_log.segment_size, commit_log.min_offset)
        commit_log.scan(segment_start, False, dispatch_recovered, end_offset=end, dispatch_from=dispatch_from)
    dispatcher.dispatched_offset = end
    rebuild_topic_queue_table(commit_log, consume_queues)


def _abnormal_recovery_start(commit_log: CommitLog, recover_from_offset: int) -> int:
    """The segment a crash recovery walks from: the checkpoint's, within the segments there are."""
    files = commit_log.files.files
    segment_size = commit_log.segment_size
    start = recover_from_offset - recover_from_offset % segment_size
    start = max(start, files[0].file_from_offset)
    return min(start, files[-1].file_from_offset)


def rebuild_topic_queue_table(commit_log: CommitLog, consume_queues: ConsumeQueueTable) -> None:
    """The commit log's next queue offsets from the consume queues' ends (each queue's min offset corrected
    to what the commit log still holds)."""
    min_phys = commit_log.min_offset
    table: dict[tuple[str, int], int] = {}
    for queue in consume_queues:
        table[(queue.topic, queue.queue_id)] = queue.max_offset
        queue.correct_min_offset(min_phys)
    commit_log.topic_queue_table = table


__all__ = ["rebuild_topic_queue_table", "recover"]
