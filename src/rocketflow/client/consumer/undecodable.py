"""Pulled records the client cannot decode: to the dead-letter queue, or skipped (never a stuck queue).

A record can be stored yet undecodable (a COMPRESSED body that is not zlib, properties that are not
UTF-8, written by an older broker or another implementation): `decode_records` hands such records
over apart (`UndecodableRecord`) and decodes the others. A push consumer in clustering mode sends
each one to ``%DLQ%<group>`` as it was stored:

1. SEND_MESSAGE_V2 of its stored body (not inflated, the COMPRESSED flag cleared, so the copy is
   readable) to ``%RETRY%<group>`` on the broker it came from, with reconsume times 0 and max
   reconsume times 0: the broker moves it to the dead-letter queue at once, as it does for a
   message out of retries. Its properties are kept, with RETRY_TOPIC, ORIGIN_MESSAGE_ID and
   ``ROCKETFLOW_DECODE_ERROR`` (`MessageConst.DECODE_ERROR`, the reason) added;
2. if that fails, CONSUMER_SEND_MSG_BACK with delay level -1 (straight to the dead-letter queue,
   a copy made by the broker; without the reason);
3. if that fails too, and always for a broadcasting consumer (RocketMQ drops what a broadcasting
   consumer cannot consume), it is skipped.

Each record is logged at ERROR and counted (`ConsumerStats.inc_undecodable`). The process queue
holds it apart meanwhile (`ProcessQueue.hold_undecodable`), so the committed offset passes it only
once it is dealt with and everything before it is consumed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any, Final, Protocol

from rocketflow.client.api import OFFSET_RPC_TIMEOUT, encode_message_properties
from rocketflow.client.config import ClientConfig
from rocketflow.client.consumer.offset_store import OffsetStore
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.client.consumer.stats import ConsumerStats
from rocketflow.client.instance import CLIENT_INNER_PRODUCER_GROUP, ClientInstance
from rocketflow.protocol.bodies import MessageModel
from rocketflow.protocol.codec import UndecodableRecord
from rocketflow.protocol.message import MessageConst, MessageQueue
from rocketflow.protocol.names import DEFAULT_TOPIC
from rocketflow.protocol.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from rocketflow.remoting.headers import SendMessageRequestHeader

logger = logging.getLogger(__name__)

#: The reason stored with a dead-lettered record is cut to this many characters.
MAX_REASON_CHARS: Final = 512
#: Properties a dead-letter copy does not keep (what the broker would act on again, or the pull added).
_DROPPED_PROPERTIES: Final = (MessageConst.DELAY_TIME_LEVEL, MessageConst.TRANSACTION_PREPARED,
                              MessageConst.WAIT_STORE_MSG_OK, MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET)
#: Delay level of a CONSUMER_SEND_MSG_BACK straight to the dead-letter queue.
DLQ_DELAY_LEVEL: Final = -1


def dead_letter_properties(record: UndecodableRecord, origin_topic: str) -> dict[str, str]:
    """The properties of ``record``'s dead-letter copy: its own readable ones, where it came from and why."""
    msg = record.message
    properties = dict(msg.properties)
    for name in _DROPPED_PROPERTIES:
        properties.pop(name, None)
    properties.setdefault(MessageConst.RETRY_TOPIC, origin_topic)
    properties[MessageConst.ORIGIN_MESSAGE_ID] = (properties.get(MessageConst.ORIGIN_MESSAGE_ID)
                                                  or properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                                                  or msg.msg_id)
    reason = record.reason.replace(PROPERTY_SEPARATOR, " ").replace(NAME_VALUE_SEPARATOR, " ")
    properties[MessageConst.DECODE_ERROR] = reason[:MAX_REASON_CHARS]
    return properties


class UndecodableHost(Protocol):
    """What the dead-letter path of undecodable records uses of its consumer (a `PushConsumer`)."""

    @property
    def group(self) -> str: ...

    @property
    def message_model(self) -> MessageModel: ...

    @property
    def retry_topic(self) -> str: ...

    @property
    def client_config(self) -> ClientConfig: ...

    @property
    def instance(self) -> ClientInstance: ...

    @property
    def offset_store(self) -> OffsetStore: ...

    @property
    def consumer_stats(self) -> ConsumerStats: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...


class UndecodableHandler:
    """A push consumer's dead-letter path for undecodable records (see the module doc)."""

    def __init__(self, consumer: UndecodableHost) -> None:
        self.consumer = consumer

    def take(self, mq: MessageQueue, pq: ProcessQueue, records: list[UndecodableRecord]) -> None:
        """Hold ``records`` in ``pq`` and start dealing with them (on the client's loop)."""
        held = {id(msg) for msg in pq.hold_undecodable([record.message for record in records])}
        fresh = [record for record in records if id(record.message) in held]
        if fresh:
            self.consumer.spawn(self._handle(mq, pq, fresh))

    async def _handle(self, mq: MessageQueue, pq: ProcessQueue, records: list[UndecodableRecord]) -> None:
        consumer = self.consumer
        group = consumer.group
        for index, record in enumerate(records):
            msg = record.message
            if pq.dropped:
                # the queue went to another consumer (or was reset): it starts at an offset before this record
                logger.info("%s: %s was dropped; %d undecodable records of it are left to whoever takes it next",
                            group, mq, len(records) - index)
                return
            where = f"the record at offset {msg.queue_offset} of {mq}"
            sent = False
            if consumer.message_model is MessageModel.CLUSTERING:
                sent = await self._send_to_dead_letter_queue(mq, record)
            consumer.consumer_stats.inc_undecodable(group, mq.topic, dead_lettered=sent)
            if sent:
                logger.error("%s: %s cannot be decoded (%s); sent to %%DLQ%%%s as stored", group, where,
                             record.reason, group)
            else:
                logger.error("%s: %s cannot be decoded (%s); skipped", group, where, record.reason)
            offset = pq.release_undecodable([msg])
            if offset >= 0 and not pq.dropped:
                consumer.offset_store.update_offset(mq, offset, True)

    async def _send_to_dead_letter_queue(self, mq: MessageQueue, record: UndecodableRecord) -> bool:
        consumer = self.consumer
        instance = consumer.instance
        msg = record.message
        addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            logger.warning("%s: no master address of %s to dead-letter a record of %s", consumer.group,
                           mq.broker_name, mq)
            return False
        try:
            properties = dead_letter_properties(record, msg.topic or mq.topic)
            header = SendMessageRequestHeader(
                producer_group=CLIENT_INNER_PRODUCER_GROUP, topic=consumer.retry_topic, default_topic=DEFAULT_TOPIC,
                default_topic_queue_nums=1, queue_id=0, sys_flag=0, born_timestamp=int(time.time() * 1000),
                flag=msg.flag, properties=encode_message_properties(properties), reconsume_times=0,
                max_reconsume_times=0)
            await instance.api.send_message(addr, mq.broker_name, msg.body,
                                             properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""), header,
                                             consumer.client_config.mq_client_api_timeout)
            return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("%s: sending the undecodable record at offset %d of %s to %%DLQ%%%s failed (%s); "
                           "asking the broker to move it there", consumer.group, msg.queue_offset, mq, consumer.group,
                           exc)
        try:
            await instance.api.consumer_send_message_back(addr, msg, consumer.group, DLQ_DELAY_LEVEL, 0,
                                                          OFFSET_RPC_TIMEOUT)
            return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("%s: CONSUMER_SEND_MSG_BACK of the undecodable record at offset %d of %s failed: %s",
                           consumer.group, msg.queue_offset, mq, exc)
            return False


__all__ = ["DLQ_DELAY_LEVEL", "MAX_REASON_CHARS", "UndecodableHandler", "UndecodableHost", "dead_letter_properties"]
