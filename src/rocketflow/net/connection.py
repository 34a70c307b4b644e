"""One remoting connection over asyncio, shared by the server and the client.

A `Channel` is an `asyncio.Protocol`: it decodes frames with the sans-IO `FrameDecoder`, matches
responses to pending requests by opaque, hands requests to a `RequestDispatcher` (each async
processor runs in its own task) and batches outgoing frames into one transport write per loop
iteration.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final, TypeAlias, cast

from rocketflow.net.deadline_timer import DeadlineTimer
from rocketflow.net.errors import RemotingConnectionClosedError, RemotingTimeoutError
from rocketflow.net.responses import OVERLOAD_REMARK, bad_input_response, describe_exception, not_supported_remark
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand, next_opaque
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame

logger = logging.getLogger(__name__)

#: Transport write buffer above which the peer is considered slow (reading pauses on the server).
WRITE_BUFFER_HIGH_WATER: Final = 1024 * 1024
WRITE_BUFFER_LOW_WATER: Final = 256 * 1024
#: Server side: a peer with more than this many response bytes buffered (it does not read) is disconnected.
#: Pausing reads bounds new requests, but those already read (one read can hold hundreds of pulls) are answered.
WRITE_BUFFER_HARD_LIMIT: Final = 64 * 1024 * 1024
#: Server side: a peer whose responses stay above the high-water mark this long (it reads nothing, or
#: too little to drain ~768 KiB in that time) is disconnected too. With reads paused below the hard
#: limit it would otherwise hold its buffered responses until the idle check, 120 s later.
WRITE_STALL_TIMEOUT: Final = 5.0
#: Queued outgoing bytes that force an immediate write instead of waiting for the next loop turn.
OUTBOX_FLUSH_BYTES: Final = 256 * 1024
#: How long a connection closed for a malformed frame waits for handlers of the good frames before it.
PROTOCOL_ERROR_CLOSE_GRACE: Final = 3.0

_channel_ids = itertools.count(1)


def _format_address(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address) if address else "unknown"


def run_channel_callback(callback: Callable[[Channel], object] | None, channel: Channel, what: str,
                  tasks: set[asyncio.Task[None]]) -> None:
    """Run a lifecycle hook; an awaitable result is scheduled as a task. Errors are logged only."""
    if callback is None:
        return
    try:
        result = callback(channel)
    except Exception:
        logger.exception("%s hook raised for %s", what, channel)
        return
    if inspect.isawaitable(result):
        task = asyncio.get_running_loop().create_task(_await_callback(result, channel, what))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


async def _await_callback(awaitable: Awaitable[object], channel: Channel, what: str) -> None:
    try:
        await awaitable
    except Exception:
        logger.exception("%s hook raised for %s", what, channel)


class RequestContext:
    """What a processor gets besides the request: the channel it came on and a way to answer.

    A processor that returns None can answer later with `respond` (e.g. a suspended long poll).
    `invoke`/`send_oneway` send requests of our own to the same peer.
    """

    __slots__ = ("_responded", "channel", "request")

    def __init__(self, channel: Channel, request: RemotingCommand) -> None:
        self.channel = channel
        self.request = request
        self._responded = False

    @property
    def remote_address(self) -> str:
        return self.channel.remote_address

    @property
    def local_address(self) -> str:
        return self.channel.local_address

    @property
    def responded(self) -> bool:
        return self._responded

    def respond(self, response: RemotingCommand) -> bool:
        """Send the response (opaque and response flag are set here). Returns False if it was dropped:
        oneway request, already answered, or channel closed."""
        request = self.request
        if request.is_oneway:
            logger.debug("not answering oneway %s from %s", request.describe(), self.channel.remote_address)
            return False
        if self._responded:
            logger.warning("dropping a second response to %s from %s", request.describe(),
                           self.channel.remote_address)
            return False
        self._responded = True
        response.opaque = request.opaque
        response.flag |= RESPONSE_FLAG
        try:
            return self.channel.send(response)
        except (ProtocolError, TypeError, ValueError) as exc:
            logger.error("cannot encode the response to %s: %s", request.describe(), exc)
            fallback = request.make_response(ResponseCode.SYSTEM_ERROR,
                                             remark=f"cannot encode response: {describe_exception(exc)}")
            return self.channel.send(fallback)

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request of our own to this peer and await its response."""
        return await self.channel.invoke(request, timeout)

    async def send_oneway(self, request: RemotingCommand) -> None:
        """Send a oneway request of our own to this peer."""
        await self.channel.send_oneway(request)

    def __repr__(self) -> str:
        return f"RequestContext({self.request.describe()} on {self.channel})"


#: A request handler: sync or async; returns the response, or None for "no response now".
Processor: TypeAlias = Callable[
    [RequestContext, RemotingCommand], Awaitable[RemotingCommand | None] | RemotingCommand | None
]
#: What a group processor gives for one request: what a `Processor` would return, or the exception it would raise.
GroupResult: TypeAlias = Awaitable[RemotingCommand | None] | RemotingCommand | Exception | None
#: Handles requests of one code that arrived together on one channel, in their order (one result per
#: context). Lets a processor share per-request costs, e.g. one store write for many sends.
GroupProcessor: TypeAlias = Callable[[Sequence["RequestContext"]], Sequence[GroupResult]]
#: A connection lifecycle hook (may be sync or async).
ChannelCallback: TypeAlias = Callable[["Channel"], object]
#: Runs before every request is routed (e.g. an ACL check): None lets it through, a response refuses it.
RequestHook: TypeAlias = Callable[["Channel", RemotingCommand], RemotingCommand | None]


class RequestDispatcher:
    """Routes incoming requests to processors by code and turns their results into responses."""

    def __init__(self, role: str, *, max_inflight_requests: int | None = None) -> None:
        if max_inflight_requests is not None and max_inflight_requests <= 0:
            raise ValueError(f"max_inflight_requests must be positive, got {max_inflight_requests}")
        self.role = role
        self.max_inflight_requests = max_inflight_requests
        self.default_processor: Processor | None = None
        self.request_hook: RequestHook | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self._processors: dict[int, Processor] = {}
        #: codes whose requests, when several arrive in one read, go to a group processor together
        self.group_processors: dict[int, GroupProcessor] = {}

    def register(self, code: int, processor: Processor, *, group: GroupProcessor | None = None) -> None:
        self._processors[int(code)] = processor
        if group is None:
            self.group_processors.pop(int(code), None)
        else:
            self.group_processors[int(code)] = group

    def processor_for(self, code: int) -> Processor | None:
        return self._processors.get(code, self.default_processor)

    def dispatch(self, channel: Channel, request: RemotingCommand) -> None:
        if self.request_hook is not None and self._refused_by_hook(self.request_hook, channel, request):
            return
        processor = self._processors.get(request.code, self.default_processor)
        if processor is None:
            logger.debug("%s: no processor for %s from %s", self.role, request.describe(),
                         channel.remote_address)
            if not request.is_oneway:
                channel.send_quietly(request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                                           remark=not_supported_remark(request.code)))
            return
        if self._over_limit(channel, request):
            return
        context = RequestContext(channel, request)
        try:
            result = processor(context, request)
        except Exception as exc:
            self._processor_failed(context, exc)
            return
        self._handle_result(context, result)

    def _over_limit(self, channel: Channel, request: RemotingCommand) -> bool:
        """Whether `max_inflight_requests` refuses the request (answered SYSTEM_BUSY then)."""
        limit = self.max_inflight_requests
        if limit is None or len(self.tasks) < limit:
            return False
        logger.warning("%s: %d requests in flight, rejecting %s from %s", self.role, len(self.tasks),
                       request.describe(), channel.remote_address)
        if not request.is_oneway:
            channel.send_quietly(request.make_response(ResponseCode.SYSTEM_BUSY, remark=OVERLOAD_REMARK))
        return True

    def dispatch_group(self, channel: Channel, requests: Sequence[RemotingCommand]) -> None:
        """Dispatch requests of one code with a group processor that arrived together, in order.

        Each passes the request hook and the in-flight limit on its own; those let through go to the
        group processor in one call (a single one goes to the plain processor).
        """
        group = self.group_processors.get(requests[0].code)
        if group is None or len(requests) == 1:
            for request in requests:
                self.dispatch(channel, request)
            return
        hook = self.request_hook
        contexts: list[RequestContext] = []
        for request in requests:
            if hook is not None and self._refused_by_hook(hook, channel, request):
                continue
            if self._over_limit(channel, request):
                continue
            contexts.append(RequestContext(channel, request))
        if not contexts:
            return
        results: Sequence[GroupResult]
        try:
            if len(contexts) == 1:
                results = [self._processors[contexts[0].request.code](contexts[0], contexts[0].request)]
            else:
                results = group(contexts)
                if len(results) != len(contexts):
                    raise TypeError(f"group processor returned {len(results)} results for {len(contexts)} requests")
        except Exception as exc:
            for context in contexts:
                if not context.responded:
                    self._processor_failed(context, exc)
            return
        for context, result in zip(contexts, results, strict=True):
            self._handle_result(context, result)

    def _handle_result(self, context: RequestContext, result: GroupResult) -> None:
        if result is None:
            return
        if isinstance(result, RemotingCommand):
            context.respond(result)
            return
        if isinstance(result, Exception):
            self._processor_failed(context, result)
            return
        if inspect.isawaitable(result):
            channel = context.channel
            task = asyncio.get_running_loop().create_task(self._run(context, result))
            self.tasks.add(task)
            channel.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            task.add_done_callback(channel.tasks.discard)
            return
        self._processor_failed(context, TypeError(f"processor returned {type(result).__name__}, "
                                                  "expected RemotingCommand or None"))

    def _refused_by_hook(self, hook: RequestHook, channel: Channel, request: RemotingCommand) -> bool:
        try:
            refusal = hook(channel, request)
        except Exception as exc:
            logger.error("%s: request hook failed on %s from %s", self.role, request.describe(),
                         channel.remote_address, exc_info=exc)
            refusal = request.make_response(ResponseCode.SYSTEM_ERROR, remark=describe_exception(exc))
        if refusal is None:
            return False
        if not request.is_oneway:
            refusal.opaque = request.opaque
            channel.send_quietly(refusal)
        return True

    async def _run(self, context: RequestContext, awaitable: Awaitable[RemotingCommand | None]) -> None:
        try:
            result = await awaitable
        except Exception as exc:
            self._processor_failed(context, exc)
            return
        if result is None:
            return
        if isinstance(result, RemotingCommand):
            context.respond(result)
        else:
            self._processor_failed(context, TypeError(f"processor returned {type(result).__name__}, "
                                                      "expected RemotingCommand or None"))

    def _processor_failed(self, context: RequestContext, exc: Exception) -> None:
        request = context.request
        if isinstance(exc, ProtocolError):
            # the peer's fault (a malformed header or body), not ours: a clear answer, no traceback
            logger.info("%s: rejecting %s from %s: %s", self.role, request.describe(),
                        context.channel.remote_address, exc)
            response = bad_input_response(request, exc)
        else:
            logger.error("%s: processor failed on %s from %s", self.role, request.describe(),
                         context.channel.remote_address, exc_info=exc)
            response = request.make_response(ResponseCode.SYSTEM_ERROR, remark=describe_exception(exc))
        if request.is_oneway or context.responded:
            return
        context.respond(response)


class Channel(asyncio.Protocol):
    """One TCP connection speaking the remoting protocol, on either side.

    Writes are whole frames queued in order and written once per loop turn (or sooner when a lot is
    queued). With ``pause_reading_on_backpressure`` (server side) reading stops while the transport's
    write buffer is above its high-water mark, so a peer that does not read its responses cannot make
    us buffer without bound.
    """

    def __init__(
        self,
        dispatcher: RequestDispatcher,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        pause_reading_on_backpressure: bool = False,
        on_open: Callable[[Channel], None] | None = None,
        on_lost: Callable[[Channel], None] | None = None,
    ) -> None:
        self.id = next(_channel_ids)
        self.remote_address = "unknown"
        self.local_address = "unknown"
        self.last_activity = 0.0
        #: Handler tasks started for requests received on this channel.
        self.tasks: set[asyncio.Task[None]] = set()
        self._dispatcher = dispatcher
        self._decoder = FrameDecoder(max_frame_size)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._closed = False
        self._lost = False
        self._closed_waiter: asyncio.Future[None] = self._loop.create_future()
        #: opaque -> (the caller's future, its deadline on the loop's clock, the request, its timeout)
        self._pending: dict[int, tuple[asyncio.Future[RemotingCommand], float, RemotingCommand, float]] = {}
        # One timer for all pending requests, due at the earliest deadline.
        self._expiry = DeadlineTimer(self._expire_due)
        self._outbox: list[bytes] = []
        self._outbox_bytes = 0
        self._flush_scheduled = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._pause_reading_on_backpressure = pause_reading_on_backpressure
        self._read_paused = False
        self._reading_stopped = False
        self._stall_timer: asyncio.TimerHandle | None = None
        self._closer: asyncio.Task[None] | None = None
        self._on_open = on_open
        self._on_lost = on_lost

    # ------------------------------------------------------------------ state

    @property
    def closed(self) -> bool:
        """True once closing started or the connection was lost; nothing more is sent."""
        return self._closed

    @property
    def reading_paused(self) -> bool:
        """True while reading is paused (write backpressure, a malformed frame, or shutdown)."""
        return self._read_paused

    @property
    def pending_requests(self) -> int:
        """Our requests on this channel still waiting for a response."""
        return len(self._pending)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Channel#{self.id}({self.local_address} <-> {self.remote_address}, {state})"

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's stream transports are not subclasses of asyncio.Transport, only alike
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_WATER, low=WRITE_BUFFER_LOW_WATER)
        self.remote_address = _format_address(transport.get_extra_info("peername"))
        self.local_address = _format_address(transport.get_extra_info("sockname"))
        self.last_activity = self._loop.time()
        logger.debug("%s: connection opened", self)
        if self._on_open is not None:
            self._on_open(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._lost = True
        self._cancel_stall_timer()
        self._outbox.clear()
        self._outbox_bytes = 0
        if exc is not None:
            logger.debug("%s: connection lost: %s", self, exc)
        else:
            logger.debug("%s: connection closed", self)
        self._fail_pending()
        self._wake_drain_waiters()
        if not self._closed_waiter.done():
            self._closed_waiter.set_result(None)
        if self._on_lost is not None:
            self._on_lost(self)

    def data_received(self, data: bytes) -> None:
        if self._reading_stopped:
            return
        self.last_activity = self._loop.time()
        decoder = self._decoder
        try:
            commands = decoder.feed(data)
        except ProtocolError as exc:
            self._protocol_error(exc)
            return
        except Exception as exc:  # a decoder bug must not escape into the event loop
            logger.exception("%s: unexpected error decoding input", self)
            self._protocol_error(ProtocolError(f"undecodable input: {describe_exception(exc)}"))
            return
        dispatcher = self._dispatcher
        if len(commands) == 1 or not dispatcher.group_processors:
            for command in commands:
                if command.flag & RESPONSE_FLAG:
                    self._complete(command)
                else:
                    dispatcher.dispatch(self, command)
        else:
            self._dispatch_grouped(commands)
        if decoder.error is not None:
            self._protocol_error(decoder.error)

    def _dispatch_grouped(self, commands: list[RemotingCommand]) -> None:
        """Dispatch one read's commands in order, handing neighbouring requests of a grouped code over together."""
        dispatcher = self._dispatcher
        grouped = dispatcher.group_processors
        pending: list[RemotingCommand] = []
        for command in commands:
            if command.flag & RESPONSE_FLAG:
                if pending:
                    dispatcher.dispatch_group(self, pending)
                    pending = []
                self._complete(command)
            elif command.code in grouped:
                if pending and pending[0].code != command.code:
                    dispatcher.dispatch_group(self, pending)
                    pending = []
                pending.append(command)
            else:
                if pending:
                    dispatcher.dispatch_group(self, pending)
                    pending = []
                dispatcher.dispatch(self, command)
        if pending:
            dispatcher.dispatch_group(self, pending)

    def pause_writing(self) -> None:
        self._write_paused = True
        if not self._pause_reading_on_backpressure:
            return
        if self._stall_timer is None and not self._closed:
            self._stall_timer = self._loop.call_later(WRITE_STALL_TIMEOUT, self._write_stalled)
        if not self._read_paused and self._transport is not None:
            logger.debug("%s: write buffer full, pausing reads", self)
            self._read_paused = True
            self._transport.pause_reading()

    def _write_stalled(self) -> None:
        self._stall_timer = None
        if self._write_paused and not self._closed and self._transport is not None:
            logger.warning("%s: peer has not read its responses for %.0f s (%d bytes buffered): disconnecting", self,
                           WRITE_STALL_TIMEOUT, self._transport.get_write_buffer_size())
            self.abort()

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def resume_writing(self) -> None:
        self._write_paused = False
        self._cancel_stall_timer()
        self._wake_drain_waiters()
        if self._read_paused and not (self._reading_stopped or self._closed) and self._transport is not None:
            self._read_paused = False
            self._transport.resume_reading()

    # ------------------------------------------------------------------ sending

    def send(self, command: RemotingCommand) -> bool:
        """Queue one command's frame. Returns False (and logs at debug level) if the channel is closed.

        Raises `ProtocolError` if the command cannot be encoded (e.g. a header over 16 MiB).
        """
        if self._closed:
            logger.debug("%s: dropping %s, channel closed", self, command.describe())
            return False
        frame = encode_frame(command)
        self._outbox.append(frame)
        self._outbox_bytes += len(frame)
        if self._outbox_bytes >= OUTBOX_FLUSH_BYTES:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        return True

    def send_quietly(self, command: RemotingCommand) -> bool:
        """`send` that logs instead of raising when the command cannot be encoded."""
        try:
            return self.send(command)
        except ProtocolError as exc:
            logger.error("%s: cannot encode %s: %s", self, command.describe(), exc)
            return False

    def flush(self) -> None:
        """Write what `send` queued now rather than at the end of the loop's turn (call on the loop)."""
        self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        outbox = self._outbox
        if not outbox:
            return
        data = outbox[0] if len(outbox) == 1 else b"".join(outbox)
        self._outbox = []
        self._outbox_bytes = 0
        if self._transport is None or self._lost:
            return
        self._transport.write(data)
        self.last_activity = self._loop.time()
        if self._pause_reading_on_backpressure and self._transport.get_write_buffer_size() > WRITE_BUFFER_HARD_LIMIT:
            logger.warning("%s: peer does not read its responses (%d bytes buffered, limit %d): disconnecting", self,
                           self._transport.get_write_buffer_size(), WRITE_BUFFER_HARD_LIMIT)
            self.abort()

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if not self._write_paused or self._closed:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and await the response with the same opaque.

        Raises `RemotingTimeoutError` after ``timeout`` seconds and `RemotingConnectionClosedError`
        if the channel closes first.
        """
        if request.is_oneway or request.is_response:
            raise ValueError(f"invoke needs a two-way request, got {request.describe()}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if self._write_paused:
            await self.drain()
        if self._closed:
            raise RemotingConnectionClosedError(f"{self}: cannot send {request.describe()}, channel closed")
        pending = self._pending
        opaque = request.opaque
        while opaque in pending:
            opaque = request.opaque = next_opaque()
        loop = self._loop
        future: asyncio.Future[RemotingCommand] = loop.create_future()
        deadline = loop.time() + timeout
        pending[opaque] = (future, deadline, request, timeout)
        try:
            self.send(request)
        except BaseException:
            del pending[opaque]
            raise
        self._expiry.arm(loop, deadline)
        try:
            return await future
        finally:
            entry = pending.get(opaque)
            if entry is not None and entry[0] is future:
                del pending[opaque]

    async def send_oneway(self, request: RemotingCommand) -> None:
        """Send a request the peer must not answer (the oneway flag is set on ``request``)."""
        if request.is_response:
            raise ValueError(f"send_oneway needs a request, got {request.describe()}")
        request.flag |= ONEWAY_FLAG
        if self._write_paused:
            await self.drain()
        if self._closed:
            raise RemotingConnectionClosedError(f"{self}: cannot send {request.describe()}, channel closed")
        self.send(request)

    def _expire_due(self, now: float) -> float | None:
        """Fail the requests whose deadline is up; the earliest deadline left, if any (`DeadlineTimer`)."""
        earliest: float | None = None
        pending = self._pending
        for opaque, (future, deadline, request, timeout) in list(pending.items()):
            if deadline > now:
                earliest = deadline if earliest is None else min(earliest, deadline)
                continue
            del pending[opaque]
            if not future.done():
                future.set_exception(RemotingTimeoutError(
                    f"no response to {request.code_name} (code {request.code}, opaque {opaque}) from "
                    f"{self.remote_address} within {timeout * 1000:.0f} ms"
                ))
        return None if self._lost else earliest

    def _complete(self, response: RemotingCommand) -> None:
        entry = self._pending.pop(response.opaque, None)
        if entry is None or entry[0].done():
            logger.debug("%s: no caller waits for %s (late or unsolicited)", self, response.describe())
            return
        entry[0].set_result(response)

    def _fail_pending(self) -> None:
        self._expiry.cancel()
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for opaque, (future, _, _, _) in pending.items():
            if not future.done():
                future.set_exception(RemotingConnectionClosedError(
                    f"connection to {self.remote_address} closed while waiting for the response to "
                    f"opaque {opaque}"
                ))

    # ------------------------------------------------------------------ closing

    def stop_reading(self) -> None:
        """Stop reading for good (a closing channel still sends what its handlers produce)."""
        self._reading_stopped = True
        if not self._read_paused and self._transport is not None and not self._lost:
            self._read_paused = True
            self._transport.pause_reading()

    def close(self) -> None:
        """Flush queued frames and close; pending invocations fail right away."""
        if self._closed:
            return
        self._flush()
        self._closed = True
        self._fail_pending()
        self._wake_drain_waiters()
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close at once, discarding unsent data."""
        self.close()
        if self._transport is not None and not self._lost:
            self._transport.abort()

    async def wait_closed(self) -> None:
        """Wait until the connection is fully closed."""
        await asyncio.shield(self._closed_waiter)

    async def close_and_wait(self, timeout: float = 1.0) -> None:
        """Close gracefully; abort if the peer does not take the remaining data within ``timeout``."""
        self.close()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._closed_waiter)
        except TimeoutError:
            self.abort()
            await asyncio.shield(self._closed_waiter)

    def _protocol_error(self, exc: ProtocolError) -> None:
        if self._reading_stopped or self._closed:
            return
        logger.warning("%s: closing connection after a malformed frame: %s: %s", self,
                       type(exc).__name__, exc)
        self.stop_reading()
        if self.tasks:
            self._closer = self._loop.create_task(self._close_after_handlers())
        else:
            self.close()

    async def _close_after_handlers(self) -> None:
        await asyncio.wait(set(self.tasks), timeout=PROTOCOL_ERROR_CLOSE_GRACE)
        self.close()


async def sweep_idle_channels(
    channels: Callable[[], Iterable[Channel]], max_idle_seconds: float, role: str
) -> None:
    """Close channels silent in both directions for over ``max_idle_seconds`` (runs until cancelled)."""
    loop = asyncio.get_running_loop()
    interval = min(max(max_idle_seconds / 4, 0.05), 5.0)
    while True:
        await asyncio.sleep(interval)
        now = loop.time()
        for channel in list(channels()):
            if not channel.closed and now - channel.last_activity > max_idle_seconds:
                logger.info("%s: closing %s, idle for %.1fs", role, channel, now - channel.last_activity)
                channel.close()


__all__ = [
    "Channel",
    "ChannelCallback",
    "Processor",
    "RequestContext",
    "RequestDispatcher",
    "run_channel_callback",
    "sweep_idle_channels",
]
