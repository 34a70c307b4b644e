"""Request-reply over RocketMQ (4.6+): `Producer.request` sends a message and waits for its reply.

The requester stamps the message with ``CORRELATION_ID`` (a fresh UUID), ``REPLY_TO_CLIENT`` (its
client id) and ``TTL`` (the timeout in ms), and waits. A consumer of the topic answers with
`create_reply_message(request, body)` sent by any producer: the reply goes to the cluster's
``<cluster>_REPLY_TOPIC`` with SEND_REPLY_MESSAGE, and the broker pushes it straight to the
requesting client (PUSH_REPLY_MESSAGE_TO_CLIENT), whose client instance hands it to the waiting
`request` (`rocketflow.client.instance.server_requests`).
"""

from __future__ import annotations

import uuid

from rocketflow.client.errors import MQClientError
from rocketflow.protocol.message import Message, MessageConst
from rocketflow.protocol.names import REPLY_MESSAGE_FLAG, reply_topic


def new_correlation_id() -> str:
    return str(uuid.uuid4())


def stamp_request(msg: Message, client_id: str, timeout: float) -> str:
    """Mark ``msg`` as a request of ``client_id`` waiting ``timeout`` seconds; returns its correlation id."""
    correlation_id = new_correlation_id()
    msg.properties[MessageConst.CORRELATION_ID] = correlation_id
    msg.properties[MessageConst.REPLY_TO_CLIENT] = client_id
    msg.properties[MessageConst.TTL] = str(int(timeout * 1000))
    return correlation_id


def create_reply_message(request: Message, body: bytes) -> Message:
    """The reply to a request message a consumer received (RocketMQ's ``MessageUtil.createReplyMessage``).

    Send it with any started `Producer`; it reaches the requester while its `Producer.request` waits.
    Raises `MQClientError` if ``request`` is not a request (no CLUSTER or REPLY_TO_CLIENT property).
    """
    properties = request.properties
    cluster = properties.get(MessageConst.CLUSTER)
    if not cluster:
        raise MQClientError(f"create reply message fail, requestMessage error, property[{MessageConst.CLUSTER}] "
                            "is null.")
    if not properties.get(MessageConst.REPLY_TO_CLIENT):
        raise MQClientError("the message is not a request: it has no REPLY_TO_CLIENT property")
    if not isinstance(body, bytes | bytearray):
        raise MQClientError(f"the reply body must be bytes, got {type(body).__name__}")
    reply = Message(reply_topic(cluster), bytes(body))
    reply.properties[MessageConst.MSG_TYPE] = REPLY_MESSAGE_FLAG
    for name in (MessageConst.CORRELATION_ID, MessageConst.REPLY_TO_CLIENT, MessageConst.TTL):
        value = properties.get(name)
        if value is not None:
            reply.properties[name] = value
    return reply


def is_reply(msg: Message) -> bool:
    return msg.properties.get(MessageConst.MSG_TYPE) == REPLY_MESSAGE_FLAG


__all__ = ["create_reply_message", "is_reply", "stamp_request"]
