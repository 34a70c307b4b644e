"""Remoting requests made inside the broker on behalf of a gRPC client.

The gRPC endpoint does what RocketMQ's proxy does in its local mode: a 5.x send, transaction end or
dead-lettering becomes the remoting request a 4.x client would send, handed straight to the broker's
processor for that code, so both protocols share one path (checks, half messages, delays, stats).

`LocalChannel` stands in for the client's connection: the processor's late answers come back through
it, and requests the broker sends to the client (a transaction check-back) go to a callback that
turns them into telemetry commands. Requests are signed with the gRPC caller's credentials when ACL
is on, so the processors' own permission checks see the same account.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable

from rocketflow.acl import AclClientHook, SessionCredentials
from rocketflow.net import Channel, Processor, RequestContext
from rocketflow.net.connection import RequestDispatcher
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import RemotingCommand

logger = logging.getLogger(__name__)

_opaques = itertools.count(1 << 30)


class LocalChannel(Channel):
    """A client connection that is not a socket: what the broker sends on it goes to callbacks."""

    def __init__(self, remote_address: str, on_request: Callable[[RemotingCommand], None] | None = None) -> None:
        super().__init__(RequestDispatcher("local"))
        self.remote_address = remote_address
        self.local_address = "local"
        self.last_activity = asyncio.get_running_loop().time()
        self._on_request = on_request
        self._waiting: dict[int, asyncio.Future[RemotingCommand]] = {}

    def send(self, command: RemotingCommand) -> bool:
        if self.closed:
            return False
        if command.is_response:
            waiter = self._waiting.pop(command.opaque, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(command)
            return True
        if self._on_request is not None:
            try:
                self._on_request(command)
            except Exception:
                logger.exception("cannot forward %s to a gRPC client", command.describe())
                return False
            return True
        return False

    def expect(self, opaque: int) -> asyncio.Future[RemotingCommand]:
        waiter: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[opaque] = waiter
        return waiter

    def forget(self, opaque: int) -> None:
        self._waiting.pop(opaque, None)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.cancel()
        self._waiting.clear()
        with contextlib.suppress(asyncio.InvalidStateError):
            self._closed_waiter.set_result(None)

    def abort(self) -> None:
        self.close()


ProcessorLookup = Callable[[int], Processor | None]


async def invoke_local(lookup: ProcessorLookup, channel: LocalChannel, code: int, ext_fields: dict[str, str],
                       body: bytes = b"", *, credentials: SessionCredentials | None = None,
                       timeout: float = 30.0) -> RemotingCommand:
    """Run the broker's processor for ``code`` on a request made from these parts; its response."""
    request = RemotingCommand.request(code, ext_fields, body)
    request.opaque = next(_opaques)
    if credentials is not None:
        AclClientHook(credentials)(channel.remote_address, request)
    processor = lookup(code)
    if processor is None:
        return request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f"no processor for {code}")
    ctx = RequestContext(channel, request)
    waiter = channel.expect(request.opaque)
    try:
        result = processor(ctx, request)
        if isinstance(result, Awaitable):
            result = await result
        if result is None:  # answered later through ctx.respond, i.e. channel.send
            async with asyncio.timeout(timeout):
                return await waiter
        return result
    finally:
        channel.forget(request.opaque)


__all__ = ["LocalChannel", "ProcessorLookup", "invoke_local"]
