"""`SimpleConsumer`: RocketMQ 5's receive / ack / change-invisibility consumption, from rocketflow's client.

It speaks gRPC to the broker's 5.x endpoint (``--grpc-port``; needs the ``grpc`` extra), as Apache's
5.x clients do, rather than the remoting protocol's pop codes: the broker then has one implementation
of consumption by invisibility (the endpoint's), shared with every official 5.x client, and the
consumer gets the same statuses those clients get. A receive takes up to ``max_messages`` of the
subscribed topics' messages (long polling up to ``await_duration``), hidden from the group's other
consumers for ``invisible_duration``; `ack` finishes one, `change_invisible_duration` hides it again
for a new time (and gives it a new receipt handle). An unacked message is received again once its
invisible time passes, with its delivery attempt + 1.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rocketflow.client.errors import MQBrokerError, MQClientError

logger = logging.getLogger(__name__)

_client_ids = itertools.count(1)


@dataclass(slots=True)
class ReceivedMessage:
    """A message a `SimpleConsumer` received; ``receipt_handle`` names this delivery."""

    topic: str
    body: bytes
    message_id: str
    receipt_handle: str
    delivery_attempt: int
    tags: str | None = None
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    message_group: str | None = None
    queue_id: int = 0
    queue_offset: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0


class SimpleConsumer:
    """Receives with invisibility from a broker's gRPC endpoint (``host:port``, RocketMQ's proxy port)."""

    def __init__(self, group: str, endpoint: str, subscriptions: dict[str, str] | None = None, *,
                 await_duration: float = 5.0, request_timeout: float = 5.0, tls: bool = False,
                 access_key: str | None = None, secret_key: str | None = None) -> None:
        self.group = group
        self.endpoint = endpoint
        self.subscriptions = dict(subscriptions or {})
        self.await_duration = await_duration
        self.request_timeout = request_timeout
        self.tls = tls
        self.access_key = access_key
        self.secret_key = secret_key
        self.client_id = f"{socket.gethostname()}@{os.getpid()}@{next(_client_ids)}@simple"
        self._channel: Any = None
        self._stub: Any = None
        self._topic_turn = itertools.count()

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Receive ``topic``'s messages whose tag matches ``expression`` (``"*"``, ``"TagA || TagB"``)."""
        self.subscriptions[topic] = expression

    def start(self) -> None:
        try:
            import grpc

            from rocketflow.grpc_protocol import service_pb2_grpc
        except ImportError as exc:
            raise MQClientError("SimpleConsumer needs the grpc extra: pip install 'rocketflow[grpc]'") from exc
        options = [("grpc.max_receive_message_length", -1)]
        if self.tls:
            self._channel = grpc.secure_channel(self.endpoint, grpc.ssl_channel_credentials(), options)
        else:
            self._channel = grpc.insecure_channel(self.endpoint, options)
        self._stub = service_pb2_grpc.MessagingServiceStub(self._channel)

    def shutdown(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None

    def __enter__(self) -> SimpleConsumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ calls

    def _metadata(self) -> list[tuple[str, str]]:
        now = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        metadata = [("x-mq-client-id", self.client_id), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"),
                    ("x-mq-date-time", now)]
        if self.access_key and self.secret_key:
            signature = hmac.new(self.secret_key.encode(), now.encode(), hashlib.sha1).hexdigest().upper()
            metadata.append(("authorization", f"MQv2-HMAC-SHA1 Credential={self.access_key}, "
                                              f"SignedHeaders=x-mq-date-time, Signature={signature}"))
        return metadata

    def _require_started(self) -> Any:
        if self._stub is None:
            raise MQClientError("the simple consumer is not started")
        return self._stub

    @staticmethod
    def _check(status: Any, what: str) -> None:
        from rocketflow.grpc_protocol import definition_pb2 as pb

        if status.code not in (pb.OK, pb.MULTIPLE_RESULTS, pb.MESSAGE_NOT_FOUND):
            raise MQBrokerError(int(status.code), f"{what}: {pb.Code.Name(status.code)} {status.message}")

    def receive(self, max_messages: int = 16, invisible_duration: float = 30.0) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages of one subscribed topic (the topics take turns); waits up to
        ``await_duration`` seconds when none is there. Empty when none came."""
        from rocketflow.grpc_protocol import definition_pb2 as pb
        from rocketflow.grpc_protocol import service_pb2 as spb

        stub = self._require_started()
        if not self.subscriptions:
            raise MQClientError("subscribe to a topic first")
        topics = sorted(self.subscriptions)
        topic = topics[next(self._topic_turn) % len(topics)]
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=self.group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression=self.subscriptions[topic]),
            batch_size=max_messages)
        request.invisible_duration.FromMilliseconds(int(invisible_duration * 1000))
        request.long_polling_timeout.FromMilliseconds(int(self.await_duration * 1000))
        received: list[ReceivedMessage] = []
        for response in stub.ReceiveMessage(request, metadata=self._metadata(),
                                            timeout=self.await_duration + self.request_timeout):
            content = response.WhichOneof("content")
            if content == "status":
                self._check(response.status, "receive")
            elif content == "message":
                received.append(_received(response.message))
        return received

    def ack(self, message: ReceivedMessage) -> None:
        """Done with ``message``: it is not delivered again."""
        from rocketflow.grpc_protocol import definition_pb2 as pb
        from rocketflow.grpc_protocol import service_pb2 as spb

        response = self._require_started().AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name=self.group), topic=pb.Resource(name=message.topic),
            entries=[spb.AckMessageEntry(message_id=message.message_id, receipt_handle=message.receipt_handle)]),
            metadata=self._metadata(), timeout=self.request_timeout)
        self._check(response.status, f"ack of {message.message_id}")

    def change_invisible_duration(self, message: ReceivedMessage, invisible_duration: float) -> None:
        """Hide ``message`` for ``invisible_duration`` seconds from now; its receipt handle is renewed."""
        from rocketflow.grpc_protocol import definition_pb2 as pb
        from rocketflow.grpc_protocol import service_pb2 as spb

        request = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=self.group), topic=pb.Resource(name=message.topic),
            receipt_handle=message.receipt_handle, message_id=message.message_id)
        request.invisible_duration.FromMilliseconds(int(invisible_duration * 1000))
        response = self._require_started().ChangeInvisibleDuration(request, metadata=self._metadata(),
                                                                   timeout=self.request_timeout)
        self._check(response.status, f"change of {message.message_id}")
        message.receipt_handle = response.receipt_handle


def _received(message: Any) -> ReceivedMessage:
    system = message.system_properties
    return ReceivedMessage(
        topic=message.topic.name, body=message.body, message_id=system.message_id,
        receipt_handle=system.receipt_handle, delivery_attempt=system.delivery_attempt,
        tags=system.tag if system.HasField("tag") else None, keys=list(system.keys),
        properties=dict(message.user_properties),
        message_group=system.message_group if system.HasField("message_group") else None,
        queue_id=system.queue_id, queue_offset=system.queue_offset,
        born_timestamp=system.born_timestamp.ToMilliseconds(), store_timestamp=system.store_timestamp.ToMilliseconds())


__all__ = ["ReceivedMessage", "SimpleConsumer"]
