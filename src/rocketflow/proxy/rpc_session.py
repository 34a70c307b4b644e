"""The RPCs of a client's session: routes, heartbeats, termination, and the telemetry stream (settings
in, transaction check-backs out)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.protocol.names import is_readable, is_writeable
from rocketflow.proxy.calls import ClientSession, Refused, ok, to_duration
from rocketflow.proxy.rpc_base import ServiceBase

logger = logging.getLogger(__name__)


class SessionRpcs(ServiceBase):
    """Routes, heartbeats, termination and telemetry: a client's life on the endpoint."""

    async def QueryRoute(self, request: spb.QueryRouteRequest,
                         context: grpc.aio.ServicerContext[Any, Any]) -> spb.QueryRouteResponse:
        try:
            caller = self._caller(context)
            name = self._topic_name(request.topic)
            topic_config = self._topic(name)
            del caller
        except Refused as refused:
            return spb.QueryRouteResponse(status=refused.status)
        broker = self._broker(request.endpoints if request.HasField("endpoints") else None)
        types = self.accepted_types(topic_config)
        queues = []
        readable, writeable = is_readable(topic_config.perm), is_writeable(topic_config.perm)
        for queue_id in range(max(topic_config.read_queue_nums, topic_config.write_queue_nums)):
            read = readable and queue_id < topic_config.read_queue_nums
            write = writeable and queue_id < topic_config.write_queue_nums
            permission = pb.READ_WRITE if read and write else pb.READ if read else pb.WRITE if write else pb.NONE
            resource = pb.Resource(name=name, resource_namespace=request.topic.resource_namespace)
            queues.append(pb.MessageQueue(topic=resource, id=queue_id, permission=permission, broker=broker,
                                          accept_message_types=types))
        return spb.QueryRouteResponse(status=ok(), message_queues=queues)

    async def Heartbeat(self, request: spb.HeartbeatRequest,
                        context: grpc.aio.ServicerContext[Any, Any]) -> spb.HeartbeatResponse:
        try:
            caller = self._caller(context)
            session = self._session(caller)
            if request.client_type:
                session.client_type = request.client_type
            if request.HasField("group") and request.group.name:
                self._group(self._group_name(request.group))
            if session.producer_groups:
                await self._register_producers(session, [])
        except Refused as refused:
            return spb.HeartbeatResponse(status=refused.status)
        return spb.HeartbeatResponse(status=ok())

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: grpc.aio.ServicerContext[Any, Any]
                                      ) -> spb.NotifyClientTerminationResponse:
        try:
            caller = self._caller(context)
        except Refused as refused:
            return spb.NotifyClientTerminationResponse(status=refused.status)
        await self._end_session(caller.client_id)
        return spb.NotifyClientTerminationResponse(status=ok())

    def server_settings(self, settings: pb.Settings) -> pb.Settings:
        """The settings answered on the telemetry stream: the client's, with the server's values."""
        answer = pb.Settings()
        answer.CopyFrom(settings)
        config = self.access.config
        if settings.WhichOneof("pub_sub") == "publishing":
            answer.publishing.max_body_size = config.max_message_size
            answer.publishing.validate_message_type = True
            attempts = settings.backoff_policy.max_attempts if settings.HasField("backoff_policy") else 3
            answer.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=attempts or 3, exponential_backoff=pb.ExponentialBackoff(
                    initial=to_duration(10), max=to_duration(1000), multiplier=2.0)))
        elif settings.WhichOneof("pub_sub") == "subscription":
            subscription = answer.subscription
            group_config = self.access.group(settings.subscription.group.name) if settings.subscription.group.name \
                else None
            subscription.fifo = bool(getattr(group_config, "consume_message_orderly", False))
            subscription.receive_batch_size = 32
            subscription.long_polling_timeout.CopyFrom(to_duration(self.long_polling_ms))
            attempts = self._max_attempts(group_config) if group_config is not None else 17
            answer.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=attempts,
                customized_backoff=pb.CustomizedBackoff(next=[to_duration(ms) for ms in self.consumer_backoff_ms])))
        return answer

    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand],
                        context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[spb.TelemetryCommand]:
        try:
            caller = self._caller(context)
        except Refused as refused:
            yield spb.TelemetryCommand(status=refused.status)
            return
        session = self._session(caller)
        session.streams += 1
        incoming: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for command in request_iterator:
                    incoming.put_nowait(command)
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass
            finally:
                incoming.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                get_in = asyncio.ensure_future(incoming.get())
                get_out = asyncio.ensure_future(session.outbox.get())
                done, _ = await asyncio.wait({get_in, get_out}, return_when=asyncio.FIRST_COMPLETED)
                for pending_get in (get_in, get_out):
                    if pending_get not in done:
                        pending_get.cancel()
                if get_out in done:
                    yield get_out.result()
                if get_in in done:
                    command = get_in.result()
                    if command is None:
                        return
                    answer = await self._telemetry_command(session, command)
                    if answer is not None:
                        yield answer
        finally:
            reader.cancel()
            session.streams -= 1

    async def _telemetry_command(self, session: ClientSession,
                                 command: spb.TelemetryCommand) -> spb.TelemetryCommand | None:
        kind = command.WhichOneof("command")
        if kind != "settings":
            return None  # thread stack traces, verify results: nothing to do
        settings = command.settings
        session.client_type = settings.client_type
        if settings.WhichOneof("pub_sub") == "subscription" and settings.subscription.group.name:
            try:
                self._group(self._group_name(settings.subscription.group))
            except Refused as refused:
                return spb.TelemetryCommand(status=refused.status)
        if settings.WhichOneof("pub_sub") == "publishing":
            topics = [topic.name for topic in settings.publishing.topics if topic.name]
            await self._register_producers(session, topics)
        return spb.TelemetryCommand(status=ok(), settings=self.server_settings(settings))



__all__ = ["SessionRpcs"]
