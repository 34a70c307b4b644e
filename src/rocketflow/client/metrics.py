"""Prometheus metrics of one client instance, served over HTTP at ``/metrics`` (off unless enabled).

Enable them with the ``metrics_port`` client setting (any producer or consumer keyword) or with
`ClientInstance.enable_metrics`. Each instance has its own `CollectorRegistry`. A collector reads
the consumers' `ConsumerStats`, process queues and rebalance counters when Prometheus scrapes;
the only work added to the hot path is the producer's send RT histogram (one observation per send,
nothing at all while metrics are off).
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rocketflow.client.errors import MQError
from rocketflow.net.metrics_endpoint import MetricsEndpoint
from rocketflow.protocol.bodies import ConsumeStatus
from rocketflow.protocol.message import MessageQueue
from rocketflow.version import __version__

logger = logging.getLogger(__name__)

PREFIX: Final = "rocketflow_client_"
#: Upper bounds (seconds) of the send RT buckets.
SEND_RT_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: How long a scrape waits for the client's loop to list the process queues.
SNAPSHOT_TIMEOUT_SECONDS: Final = 5.0


_T = TypeVar("_T")


class MetricsSource(Protocol):
    """What the metrics read from their client instance (a `ClientInstance`)."""

    @property
    def client_id(self) -> str: ...

    def consumers(self) -> dict[str, Any]: ...

    def in_loop_thread(self) -> bool: ...

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T: ...


class ConsumeCounts(Protocol):
    """A consumer's counts since it started, for one group and topic (`ConsumeTotals`)."""

    @property
    def pulled_msgs(self) -> int: ...

    @property
    def pulls(self) -> int: ...

    @property
    def consume_ok_msgs(self) -> int: ...

    @property
    def consume_failed_msgs(self) -> int: ...

    @property
    def undecodable_dead_lettered(self) -> int: ...

    @property
    def undecodable_skipped(self) -> int: ...


@runtime_checkable
class GroupStats(Protocol):
    """A consumer's statistics (its `ConsumerStats`), read at each scrape."""

    def topics(self, group: str) -> list[str]: ...

    def consume_status(self, group: str, topic: str) -> ConsumeStatus: ...

    def totals(self, group: str, topic: str) -> ConsumeCounts: ...


@dataclass(frozen=True, slots=True)
class ConsumerQueuesSnapshot:
    """Per consumer group: rebalance rounds run and messages/bytes cached per held queue."""

    group: str
    rebalances: int
    #: queue -> (cached messages, cached body bytes)
    cached: dict[MessageQueue, tuple[int, int]]


def consumer_queues_snapshot(consumers: dict[str, Any]) -> list[ConsumerQueuesSnapshot]:
    """Read the process queues and rebalance counts of ``consumers``; call it on the client's loop."""
    snapshots: list[ConsumerQueuesSnapshot] = []
    for group, consumer in sorted(consumers.items()):
        rebalance = getattr(consumer, "rebalance", None)
        table = getattr(rebalance, "process_queue_table", None) or {}
        cached = {queue: (process_queue.msg_count, process_queue.msg_size)
                  for queue, process_queue in list(table.items())}
        snapshots.append(ConsumerQueuesSnapshot(group, int(getattr(rebalance, "rebalance_count", 0)), cached))
    return snapshots


class ClientCollector(Collector):
    """Builds the client's metric families at each scrape."""

    def __init__(self, instance: MetricsSource, send_rt: Histogram, send_failures: Counter) -> None:
        self._instance = instance
        self._send_rt = send_rt
        self._send_failures = send_failures

    def _queues_snapshot(self) -> list[ConsumerQueuesSnapshot] | None:
        instance = self._instance
        consumers = instance.consumers()
        if instance.in_loop_thread():
            return consumer_queues_snapshot(consumers)

        async def on_loop() -> list[ConsumerQueuesSnapshot]:
            return consumer_queues_snapshot(consumers)

        try:
            return instance.run(on_loop(), SNAPSHOT_TIMEOUT_SECONDS)
        except (MQError, RuntimeError) as exc:
            logger.debug("metrics: no process queue snapshot from %s: %s", instance.client_id, exc)
            return None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        instance = self._instance
        info = GaugeMetricFamily(PREFIX + "info", "Client instance identity (always 1).",
                                 labels=["client_id", "version"])
        info.add_metric([instance.client_id, __version__], 1)
        yield info
        yield from self._send_rt.collect()
        yield from self._send_failures.collect()
        yield from consumer_stats_families(
            (group, stats) for group, consumer in sorted(instance.consumers().items())
            if isinstance(stats := getattr(consumer, "consumer_stats", None), GroupStats))
        snapshots = self._queues_snapshot()
        if snapshots is not None:
            yield from queue_families(snapshots)


def consumer_stats_families(groups: Iterable[tuple[str, GroupStats]]) -> Iterator[Metric]:
    """Pull/consume RT, TPS and totals per (group, topic) from the consumers' statistics."""
    labels = ["group", "topic"]
    pull_rt = GaugeMetricFamily(PREFIX + "pull_rt_avg_seconds", "Mean pull round trip (last minute).", labels=labels)
    pull_tps = GaugeMetricFamily(PREFIX + "pull_tps", "Messages pulled per second (last minute).", labels=labels)
    consume_rt = GaugeMetricFamily(PREFIX + "consume_rt_avg_seconds", "Mean listener call time (last minute).",
                                   labels=labels)
    ok_tps = GaugeMetricFamily(PREFIX + "consume_ok_tps", "Messages consumed OK per second (last minute).",
                               labels=labels)
    failed_tps = GaugeMetricFamily(PREFIX + "consume_failed_tps", "Messages whose consumption failed per second "
                                   "(last minute).", labels=labels)
    pulled = CounterMetricFamily(PREFIX + "pulled_messages", "Messages pulled.", labels=labels)
    pulls = CounterMetricFamily(PREFIX + "pulls", "Pulls that found messages.", labels=labels)
    consumed_ok = CounterMetricFamily(PREFIX + "consume_ok_messages", "Messages consumed OK.", labels=labels)
    consumed_failed = CounterMetricFamily(PREFIX + "consume_failed_messages", "Messages whose consumption failed "
                                          "(to be retried).", labels=labels)
    undecodable = CounterMetricFamily(PREFIX + "undecodable_messages", "Pulled records that could not be decoded, "
                                      "by what became of them (dead_lettered or skipped).",
                                      labels=[*labels, "outcome"])
    for group, stats in groups:
        for topic in stats.topics(group):
            values = [group, topic]
            status = stats.consume_status(group, topic)
            totals = stats.totals(group, topic)
            pull_rt.add_metric(values, status.pull_rt / 1000)
            pull_tps.add_metric(values, status.pull_tps)
            consume_rt.add_metric(values, status.consume_rt / 1000)
            ok_tps.add_metric(values, status.consume_ok_tps)
            failed_tps.add_metric(values, status.consume_failed_tps)
            pulled.add_metric(values, totals.pulled_msgs)
            pulls.add_metric(values, totals.pulls)
            consumed_ok.add_metric(values, totals.consume_ok_msgs)
            consumed_failed.add_metric(values, totals.consume_failed_msgs)
            if totals.undecodable_dead_lettered or totals.undecodable_skipped:
                undecodable.add_metric([*values, "dead_lettered"], totals.undecodable_dead_lettered)
                undecodable.add_metric([*values, "skipped"], totals.undecodable_skipped)
    yield from (pull_rt, pull_tps, consume_rt, ok_tps, failed_tps, pulled, pulls, consumed_ok, consumed_failed,
                undecodable)


def queue_families(snapshots: Iterable[ConsumerQueuesSnapshot]) -> Iterator[Metric]:
    """Cached messages/bytes per held queue and rebalance rounds per group."""
    labels = ["group", "topic", "broker_name", "queue_id"]
    cached_messages = GaugeMetricFamily(PREFIX + "cached_messages", "Messages pulled and not yet consumed, per "
                                        "held queue (process queue).", labels=labels)
    cached_bytes = GaugeMetricFamily(PREFIX + "cached_bytes", "Body bytes pulled and not yet consumed, per held "
                                     "queue.", labels=labels)
    rebalances = CounterMetricFamily(PREFIX + "rebalances", "Rebalance rounds run by a consumer group.",
                                     labels=["group"])
    for snapshot in snapshots:
        rebalances.add_metric([snapshot.group], snapshot.rebalances)
        for queue in sorted(snapshot.cached):
            count, size = snapshot.cached[queue]
            values = [snapshot.group, queue.topic, queue.broker_name, str(queue.queue_id)]
            cached_messages.add_metric(values, count)
            cached_bytes.add_metric(values, size)
    yield from (cached_messages, cached_bytes, rebalances)


class ClientMetrics:
    """The registry, collector, send RT histogram and HTTP endpoint of one client instance."""

    def __init__(self, instance: MetricsSource) -> None:
        self.instance = instance
        self.registry = CollectorRegistry(auto_describe=False)
        self.send_rt = Histogram(PREFIX + "send_rt_seconds", "Round trip of successful sends (one broker attempt).",
                                 labelnames=["group", "topic"], buckets=SEND_RT_BUCKETS, registry=None)
        self.send_failures = Counter(PREFIX + "send_failures", "Send attempts that failed (each retry counts).",
                                     labelnames=["group", "topic"], registry=None)
        self.registry.register(ClientCollector(instance, self.send_rt, self.send_failures))
        self.endpoint = MetricsEndpoint(self.registry, "client metrics")

    def observe_send(self, group: str, topic: str, seconds: float) -> None:
        """Record one successful send attempt."""
        self.send_rt.labels(group, topic).observe(seconds)

    def send_failed(self, group: str, topic: str) -> None:
        """Record one failed send attempt."""
        self.send_failures.labels(group, topic).inc()

    @property
    def host(self) -> str:
        """The host ``/metrics`` was last served on ("" before)."""
        return self.endpoint.host

    @property
    def port(self) -> int:
        """The port ``/metrics`` is served on (0 when not serving)."""
        return self.endpoint.port

    @property
    def address(self) -> str | None:
        """``host:port`` of the endpoint, None when not serving."""
        return f"{self.host}:{self.port}" if self.endpoint.serving else None

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``host:port``; raises `OSError` naming the address if it cannot bind."""
        if self.endpoint.serving:
            raise RuntimeError(f"client metrics are already served on {self.address}")
        self.endpoint.serve(port, host)
        logger.info("client %s metrics on http://%s:%d/metrics", self.instance.client_id, host, self.port)

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        self.endpoint.stop()


__all__ = [
    "SEND_RT_BUCKETS",
    "ClientCollector",
    "ClientMetrics",
    "ConsumerQueuesSnapshot",
    "consumer_queues_snapshot",
    "consumer_stats_families",
    "queue_families",
]
