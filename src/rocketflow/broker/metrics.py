"""Prometheus metrics of one broker, served over HTTP at ``/metrics`` (off unless ``metrics_port`` is set).

Nothing is counted for the metrics on the hot path: a custom collector reads the broker's own
state when Prometheus scrapes (the put/get counters of `BrokerStats`, the store's queue offsets,
the committed consumer offsets, held pulls, the lock table). Those are read on the broker's event
loop, the thread that changes them. The only addition to the broker's work is the store flush
latency histogram, one observation per commit-log flush.

Each broker has its own `CollectorRegistry`, so several brokers can run in one process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rocketflow.broker.context import BrokerContext
from rocketflow.net.metrics_endpoint import MetricsEndpoint
from rocketflow.version import __version__

logger = logging.getLogger(__name__)

#: Upper bounds (seconds) of the flush latency buckets: page-cache flushes to slow disks.
FLUSH_LATENCY_BUCKETS: Final = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                                2.5, 5.0)
#: How long a scrape waits for the broker's loop to take the snapshot.
SNAPSHOT_TIMEOUT_SECONDS: Final = 5.0
PREFIX: Final = "rocketflow_broker_"


@dataclass(slots=True)
class BrokerSnapshot:
    """The broker state one scrape reports (taken on the broker's loop)."""

    broker_name: str
    cluster: str
    put_messages: int
    put_bytes: int
    put_failures: int
    get_messages: int
    get_bytes: int
    put_tps: float
    get_tps: float
    group_get_messages: dict[str, int]
    group_get_tps: dict[str, float]
    #: (topic, queue id) -> (min offset, max offset)
    queue_offsets: dict[tuple[str, int], tuple[int, int]]
    #: (group, topic, queue id) -> committed offset
    consumer_offsets: dict[tuple[str, str, int], int]
    held_pulls: int
    lock_entries: dict[str, int]
    connections: int
    commit_log_min_offset: int
    commit_log_max_offset: int
    topics: int
    subscription_groups: int
    #: (group, topic) -> messages retention deleted before the group consumed them
    unconsumed_deleted: dict[tuple[str, str], int]


@dataclass(frozen=True, slots=True)
class MetricsSource:
    """What a scrape reads: the broker's parts, and the two counts only its server and pull holder know."""

    ctx: BrokerContext
    #: pulls held by long polling now
    held_pulls: Callable[[], int]
    #: open client connections now
    connections: Callable[[], int]


def take_snapshot(source: MetricsSource) -> BrokerSnapshot:
    """Read everything a scrape reports; call it on the broker's event loop."""
    ctx = source.ctx
    stats = ctx.stats
    store = ctx.store
    # queues that hold or held messages only: configured empty queues (BenchmarkTest alone has 1024)
    # would add thousands of zero series
    queue_offsets = {
        (topic, queue_id): (max(store.get_min_offset_in_queue(topic, queue_id), 0),
                            store.get_max_offset_in_queue(topic, queue_id))
        for topic, queue_id in store.topic_queues()
    }
    consumer_offsets: dict[tuple[str, str, int], int] = {}
    for key, queues in list(ctx.offsets.table.items()):
        topic, separator, group = key.rpartition("@")
        if not separator:
            continue
        for queue_id, offset in list(queues.items()):
            consumer_offsets[(group, topic, queue_id)] = offset
    groups = dict(stats.group_get_total)
    return BrokerSnapshot(
        broker_name=ctx.config.broker_name,
        cluster=ctx.config.cluster,
        put_messages=stats.put_total,
        put_bytes=stats.put_bytes,
        put_failures=stats.put_failures,
        get_messages=stats.get_total,
        get_bytes=stats.get_bytes,
        put_tps=stats.put_tps(),
        get_tps=stats.get_tps(),
        group_get_messages=groups,
        group_get_tps={group: stats.group_get_tps(group) for group in groups},
        queue_offsets=queue_offsets,
        consumer_offsets=consumer_offsets,
        held_pulls=source.held_pulls(),
        lock_entries=ctx.locks.entry_counts(),
        connections=source.connections(),
        commit_log_min_offset=store.min_phy_offset,
        commit_log_max_offset=store.max_phy_offset,
        topics=len(ctx.topics.topics),
        subscription_groups=len(ctx.groups.groups),
        unconsumed_deleted=ctx.unconsumed_deletions.counts(),
    )


class BrokerCollector(Collector):
    """Builds the broker's metric families from a fresh `BrokerSnapshot` at each scrape."""

    def __init__(self, source: MetricsSource, flush_latency: Histogram) -> None:
        self._source = source
        self._flush_latency = flush_latency
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop snapshots are taken on (the broker's); call it from that loop."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def snapshot(self) -> BrokerSnapshot | None:
        """A snapshot taken on the broker's loop; None when the loop does not answer (broker stopping)."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread:
            return take_snapshot(self._source)
        if loop.is_closed():
            return None

        async def on_loop() -> BrokerSnapshot:
            return take_snapshot(self._source)

        try:
            future = asyncio.run_coroutine_threadsafe(on_loop(), loop)
        except RuntimeError:
            return None
        try:
            return future.result(SNAPSHOT_TIMEOUT_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            logger.warning("metrics: the broker loop did not answer within %ss", SNAPSHOT_TIMEOUT_SECONDS)
        except concurrent.futures.CancelledError:
            pass
        except Exception:
            logger.exception("metrics: taking the broker snapshot failed")
        return None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        snapshot = self.snapshot()
        if snapshot is not None:
            yield from snapshot_families(snapshot)
        yield from self._flush_latency.collect()


def snapshot_families(snapshot: BrokerSnapshot) -> Iterator[Metric]:
    """The metric families of one snapshot (see docs/metrics.md)."""
    info = GaugeMetricFamily(PREFIX + "info", "Broker identity (always 1).",
                             labels=["broker_name", "cluster", "version"])
    info.add_metric([snapshot.broker_name, snapshot.cluster, __version__], 1)
    yield info
    for name, documentation, value in (
        ("put_messages", "Messages stored since the broker started.", snapshot.put_messages),
        ("put_bytes", "Commit-log bytes written for stored messages since the broker started.", snapshot.put_bytes),
        ("put_failures", "Sends the store refused since the broker started.", snapshot.put_failures),
        ("get_messages", "Messages returned to pulls since the broker started.", snapshot.get_messages),
        ("get_bytes", "Bytes returned to pulls since the broker started.", snapshot.get_bytes),
    ):
        yield CounterMetricFamily(PREFIX + name, documentation, value=value)
    yield GaugeMetricFamily(PREFIX + "put_tps", "Messages stored per second (last 10 s).", value=snapshot.put_tps)
    yield GaugeMetricFamily(PREFIX + "get_tps", "Messages pulled per second (last 10 s).", value=snapshot.get_tps)
    group_get = CounterMetricFamily(PREFIX + "group_get_messages", "Messages pulled by a consumer group.",
                                    labels=["group"])
    group_tps = GaugeMetricFamily(PREFIX + "group_get_tps", "Messages pulled per second by a consumer group "
                                  "(last 10 s).", labels=["group"])
    for group in sorted(snapshot.group_get_messages):
        group_get.add_metric([group], snapshot.group_get_messages[group])
        group_tps.add_metric([group], snapshot.group_get_tps.get(group, 0.0))
    yield group_get
    yield group_tps
    max_offset = GaugeMetricFamily(PREFIX + "queue_max_offset", "Next logical offset of a queue (messages "
                                   "ever stored in it).", labels=["topic", "queue_id"])
    min_offset = GaugeMetricFamily(PREFIX + "queue_min_offset", "Oldest logical offset still stored in a queue.",
                                   labels=["topic", "queue_id"])
    for (topic, queue_id), (low, high) in sorted(snapshot.queue_offsets.items()):
        labels = [topic, str(queue_id)]
        max_offset.add_metric(labels, high)
        min_offset.add_metric(labels, low)
    yield max_offset
    yield min_offset
    committed = GaugeMetricFamily(PREFIX + "consumer_offset", "Offset a consumer group committed for a queue.",
                                  labels=["group", "topic", "queue_id"])
    lag = GaugeMetricFamily(PREFIX + "consumer_lag", "Messages of a queue a consumer group has not committed "
                            "(queue max offset - committed offset).", labels=["group", "topic", "queue_id"])
    for (group, topic, queue_id), offset in sorted(snapshot.consumer_offsets.items()):
        labels = [group, topic, str(queue_id)]
        committed.add_metric(labels, offset)
        high = snapshot.queue_offsets.get((topic, queue_id), (0, 0))[1]
        lag.add_metric(labels, max(high - offset, 0))
    yield committed
    yield lag
    yield GaugeMetricFamily(PREFIX + "long_poll_waiters", "Pull requests suspended by long polling.",
                            value=snapshot.held_pulls)
    locks = GaugeMetricFamily(PREFIX + "lock_table_entries", "Queue locks held for orderly consumers, by group.",
                              labels=["group"])
    for group in sorted(snapshot.lock_entries):
        locks.add_metric([group], snapshot.lock_entries[group])
    yield locks
    yield GaugeMetricFamily(PREFIX + "connections", "Open client connections.", value=snapshot.connections)
    yield GaugeMetricFamily(PREFIX + "commit_log_min_offset", "Oldest physical offset of the commit log.",
                            value=snapshot.commit_log_min_offset)
    yield GaugeMetricFamily(PREFIX + "commit_log_max_offset", "Physical offset the next record is written at.",
                            value=snapshot.commit_log_max_offset)
    yield GaugeMetricFamily(PREFIX + "topics", "Topics configured on the broker.", value=snapshot.topics)
    yield GaugeMetricFamily(PREFIX + "subscription_groups", "Subscription groups configured on the broker.",
                            value=snapshot.subscription_groups)
    deleted = CounterMetricFamily(PREFIX + "unconsumed_messages_deleted", "Messages retention deleted before a "
                                  "consumer group with an offset on their queue consumed them.",
                                  labels=["group", "topic"])
    for (group, topic), count in sorted(snapshot.unconsumed_deleted.items()):
        deleted.add_metric([group, topic], count)
    yield deleted


class BrokerMetrics:
    """The registry, collector and HTTP endpoint of one broker's metrics."""

    def __init__(self, source: MetricsSource) -> None:
        self.source = source
        self.registry = CollectorRegistry(auto_describe=False)
        self.flush_latency = Histogram(PREFIX + "store_flush_seconds", "Duration of commit-log flushes (fsync).",
                                       buckets=FLUSH_LATENCY_BUCKETS, registry=None)
        self.collector = BrokerCollector(source, self.flush_latency)
        self.registry.register(self.collector)
        self.endpoint = MetricsEndpoint(self.registry, "broker metrics")

    @property
    def port(self) -> int:
        """The port ``/metrics`` is served on (0 when not serving)."""
        return self.endpoint.port

    @property
    def address(self) -> str | None:
        """``host:port`` of the endpoint (the configured ``metrics_host``), None when not serving."""
        if not self.endpoint.serving:
            return None
        return f"{self.source.ctx.config.metrics_host}:{self.endpoint.port}"

    def start(self, port: int | None = None, host: str | None = None) -> None:
        """Bind the collector to the running loop, time store flushes, serve ``/metrics`` on ``host:port``.

        Call it on the broker's loop. Raises `OSError` (with the address in its message) when the port
        cannot be bound.
        """
        if self.endpoint.serving:
            raise RuntimeError("broker metrics are already served")
        config = self.source.ctx.config
        port = config.metrics_port if port is None else port
        host = config.metrics_host if host is None else host
        self.collector.bind_loop(asyncio.get_running_loop())
        self.endpoint.serve(port, host)
        self.source.ctx.store.flush_stats.flush_latency_observer = self.flush_latency.observe
        logger.info("broker %s metrics on http://%s:%d/metrics", config.broker_name, host, self.port)

    def stop(self) -> None:
        """Stop serving and stop timing flushes (blocks briefly: call it off the loop)."""
        self.source.ctx.store.flush_stats.flush_latency_observer = None
        self.endpoint.stop()


__all__ = [
    "FLUSH_LATENCY_BUCKETS",
    "BrokerCollector",
    "BrokerMetrics",
    "BrokerSnapshot",
    "MetricsSource",
    "snapshot_families",
    "take_snapshot",
]
