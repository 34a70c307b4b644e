"""Receive / ack / change invisibility for the gRPC endpoint, over `rocketflow.pop.PopState` and the store.

A receive walks the topic's readable queues from a rotating start: in each, first the group's
messages that are visible again (their invisible time passed without an ack; delivery attempt + 1,
or to ``%DLQ%<group>`` once the group's attempts are used up), then new messages from the queue's
cursor, skipping those the filter does not take. A FIFO group takes nothing from a queue that has a
message still invisible, so the messages of a message group (always one queue) go out one batch at a
time, in order. Nothing found: the receive waits (long polling) for new messages of the topic or the
next message to become visible again, until its timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rocketflow.acl import SessionCredentials
from rocketflow.filter import FilterSyntaxError, Sql92Filter, compile_sql92
from rocketflow.pop import HandleError, Inflight, PopState
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.names import is_readable
from rocketflow.protocol.tags import SubscriptionParseError, parse_subscription
from rocketflow.proxy.access import BrokerAccess
from rocketflow.proxy.local import LocalChannel, invoke_local
from rocketflow.remoting.codes import RequestCode, ResponseCode

logger = logging.getLogger(__name__)

#: messages a receive reads from one queue per store read
_READ_CHUNK = 64


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageFilter:
    """A receive's filter: TAG (``"A || B"``, ``"*"``) or SQL (SQL92 over properties)."""

    def __init__(self, kind: str, expression: str) -> None:
        self.kind = kind
        self._tags: frozenset[str] | None = None
        self._sql: Sql92Filter | None = None
        if kind == "SQL":
            self._sql = compile_sql92(expression)
        else:
            parsed = parse_subscription(expression or "*", max_tags=1024)
            self._tags = frozenset(parsed.tags_set) if parsed.tags_set else None

    @classmethod
    def parse(cls, kind: str, expression: str) -> MessageFilter | str:
        """The filter, or why the expression is refused."""
        try:
            return cls(kind, expression)
        except (FilterSyntaxError, SubscriptionParseError) as exc:
            return str(exc)

    def matches(self, message: MessageExt) -> bool:
        if self._sql is not None:
            return self._sql.matches(message.properties)
        return self._tags is None or message.properties.get(MessageConst.TAGS) in self._tags


@dataclass(slots=True)
class Received:
    """One message handed out by a receive."""

    message: MessageExt
    handle: str
    attempt: int


class PopService:
    """Pop consumption of one broker (call it on the broker's loop)."""

    def __init__(self, access: BrokerAccess, directory: Path, *, flush_interval_ms: int) -> None:
        self.access = access
        self.state = PopState(directory)
        self.flush_interval_ms = flush_interval_ms
        self._waiters: dict[str, set[asyncio.Future[None]]] = defaultdict(set)
        self._start: dict[tuple[str, str], int] = defaultdict(int)
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: counters for the runtime info and the bench
        self.received = 0
        self.acked = 0
        self.redelivered = 0
        self.dead_lettered = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.state.open()
        self._loop = asyncio.get_running_loop()
        self.access.add_arrival_listener(self._arrived)
        self._task = self._loop.create_task(self._housekeeping())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        self.state.checkpoint()
        self.state.close()

    async def _housekeeping(self) -> None:
        interval = max(self.flush_interval_ms, 10) / 1000
        since_checkpoint = 0.0
        while True:
            await asyncio.sleep(interval)
            since_checkpoint += interval
            try:
                await asyncio.to_thread(self.state.flush)
                if self.state.lines_since_checkpoint > 10_000 or (
                        since_checkpoint >= 60 and self.state.lines_since_checkpoint):
                    since_checkpoint = 0.0
                    snapshot, generation = self.state.begin_checkpoint()
                    await asyncio.to_thread(self.state.finish_checkpoint, snapshot, generation)
            except Exception:
                logger.exception("pop state flush or checkpoint failed")

    # ------------------------------------------------------------------ long polling

    def _arrived(self, topic: str, queue_id: int) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake(topic)
        else:
            loop.call_soon_threadsafe(self._wake, topic)

    def _wake(self, topic: str) -> None:
        waiters = self._waiters.pop(topic, None)
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self, group: str, topic: str, deadline: float) -> None:
        """Until a message arrives on ``topic``, one of the group's becomes visible again, or ``deadline``
        (on the loop's clock)."""
        loop = asyncio.get_running_loop()
        timeout = deadline - loop.time()
        visible = self.state.next_visible_ms(group, topic)
        if visible is not None:
            timeout = min(timeout, max(0.0, (visible - now_ms()) / 1000) + 0.005)
        if timeout <= 0:
            return
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters[topic].add(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass
        finally:
            waiters = self._waiters.get(topic)
            if waiters is not None:
                waiters.discard(waiter)

    # ------------------------------------------------------------------ receive

    async def receive(self, group: str, topic: str, queue_ids: list[int], batch: int, invisible_ms: int, *,
                      fifo: bool, message_filter: MessageFilter, max_attempts: int, deadline: float,
                      credentials: SessionCredentials | None, channel: LocalChannel) -> list[Received]:
        """Up to ``batch`` messages of ``topic`` for ``group``, hidden for ``invisible_ms``; waits until
        ``deadline`` (loop clock) when there are none."""
        loop = asyncio.get_running_loop()
        while True:
            found, dead = self._take(group, topic, queue_ids, batch, invisible_ms, fifo, message_filter, max_attempts)
            for queue_id, entry, message in dead:
                await self._dead_letter(group, topic, queue_id, entry, message, max_attempts, credentials, channel)
            if found or loop.time() >= deadline:
                return found
            if dead:
                continue
            await self._wait(group, topic, deadline)
            if loop.time() >= deadline:
                found, dead = self._take(group, topic, queue_ids, batch, invisible_ms, fifo, message_filter,
                                         max_attempts)
                for queue_id, entry, message in dead:
                    await self._dead_letter(group, topic, queue_id, entry, message, max_attempts, credentials,
                                            channel)
                return found

    def _take(self, group: str, topic: str, queue_ids: list[int], batch: int, invisible_ms: int, fifo: bool,
              message_filter: MessageFilter, max_attempts: int
              ) -> tuple[list[Received], list[tuple[int, Inflight, MessageExt | None]]]:
        with self.state.batch():  # one log write for the whole receive
            return self._take_batched(group, topic, queue_ids, batch, invisible_ms, fifo, message_filter,
                                      max_attempts)

    def _take_batched(self, group: str, topic: str, queue_ids: list[int], batch: int, invisible_ms: int, fifo: bool,
                      message_filter: MessageFilter, max_attempts: int
                      ) -> tuple[list[Received], list[tuple[int, Inflight, MessageExt | None]]]:
        now = now_ms()
        until = now + invisible_ms
        found: list[Received] = []
        dead: list[tuple[int, Inflight, MessageExt | None]] = []
        if not queue_ids:
            return found, dead
        start = self._start[(group, topic)] % len(queue_ids)
        self._start[(group, topic)] = start + 1
        state = self.state
        for i in range(len(queue_ids)):
            if len(found) >= batch:
                break
            queue_id = queue_ids[(start + i) % len(queue_ids)]
            visible, may_read_new = state.visible_again(group, topic, queue_id, now, fifo=fifo)
            handed: list[tuple[int, int]] = []
            messages: list[MessageExt] = []
            for entry in visible:
                if len(found) + len(handed) >= batch:
                    may_read_new = False
                    break
                message = self._read_one(group, topic, queue_id, entry.offset)
                if message is None or entry.attempt >= max_attempts:
                    dead.append((queue_id, entry, message))
                    if fifo:  # the next message of the queue waits until this one is dead-lettered
                        may_read_new = False
                        break
                    continue
                handed.append((entry.offset, entry.attempt + 1))
                messages.append(message)
                self.redelivered += 1
            queue_state = state.queue(group, topic, queue_id)
            cursor = queue_state.cursor if queue_state is not None else self._initial_offset(group, topic, queue_id)
            if may_read_new and not dead:
                cursor = self._read_new(group, topic, queue_id, cursor, batch - len(found) - len(handed),
                                        message_filter, handed, messages)
            if handed or queue_state is None or cursor != queue_state.cursor:
                if handed:
                    handles = state.record_receive(group, topic, queue_id, handed, until, cursor)
                    for (_, attempt), handle, message in zip(handed, handles, messages, strict=True):
                        found.append(Received(message, handle, attempt))
                else:
                    state.move_cursor(group, topic, queue_id, cursor)
                self._commit(group, topic, queue_id)
        self.received += len(found)
        return found, dead

    def _initial_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Where a group that never received from a queue starts: its consumer offset (shared with 4.x
        consumers of the group) or the queue's first message."""
        committed = self.access.committed_offset(group, topic, queue_id)
        return committed if committed >= 0 else self.access.min_offset(topic, queue_id)

    def _read_one(self, group: str, topic: str, queue_id: int, offset: int) -> MessageExt | None:
        read = self.access.read(topic, queue_id, offset, 1, group)
        if read.messages and read.messages[0].queue_offset == offset:
            return read.messages[0]
        return None

    def _read_new(self, group: str, topic: str, queue_id: int, cursor: int, wanted: int,
                  message_filter: MessageFilter, handed: list[tuple[int, int]], messages: list[MessageExt]) -> int:
        """Read up to ``wanted`` matching messages from ``cursor``; appends them; returns the new cursor."""
        while wanted > 0:
            read = self.access.read(topic, queue_id, cursor, min(_READ_CHUNK, max(wanted, 1)), group)
            if not read.messages:
                if read.next_offset > cursor:  # messages gone from the store, or none matched
                    cursor = read.next_offset
                    if not read.exhausted:
                        continue
                return cursor
            for message in read.messages:
                if wanted <= 0:
                    return cursor
                cursor = message.queue_offset + 1
                if message_filter.matches(message):
                    handed.append((message.queue_offset, 1))
                    messages.append(message)
                    wanted -= 1
            if read.exhausted:
                return cursor
        return cursor

    def _commit(self, group: str, topic: str, queue_id: int) -> None:
        queue_state = self.state.queue(group, topic, queue_id)
        if queue_state is not None:
            self.access.commit_offset(group, topic, queue_id, queue_state.committed)

    async def _dead_letter(self, group: str, topic: str, queue_id: int, entry: Inflight, message: MessageExt | None,
                           max_attempts: int, credentials: SessionCredentials | None, channel: LocalChannel) -> None:
        """Move a message whose attempts are used up to ``%DLQ%<group>`` (or drop one the store lost)."""
        if message is not None:
            response = await invoke_local(self.access.processor, channel, RequestCode.CONSUMER_SEND_MSG_BACK, {
                "offset": str(message.commit_log_offset), "group": group, "delayLevel": "-1",
                "originMsgId": message.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or message.msg_id,
                "originTopic": topic, "unitMode": "false", "maxReconsumeTimes": str(max(max_attempts - 1, 0)),
            }, credentials=credentials)
            if response.code != ResponseCode.SUCCESS:
                logger.error("cannot move message %s of %s to the dead-letter queue of %s: %s %s", message.msg_id,
                             topic, group, response.code, response.remark)
                return
            self.dead_lettered += 1
            logger.info("message %s of %s moved to the dead-letter queue of %s after %d attempts", message.msg_id,
                        topic, group, entry.attempt)
        else:
            logger.warning("message at %s@%d offset %d is gone from the store; %s stops waiting for it", topic,
                           queue_id, entry.offset, group)
        self.state.remove(group, topic, queue_id, entry.offset)
        self._commit(group, topic, queue_id)

    # ------------------------------------------------------------------ ack and change

    def ack(self, group: str, topic: str, receipt_handle: str) -> HandleError | None:
        return self.ack_many(group, topic, [receipt_handle])[0]

    def ack_many(self, group: str, topic: str, receipt_handles: Iterable[str]) -> list[HandleError | None]:
        """Ack each handle (in one log write); per handle, None or why it was refused."""
        state = self.state
        outcomes: list[HandleError | None] = []
        touched: set[int] = set()
        with state.batch():
            for receipt_handle in receipt_handles:
                handle = state.parse_handle(group, topic, receipt_handle)
                if isinstance(handle, HandleError):
                    outcomes.append(handle)
                    continue
                done = state.ack(group, topic, handle)
                if isinstance(done, HandleError):
                    outcomes.append(done)
                    continue
                outcomes.append(None)
                touched.add(handle.queue_id)
        self.acked += outcomes.count(None)
        for queue_id in touched:
            self._commit(group, topic, queue_id)
        return outcomes

    def change_invisible(self, group: str, topic: str, receipt_handle: str,
                         invisible_ms: int) -> tuple[str, Inflight] | HandleError:
        handle = self.state.parse_handle(group, topic, receipt_handle)
        if isinstance(handle, HandleError):
            return handle
        changed = self.state.change_invisible(group, topic, handle, now_ms() + invisible_ms)
        if isinstance(changed, HandleError):
            return changed
        entry, new_handle = changed
        if invisible_ms == 0:
            self._wake(topic)
        return new_handle, entry

    async def forward_to_dlq(self, group: str, topic: str, receipt_handle: str, max_attempts: int,
                             credentials: SessionCredentials | None, channel: LocalChannel) -> HandleError | str | None:
        """The client gave up on a message: to the dead-letter queue now. Returns a handle error, a failure
        text, or None when done."""
        handle = self.state.parse_handle(group, topic, receipt_handle)
        if isinstance(handle, HandleError):
            return handle
        queue_state = self.state.queue(group, topic, handle.queue_id)
        entry = queue_state.inflight.get(handle.offset) if queue_state is not None else None
        if entry is None or entry.seq != handle.seq:
            return HandleError.STALE
        message = self._read_one(group, topic, handle.queue_id, handle.offset)
        before = self.dead_lettered
        await self._dead_letter(group, topic, handle.queue_id, entry, message, max_attempts, credentials, channel)
        if message is not None and self.dead_lettered == before:
            return "the broker could not store the message in the dead-letter queue"
        return None

    # ------------------------------------------------------------------ info

    def readable_queues(self, topic_perm: int, read_queue_nums: int) -> list[int]:
        return list(range(read_queue_nums)) if is_readable(topic_perm) else []

    def stats(self) -> Mapping[str, str]:
        return {
            "popReceived": str(self.received),
            "popAcked": str(self.acked),
            "popRedelivered": str(self.redelivered),
            "popDeadLettered": str(self.dead_lettered),
            "popInflight": str(self.state.inflight_count),
        }


__all__ = ["MessageFilter", "PopService", "Received", "now_ms"]
