"""A plain gRPC client of rocketflow's 5.x endpoint for tests (no official client): each RPC called directly,
with the client id in the metadata as the official clients send it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.grpc_protocol import service_pb2_grpc as sgrpc

__all__ = ["RawClient", "Received", "ms"]


def ms(value: int) -> Duration:
    return Duration(seconds=value // 1000, nanos=(value % 1000) * 1_000_000)


@dataclass
class Received:
    status: pb.Status
    messages: list[pb.Message]


class RawClient:
    """Calls the endpoint's RPCs directly (a client id in the metadata, as the official clients send it)."""

    def __init__(self, address: str, credentials: grpc.ChannelCredentials | None = None) -> None:
        self.address = address
        self.channel = (grpc.insecure_channel(address) if credentials is None
                        else grpc.secure_channel(address, credentials))
        self.stub = sgrpc.MessagingServiceStub(self.channel)
        self.client_id = f"raw-{uuid.uuid4().hex[:8]}"
        self.metadata = (("x-mq-client-id", self.client_id), ("x-mq-protocol", "v2"))

    def close(self) -> None:
        self.channel.close()

    def route(self, topic: str) -> spb.QueryRouteResponse:
        host, port = self.address.rsplit(":", 1)
        endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])
        return self.stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints),
                                    metadata=self.metadata, timeout=10)

    def send(self, topic: str, body: bytes, *, tag: str | None = None, keys: tuple[str, ...] = (),
             properties: dict[str, str] | None = None, group: str | None = None, deliver_ms: int | None = None,
             message_type: int | None = None) -> spb.SendMessageResponse:
        message = pb.Message(topic=pb.Resource(name=topic), body=body)
        system = message.system_properties
        system.message_id = uuid.uuid4().hex.upper()
        if tag is not None:
            system.tag = tag
        system.keys.extend(keys)
        system.born_timestamp.FromMilliseconds(int(time.time() * 1000))
        system.born_host = "127.0.0.1"
        if group is not None:
            system.message_group = group
        if deliver_ms is not None:
            system.delivery_timestamp.FromMilliseconds(deliver_ms)
        system.message_type = message_type if message_type is not None else (
            pb.FIFO if group is not None else pb.DELAY if deliver_ms is not None else pb.NORMAL)
        for key, value in (properties or {}).items():
            message.user_properties[key] = value
        return self.stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=self.metadata, timeout=10)

    def receive(self, group: str, topic: str, *, batch: int = 32, invisible_ms: int | None = 5000,
                polling_ms: int = 500, expression: str = "*", auto_renew: bool = False) -> Received:
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression=expression), batch_size=batch,
            auto_renew=auto_renew, long_polling_timeout=ms(polling_ms))
        if invisible_ms is not None:
            request.invisible_duration.CopyFrom(ms(invisible_ms))
        status: pb.Status | None = None
        messages: list[pb.Message] = []
        for response in self.stub.ReceiveMessage(request, metadata=self.metadata, timeout=polling_ms / 1000 + 10):
            if response.HasField("status"):
                status = response.status
            elif response.HasField("message"):
                messages.append(response.message)
        assert status is not None, "a receive answers a status"
        return Received(status, messages)

    def receive_all(self, group: str, topic: str, count: int, timeout: float = 15.0, **options: Any
                    ) -> list[pb.Message]:
        found: list[pb.Message] = []
        deadline = time.monotonic() + timeout
        while len(found) < count and time.monotonic() < deadline:
            found += self.receive(group, topic, **options).messages
        return found

    def ack(self, group: str, topic: str, *handles: str) -> spb.AckMessageResponse:
        entries = [spb.AckMessageEntry(message_id=f"m{i}", receipt_handle=handle) for i, handle in enumerate(handles)]
        return self.stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                                          entries=entries), metadata=self.metadata, timeout=10)

    def change(self, group: str, topic: str, handle: str, invisible_ms: int) -> spb.ChangeInvisibleDurationResponse:
        return self.stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=handle,
            invisible_duration=ms(invisible_ms), message_id="m"), metadata=self.metadata, timeout=10)

    def settings(self, settings: pb.Settings) -> Iterator[spb.TelemetryCommand]:
        return iter(self.stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=self.metadata,
                                        timeout=10))
