"""Request-reply over RocketMQ (4.6+): `Producer.request` sends a message and waits for its reply.

The requester stamps the message with ``CORRELATION_ID`` (a fresh UUID), ``REPLY_TO_CLIENT`` (its
client id) and ``TTL`` (the timeout in ms), and waits. A consumer of the topic answers with
`create_reply_message(request, body)` sent by any producer: the reply goes to the cluster's
``<cluster>_REPLY_TOPIC`` with SEND_REPLY_MESSAGE, and the broker pushes it straight to the
requesting client (PUSH_REPLY_MESSAGE_TO_CLIENT), which hands it to the waiting `request`.
"""

from __future__ import annotations

import uuid

from rocketflow.client.errors import MQClientError
from rocketflow.protocol.codec import decompress_body
from rocketflow.protocol.message import Message, MessageConst, MessageExt
from rocketflow.protocol.names import REPLY_MESSAGE_FLAG, reply_topic
from rocketflow.protocol.properties import decode_properties
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.headers import ReplyMessageRequestHeader

_COMPRESSED = int(MessageSysFlag.COMPRESSED)


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


def _host(text: str) -> tuple[str, int]:
    """``/127.0.0.1:10911`` (Java's socket address text) -> ``("127.0.0.1", 10911)``."""
    host, _, port = text.lstrip("/").rpartition(":")
    if "/" in host:  # "hostname/1.2.3.4"
        host = host.rpartition("/")[2]
    return (host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0)


def reply_from_push(header: ReplyMessageRequestHeader, body: bytes) -> MessageExt:
    """The reply a broker pushed (PUSH_REPLY_MESSAGE_TO_CLIENT) as a message, its body inflated."""
    sys_flag = header.sys_flag
    if sys_flag & _COMPRESSED:
        body = decompress_body(body)
        sys_flag &= ~_COMPRESSED
    return MessageExt(
        header.topic, body, flag=header.flag,
        properties=decode_properties(header.properties) if header.properties else {},
        queue_id=header.queue_id, sys_flag=sys_flag, born_timestamp=header.born_timestamp,
        born_host=_host(header.born_host), store_timestamp=header.store_timestamp,
        store_host=_host(header.store_host), reconsume_times=header.reconsume_times or 0)


__all__ = ["create_reply_message", "is_reply", "reply_from_push", "stamp_request"]
