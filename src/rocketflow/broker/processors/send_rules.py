"""What a message sent to the broker must pass, and what it may create: the rules send, send-back and
reply share (RocketMQ's msgCheck and the auto-creation of topics and groups)."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import FAQ_SUFFIX, error
from rocketflow.net import RequestContext
from rocketflow.protocol.bodies import SubscriptionGroupConfig, TopicConfig
from rocketflow.protocol.codec import has_zlib_header
from rocketflow.protocol.names import (
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    InvalidNameError,
    PermName,
    is_retry_topic,
    is_writeable,
    validate_topic,
)
from rocketflow.protocol.sysflag import (
    COMPRESSION_TYPE_MASK,
    COMPRESSION_ZLIB_TYPE,
    KNOWN_MESSAGE_SYS_FLAGS,
    MessageSysFlag,
)
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import SendMessageRequestHeader

#: Topics no producer may send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND_TOPICS: Final = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT,
})
#: Request version from which CONSUMER_SEND_MSG_BACK / retry sends honour ``maxReconsumeTimes`` (V3_4_9).
MAX_RECONSUME_TIMES_MIN_VERSION: Final = 121
#: Lowest queue id a send may name: -1 is RocketMQ's "any queue" (the broker picks one).
ANY_QUEUE: Final = -1
_COMPRESSED: Final = int(MessageSysFlag.COMPRESSED)
#: sysFlag bits a send may carry that need no look at the body (anything else goes through `sys_flag_error`)
PLAIN_SYS_FLAGS: Final = KNOWN_MESSAGE_SYS_FLAGS & ~_COMPRESSED

_random = random.Random()


@dataclass(slots=True)
class Creations:
    """Topics and groups a request needs (existing, or planned auto-creations), stored once it is accepted."""

    topics: list[TopicConfig] = field(default_factory=list)
    groups: list[SubscriptionGroupConfig] = field(default_factory=list)

    def apply(self, ctx: BrokerContext) -> None:
        for group_config in self.groups:
            ctx.groups.add_if_absent(group_config)
        for topic_config in self.topics:
            ctx.topics.add_if_absent(topic_config)


def check_send(ctx: BrokerContext, request_ctx: RequestContext, request: RemotingCommand,
               header: SendMessageRequestHeader) -> TopicConfig | RemotingCommand:
    """msgCheck: broker/topic permission, topic name, queue id.

    Returns the topic's config, or for a topic that would be auto-created the config to store
    once the message is accepted (not stored yet).
    """
    topics = ctx.topics
    topic = header.topic
    if not is_writeable(ctx.config.broker_permission):
        return error(request, ResponseCode.NO_PERMISSION,
                     f"the broker[{ctx.identity.ip}] sending message is forbidden")
    illegal = topic_error(topic)
    if illegal is not None:
        return error(request, ResponseCode.MESSAGE_ILLEGAL, illegal)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        return error(request, ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
    topic_config = topics.select(topic)
    if topic_config is None:
        topic_config = topics.plan_in_send(topic, header.default_topic, request_ctx.remote_address,
                                           header.default_topic_queue_nums)
        if topic_config is None and is_retry_topic(topic):
            topic_config = topics.plan_in_send_back(topic, 1, PermName.READ | PermName.WRITE)
        if topic_config is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST,
                         f"topic[{topic}] not exist, apply first please!{FAQ_SUFFIX}")
    if not is_writeable(topic_config.perm):
        return error(request, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
    queue_id = header.queue_id
    # RocketMQ's bound: a queue that is readable or writable (a stale route during a shrink still lands)
    limit = max(topic_config.read_queue_nums, topic_config.write_queue_nums)
    if queue_id >= limit or queue_id < ANY_QUEUE:
        return error(request, ResponseCode.SYSTEM_ERROR,
                     f"request queueId[{queue_id}] is illegal (-1 for any queue, else 0..{limit - 1}), "
                     f"{topic_config} Producer: {request_ctx.remote_address}")
    return topic_config


def pick_queue(queue_id: int, queue_nums: int) -> int:
    """The queue a send goes to: the one it names, else a random one of ``queue_nums``."""
    if queue_id >= 0:
        return queue_id
    return _random.randrange(queue_nums) if queue_nums > 0 else 0


def random_queue(queue_nums: int) -> int:
    """A random queue of a retry or dead-letter topic (RocketMQ's ``nextInt(99999999) % queueNums``)."""
    return _random.randrange(99_999_999) % queue_nums


@functools.lru_cache(maxsize=1024)
def topic_error(topic: str) -> str | None:
    """Why `topic` is not a legal topic name, or None (remembered: a producer sends to few topics)."""
    try:
        validate_topic(topic)
    except InvalidNameError as exc:
        return str(exc)
    return None


def sys_flag_error(sys_flag: int, bodies: Sequence[bytes]) -> str | None:
    """Why a send's ``sysFlag`` (with these bodies) cannot be stored as a record a consumer decodes, or None.

    Bits no 4.x client sets, or 5.x ones this broker does not implement (an inner batch, LZ4 or ZSTD),
    are refused; so is a body flagged COMPRESSED that cannot be zlib data (its header shows it).
    """
    unknown = sys_flag & ~(KNOWN_MESSAGE_SYS_FLAGS | COMPRESSION_TYPE_MASK)
    if unknown:
        return (f"sysFlag {sys_flag:#x} has bits {unknown & 0xFFFFFFFF:#x} this broker does not know (it knows "
                f"{KNOWN_MESSAGE_SYS_FLAGS:#x}, and {COMPRESSION_ZLIB_TYPE:#x} with the compressed bit 0x1)")
    compression = sys_flag & COMPRESSION_TYPE_MASK
    if compression and (compression != COMPRESSION_ZLIB_TYPE or not sys_flag & _COMPRESSED):
        return (f"sysFlag {sys_flag:#x}: compression type {compression >> 8} is not supported; "
                f"compressed bodies are zlib (type 3, {COMPRESSION_ZLIB_TYPE:#x}, with the compressed bit 0x1)")
    if sys_flag & _COMPRESSED:
        for body in bodies:
            if not has_zlib_header(body):
                return ("the body is flagged compressed (sysFlag bit 0x1) but is not zlib data "
                        f"(its first bytes {bytes(body[:2]).hex() or 'none'} are no zlib header)")
    return None


__all__ = [
    "ANY_QUEUE",
    "MAX_RECONSUME_TIMES_MIN_VERSION",
    "NOT_ALLOWED_SEND_TOPICS",
    "PLAIN_SYS_FLAGS",
    "Creations",
    "check_send",
    "pick_queue",
    "random_queue",
    "sys_flag_error",
    "topic_error",
]
