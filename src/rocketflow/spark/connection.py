"""Broker access for the Spark source and sink: one client per Python process, opened lazily.

Spark pickles the reader and writer objects (configuration only) and runs their methods in several
processes: the driver's planner process, and every executor's Python workers. `get_connection`
keeps one `Connection` (one `ClientInstance`, one event-loop thread, pooled TCP connections) per
process id and name server, so a forked worker never reuses its parent's sockets or loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from rocketflow.client.api import PullStatus
from rocketflow.client.config import ClientConfig
from rocketflow.client.errors import MQBrokerError, MQError
from rocketflow.client.instance import ClientInstance
from rocketflow.client.producer.producer import Producer
from rocketflow.errors import RocketflowError
from rocketflow.protocol.codec import decode_record
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.headers import PullMessageRequestHeader

logger = logging.getLogger("rocketflow.spark")

#: Timeout of one RPC made by the source or sink (seconds).
RPC_TIMEOUT: Final = 10.0
#: Offsets pulled per `Connection.read_range` step (one round trip of the calling thread).
CHUNK_OFFSETS: Final = 65_536
#: Pulls in flight per range.
PULLS_IN_FLIGHT: Final = 4


class SourceError(RocketflowError, ValueError):
    """Bad options, an unknown topic or lost data: raised with a message saying what to change."""


@dataclass(slots=True)
class Chunk:
    """Pulled record bodies of ``[start, next_offset)`` in offset order, plus the offset ranges that
    were gone (aged out of the broker, or beyond its end) as ``(from, to)`` pairs."""

    bodies: list[bytes] = field(default_factory=list)
    next_offset: int = 0
    lost: list[tuple[int, int]] = field(default_factory=list)


class Connection:
    """A started `ClientInstance` of this process with the source's and sink's RPCs on top."""

    def __init__(self, namesrv: str, access_key: str | None = None, secret_key: str | None = None) -> None:
        # one client id per process, name server and ACL key: instances are shared by client id
        cluster_tag = zlib.crc32(namesrv.encode() if access_key is None else f"{namesrv}|{access_key}".encode())
        config = ClientConfig(namesrv_addr=namesrv, instance_name=f"rocketflow-spark-{os.getpid()}-{cluster_tag:08x}",
                              mq_client_api_timeout=RPC_TIMEOUT, access_key=access_key, secret_key=secret_key)
        self.namesrv = namesrv
        self.instance = ClientInstance.get_or_create(config)
        self.instance.start()
        self._producers: dict[str, Producer] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ routes

    def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues (route refreshed now); `SourceError` if the topic has none."""
        self.instance.run(self.instance.update_topic_route(topic), RPC_TIMEOUT * 2)
        queues = self.instance.topic_subscribe_info(topic)
        if not queues:
            raise SourceError(f"topic {topic!r} has no readable queue on the cluster of name server {self.namesrv} "
                              "(create it first, e.g. with a producer or the admin tools)")
        return queues

    def _address(self, broker_name: str) -> str:
        found = self.instance.find_broker_address_in_subscribe(broker_name)
        if found is None:
            raise SourceError(f"broker {broker_name!r} is not in the route (is it down?)")
        return found.broker_addr

    def _ensure_route(self, queues: Iterable[MessageQueue]) -> None:
        """Fetch the routes of the queues' topics whose brokers this process does not know yet."""
        for topic in sorted({mq.topic for mq in queues
                             if self.instance.find_broker_address_in_subscribe(mq.broker_name) is None}):
            self.instance.run(self.instance.update_topic_route(topic), RPC_TIMEOUT * 2)

    # ------------------------------------------------------------------ offsets

    def _per_queue(self, queues: Iterable[MessageQueue], what: str, timestamp: int = 0) -> dict[MessageQueue, int]:
        api = self.instance.api
        queue_list = list(queues)
        self._ensure_route(queue_list)

        async def one(mq: MessageQueue) -> int:
            addr = self._address(mq.broker_name)
            if what == "max":
                return await api.get_max_offset(addr, mq.topic, mq.queue_id, RPC_TIMEOUT)
            if what == "min":
                return await api.get_min_offset(addr, mq.topic, mq.queue_id, RPC_TIMEOUT)
            found = await api.search_offset(addr, mq.topic, mq.queue_id, timestamp, RPC_TIMEOUT)
            return await self._first_at_or_after(addr, mq, found, timestamp)

        async def every() -> list[int]:
            return list(await asyncio.gather(*(one(mq) for mq in queue_list)))

        return dict(zip(queue_list, self.instance.run(every(), RPC_TIMEOUT * 2), strict=True))

    async def _first_at_or_after(self, addr: str, mq: MessageQueue, offset: int, timestamp: int) -> int:
        """RocketMQ's timestamp search answers the offset whose store time is *nearest*; a source
        starting at a timestamp wants the first message stored at or after it (Kafka's meaning)."""
        if offset < 0:
            return offset
        header = PullMessageRequestHeader(
            consumer_group="rocketflow_spark_reader", topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=1, sys_flag=int(PullSysFlag.SUBSCRIPTION), commit_offset=0, suspend_timeout_millis=0,
            sub_version=0, subscription="*", expression_type="TAG")
        result = await self.instance.api.pull_message(addr, header, RPC_TIMEOUT)
        if result.status is PullStatus.FOUND and result.body:
            message, _ = decode_record(result.body, with_body=False)
            if message.store_timestamp < timestamp:
                return offset + 1
        return offset

    def max_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """Each queue's next offset to be written."""
        return {mq: max(0, offset) for mq, offset in self._per_queue(queues, "max").items()}

    def min_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """Each queue's smallest offset still stored (0 for a queue the broker has not created yet)."""
        return {mq: max(0, offset) for mq, offset in self._per_queue(queues, "min").items()}

    def offsets_for_timestamp(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> dict[MessageQueue, int]:
        """Each queue's offset of the first message stored at or after ``timestamp_ms`` (SEARCH_OFFSET_BY_TIMESTAMP)."""
        return {mq: max(0, offset) for mq, offset in self._per_queue(queues, "search", timestamp_ms).items()}

    def group_offsets(self, group: str, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int | None]:
        """The consumer group's committed offset of each queue (None where it has none)."""
        api = self.instance.api
        queue_list = list(queues)
        self._ensure_route(queue_list)

        async def one(mq: MessageQueue) -> int | None:
            try:
                return await api.query_consumer_offset(self._address(mq.broker_name), group, mq, RPC_TIMEOUT)
            except MQBrokerError as exc:
                if exc.code == ResponseCode.QUERY_NOT_FOUND:
                    return None
                raise

        async def every() -> list[int | None]:
            return list(await asyncio.gather(*(one(mq) for mq in queue_list)))

        return dict(zip(queue_list, self.instance.run(every(), RPC_TIMEOUT * 2), strict=True))

    def commit_group_offsets(self, group: str, offsets: dict[MessageQueue, int]) -> None:
        """UPDATE_CONSUMER_OFFSET of every queue (waits for the broker's answers)."""
        api = self.instance.api
        self._ensure_route(offsets)

        async def every() -> None:
            await asyncio.gather(*(api.update_consumer_offset(self._address(mq.broker_name), group, mq, offset,
                                                              RPC_TIMEOUT)
                                   for mq, offset in offsets.items()))

        self.instance.run(every(), RPC_TIMEOUT * 2)

    # ------------------------------------------------------------------ reading

    def read_range(self, mq: MessageQueue, start: int, end: int, *, group: str, sub_expression: str,
                   pull_batch_size: int) -> Iterator[Chunk]:
        """The records of ``mq`` at offsets ``[start, end)``, a chunk at a time; the next chunk is
        being pulled while the caller works on the current one."""
        self._ensure_route([mq])
        addr = self._address(mq.broker_name)
        chunk_end = min(end, start + CHUNK_OFFSETS)
        future = self.instance.submit(self._pull_chunk(addr, mq, start, chunk_end, group, sub_expression,
                                                       pull_batch_size))
        while True:
            chunk = future.result(RPC_TIMEOUT * 6)
            offset = chunk.next_offset
            if offset < end:
                chunk_end = min(end, offset + CHUNK_OFFSETS)
                future = self.instance.submit(self._pull_chunk(addr, mq, offset, chunk_end, group, sub_expression,
                                                               pull_batch_size))
            yield chunk
            if offset >= end:
                return

    async def _pull_chunk(self, addr: str, mq: MessageQueue, start: int, end: int, group: str, sub_expression: str,
                          pull_batch_size: int) -> Chunk:
        """Pull ``[start, end)`` with up to `PULLS_IN_FLIGHT` pulls at once.

        The range is cut into pieces of the broker's effective batch (learned from the answers: a
        broker caps the messages per pull); a pull that comes back short leaves its rest as a new
        piece. Every answer says where the next unread offset is (``next_begin_offset``), which also
        steps over offsets a tag filter skipped.
        """
        api = self.instance.api
        sys_flag = int(PullSysFlag.SUBSCRIPTION)
        pending: list[tuple[int, int]] = []
        cursor = start
        step = pull_batch_size
        bodies: dict[int, bytes] = {}
        lost: list[tuple[int, int]] = []

        def next_piece() -> tuple[int, int] | None:
            nonlocal cursor
            if pending:
                return pending.pop()
            if cursor >= end:
                return None
            piece = (cursor, min(end, cursor + step))
            cursor = piece[1]
            return piece

        async def pull(piece: tuple[int, int]) -> None:
            nonlocal step
            low, high = piece
            header = PullMessageRequestHeader(
                consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=low,
                max_msg_nums=high - low, sys_flag=sys_flag, commit_offset=0, suspend_timeout_millis=0,
                sub_version=0, subscription=sub_expression, expression_type="TAG")
            result = await api.pull_message(addr, header, RPC_TIMEOUT)
            reached = result.next_begin_offset
            if result.status is PullStatus.FOUND:
                bodies[low] = result.body
                if low < reached < high:
                    step = max(1, min(step, reached - low))
                    pending.append((reached, high))
                elif reached <= low:
                    raise SourceError(f"{mq}: the broker did not advance past offset {low}")
            elif result.status is PullStatus.NO_MATCHED_MSG:
                if reached <= low:
                    raise SourceError(f"{mq}: the broker did not advance past offset {low}")
                if reached < high:
                    pending.append((reached, high))
            elif result.status is PullStatus.OFFSET_ILLEGAL and reached > low:
                # offsets below the queue's minimum: aged out (retention) or never there
                lost.append((low, min(reached, high)))
                if reached < high:
                    pending.append((reached, high))
            else:
                # at or past the queue's end: the range asked for does not exist (any more)
                lost.append((low, high))

        running: set[asyncio.Task[None]] = set()
        while True:
            while len(running) < PULLS_IN_FLIGHT:
                piece = next_piece()
                if piece is None:
                    break
                running.add(asyncio.ensure_future(pull(piece)))
            if not running:
                break
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if error is not None:
                    for other in running:
                        other.cancel()
                    raise error
        lost.sort()
        return Chunk([bodies[offset] for offset in sorted(bodies)], end, _merge(lost))

    # ------------------------------------------------------------------ writing

    def producer(self, group: str) -> Producer:
        """This process's started producer of ``group`` (shares the connection's client instance)."""
        with self._lock:
            producer = self._producers.get(group)
            if producer is None:
                producer = Producer(group, client_config=self.instance.config)
                producer.start()
                self._producers[group] = producer
            return producer


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in ranges:
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


_connections: dict[tuple[int, str, str | None, str | None], Connection] = {}
_connections_lock = threading.Lock()


def get_connection(namesrv: str, access_key: str | None = None, secret_key: str | None = None) -> Connection:
    """This process's connection to the cluster of ``namesrv`` (opened on first use), signing its
    requests with the ACL keys when given."""
    key = (os.getpid(), namesrv, access_key, secret_key)
    with _connections_lock:
        connection = _connections.get(key)
        if connection is not None and not connection.instance.started:
            # shut down under us (e.g. `shutdown_all` at interpreter or test teardown): open a new one
            connection = None
        if connection is None:
            try:
                connection = Connection(namesrv, access_key, secret_key)
            except MQError as exc:
                raise SourceError(f"cannot connect to name server {namesrv}: {exc}") from exc
            _connections[key] = connection
        return connection


__all__ = [
    "CHUNK_OFFSETS",
    "PULLS_IN_FLIGHT",
    "RPC_TIMEOUT",
    "Chunk",
    "Connection",
    "SourceError",
    "get_connection",
]
