"""`Admin`: the typed operator API behind ``rocketflow admin`` (RocketMQ's ``DefaultMQAdminExt``).

```python
with Admin("127.0.0.1:9876") as admin:
    admin.create_topic("Orders", read_queue_nums=8, write_queue_nums=8)
    progress = admin.consumer_progress("order-consumers")
    print(progress.total_lag, [queue.client_id for queue in progress.queues])
    admin.reset_offset("order-consumers", "Orders", EARLIEST)
```

It talks to any RocketMQ 4.x name server and its brokers with the ordinary request codes, on its
own `ClientInstance` (one event loop thread; every method blocks the calling thread, so do not
call them on that loop). Errors: `MQClientError` for bad input or a missing topic/message,
`MQBrokerError` (with the server's code and remark) when a server refuses, `MQRemotingError`
subclasses when one cannot be reached.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import queue
import time
import warnings
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Final, TypeVar

from rocketflow.client.api import ADMIN_RPC_TIMEOUT, PullStatus, SendResult, process_pull_result
from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQBrokerError, MQClientError, MQError, MQRemotingError
from rocketflow.client.instance import ClientInstance
from rocketflow.client.trace import TraceRecord, decode_trace_data
from rocketflow.protocol.bodies import (
    ClusterInfo,
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStats,
    KVTable,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicFilterType,
    TopicRouteData,
    WireBody,
)
from rocketflow.protocol.ids import InvalidMessageIdError, decode_offset_msg_id
from rocketflow.protocol.message import Message, MessageExt, MessageQueue
from rocketflow.protocol.names import (
    TRACE_TOPIC,
    InvalidNameError,
    PermName,
    is_dlq_topic,
    is_retry_topic,
    is_system_topic,
    retry_topic,
    validate_group,
    validate_topic,
)
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import ROCKETMQ_VERSION, RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    CommandHeader,
    DeleteKVConfigRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    PullMessageRequestHeader,
    PutKVConfigRequestHeader,
)

logger = logging.getLogger("rocketflow.client.admin")

_T = TypeVar("_T")
_BodyT = TypeVar("_BodyT", bound=WireBody)

#: The group the admin tools pull and query as (RocketMQ's ``MixAll.TOOLS_CONSUMER_GROUP``).
TOOLS_CONSUMER_GROUP: Final = "TOOLS_CONSUMER"
#: The producer group of `Admin.send`.
ADMIN_PRODUCER_GROUP: Final = "rocketflow_admin_producer"
#: Name-server KV namespace of ordered topics' ``brokerName:queueNums;...`` configuration.
ORDER_TOPIC_CONFIG_NAMESPACE: Final = "ORDER_TOPIC_CONFIG"
#: ``reset_offset`` timestamps with a special meaning: the first retained message / the end of each queue.
EARLIEST: Final = 0
LATEST: Final = -1
#: mqadmin's defaults for new topics and for message queries.
DEFAULT_QUEUE_NUMS: Final = 8
DEFAULT_PERM: Final = int(PermName.READ | PermName.WRITE)
#: the message types of RocketMQ 5's topics (``create_topic(message_type=...)``)
MESSAGE_TYPES: Final = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")
DEFAULT_QUERY_MAX_NUM: Final = 64
MASTER_ID: Final = 0

_instance_counter = itertools.count(1)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One broker address of the cluster and what its GET_BROKER_RUNTIME_INFO says (``error`` if it failed)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    version: str = ""
    put_tps: float = 0.0
    get_tps: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """GET_TOPIC_STATS_INFO of one queue (``last_update_timestamp``: store time of its last message, ms)."""

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """A consumer group's progress on one queue."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    client_id: str
    last_timestamp: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


@dataclass(frozen=True, slots=True)
class ConsumerProgress:
    """A consumer group's progress on every queue it has offsets for, with its consume TPS."""

    group: str
    queues: list[QueueProgress] = field(default_factory=list)
    consume_tps: float = 0.0

    @property
    def total_lag(self) -> int:
        return sum(queue.lag for queue in self.queues)

    @property
    def broker_offset_total(self) -> int:
        return sum(queue.broker_offset for queue in self.queues)

    @property
    def consumer_offset_total(self) -> int:
        return sum(queue.consumer_offset for queue in self.queues)


# --------------------------------------------------------------------------- helpers


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds of ``text``: an integer (ms), ``now`` or an ISO 8601 time (local time if no zone).

    Raises `MQClientError` naming the accepted forms.
    """
    value = text.strip()
    if value.lower() == "now":
        return time.time_ns() // 1_000_000
    if value.lstrip("-").isdigit():
        millis = int(value)
        if millis < 0:
            raise MQClientError(f"a timestamp cannot be negative, got {text!r}")
        return millis
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise MQClientError(f"invalid timestamp {text!r}: expected epoch milliseconds, 'now' or an ISO 8601 time "
                            "such as 2024-05-01T12:00:00") from None
    return int(moment.timestamp() * 1000)


def format_timestamp(millis: int) -> str:
    """``millis`` as local ``YYYY-MM-DD HH:MM:SS.mmm`` ("" for 0 or less)."""
    if millis <= 0:
        return ""
    moment = datetime.fromtimestamp(millis / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{millis % 1000:03d}"


def version_desc(version: int) -> str:
    """A remoting version for humans (RocketMQ's ``MQVersion`` ordinal; 399 is V4_9_3)."""
    if version == ROCKETMQ_VERSION:
        return "V4_9_3"
    return str(version)


def _first_number(text: str | None) -> float:
    """A runtime-info rate: Java brokers report three windows ("10s 60s 600s"); the first one."""
    if not text:
        return 0.0
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return 0.0


def _check_topic(topic: str) -> None:
    try:
        validate_topic(topic)
    except InvalidNameError as exc:
        raise MQClientError(str(exc)) from None


def _check_group(group: str) -> None:
    try:
        validate_group(group)
    except InvalidNameError as exc:
        raise MQClientError(str(exc)) from None


class QueueLayoutWarning(UserWarning):
    """A topic was given more write queues than read queues: what is sent to the extra queues is read by
    no consumer (nor Spark query) until the read queues follow."""


def warn_queue_layout(topic: str, read_queue_nums: int, write_queue_nums: int, where: str = "") -> None:
    """Warn (`QueueLayoutWarning`) when ``write_queue_nums`` exceeds ``read_queue_nums``."""
    if write_queue_nums > read_queue_nums:
        warnings.warn(QueueLayoutWarning(
            f"topic {topic} has {write_queue_nums} write queues but {read_queue_nums} read queues{where}: "
            f"messages sent to queues {read_queue_nums}-{write_queue_nums - 1} are not consumed until the read "
            f"queues follow (topic update {topic} --read-queues {write_queue_nums}). Grow a topic by raising "
            "its read queues first, shrink it by lowering its write queues first."), stacklevel=3)


def topic_kind(topic: str, reserved: frozenset[str] | set[str] = frozenset()) -> str:
    """``retry``, ``dlq``, ``system`` or ``normal``; ``reserved`` names (the cluster and broker names,
    which brokers register as topics) count as system topics."""
    if is_retry_topic(topic):
        return "retry"
    if is_dlq_topic(topic):
        return "dlq"
    if is_system_topic(topic) or topic in reserved:
        return "system"
    return "normal"


# --------------------------------------------------------------------------- tail


class MessageTail:
    """Follows new messages of a topic on every readable queue (long polling, no offsets committed).

    Use it as a context manager; `poll` returns what arrived so far (waiting up to ``timeout``).
    """

    def __init__(self, admin: Admin, topic: str, positions: dict[MessageQueue, int], addrs: dict[str, str],
                 batch_size: int, hold_seconds: float) -> None:
        self.topic = topic
        #: The queue -> first offset each queue was followed from.
        self.start_offsets = dict(positions)
        self._admin = admin
        self._addrs = addrs
        self._batch_size = batch_size
        self._hold = hold_seconds
        self._out: queue.Queue[MessageExt] = queue.Queue()
        self._future: concurrent.futures.Future[None] | None = admin.instance.submit(self._follow(positions))

    @property
    def queues(self) -> list[MessageQueue]:
        return sorted(self.start_offsets)

    async def _follow(self, positions: dict[MessageQueue, int]) -> None:
        await asyncio.gather(*(self._follow_queue(mq, offset) for mq, offset in positions.items()))

    async def _follow_queue(self, mq: MessageQueue, offset: int) -> None:
        api = self._admin.instance.api
        addr = self._addrs[mq.broker_name]
        flags = int(PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION)
        hold_ms = int(self._hold * 1000)
        while True:
            header = PullMessageRequestHeader(
                consumer_group=TOOLS_CONSUMER_GROUP, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
                max_msg_nums=self._batch_size, sys_flag=flags, commit_offset=0, suspend_timeout_millis=hold_ms,
                sub_version=0, subscription="*", expression_type="TAG")
            try:
                result = await api.pull_message(addr, header, self._hold + self._admin.timeout)
            except MQError as exc:
                logger.warning("tail of %s: pull from %s failed: %s", mq, addr, exc)
                await asyncio.sleep(1.0)
                continue
            if result.status is PullStatus.FOUND:
                for msg in process_pull_result(result, mq):
                    self._out.put(msg)
                for bad in result.undecodable:
                    logger.warning("tail of %s: the record at offset %d cannot be decoded (%s); skipped", mq,
                                   bad.queue_offset, bad.reason)
            offset = result.next_begin_offset

    def poll(self, timeout: float = 1.0) -> list[MessageExt]:
        """The messages that arrived (at least one unless ``timeout`` passed first), in arrival order.

        Raises the error that stopped the tail, if any.
        """
        messages: list[MessageExt] = []
        try:
            messages.append(self._out.get(timeout=timeout))
        except queue.Empty:
            self._raise_if_failed()
            return messages
        while True:
            try:
                messages.append(self._out.get_nowait())
            except queue.Empty:
                return messages

    def _raise_if_failed(self) -> None:
        future = self._future
        if future is not None and future.done() and not future.cancelled():
            error = future.exception()
            if error is not None:
                raise error

    def close(self) -> None:
        """Stop following (idempotent)."""
        future, self._future = self._future, None
        if future is None:
            return
        future.cancel()
        try:
            future.result(timeout=5.0)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            pass
        except Exception as exc:  # the tail already failed; the caller saw it in poll()
            logger.debug("tail of %s ended with %r", self.topic, exc)

    def __enter__(self) -> MessageTail:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


# --------------------------------------------------------------------------- the admin


class Admin:
    """The admin API; see the module docstring. ``timeout`` (seconds) bounds each request."""

    def __init__(self, namesrv: str | None = None, *, timeout: float = ADMIN_RPC_TIMEOUT,
                 client_config: ClientConfig | None = None, **client_settings: Any) -> None:
        """``client_settings`` are `ClientConfig` fields; ``namesrv`` is ``"host:port;host:port"``."""
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise MQClientError(f"timeout must be a positive number of seconds, got {timeout!r}")
        settings = dict(client_settings)
        if namesrv is not None:
            settings["namesrv_addr"] = namesrv
        settings.setdefault("instance_name", f"rocketflow-admin-{os.getpid()}-{next(_instance_counter)}")
        settings.setdefault("mq_client_api_timeout", float(timeout))
        try:
            config = client_config.copy(**settings) if client_config is not None else ClientConfig(**settings)
        except TypeError as exc:
            raise MQClientError(f"invalid admin settings: {exc}") from None
        if not config.namesrv_addresses():
            raise MQClientError("no name server address: pass namesrv='host:port' "
                                "(or set the NAMESRV_ADDR environment variable)")
        self.client_config = config
        self.timeout = float(timeout)
        self._instance: ClientInstance | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the admin's client instance (no-op when running)."""
        if self._instance is not None:
            return
        instance = ClientInstance.get_or_create(self.client_config)
        instance.start()
        self._instance = instance

    def shutdown(self) -> None:
        """Release the client instance (idempotent)."""
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.shutdown()

    def __enter__(self) -> Admin:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.shutdown()

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise MQClientError("the admin is not started; call start() or use it as a context manager")
        return self._instance

    @property
    def namesrv_addresses(self) -> list[str]:
        return self.client_config.namesrv_addresses()

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.instance.run(coro)

    # ------------------------------------------------------------------ raw requests (on the loop)

    async def _invoke(self, addr: str, code: int, header: CommandHeader | None = None, body: bytes = b"",
                      *ok_codes: int) -> RemotingCommand:
        api = self.instance.api
        request = RemotingCommand.request(code, header.to_ext_fields() if header is not None else None, body,
                                          language=api.language)
        response = await api.invoke(addr, request, self.timeout)
        if response.code not in (ok_codes or (ResponseCode.SUCCESS,)):
            raise MQBrokerError(response.code, response.remark, addr)
        return response

    @staticmethod
    def _decode(cls: type[_BodyT], response: RemotingCommand, addr: str) -> _BodyT:
        try:
            return cls.decode(response.body)
        except ProtocolError as exc:
            raise MQRemotingError(f"malformed {cls.__name__} from {addr}: {exc}", addr) from exc

    async def _route(self, topic: str) -> TopicRouteData:
        route = await self.instance.api.get_topic_route(topic, self.timeout)
        if route is None:
            raise MQClientError(f"topic {topic!r} does not exist (the name server has no route for it)",
                                ResponseCode.TOPIC_NOT_EXIST)
        return route

    @staticmethod
    def _route_masters(route: TopicRouteData) -> dict[str, str]:
        """Broker name -> master address (or any address when the master is gone) of a route."""
        result: dict[str, str] = {}
        for broker in route.broker_datas:
            addr = broker.broker_addrs.get(MASTER_ID) or broker.select_broker_addr()
            if addr:
                result[broker.broker_name] = addr
        return result

    async def _target_masters(self, cluster: str | None, broker_addr: str | None) -> list[str]:
        """Master addresses for a create/update/delete: ``broker_addr``, the masters of ``cluster``, or
        those of the only cluster there is."""
        if broker_addr is not None:
            if cluster is not None:
                raise MQClientError("pass either a cluster or a broker address, not both")
            return [broker_addr]
        info = await self.instance.api.get_broker_cluster_info(self.timeout)
        if cluster is None:
            clusters = sorted(info.cluster_addr_table)
            if len(clusters) != 1:
                raise MQClientError(f"there are {len(clusters)} clusters ({', '.join(clusters) or 'none'}); "
                                    "name one with -c/--cluster or a broker with -b/--broker")
            cluster = clusters[0]
        names = info.cluster_addr_table.get(cluster)
        if names is None:
            raise MQClientError(f"no cluster named {cluster!r} (known: {', '.join(sorted(info.cluster_addr_table))})")
        masters = [info.broker_addr_table[name].broker_addrs[MASTER_ID] for name in sorted(names)
                   if name in info.broker_addr_table and MASTER_ID in info.broker_addr_table[name].broker_addrs]
        if not masters:
            raise MQClientError(f"cluster {cluster!r} has no master broker online")
        return masters

    # ------------------------------------------------------------------ cluster

    def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO from the name server."""
        return self._run(self.instance.api.get_broker_cluster_info(self.timeout))

    def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO of one broker."""
        return self._run(self._runtime_info(addr))

    async def _runtime_info(self, addr: str) -> dict[str, str]:
        response = await self._invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict(self._decode(KVTable, response, addr).table)

    def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG of one broker: its settings by RocketMQ name (``mqadmin getBrokerConfig``)."""
        response = self._run(self._invoke(addr, RequestCode.GET_BROKER_CONFIG))
        settings: dict[str, str] = {}
        for line in response.body.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.lstrip().startswith(("#", "!")):
                settings[key.strip()] = value.strip()
        return settings

    def update_broker_config(self, addr: str, settings: Mapping[str, object]) -> None:
        """UPDATE_BROKER_CONFIG: change settings of a running broker (``mqadmin updateBrokerConfig``).

        Keys are RocketMQ's names (``brokerPermission``, ``maxMessageSize``...); `MQBrokerError` if the
        broker refuses them (unknown, invalid, or fixed at start).
        """
        if not settings:
            raise MQClientError("no settings to update")
        lines = []
        for key, value in settings.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            if not key or any(ch in key for ch in "=:\n\r") or "\n" in text or "\r" in text:
                raise MQClientError(f"cannot send the setting {key!r}={text!r} as a property line")
            lines.append(f"{key}={text}")
        self._run(self._invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, None, ("\n".join(lines) + "\n").encode()))

    def cluster_overview(self) -> list[BrokerStatus]:
        """Every broker address of every cluster with its version and put/get TPS (unreachable ones with ``error``)."""
        return self._run(self._cluster_overview())

    async def _cluster_overview(self) -> list[BrokerStatus]:
        info = await self.instance.api.get_broker_cluster_info(self.timeout)
        entries = [(cluster, name, broker_id, addr)
                   for cluster in sorted(info.cluster_addr_table)
                   for name in sorted(info.cluster_addr_table[cluster]) if name in info.broker_addr_table
                   for broker_id, addr in sorted(info.broker_addr_table[name].broker_addrs.items())]
        results = await asyncio.gather(*(self._runtime_info(addr) for *_, addr in entries), return_exceptions=True)
        statuses: list[BrokerStatus] = []
        for (cluster, name, broker_id, addr), result in zip(entries, results, strict=True):
            if isinstance(result, MQError):
                statuses.append(BrokerStatus(cluster, name, broker_id, addr, error=str(result)))
            elif isinstance(result, BaseException):
                raise result
            else:
                statuses.append(BrokerStatus(cluster, name, broker_id, addr, result.get("brokerVersionDesc", ""),
                                             _first_number(result.get("putTps")),
                                             _first_number(result.get("getTransferedTps"))))
        return statuses

    # ------------------------------------------------------------------ topics

    def topic_list(self) -> list[str]:
        """Every topic the name server knows, sorted."""
        return sorted(self._run(self.instance.api.get_all_topic_list(self.timeout)))

    def reserved_topic_names(self) -> set[str]:
        """The cluster and broker names (brokers register them as topics)."""
        info = self.cluster_info()
        return set(info.cluster_addr_table) | set(info.broker_addr_table)

    def topic_route(self, topic: str) -> TopicRouteData:
        """The topic's route; `MQClientError` (TOPIC_NOT_EXIST) when the name server has none."""
        _check_topic(topic)
        return self._run(self._route(topic))

    def create_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                     read_queue_nums: int = DEFAULT_QUEUE_NUMS, write_queue_nums: int = DEFAULT_QUEUE_NUMS,
                     perm: int = DEFAULT_PERM, order: bool = False, message_type: str | None = None) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on ``broker_addr`` or every master of ``cluster`` (default: the only
        cluster); an ordered topic's queue layout is also put in the name servers' KV config. Returns the
        broker addresses. ``message_type`` (NORMAL, FIFO, DELAY or TRANSACTION) is the one kind of message
        RocketMQ 5.x clients may send to the topic (its ``message.type`` attribute); None: any kind."""
        _check_topic(topic)
        for name, value in (("read_queue_nums", read_queue_nums), ("write_queue_nums", write_queue_nums)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise MQClientError(f"{name} must be a positive int, got {value!r}")
        if isinstance(perm, bool) or not isinstance(perm, int) or not 0 <= perm <= 15:
            raise MQClientError(f"perm must be PermName bits 0..15 (6 = read+write), got {perm!r}")
        attributes: dict[str, str] = {}
        if message_type is not None:
            if message_type.upper() not in MESSAGE_TYPES:
                raise MQClientError(f"message_type must be one of {', '.join(MESSAGE_TYPES)}, got {message_type!r}")
            attributes["message.type"] = message_type.upper()
        config = TopicConfig(topic, read_queue_nums, write_queue_nums, perm, TopicFilterType.SINGLE_TAG, 0, order,
                             attributes)
        addrs = self._run(self._create_topic(config, cluster, broker_addr))
        warn_queue_layout(topic, read_queue_nums, write_queue_nums)
        return addrs

    def ensure_topic(self, topic: str, *, queues: int = DEFAULT_QUEUE_NUMS, timeout: float = 15.0,
                     **create_options: Any) -> TopicRouteData:
        """The topic's route, creating the topic first (``queues`` read and write queues, other
        `create_topic` options as keywords) when the name server does not route it yet; waits up to
        ``timeout`` seconds for the brokers to register it."""
        try:
            return self.topic_route(topic)
        except MQClientError:
            self.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues, **create_options)
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.topic_route(topic)
            except MQClientError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def update_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                     read_queue_nums: int | None = None, write_queue_nums: int | None = None,
                     perm: int | None = None, order: bool | None = None) -> list[str]:
        """Change an existing topic's settings on its brokers (or ``broker_addr`` / ``cluster``'s masters),
        keeping each broker's current value of every setting not given."""
        _check_topic(topic)
        changes: dict[str, Any] = {}
        for name, value in (("read_queue_nums", read_queue_nums), ("write_queue_nums", write_queue_nums)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise MQClientError(f"{name} must be a positive int, got {value!r}")
                changes[name] = value
        if perm is not None:
            if isinstance(perm, bool) or not isinstance(perm, int) or not 0 <= perm <= 15:
                raise MQClientError(f"perm must be PermName bits 0..15 (6 = read+write), got {perm!r}")
            changes["perm"] = perm
        if order is not None:
            changes["order"] = bool(order)
        if not changes:
            raise MQClientError("nothing to update: give at least one of the queue numbers, perm or order")
        configs = self._run(self._update_topic(topic, cluster, broker_addr, changes))
        for addr, config in configs.items():
            warn_queue_layout(topic, config.read_queue_nums, config.write_queue_nums, f" on {addr}")
        return list(configs)

    async def _update_topic(self, topic: str, cluster: str | None, broker_addr: str | None,
                            changes: dict[str, Any]) -> dict[str, TopicConfig]:
        if cluster is None and broker_addr is None:
            addrs = list(self._route_masters(await self._route(topic)).values())
        else:
            addrs = await self._target_masters(cluster, broker_addr)
        updated: dict[str, TopicConfig] = {}
        for addr in addrs:
            response = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            current = self._decode(TopicConfigSerializeWrapper, response, addr).topic_config_table.get(topic)
            if current is None:
                raise MQClientError(f"topic {topic!r} does not exist on broker {addr}; create it first")
            config = TopicConfig(topic, changes.get("read_queue_nums", current.read_queue_nums),
                                 changes.get("write_queue_nums", current.write_queue_nums),
                                 changes.get("perm", current.perm), current.topic_filter_type,
                                 current.topic_sys_flag, changes.get("order", current.order), dict(current.attributes))
            await self.instance.api.create_topic(addr, config, timeout=self.timeout)
            updated[addr] = config
        if "order" in changes or "write_queue_nums" in changes:
            await self._put_order_conf(topic, addrs, changes.get("order"))
        return updated

    async def _create_topic(self, config: TopicConfig, cluster: str | None, broker_addr: str | None) -> list[str]:
        addrs = await self._target_masters(cluster, broker_addr)
        for addr in addrs:
            await self.instance.api.create_topic(addr, config, timeout=self.timeout)
        if config.order:
            await self._put_order_conf(config.topic_name, addrs, True)
        return addrs

    async def _put_order_conf(self, topic: str, addrs: list[str], order: bool | None) -> None:
        """Keep the name servers' ORDER_TOPIC_CONFIG entry (``brokerName:writeQueueNums;...``) in step."""
        if order is False:
            for namesrv in self.namesrv_addresses:
                await self._invoke(namesrv, RequestCode.DELETE_KV_CONFIG, DeleteKVConfigRequestHeader(
                    namespace=ORDER_TOPIC_CONFIG_NAMESPACE, key=topic))
            return
        parts: list[str] = []
        for addr in addrs:
            response = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            current = self._decode(TopicConfigSerializeWrapper, response, addr).topic_config_table.get(topic)
            runtime = await self._runtime_info(addr)
            if current is not None and (order or current.order):
                parts.append(f"{runtime.get('brokerName', addr)}:{current.write_queue_nums}")
        if not parts:
            return
        for namesrv in self.namesrv_addresses:
            await self._invoke(namesrv, RequestCode.PUT_KV_CONFIG, PutKVConfigRequestHeader(
                namespace=ORDER_TOPIC_CONFIG_NAMESPACE, key=topic, value=";".join(sorted(parts))))

    def topic_configs(self, topic: str) -> dict[str, TopicConfig]:
        """The topic's config on each master that routes it (broker address -> config): queues, permission,
        and RocketMQ 5's attributes (``message.type``)."""
        _check_topic(topic)
        return self._run(self._topic_configs(topic))

    async def _topic_configs(self, topic: str) -> dict[str, TopicConfig]:
        found: dict[str, TopicConfig] = {}
        for addr in self._route_masters(await self._route(topic)).values():
            response = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            config = self._decode(TopicConfigSerializeWrapper, response, addr).topic_config_table.get(topic)
            if config is not None:
                found[addr] = config
        return found

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG from the name server (None when it has no such item)."""
        return self._run(self._get_kv_config(namespace, key))

    async def _get_kv_config(self, namespace: str, key: str) -> str | None:
        api = self.instance.api
        request = RemotingCommand.request(RequestCode.GET_KV_CONFIG, GetKVConfigRequestHeader(
            namespace=namespace, key=key).to_ext_fields(), language=api.language)
        response = await api.invoke_namesrv(request, self.timeout)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, "name server")
        try:
            return GetKVConfigResponseHeader.from_command(response).value
        except ProtocolError as exc:
            raise MQRemotingError(f"malformed GET_KV_CONFIG response: {exc}") from exc

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """DELETE_TOPIC_IN_BROKER on the masters holding it (of ``cluster`` when given), then
        DELETE_TOPIC_IN_NAMESRV on every name server. Returns the broker addresses."""
        _check_topic(topic)
        return self._run(self._delete_topic(topic, cluster))

    async def _delete_topic(self, topic: str, cluster: str | None) -> list[str]:
        api = self.instance.api
        route = await api.get_topic_route(topic, self.timeout)
        if cluster is not None:
            addrs = await self._target_masters(cluster, None)
        elif route is not None:
            addrs = list(self._route_masters(route).values())
        else:
            raise MQClientError(f"topic {topic!r} does not exist (the name server has no route for it)",
                                ResponseCode.TOPIC_NOT_EXIST)
        for addr in addrs:
            await self._invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic=topic))
        for namesrv in self.namesrv_addresses:
            await self._invoke(namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                               DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster))
        return addrs

    def topic_stats(self, topic: str) -> list[QueueStats]:
        """Min/max offset and last store time of every queue of the topic, from its brokers."""
        _check_topic(topic)
        return self._run(self._topic_stats(topic))

    async def _topic_stats(self, topic: str) -> list[QueueStats]:
        route = await self._route(topic)
        rows: list[QueueStats] = []
        for _, addr in sorted(self._route_masters(route).items()):
            table = await self.instance.api.get_topic_stats(addr, topic, self.timeout)
            rows.extend(QueueStats(mq.topic, mq.broker_name, mq.queue_id, offset.min_offset, offset.max_offset,
                                   offset.last_update_timestamp) for mq, offset in table.offset_table.items())
        return sorted(rows, key=lambda row: (row.broker_name, row.queue_id))

    # ------------------------------------------------------------------ subscription groups

    def group_list(self, *, cluster: str | None = None,
                   broker_addr: str | None = None) -> list[SubscriptionGroupConfig]:
        """The subscription groups of the targeted masters (merged by name, sorted)."""
        return self._run(self._group_list(cluster, broker_addr))

    async def _group_list(self, cluster: str | None, broker_addr: str | None) -> list[SubscriptionGroupConfig]:
        groups: dict[str, SubscriptionGroupConfig] = {}
        for addr in await self._target_masters(cluster, broker_addr):
            response = await self._invoke(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            table = self._decode(SubscriptionGroupWrapper, response, addr).subscription_group_table
            for name, config in table.items():
                groups.setdefault(name, config)
        return [groups[name] for name in sorted(groups)]

    def create_group(self, config: SubscriptionGroupConfig | str, *, cluster: str | None = None,
                     broker_addr: str | None = None, **settings: Any) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (a config, or a group name plus `SubscriptionGroupConfig`
        fields such as ``retry_max_times``) on the targeted masters. Returns their addresses."""
        if isinstance(config, str):
            try:
                config = SubscriptionGroupConfig(config, **settings)
            except TypeError as exc:
                raise MQClientError(f"invalid group settings: {exc}") from None
        elif settings:
            raise MQClientError("pass settings either in the SubscriptionGroupConfig or as keywords, not both")
        _check_group(config.group_name)
        if config.retry_queue_nums < 0 or config.retry_max_times < -1:
            raise MQClientError("retry_queue_nums must be >= 0 and retry_max_times >= -1")
        return self._run(self._create_group(config, cluster, broker_addr))

    async def _create_group(self, config: SubscriptionGroupConfig, cluster: str | None,
                            broker_addr: str | None) -> list[str]:
        addrs = await self._target_masters(cluster, broker_addr)
        for addr in addrs:
            await self._invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
        return addrs

    def delete_group(self, group: str, *, cluster: str | None = None, broker_addr: str | None = None,
                     remove_offset: bool = False) -> list[str]:
        """DELETE_SUBSCRIPTIONGROUP on the targeted masters (and its offsets with ``remove_offset``)."""
        _check_group(group)
        return self._run(self._delete_group(group, cluster, broker_addr, remove_offset))

    async def _delete_group(self, group: str, cluster: str | None, broker_addr: str | None,
                            remove_offset: bool) -> list[str]:
        addrs = await self._target_masters(cluster, broker_addr)
        header = DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offset)
        for addr in addrs:
            await self._invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)
        return addrs

    def clone_group_offsets(self, source_group: str, target_group: str, *, topic: str | None = None,
                            offline: bool = False) -> list[str]:
        """CLONE_GROUP_OFFSET on every broker that may hold ``source_group``'s offsets (``mqadmin
        cloneGroupOffset``): ``target_group`` then starts where ``source_group`` is. Returns the brokers."""
        _check_group(source_group)
        _check_group(target_group)
        if topic is not None:
            _check_topic(topic)
        return self._run(self._clone_group_offsets(source_group, target_group, topic, offline))

    async def _clone_group_offsets(self, source_group: str, target_group: str, topic: str | None,
                                   offline: bool) -> list[str]:
        addrs = await self._group_brokers(source_group, topic)
        header = CloneGroupOffsetRequestHeader(src_group=source_group, dest_group=target_group, topic=topic,
                                               offline=offline)
        for addr in addrs:
            await self._invoke(addr, RequestCode.CLONE_GROUP_OFFSET, header)
        return addrs

    # ------------------------------------------------------------------ consumers

    async def _group_brokers(self, group: str, topic: str | None) -> list[str]:
        """Masters that may hold the group's offsets: the retry topic's and ``topic``'s brokers, else all."""
        api = self.instance.api
        addrs: dict[str, str] = {}
        for name in ([topic] if topic else []) + [retry_topic(group)]:
            route = await api.get_topic_route(name, self.timeout)
            if route is not None:
                addrs.update(self._route_masters(route))
        if not addrs:
            info = await api.get_broker_cluster_info(self.timeout)
            addrs = {name: broker.broker_addrs.get(MASTER_ID) or broker.select_broker_addr() or ""
                     for name, broker in info.broker_addr_table.items()}
        return [addr for _, addr in sorted(addrs.items()) if addr]

    def consumer_connections(self, group: str) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST; `MQBrokerError` CONSUMER_NOT_ONLINE when no member is connected."""
        _check_group(group)
        return self._run(self._consumer_connections(group))

    async def _consumer_connections(self, group: str) -> ConsumerConnection:
        last_error: MQError | None = None
        for addr in await self._group_brokers(group, None):
            try:
                return await self.instance.api.get_consumer_connection_list(addr, group, self.timeout)
            except MQError as exc:
                last_error = exc
        if last_error is not None:
            raise last_error
        raise MQClientError("no broker online to ask")

    def consumer_running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO of one client, relayed by a broker it is connected to."""
        _check_group(group)
        return self._run(self._running_info(group, client_id))

    async def _running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        last_error: MQError | None = None
        header = GetConsumerRunningInfoRequestHeader(consumer_group=group, client_id=client_id, jstack_enable=False)
        for addr in await self._group_brokers(group, None):
            try:
                response = await self._invoke(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, header)
            except MQError as exc:
                last_error = exc
                continue
            return self._decode(ConsumerRunningInfo, response, addr)
        if last_error is not None:
            raise last_error
        raise MQClientError("no broker online to ask")

    def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        """Per queue: broker offset, consumer offset, lag, owning client ("" if none), last consumed
        message's store time; plus the group's consume TPS (GET_CONSUME_STATS on every broker)."""
        _check_group(group)
        if topic is not None:
            _check_topic(topic)
        return self._run(self._consumer_progress(group, topic))

    async def _consumer_progress(self, group: str, topic: str | None) -> ConsumerProgress:
        api = self.instance.api
        addrs = await self._group_brokers(group, topic)
        stats: list[ConsumeStats] = []
        for addr in addrs:
            stats.append(await api.get_consume_stats(addr, group, topic, self.timeout))
        owners = await self._queue_owners(group, addrs)
        queues = [QueueProgress(mq.topic, mq.broker_name, mq.queue_id, wrapper.broker_offset,
                                wrapper.consumer_offset, owners.get(mq, ""), wrapper.last_timestamp)
                  for table in stats for mq, wrapper in table.offset_table.items()]
        queues.sort(key=lambda row: (row.topic, row.broker_name, row.queue_id))
        return ConsumerProgress(group, queues, sum(table.consume_tps for table in stats))

    async def _queue_owners(self, group: str, addrs: list[str]) -> dict[MessageQueue, str]:
        """Queue -> client id(s) from every connected member's running info (best effort)."""
        api = self.instance.api
        connection: ConsumerConnection | None = None
        for addr in addrs:
            try:
                connection = await api.get_consumer_connection_list(addr, group, self.timeout)
                break
            except MQError:
                continue
        if connection is None:
            return {}
        owners: dict[MessageQueue, list[str]] = {}
        for member in sorted(connection.connection_set, key=lambda item: item.client_id):
            try:
                info = await self._running_info(group, member.client_id)
            except MQError as exc:
                logger.info("running info of %s/%s failed: %s", group, member.client_id, exc)
                continue
            for mq, process_queue in info.mq_table.items():
                if not process_queue.droped:
                    owners.setdefault(mq, []).append(member.client_id)
        return {mq: ",".join(clients) for mq, clients in owners.items()}

    def reset_offset(self, group: str, topic: str, timestamp_ms: int, *,
                     force: bool = False) -> dict[MessageQueue, int]:
        """Reset ``group``'s offsets of ``topic`` to the first message stored at or after ``timestamp_ms``
        (`EARLIEST`: the first retained one, `LATEST`: the end of each queue), through the brokers
        (INVOKE_BROKER_TO_RESET_OFFSET), which tell the group's running clients. Without ``force`` an
        offset only moves back. A broker that answers CONSUMER_NOT_ONLINE gets the offsets committed
        directly (what mqadmin does for groups with no live member). Returns queue -> new offset."""
        _check_group(group)
        _check_topic(topic)
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < LATEST:
            raise MQClientError(f"timestamp_ms must be epoch ms, EARLIEST (0) or LATEST (-1), got {timestamp_ms!r}")
        return self._run(self._reset_offset(group, topic, timestamp_ms, force))

    async def _reset_offset(self, group: str, topic: str, timestamp_ms: int, force: bool) -> dict[MessageQueue, int]:
        api = self.instance.api
        route = await self._route(topic)
        result: dict[MessageQueue, int] = {}
        for broker_name, addr in sorted(self._route_masters(route).items()):
            try:
                table = await api.invoke_broker_to_reset_offset(addr, topic, group, timestamp_ms, force, self.timeout)
            except MQBrokerError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
                table = await self._reset_offset_directly(addr, broker_name, route, group, topic, timestamp_ms, force)
            result.update(table)
        return dict(sorted(result.items()))

    async def _reset_offset_directly(self, addr: str, broker_name: str, route: TopicRouteData, group: str,
                                     topic: str, timestamp_ms: int, force: bool) -> dict[MessageQueue, int]:
        api = self.instance.api
        queue_nums = max((data.write_queue_nums for data in route.queue_datas if data.broker_name == broker_name),
                         default=0)
        table: dict[MessageQueue, int] = {}
        for queue_id in range(queue_nums):
            mq = MessageQueue(topic, broker_name, queue_id)
            if timestamp_ms == LATEST:
                target = await api.get_max_offset(addr, topic, queue_id, self.timeout)
            else:
                target = await api.search_offset(addr, topic, queue_id, timestamp_ms, self.timeout)
            try:
                current = await api.query_consumer_offset(addr, group, mq, self.timeout)
            except MQBrokerError:
                current = -1
            if not force and 0 <= current <= target:
                target = current
            await api.update_consumer_offset(addr, group, mq, target, self.timeout)
            table[mq] = target
        return table

    # ------------------------------------------------------------------ messages

    def view_message(self, msg_id: str, *, topic: str | None = None) -> MessageExt:
        """A message by its offset msg id (VIEW_MESSAGE_BY_ID) or by its UNIQ_KEY id (QUERY_MESSAGE of the
        unique key in ``topic``, or in every non-system topic when not given)."""
        msg_id = msg_id.strip()
        if not msg_id:
            raise MQClientError("the message id is empty")
        if topic is not None:
            _check_topic(topic)
        return self._run(self._view_message(msg_id, topic))

    async def _view_message(self, msg_id: str, topic: str | None) -> MessageExt:
        api = self.instance.api
        info = await api.get_broker_cluster_info(self.timeout)
        known: dict[str, str] = {addr: name for name, broker in info.broker_addr_table.items()
                                 for addr in broker.broker_addrs.values()}
        try:
            host, port, offset = decode_offset_msg_id(msg_id)
        except InvalidMessageIdError:
            host, port, offset = "", 0, -1
        addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if addr in known:
            msg = await api.view_message(addr, offset, self.timeout)
            msg.broker_name = msg.broker_name or known[addr]
            return msg
        topics = [topic] if topic is not None else sorted(
            name for name in await api.get_all_topic_list(self.timeout) if topic_kind(name) != "system")
        for name in topics:
            found = await self._query(name, msg_id, 0, time.time_ns() // 1_000_000 + 60_000, 32, unique_key=True)
            matching = [msg for msg in found if msg.uniq_key == msg_id or msg.msg_id == msg_id]
            if matching:
                return matching[0]
        where = f"topic {topic!r}" if topic is not None else "any topic"
        raise MQClientError(f"message {msg_id!r} not found: not an offset msg id of a known broker and no "
                            f"message with that UNIQ_KEY in {where}", ResponseCode.QUERY_NOT_FOUND)

    def query_messages(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int | None = None,
                       max_num: int = DEFAULT_QUERY_MAX_NUM) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS, stored in [begin_ms, end_ms], from every broker."""
        _check_topic(topic)
        if not key or not key.strip():
            raise MQClientError("the message key is empty")
        if isinstance(max_num, bool) or not isinstance(max_num, int) or max_num <= 0:
            raise MQClientError(f"max_num must be a positive int, got {max_num!r}")
        end = end_ms if end_ms is not None else time.time_ns() // 1_000_000 + 60_000
        if begin_ms < 0 or end < begin_ms:
            raise MQClientError(f"invalid time range: begin {begin_ms} .. end {end}")
        messages = self._run(self._query(topic, key, begin_ms, end, max_num))
        keyed = [msg for msg in messages if key in msg.key_list]
        return sorted(keyed, key=lambda msg: (msg.store_timestamp, msg.broker_name, msg.queue_id,
                                              msg.queue_offset))[:max_num]

    def message_trace(self, msg_id: str, *, trace_topic: str = TRACE_TOPIC,
                      max_num: int = DEFAULT_QUERY_MAX_NUM) -> list[TraceRecord]:
        """The trace records of ``msg_id`` (its UNIQ_KEY) in ``trace_topic``, oldest first (RocketMQ's
        ``queryMsgTraceById``): the Pub of each send, SubBefore / SubAfter of each consume."""
        records: list[TraceRecord] = []
        for trace in self.query_messages(trace_topic, msg_id, max_num=max_num):
            records.extend(record for record in decode_trace_data(trace.body.decode("utf-8", "replace"))
                           if record.msg_id == msg_id)
        return sorted(records, key=lambda record: record.timestamp)

    async def _query(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int, *,
                     unique_key: bool = False) -> list[MessageExt]:
        api = self.instance.api
        route = await api.get_topic_route(topic, self.timeout)
        if route is None:
            if unique_key:
                return []
            raise MQClientError(f"topic {topic!r} does not exist (the name server has no route for it)",
                                ResponseCode.TOPIC_NOT_EXIST)
        messages: list[MessageExt] = []
        for broker_name, addr in sorted(self._route_masters(route).items()):
            found = await api.query_message(addr, topic, key, max_num, begin_ms, end_ms, unique_key=unique_key,
                                            timeout=self.timeout)
            for msg in found:
                msg.broker_name = msg.broker_name or broker_name
            messages.extend(found)
        return messages

    def open_tail(self, topic: str, *, from_now: bool = True, batch_size: int = 32,
                  hold_seconds: float = 2.0) -> MessageTail:
        """Follow ``topic`` on every readable queue from its end (``from_now``) or its first retained message."""
        _check_topic(topic)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 0 < batch_size <= 1024:
            raise MQClientError(f"batch_size must be an int in 1..1024, got {batch_size!r}")
        positions, addrs = self._run(self._tail_positions(topic, from_now))
        return MessageTail(self, topic, positions, addrs, batch_size, hold_seconds)

    async def _tail_positions(self, topic: str, from_now: bool) -> tuple[dict[MessageQueue, int], dict[str, str]]:
        api = self.instance.api
        route = await self._route(topic)
        addrs = self._route_masters(route)
        positions: dict[MessageQueue, int] = {}
        for data in route.queue_datas:
            addr = addrs.get(data.broker_name)
            if addr is None or not data.perm & PermName.READ:
                continue
            for queue_id in range(data.read_queue_nums):
                if from_now:
                    offset = await api.get_max_offset(addr, topic, queue_id, self.timeout)
                else:
                    offset = await api.get_min_offset(addr, topic, queue_id, self.timeout)
                positions[MessageQueue(topic, data.broker_name, queue_id)] = max(0, offset)
        if not positions:
            raise MQClientError(f"topic {topic!r} has no readable queue")
        return positions, addrs

    def send(self, topic: str, body: bytes | str, *, keys: str | Iterable[str] | None = None,
             tags: str | None = None, sharding_key: str | None = None,
             properties: Mapping[str, str] | None = None, group: str = ADMIN_PRODUCER_GROUP) -> SendResult:
        """Send one message with a producer of ``group`` on the admin's client instance."""
        from rocketflow.client.producer import Producer

        data = body.encode() if isinstance(body, str) else bytes(body)
        msg = Message(topic, data, tags=tags, keys=keys, properties=properties)
        producer = Producer(group, client_config=self.instance.config)
        producer.start()
        try:
            return producer.send(msg, sharding_key=sharding_key)
        finally:
            producer.shutdown()


__all__ = [
    "ADMIN_PRODUCER_GROUP",
    "DEFAULT_PERM",
    "DEFAULT_QUERY_MAX_NUM",
    "DEFAULT_QUEUE_NUMS",
    "EARLIEST",
    "LATEST",
    "MESSAGE_TYPES",
    "ORDER_TOPIC_CONFIG_NAMESPACE",
    "TOOLS_CONSUMER_GROUP",
    "Admin",
    "BrokerStatus",
    "ConsumerProgress",
    "MessageTail",
    "QueueLayoutWarning",
    "QueueProgress",
    "QueueStats",
    "format_timestamp",
    "parse_timestamp",
    "topic_kind",
    "version_desc",
    "warn_queue_layout",
]
