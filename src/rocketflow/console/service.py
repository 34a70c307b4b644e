"""`ConsoleService`: the console's reads and writes, through one `Admin`, off the web server's event loop.

Every `Admin` call blocks its thread, so each runs in a worker thread (at most `ADMIN_THREADS` at
once); what pages poll (brokers, topics, groups, a group's progress) is cached for half the refresh
period and computed once however many pages ask at the same time. `LagHistory` keeps the lag samples
of the groups whose chart someone looked at recently, taken by `ConsoleService.sample_lag`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import anyio
import anyio.to_thread

from rocketflow.client import MQBrokerError, MQClientError, MQError
from rocketflow.client.admin import (
    Admin,
    ConsumeMessageDirectlyResult,
    ConsumerProgress,
    QueueStats,
    topic_kind,
)
from rocketflow.console.settings import ConsoleSettings
from rocketflow.protocol.message import MessageExt

if TYPE_CHECKING:
    from rocketflow.protocol.bodies import SubscriptionGroupConfig

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Admin calls running at once (each holds a worker thread while it waits for the cluster).
ADMIN_THREADS: Final = 8
#: A watched group's lag is sampled while its chart was fetched within this many seconds.
WATCH_SECONDS: Final = 120.0
#: Groups RocketMQ's own tools and brokers use (``MixAll``), hidden from the group list unless asked.
SYSTEM_GROUPS: Final = frozenset({
    "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER", "SELF_TEST_P_GROUP",
    "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL",
    "CID_RMQ_SYS_TRANS", "CID_SYS_RMQ_TRANS", "rocketflow_admin_producer",
})
DLQ_PREFIX: Final = "%DLQ%"
RETRY_PREFIX: Final = "%RETRY%"


def is_system_group(name: str) -> bool:
    return name in SYSTEM_GROUPS or name.startswith("CID_RMQ_SYS_")


# --------------------------------------------------------------------------- views


@dataclass(frozen=True, slots=True)
class BrokerRow:
    """One broker address as the cluster page shows it (``error`` when its runtime info failed)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    version: str = ""
    role: str = ""
    put_tps: float = 0.0
    get_tps: float = 0.0
    disk_ratio: float | None = None
    capacity: str = ""
    put_today: str = ""
    get_today: str = ""
    runtime: str = ""
    error: str | None = None

    @property
    def disk_percent(self) -> float | None:
        return None if self.disk_ratio is None or self.disk_ratio < 0 else round(self.disk_ratio * 100, 1)


@dataclass(frozen=True, slots=True)
class ClusterView:
    namesrvs: list[str]
    clusters: list[str]
    brokers: list[BrokerRow]


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    kind: str


@dataclass(frozen=True, slots=True)
class RouteRow:
    """One broker of a topic's route with its queue numbers and permission."""

    broker_name: str
    addrs: dict[int, str]
    read_queues: int
    write_queues: int
    perm: int


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    kind: str
    routes: list[RouteRow]
    queues: list[QueueStats]
    order_conf: str | None

    @property
    def total_messages(self) -> int:
        return sum(max(0, queue.max_offset - queue.min_offset) for queue in self.queues)

    @property
    def last_update(self) -> int:
        return max((queue.last_update_timestamp for queue in self.queues), default=0)


@dataclass(frozen=True, slots=True)
class GroupRow:
    """A subscription group with its live figures (``error`` when its progress could not be read)."""

    name: str
    system: bool
    consume_enable: bool
    broadcast: bool
    retry_max_times: int
    members: int = 0
    topics: int = 0
    lag: int = 0
    tps: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class MemberRow:
    client_id: str
    addr: str
    language: str
    version: int


@dataclass(frozen=True, slots=True)
class SubscriptionRow:
    topic: str
    expression: str
    expression_type: str


@dataclass(frozen=True, slots=True)
class GroupView:
    name: str
    members: list[MemberRow]
    subscriptions: list[SubscriptionRow]
    consume_type: str
    message_model: str
    members_error: str | None
    progress: ConsumerProgress | None
    progress_error: str | None

    @property
    def topics(self) -> list[str]:
        names = {queue.topic for queue in self.progress.queues} if self.progress is not None else set()
        names.update(sub.topic for sub in self.subscriptions)
        return sorted(names, key=lambda name: (name.startswith(RETRY_PREFIX), name))


@dataclass(frozen=True, slots=True)
class DlqRow:
    topic: str
    group: str
    messages: int
    error: str | None = None


@dataclass(slots=True)
class LagSample:
    at: float
    total: int
    by_topic: dict[str, int]


@dataclass(slots=True)
class LagHistory:
    """Lag samples of the groups whose chart was asked for within `WATCH_SECONDS` (the newest ``max_points``)."""

    max_points: int
    samples: dict[str, deque[LagSample]] = field(default_factory=dict)
    watched: dict[str, float] = field(default_factory=dict)

    def watch(self, group: str) -> None:
        self.watched[group] = time.monotonic()

    def watched_groups(self) -> list[str]:
        cutoff = time.monotonic() - WATCH_SECONDS
        for group in [name for name, seen in self.watched.items() if seen < cutoff]:
            del self.watched[group]
        return sorted(self.watched)

    def add(self, progress: ConsumerProgress, at: float | None = None) -> None:
        by_topic: dict[str, int] = {}
        for queue in progress.queues:
            by_topic[queue.topic] = by_topic.get(queue.topic, 0) + queue.lag
        points = self.samples.setdefault(progress.group, deque(maxlen=self.max_points))
        points.append(LagSample(time.time() if at is None else at, progress.total_lag, by_topic))

    def series(self, group: str) -> dict[str, Any]:
        """uPlot's shape: ``t`` (epoch seconds) and one value list per series (total first, then each topic)."""
        points = list(self.samples.get(group, ()))
        topics = sorted({topic for point in points for topic in point.by_topic})
        return {
            "t": [round(point.at, 3) for point in points],
            "series": [{"label": "total", "values": [point.total for point in points]}] + [
                {"label": topic, "values": [point.by_topic.get(topic) for point in points]} for topic in topics],
        }


# --------------------------------------------------------------------------- cache


class TtlCache:
    """Values by key for a time; concurrent askers of a missing key share one computation.

    Use it on one event loop. A computation is a task of its own, so an asker that goes away (a
    closed page) does not cancel it for the others; failures are not cached.
    """

    def __init__(self) -> None:
        self._values: dict[Hashable, tuple[float, Any]] = {}
        self._pending: dict[Hashable, asyncio.Task[Any]] = {}

    async def get(self, key: Hashable, ttl: float, compute: Callable[[], Awaitable[_T]]) -> _T:
        hit = self._values.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return cast(_T, hit[1])
        task = self._pending.get(key)
        if task is None:
            task = asyncio.ensure_future(compute())
            self._pending[key] = task
            task.add_done_callback(functools.partial(self._settle, key, ttl))
        return cast(_T, await asyncio.shield(task))

    def _settle(self, key: Hashable, ttl: float, task: asyncio.Task[Any]) -> None:
        if self._pending.get(key) is task:
            del self._pending[key]
        if task.cancelled() or task.exception() is not None:  # retrieving the exception keeps asyncio quiet
            return
        if len(self._values) > 4096:
            now = time.monotonic()
            self._values = {name: entry for name, entry in self._values.items() if entry[0] > now}
        self._values[key] = (time.monotonic() + ttl, task.result())

    def invalidate(self) -> None:
        """Forget every value (after a write)."""
        self._values.clear()


# --------------------------------------------------------------------------- the service


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class ConsoleService:
    """The console's view of one cluster; `start` before use, `close` after."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.admin = Admin(settings.namesrv, timeout=settings.timeout, **settings.admin_settings())
        self.cache = TtlCache()
        self.lag = LagHistory(settings.lag_points)
        self._limiter: anyio.CapacityLimiter | None = None

    @property
    def ttl(self) -> float:
        return self.settings.refresh_seconds / 2

    def start(self) -> None:
        self.admin.start()

    def close(self) -> None:
        self.admin.shutdown()

    async def call(self, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``func(*args, **kwargs)`` in a worker thread."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(ADMIN_THREADS)
        return await anyio.to_thread.run_sync(functools.partial(func, *args, **kwargs), limiter=self._limiter)

    async def _cached(self, key: Hashable, func: Callable[..., _T], *args: Any) -> _T:
        return await self.cache.get(key, self.ttl, lambda: self.call(func, *args))

    # ------------------------------------------------------------------ cluster

    async def cluster(self) -> ClusterView:
        return await self._cached("cluster", self._cluster_sync)

    def _cluster_sync(self) -> ClusterView:
        info = self.admin.cluster_info()
        rows: list[BrokerRow] = []
        for cluster in sorted(info.cluster_addr_table):
            for name in sorted(info.cluster_addr_table[cluster]):
                broker = info.broker_addr_table.get(name)
                if broker is None:
                    continue
                for broker_id, addr in sorted(broker.broker_addrs.items()):
                    rows.append(self._broker_row(cluster, name, broker_id, addr))
        return ClusterView(self.admin.namesrv_addresses, sorted(info.cluster_addr_table), rows)

    def _broker_row(self, cluster: str, name: str, broker_id: int, addr: str) -> BrokerRow:
        try:
            table = self.admin.broker_runtime_info(addr)
        except MQError as exc:
            return BrokerRow(cluster, name, broker_id, addr, error=_error_text(exc))
        return BrokerRow(
            cluster, name, broker_id, addr, version=table.get("brokerVersionDesc", ""),
            role=table.get("brokerRole", "MASTER" if broker_id == 0 else "SLAVE"),
            put_tps=_first_number(table.get("putTps")), get_tps=_first_number(table.get("getTransferedTps")),
            disk_ratio=_optional_number(table.get("commitLogDiskRatio")),
            capacity=table.get("commitLogDirCapacity", ""), put_today=table.get("msgPutTotalTodayNow", ""),
            get_today=table.get("msgGetTotalTodayNow", ""), runtime=table.get("runtime", ""))

    async def broker_config(self, addr: str) -> dict[str, str]:
        from rocketflow.acl import redact_settings

        known = {row.addr for row in (await self.cluster()).brokers}
        if addr not in known:
            raise MQClientError(f"no broker at {addr!r} in the cluster (known: {', '.join(sorted(known))})")
        settings = await self.call(self.admin.broker_config, addr)
        return {key: str(value) for key, value in sorted(redact_settings(settings).items())}

    # ------------------------------------------------------------------ topics

    async def topics(self) -> list[TopicRow]:
        return await self._cached("topics", self._topics_sync)

    def _topics_sync(self) -> list[TopicRow]:
        names = self.admin.topic_list()
        info = self.admin.cluster_info()
        reserved = set(info.cluster_addr_table) | set(info.broker_addr_table)
        return [TopicRow(name, topic_kind(name, reserved)) for name in names]

    async def topic(self, topic: str) -> TopicView:
        return await self._cached(("topic", topic), self._topic_sync, topic)

    def _topic_sync(self, topic: str) -> TopicView:
        route = self.admin.topic_route(topic)
        addrs = {broker.broker_name: dict(broker.broker_addrs) for broker in route.broker_datas}
        routes = [RouteRow(data.broker_name, addrs.get(data.broker_name, {}), data.read_queue_nums,
                           data.write_queue_nums, data.perm)
                  for data in sorted(route.queue_datas, key=lambda data: data.broker_name)]
        stats = self.admin.topic_stats(topic)
        return TopicView(topic, topic_kind(topic), routes, stats, route.order_topic_conf)

    # ------------------------------------------------------------------ groups

    async def groups(self) -> list[GroupRow]:
        return await self.cache.get("groups", self.ttl, self._groups)

    async def _groups(self) -> list[GroupRow]:
        configs = await self.call(self._group_configs)
        rows = [GroupRow(config.group_name, is_system_group(config.group_name), config.consume_enable,
                         config.consume_broadcast_enable, config.retry_max_times) for config in configs]
        return list(await asyncio.gather(*(self._group_row(row) for row in rows)))

    def _group_configs(self) -> list[SubscriptionGroupConfig]:
        configs: dict[str, SubscriptionGroupConfig] = {}
        for cluster in sorted(self.admin.cluster_info().cluster_addr_table):
            for config in self.admin.group_list(cluster=cluster):
                configs.setdefault(config.group_name, config)
        return [configs[name] for name in sorted(configs)]

    async def _group_row(self, row: GroupRow) -> GroupRow:
        if row.system:
            return row
        try:
            progress = await self.progress(row.name)
        except MQError as exc:
            return dataclasses.replace(row, error=_error_text(exc))
        members = {client for queue in progress.queues for client in queue.client_id.split(",") if client}
        return dataclasses.replace(row, members=len(members), topics=len({queue.topic for queue in progress.queues}),
                                   lag=progress.total_lag, tps=progress.consume_tps)

    async def progress(self, group: str) -> ConsumerProgress:
        return await self._cached(("progress", group), self.admin.consumer_progress, group)

    async def group(self, group: str) -> GroupView:
        members: list[MemberRow] = []
        subscriptions: list[SubscriptionRow] = []
        consume_type = message_model = ""
        members_error: str | None = None
        try:
            connection = await self._cached(("connections", group), self.admin.consumer_connections, group)
        except MQBrokerError as exc:
            members_error = exc.remark or _error_text(exc)
        except MQError as exc:
            members_error = _error_text(exc)
        else:
            members = [MemberRow(item.client_id, item.client_addr, item.language.name, item.version)
                       for item in sorted(connection.connection_set, key=lambda item: item.client_id)]
            subscriptions = [SubscriptionRow(sub.topic, sub.sub_string, sub.expression_type)
                             for sub in sorted(connection.subscription_table.values(), key=lambda sub: sub.topic)]
            consume_type = connection.consume_type.name if connection.consume_type is not None else ""
            message_model = connection.message_model.name if connection.message_model is not None else ""
        progress: ConsumerProgress | None = None
        progress_error: str | None = None
        try:
            progress = await self.progress(group)
        except MQError as exc:
            progress_error = _error_text(exc)
        return GroupView(group, members, subscriptions, consume_type, message_model, members_error, progress,
                         progress_error)

    async def lag_series(self, group: str) -> dict[str, Any]:
        """The group's lag history (a first sample is taken when there is none); marks the group watched."""
        self.lag.watch(group)
        if group not in self.lag.samples:
            self.lag.add(await self.progress(group))
        return self.lag.series(group)

    async def sample_lag(self) -> None:
        """One lag sample of every watched group (a failing group is logged and skipped)."""
        for group in self.lag.watched_groups():
            try:
                self.lag.add(await self.progress(group))
            except MQError as exc:
                logger.info("lag sample of %s failed: %s", group, exc)

    async def run_lag_sampler(self) -> None:
        """Sample the watched groups every refresh period, until cancelled."""
        while True:
            await asyncio.sleep(self.settings.refresh_seconds)
            await self.sample_lag()

    # ------------------------------------------------------------------ messages

    async def message(self, msg_id: str, topic: str | None) -> MessageExt:
        return await self.call(self.admin.view_message, msg_id, topic=topic)

    async def messages_by_key(self, topic: str, key: str, begin_ms: int, end_ms: int,
                              max_num: int) -> list[MessageExt]:
        return await self.call(self.admin.query_messages, topic, key, begin_ms=begin_ms, end_ms=end_ms,
                               max_num=max_num)

    async def messages_by_time(self, topic: str, begin_ms: int, end_ms: int, *, broker_name: str | None,
                               queue_id: int | None, max_num: int) -> list[MessageExt]:
        return await self.call(self.admin.messages_by_time, topic, begin_ms, end_ms, broker_name=broker_name,
                               queue_id=queue_id, max_num=max_num)

    async def trace(self, msg_id: str) -> tuple[list[Any], str | None]:
        """The message's trace records, or why there are none (tracing off: no trace topic)."""
        try:
            return await self.call(self.admin.message_trace, msg_id), None
        except MQClientError as exc:
            return [], _error_text(exc)

    async def dlq(self) -> list[DlqRow]:
        return await self._cached("dlq", self._dlq_sync)

    def _dlq_sync(self) -> list[DlqRow]:
        rows: list[DlqRow] = []
        for name in self.admin.topic_list():
            if not name.startswith(DLQ_PREFIX):
                continue
            group = name[len(DLQ_PREFIX):]
            try:
                stats = self.admin.topic_stats(name)
            except MQError as exc:
                rows.append(DlqRow(name, group, 0, _error_text(exc)))
                continue
            rows.append(DlqRow(name, group, sum(max(0, row.max_offset - row.min_offset) for row in stats)))
        return rows

    # ------------------------------------------------------------------ writes

    async def write(self, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """A write through the admin; the cached views are dropped after it."""
        try:
            return await self.call(func, *args, **kwargs)
        finally:
            self.cache.invalidate()

    async def resend(self, group: str, msg_id: str, client_id: str | None,
                     topic: str | None) -> ConsumeMessageDirectlyResult:
        return await self.write(self.admin.consume_message_directly, group, msg_id, client_id=client_id,
                                topic=topic)


def _first_number(text: str | None) -> float:
    """A runtime-info rate: Java brokers report three windows ("10s 60s 600s"); the first one."""
    value = _optional_number(text.split()[0] if text and text.split() else None)
    return 0.0 if value is None else value


def _optional_number(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


__all__ = [
    "ADMIN_THREADS",
    "SYSTEM_GROUPS",
    "BrokerRow",
    "ClusterView",
    "ConsoleService",
    "DlqRow",
    "GroupRow",
    "GroupView",
    "LagHistory",
    "LagSample",
    "MemberRow",
    "RouteRow",
    "SubscriptionRow",
    "TopicRow",
    "TopicView",
    "TtlCache",
    "is_system_group",
]
