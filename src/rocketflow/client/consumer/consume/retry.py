"""Retry and dead-letter: a message whose consumption failed goes back to the broker, to be consumed again.

* `MessageSendBack.send_message_back` (concurrent consumption, expired messages, key-ordered
  dead-lettering): CONSUMER_SEND_MSG_BACK to the message's broker with a delay level (0: the broker
  picks ``3 + reconsume times``; -1: straight to ``%DLQ%<group>``). The broker stores a copy in
  ``%RETRY%<group>``, which the consumer subscribes to, delivered after the delay; once the
  reconsume count reaches ``max_reconsume_times`` the broker moves the copy to ``%DLQ%<group>``
  instead. If the RPC fails, a copy goes to ``%RETRY%<group>`` through the client instance's inner
  producer, carrying the reconsume count and the original topic and message id in its properties.
* `MessageSendBack.send_to_dead_letter` (orderly consumption, which retries in place and only sends
  a message back once it is out of retries): a copy to ``%RETRY%<group>`` with the reconsume count
  at the limit, which the broker dead-letters at once.

A message of ``%RETRY%<group>`` gets its original topic back before the listener sees it
(`ConsumeMessageService.reset_retry_topic`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from rocketflow.client.errors import MQClientError
from rocketflow.client.instance import ClientInstance
from rocketflow.protocol.message import Message, MessageConst, MessageExt

logger = logging.getLogger(__name__)


class SendBackHost(Protocol):
    """What sending back uses of its consumer (a `PushConsumer`)."""

    @property
    def group(self) -> str: ...

    @property
    def retry_topic(self) -> str: ...

    @property
    def effective_max_reconsume_times(self) -> int: ...

    @property
    def instance(self) -> ClientInstance: ...


class MessageSendBack:
    """Sends a push consumer's failed messages back to the broker (see the module docstring)."""

    def __init__(self, consumer: SendBackHost) -> None:
        self.consumer = consumer

    async def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> None:
        """CONSUMER_SEND_MSG_BACK to ``broker_name``'s master (None: the broker that stored ``msg``); if
        that fails, a copy to ``%RETRY%<group>`` through the inner producer. Raises if both fail."""
        consumer = self.consumer
        instance = consumer.instance
        max_times = consumer.effective_max_reconsume_times
        try:
            if broker_name is not None:
                addr = instance.find_broker_address_in_publish(broker_name)
            else:
                host, port = msg.store_host
                addr = f"{host}:{port}"
            if addr is None:
                raise MQClientError(f"no master address for broker {broker_name!r}")
            await instance.api.consumer_send_message_back(addr, msg, consumer.group, delay_level, max_times)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("%s: CONSUMER_SEND_MSG_BACK of %s failed (%s); re-sending it to %s", consumer.group, msg,
                           exc, consumer.retry_topic)
        properties = dict(msg.properties)
        properties[MessageConst.ORIGIN_MESSAGE_ID] = properties.get(MessageConst.ORIGIN_MESSAGE_ID) or msg.client_msg_id
        properties[MessageConst.RETRY_TOPIC] = msg.topic
        properties[MessageConst.RECONSUME_TIME] = str(msg.reconsume_times + 1)
        properties[MessageConst.MAX_RECONSUME_TIMES] = str(max_times)
        properties.pop(MessageConst.TRANSACTION_PREPARED, None)
        copy = Message(consumer.retry_topic, msg.body, flag=msg.flag, properties=properties)
        copy.delay_level = 3 + msg.reconsume_times
        await instance.inner_producer.send_coro(copy)

    def dead_letter_copy(self, msg: MessageExt) -> Message:
        """The copy of ``msg`` that `send_to_dead_letter` sends (its reconsume count at the limit)."""
        consumer = self.consumer
        properties = dict(msg.properties)
        properties[MessageConst.RECONSUME_TIME] = str(msg.reconsume_times)
        origin = properties.get(MessageConst.ORIGIN_MESSAGE_ID)
        properties[MessageConst.ORIGIN_MESSAGE_ID] = origin or msg.client_msg_id
        properties[MessageConst.RETRY_TOPIC] = msg.topic
        properties[MessageConst.MAX_RECONSUME_TIMES] = str(consumer.effective_max_reconsume_times)
        new_msg = Message(consumer.retry_topic, msg.body, flag=msg.flag, properties=properties)
        new_msg.delay_level = 3 + msg.reconsume_times
        return new_msg

    async def send_to_dead_letter(self, msg: MessageExt) -> bool:
        """Re-send ``msg`` to ``%RETRY%<group>`` with its reconsume count at the limit (so it is
        dead-lettered); False (logged) when that failed."""
        group = self.consumer.group
        msg.properties[MessageConst.RECONSUME_TIME] = str(msg.reconsume_times)
        try:
            await self.consumer.instance.inner_producer.send_coro(self.dead_letter_copy(msg))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("%s: sending %s to the dead-letter queue failed: %s", group, msg, exc)
            return False
        logger.info("%s: %s reached %d reconsumes; sent to the dead-letter queue", group, msg, msg.reconsume_times)
        return True


__all__ = ["MessageSendBack", "SendBackHost"]
