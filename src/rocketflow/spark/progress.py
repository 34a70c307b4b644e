"""Commit a streaming query's progress to a consumer group as each micro-batch completes.

The source's own ``commit`` hook lags a batch (Spark calls it for batch N only once batch N+1 is
planned, and never for the last one), so a group fed only by it never shows lag 0. A
`StreamingQueryListener` runs in the driver and sees every batch's end offsets as soon as the batch
is done: the group then tracks the query exactly, for ``rocketflow admin consumer-progress``.
Monitoring only: the checkpoint stays the truth for where the query resumes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import orjson
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from rocketflow.spark.connection import get_connection
from rocketflow.spark.options import Offsets, offsets_from_json

logger = logging.getLogger(__name__)


class GroupProgressListener(StreamingQueryListener):
    """Writes each completed batch's end offsets (of our ``rocketmq`` sources) to ``group``.

    ``topics`` limits it to sources reading those topics; ``query_ids`` to those queries (ids as
    strings, ``StreamingQuery.id``). Failures are logged, never raised: a listener must not stop Spark.
    """

    def __init__(self, namesrv: str, group: str, *, topics: Iterable[str] | None = None,
                 query_ids: Iterable[str] | None = None, access_key: str | None = None,
                 secret_key: str | None = None) -> None:
        self.namesrv = namesrv
        self.group = group
        self.topics = frozenset(topics) if topics is not None else None
        self.query_ids = frozenset(query_ids) if query_ids is not None else None
        self.access_key = access_key
        self.secret_key = secret_key
        #: batches whose offsets were written, for tests and logs
        self.committed_batches = 0

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        return None

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        if self.query_ids is not None and str(progress.id) not in self.query_ids:
            return
        offsets: Offsets = {}
        for source in progress.sources:
            offsets.update(self._our_offsets(source.endOffset))
        if not offsets:
            return
        try:
            get_connection(self.namesrv, self.access_key, self.secret_key).commit_group_offsets(self.group, offsets)
            self.committed_batches += 1
        except Exception as exc:  # monitoring must never break the query
            logger.warning("committing batch %s of query %s to group %s failed: %s",
                           progress.batchId, progress.id, self.group, exc)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        return None

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        return None

    def _our_offsets(self, raw: Any) -> Offsets:
        """The source's end offsets if they are a rocketmq source's (of the wanted topics), else empty."""
        if not raw:
            return {}
        try:
            data = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
            offsets = offsets_from_json(data, "end offset")
        except Exception:  # another source's offsets (Kafka's, a file's ...): not ours
            return {}
        if self.topics is not None:
            offsets = {mq: offset for mq, offset in offsets.items() if mq.topic in self.topics}
        return offsets


def track_group_progress(spark: Any, namesrv: str, group: str, **kwargs: Any) -> GroupProgressListener:
    """Add a `GroupProgressListener` to ``spark.streams``; remove it with ``spark.streams.removeListener``."""
    listener = GroupProgressListener(namesrv, group, **kwargs)
    spark.streams.addListener(listener)
    return listener
