"""`ClientAPI`: one coroutine per RPC the client makes, with typed arguments and results.

Built on the typed headers (`rocketflow.remoting.headers`) and bodies (`rocketflow.protocol.bodies`).
Every method raises `MQBrokerError` for a non-success response (unless the method documents a
code it turns into a result), `MQRemotingError` subclasses for transport failures and malformed
responses. Timeouts are in seconds.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, TypeVar

from rocketflow.client.errors import MQBrokerError, MQClientError, MQRemotingError, wrap_remoting_error
from rocketflow.net import RemotingClient, RemotingConnectError, RemotingError
from rocketflow.protocol.bodies import (
    ClusterInfo,
    ConsumerConnection,
    ConsumerListBody,
    ConsumeStats,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ResetOffsetBody,
    TopicConfig,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
    UnlockBatchRequestBody,
    WireBody,
)
from rocketflow.protocol.codec import RecordDecodeError, UndecodableRecord, decode_record, decode_records
from rocketflow.protocol.message import Message, MessageConst, MessageExt, MessageQueue
from rocketflow.protocol.properties import InvalidPropertyError, encode_properties
from rocketflow.protocol.tags import Subscription
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import (
    CommandHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    GetTopicStatsInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)

_HeaderT = TypeVar("_HeaderT", bound=CommandHeader)
_BodyT = TypeVar("_BodyT", bound=WireBody)

#: RocketMQ's timeouts for the consumer-side calls (ms in Java): offsets 5 s, locks 1 s, admin 6 s.
OFFSET_RPC_TIMEOUT: Final = 5.0
LOCK_RPC_TIMEOUT: Final = 1.0
ADMIN_RPC_TIMEOUT: Final = 6.0
#: The region a broker reports when none is configured.
DEFAULT_REGION: Final = "DefaultRegion"


class CommunicationMode(Enum):
    """How a send waits: for the response (SYNC / ASYNC) or not at all (ONEWAY)."""

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


class SendStatus(Enum):
    """Outcome of a stored send; every status but SEND_OK means stored with a weaker guarantee."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_SEND_STATUS_BY_CODE: Final[dict[int, SendStatus]] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """The result of a send.

    ``msg_id`` is the client-assigned UNIQ_KEY (comma-joined for a batch); ``offset_msg_id`` the
    broker-assigned id (store host + commit-log offset; comma-joined for a batch);
    ``queue_offset`` the (first) message's offset in ``message_queue``.
    """

    send_status: SendStatus
    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    offset_msg_id: str
    region_id: str = DEFAULT_REGION
    trace_on: bool = True
    transaction_id: str | None = None


class PullStatus(Enum):
    """PULL_MESSAGE outcome by response code: 0 FOUND, 19 NO_NEW_MSG, 20 NO_MATCHED_MSG, 21 OFFSET_ILLEGAL."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS_BY_CODE: Final[dict[int, PullStatus]] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    """A raw pull result: ``body`` holds the concatenated records (FOUND only); ``messages`` is
    filled by `process_pull_result`, and ``undecodable`` with the records it could not decode."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int = 0
    body: bytes = b""
    messages: list[MessageExt] = field(default_factory=list)
    undecodable: list[UndecodableRecord] = field(default_factory=list)


def pull_offset_properties(result: PullResult) -> tuple[tuple[str, str], ...]:
    """The MIN_OFFSET and MAX_OFFSET properties every message of a pull result gets."""
    return ((MessageConst.MIN_OFFSET, str(result.min_offset)), (MessageConst.MAX_OFFSET, str(result.max_offset)))


def process_pull_result(result: PullResult, mq: MessageQueue, subscription: Subscription | None = None,
                        *, decompress: bool = True) -> list[MessageExt]:
    """Decode a FOUND result's body as RocketMQ's ``PullAPIWrapper.processPullResult`` does.

    Messages are re-filtered by tag when ``subscription`` names tags (untagged messages are
    dropped), get MIN_OFFSET / MAX_OFFSET properties from the response and ``mq``'s broker name;
    transactional messages get their UNIQ_KEY as transaction id. Sets and returns ``result.messages``;
    records that cannot be decoded go to ``result.undecodable`` (those whose tags are readable and do
    not match are dropped too). Raises `MQRemotingError` for a body that is not a sequence of records.
    """
    if result.status is not PullStatus.FOUND or not result.body:
        result.messages = []
        return result.messages
    undecodable: list[UndecodableRecord] = []
    try:
        messages = decode_records(result.body, decompress=decompress, broker_name=mq.broker_name,
                                  extra_properties=pull_offset_properties(result), undecodable=undecodable)
    except (RecordDecodeError, ProtocolError) as exc:
        raise MQRemotingError(f"malformed pull body for {mq}: {exc}") from exc
    if subscription is not None and not subscription.is_sub_all:
        messages = [msg for msg in messages if subscription.matches_tags(msg.tags)]
        undecodable = [bad for bad in undecodable
                       if bad.message.tags is None or subscription.matches_tags(bad.message.tags)]
    result.messages = messages
    result.undecodable = undecodable
    return messages


class ClientAPI:
    """The client's RPCs over one `RemotingClient` (must be used on that client's event loop)."""

    def __init__(self, remoting: RemotingClient, namesrv_addresses: list[str], *,
                 language: LanguageCode = LanguageCode.PYTHON, default_timeout: float = 3.0) -> None:
        self.remoting = remoting
        self.language = language
        self.default_timeout = default_timeout
        self._namesrv_addresses = list(namesrv_addresses)
        self._namesrv_index = random.randrange(len(namesrv_addresses)) if namesrv_addresses else 0

    # ------------------------------------------------------------------ plumbing

    @property
    def namesrv_addresses(self) -> list[str]:
        return list(self._namesrv_addresses)

    def update_namesrv_addresses(self, addresses: list[str]) -> None:
        self._namesrv_addresses = list(addresses)
        self._namesrv_index = 0

    def _request(self, code: int, header: CommandHeader | None = None, body: bytes = b"") -> RemotingCommand:
        return RemotingCommand.request(code, header.to_ext_fields() if header is not None else None, body,
                                       language=self.language)

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send ``request`` to ``addr`` and return the response (any code); transport errors wrapped."""
        try:
            return await self.remoting.invoke(addr, request, timeout or self.default_timeout)
        except RemotingError as exc:
            raise wrap_remoting_error(exc, addr, _code_label(request.code)) from exc

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        try:
            await self.remoting.invoke_oneway(addr, request)
        except RemotingError as exc:
            raise wrap_remoting_error(exc, addr, _code_label(request.code)) from exc

    async def invoke_namesrv(self, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Invoke the current name server, moving on to the next one when it cannot be reached."""
        addresses = self._namesrv_addresses
        if not addresses:
            raise MQClientError("no name server address: set namesrv_addr (or the NAMESRV_ADDR environment variable)")
        last_error: MQRemotingError | None = None
        for attempt in range(len(addresses)):
            index = (self._namesrv_index + attempt) % len(addresses)
            addr = addresses[index]
            try:
                response = await self.remoting.invoke(addr, request, timeout or self.default_timeout)
            except RemotingError as exc:
                last_error = wrap_remoting_error(exc, addr, _code_label(request.code))
                if isinstance(exc, RemotingConnectError):
                    continue
                raise last_error from exc
            self._namesrv_index = index
            return response
        assert last_error is not None
        raise last_error

    @staticmethod
    def _check(response: RemotingCommand, addr: str | None, *ok_codes: int) -> None:
        if response.code not in (ok_codes or (ResponseCode.SUCCESS,)):
            raise MQBrokerError(response.code, response.remark, addr)

    async def _call(self, addr: str, code: int, header: CommandHeader | None = None, body: bytes = b"",
                    timeout: float | None = None) -> RemotingCommand:
        """Invoke request ``code`` at ``addr``; the response, which `MQBrokerError` unless SUCCESS."""
        response = await self.invoke(addr, self._request(code, header, body), timeout)
        self._check(response, addr)
        return response

    @staticmethod
    def _header(cls: type[_HeaderT], response: RemotingCommand, addr: str | None) -> _HeaderT:
        try:
            return cls.from_command(response)
        except ProtocolError as exc:
            raise MQRemotingError(f"malformed {cls.__name__} from {addr}: {exc}", addr) from exc

    @staticmethod
    def _body(cls: type[_BodyT], response: RemotingCommand, addr: str | None) -> _BodyT:
        try:
            return cls.decode(response.body)
        except ProtocolError as exc:
            raise MQRemotingError(f"malformed {cls.__name__} from {addr}: {exc}", addr) from exc

    # ------------------------------------------------------------------ name server

    async def get_topic_route(self, topic: str, timeout: float | None = None) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC; None when the name server says TOPIC_NOT_EXIST."""
        request = self._request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic))
        response = await self.invoke_namesrv(request, timeout)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        self._check(response, "name server")
        return self._body(TopicRouteData, response, "name server")

    async def get_broker_cluster_info(self, timeout: float | None = None) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO."""
        response = await self.invoke_namesrv(self._request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout)
        self._check(response, "name server")
        return self._body(ClusterInfo, response, "name server")

    async def get_all_topic_list(self, timeout: float | None = None) -> set[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
        response = await self.invoke_namesrv(self._request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), timeout)
        self._check(response, "name server")
        return set(self._body(TopicList, response, "name server").topic_list)

    # ------------------------------------------------------------------ producer

    def _send_request(self, code: int, header: SendMessageRequestHeader, body: bytes) -> RemotingCommand:
        if code == RequestCode.SEND_MESSAGE:
            return self._request(code, header, body)
        return RemotingCommand.request(code, header.to_v2_ext_fields(), body, language=self.language)

    async def send_message(self, addr: str, broker_name: str, body: bytes, msg_id: str,
                           header: SendMessageRequestHeader, timeout: float,
                           mode: CommunicationMode = CommunicationMode.SYNC,
                           *, code: int = RequestCode.SEND_MESSAGE_V2) -> SendResult | None:
        """SEND_MESSAGE_V2 (or ``code``) of a message's ``body`` as is (the caller compresses) and its
        unique id ``msg_id`` (its UNIQ_KEY); None for ONEWAY."""
        request = self._send_request(code, header, body)
        if mode is CommunicationMode.ONEWAY:
            await self.invoke_oneway(addr, request)
            return None
        try:  # `invoke`, written out: one coroutine less on every send
            response = await self.remoting.invoke(addr, request, timeout or self.default_timeout)
        except RemotingError as exc:
            raise wrap_remoting_error(exc, addr, _code_label(request.code)) from exc
        return self._send_result(response, addr, broker_name, header, msg_id)

    async def send_oneway(self, addr: str, msg: Message, header: SendMessageRequestHeader) -> None:
        """SEND_MESSAGE_V2 without waiting for the response."""
        await self.invoke_oneway(addr, self._send_request(RequestCode.SEND_MESSAGE_V2, header, msg.body))

    async def send_batch(self, addr: str, broker_name: str, messages: list[Message], body: bytes,
                         header: SendMessageRequestHeader, timeout: float,
                         mode: CommunicationMode = CommunicationMode.SYNC) -> SendResult | None:
        """SEND_BATCH_MESSAGE of an encoded batch ``body`` (``header.batch`` must be true)."""
        request = self._send_request(RequestCode.SEND_BATCH_MESSAGE, header, body)
        if mode is CommunicationMode.ONEWAY:
            await self.invoke_oneway(addr, request)
            return None
        response = await self.invoke(addr, request, timeout)
        msg_id = ",".join(message.uniq_key or "" for message in messages)
        return self._send_result(response, addr, broker_name, header, msg_id)

    def _send_result(self, response: RemotingCommand, addr: str, broker_name: str,
                     header: SendMessageRequestHeader, msg_id: str) -> SendResult:
        status = _SEND_STATUS_BY_CODE.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark, addr)
        reply = self._header(SendMessageResponseHeader, response, addr)
        return SendResult(
            send_status=status,
            msg_id=msg_id,
            message_queue=MessageQueue(header.topic, broker_name, reply.queue_id),
            queue_offset=reply.queue_offset,
            offset_msg_id=reply.msg_id,
            region_id=reply.msg_region or DEFAULT_REGION,
            trace_on=response.ext_fields.get("TRACE_ON") != "false",
            transaction_id=reply.transaction_id,
        )

    # ------------------------------------------------------------------ consumer

    async def pull_message(self, addr: str, header: PullMessageRequestHeader, timeout: float) -> PullResult:
        """PULL_MESSAGE; the four pull outcomes are results, any other code raises `MQBrokerError`."""
        request = self._request(RequestCode.PULL_MESSAGE, header)
        try:  # `invoke`, written out: one coroutine less on every pull
            response = await self.remoting.invoke(addr, request, timeout or self.default_timeout)
        except RemotingError as exc:
            raise wrap_remoting_error(exc, addr, _code_label(request.code)) from exc
        status = _PULL_STATUS_BY_CODE.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark, addr)
        reply = self._header(PullMessageResponseHeader, response, addr)
        return PullResult(
            status=status,
            next_begin_offset=reply.next_begin_offset,
            min_offset=reply.min_offset,
            max_offset=reply.max_offset,
            suggest_which_broker_id=reply.suggest_which_broker_id,
            body=response.body if status is PullStatus.FOUND else b"",
        )

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue,
                                    timeout: float = OFFSET_RPC_TIMEOUT) -> int:
        """QUERY_CONSUMER_OFFSET; QUERY_NOT_FOUND (no committed offset) raises `MQBrokerError`."""
        header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=mq.topic, queue_id=mq.queue_id)
        response = await self._call(addr, RequestCode.QUERY_CONSUMER_OFFSET, header, timeout=timeout)
        return self._header(QueryConsumerOffsetResponseHeader, response, addr).offset

    def _update_offset_request(self, group: str, mq: MessageQueue, offset: int) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader(consumer_group=group, topic=mq.topic, queue_id=mq.queue_id,
                                                   commit_offset=offset)
        return self._request(RequestCode.UPDATE_CONSUMER_OFFSET, header)

    async def update_consumer_offset(self, addr: str, group: str, mq: MessageQueue, offset: int,
                                     timeout: float = OFFSET_RPC_TIMEOUT) -> None:
        """UPDATE_CONSUMER_OFFSET, waiting for the broker's answer."""
        response = await self.invoke(addr, self._update_offset_request(group, mq, offset), timeout)
        self._check(response, addr)

    async def update_consumer_offset_oneway(self, addr: str, group: str, mq: MessageQueue, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET as a oneway request (periodic persistence)."""
        await self.invoke_oneway(addr, self._update_offset_request(group, mq, offset))

    async def get_consumer_id_list(self, addr: str, group: str, timeout: float | None = None) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP (the broker answers SYSTEM_ERROR when the group has no live member)."""
        header = GetConsumerListByGroupRequestHeader(consumer_group=group)
        response = await self._call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, header, timeout=timeout)
        return list(self._body(ConsumerListBody, response, addr).consumer_id_list)

    async def heartbeat(self, addr: str, data: HeartbeatData, timeout: float | None = None) -> int:
        """HEART_BEAT; returns the broker's version (from the response)."""
        response = await self._call(addr, RequestCode.HEART_BEAT, body=data.encode(), timeout=timeout)
        return response.version

    async def unregister_client(self, addr: str, client_id: str, *, producer_group: str | None = None,
                                consumer_group: str | None = None, timeout: float | None = None) -> None:
        """UNREGISTER_CLIENT."""
        header = UnregisterClientRequestHeader(client_id=client_id, producer_group=producer_group,
                                               consumer_group=consumer_group)
        await self._call(addr, RequestCode.UNREGISTER_CLIENT, header, timeout=timeout)

    async def lock_batch_mq(self, addr: str, body: LockBatchRequestBody,
                            timeout: float = LOCK_RPC_TIMEOUT) -> set[MessageQueue]:
        """LOCK_BATCH_MQ; returns the queues now locked by ``body.client_id``."""
        response = await self._call(addr, RequestCode.LOCK_BATCH_MQ, body=body.encode(), timeout=timeout)
        return set(self._body(LockBatchResponseBody, response, addr).lock_ok_mq_set)

    async def unlock_batch_mq(self, addr: str, body: UnlockBatchRequestBody, timeout: float = LOCK_RPC_TIMEOUT,
                              *, oneway: bool = False) -> None:
        """UNLOCK_BATCH_MQ (oneway when ``oneway``)."""
        request = self._request(RequestCode.UNLOCK_BATCH_MQ, body=body.encode())
        if oneway:
            await self.invoke_oneway(addr, request)
            return
        response = await self.invoke(addr, request, timeout)
        self._check(response, addr)

    async def consumer_send_message_back(self, addr: str, msg: MessageExt, group: str, delay_level: int,
                                         max_reconsume_times: int, timeout: float = OFFSET_RPC_TIMEOUT) -> None:
        """CONSUMER_SEND_MSG_BACK of a message that failed consumption."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset, group=group, delay_level=delay_level, origin_msg_id=msg.msg_id,
            origin_topic=msg.topic, unit_mode=False, max_reconsume_times=max_reconsume_times)
        await self._call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header, timeout=timeout)

    async def get_max_offset(self, addr: str, topic: str, queue_id: int, timeout: float = ADMIN_RPC_TIMEOUT) -> int:
        """GET_MAX_OFFSET: the queue's next offset to be written."""
        header = GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
        response = await self._call(addr, RequestCode.GET_MAX_OFFSET, header, timeout=timeout)
        return self._header(GetMaxOffsetResponseHeader, response, addr).offset

    async def get_min_offset(self, addr: str, topic: str, queue_id: int, timeout: float = ADMIN_RPC_TIMEOUT) -> int:
        """GET_MIN_OFFSET."""
        header = GetMinOffsetRequestHeader(topic=topic, queue_id=queue_id)
        response = await self._call(addr, RequestCode.GET_MIN_OFFSET, header, timeout=timeout)
        return self._header(GetMinOffsetResponseHeader, response, addr).offset

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp_ms: int,
                            timeout: float = ADMIN_RPC_TIMEOUT) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP."""
        header = SearchOffsetRequestHeader(topic=topic, queue_id=queue_id, timestamp=timestamp_ms)
        response = await self._call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header, timeout=timeout)
        return self._header(SearchOffsetResponseHeader, response, addr).offset

    async def get_earliest_msg_storetime(self, addr: str, topic: str, queue_id: int,
                                         timeout: float = ADMIN_RPC_TIMEOUT) -> int:
        """GET_EARLIEST_MSG_STORETIME (ms)."""
        header = GetEarliestMsgStoretimeRequestHeader(topic=topic, queue_id=queue_id)
        response = await self._call(addr, RequestCode.GET_EARLIEST_MSG_STORETIME, header, timeout=timeout)
        return self._header(GetEarliestMsgStoretimeResponseHeader, response, addr).timestamp

    async def view_message(self, addr: str, commit_log_offset: int, timeout: float = ADMIN_RPC_TIMEOUT) -> MessageExt:
        """VIEW_MESSAGE_BY_ID (``commit_log_offset`` from `decode_offset_msg_id`)."""
        header = ViewMessageRequestHeader(offset=commit_log_offset)
        response = await self._call(addr, RequestCode.VIEW_MESSAGE_BY_ID, header, timeout=timeout)
        try:
            return decode_record(response.body)[0]
        except (RecordDecodeError, ProtocolError) as exc:
            raise MQRemotingError(f"malformed message from {addr}: {exc}", addr) from exc

    async def query_message(self, addr: str, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int,
                            *, unique_key: bool = False, timeout: float = ADMIN_RPC_TIMEOUT) -> list[MessageExt]:
        """QUERY_MESSAGE by key (or UNIQ_KEY with ``unique_key``); [] when the broker finds nothing."""
        header = QueryMessageRequestHeader(topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms,
                                           end_timestamp=end_ms, unique_key_query=unique_key)
        response = await self.invoke(addr, self._request(RequestCode.QUERY_MESSAGE, header), timeout)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        self._check(response, addr)
        self._header(QueryMessageResponseHeader, response, addr)
        try:
            return decode_records(response.body)
        except (RecordDecodeError, ProtocolError) as exc:
            raise MQRemotingError(f"malformed messages from {addr}: {exc}", addr) from exc

    # ------------------------------------------------------------------ admin

    async def create_topic(self, addr: str, topic_config: TopicConfig, default_topic: str = "TBW102",
                           timeout: float = ADMIN_RPC_TIMEOUT) -> None:
        """UPDATE_AND_CREATE_TOPIC on one broker."""
        header = CreateTopicRequestHeader(
            topic=topic_config.topic_name, default_topic=default_topic, read_queue_nums=topic_config.read_queue_nums,
            write_queue_nums=topic_config.write_queue_nums, perm=topic_config.perm,
            topic_filter_type=topic_config.topic_filter_type.name, topic_sys_flag=topic_config.topic_sys_flag,
            order=topic_config.order,
            attributes=",".join(f"+{key}={value}" for key, value in sorted(topic_config.attributes.items())) or None)
        await self._call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header, timeout=timeout)

    async def get_topic_stats(self, addr: str, topic: str, timeout: float = ADMIN_RPC_TIMEOUT) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO."""
        header = GetTopicStatsInfoRequestHeader(topic=topic)
        response = await self._call(addr, RequestCode.GET_TOPIC_STATS_INFO, header, timeout=timeout)
        return self._body(TopicStatsTable, response, addr)

    async def get_consume_stats(self, addr: str, group: str, topic: str | None = None,
                                timeout: float = ADMIN_RPC_TIMEOUT) -> ConsumeStats:
        """GET_CONSUME_STATS (all the group's topics when ``topic`` is None)."""
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        response = await self._call(addr, RequestCode.GET_CONSUME_STATS, header, timeout=timeout)
        return self._body(ConsumeStats, response, addr)

    async def get_consumer_connection_list(self, addr: str, group: str,
                                           timeout: float = ADMIN_RPC_TIMEOUT) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST (CONSUMER_NOT_ONLINE raises `MQBrokerError`)."""
        header = GetConsumerConnectionListRequestHeader(consumer_group=group)
        response = await self._call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, header, timeout=timeout)
        return self._body(ConsumerConnection, response, addr)

    async def invoke_broker_to_reset_offset(self, addr: str, topic: str, group: str, timestamp_ms: int,
                                            is_force: bool = True,
                                            timeout: float = ADMIN_RPC_TIMEOUT) -> dict[MessageQueue, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET: the broker resets the group's offsets and tells its clients."""
        header = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp_ms, is_force=is_force)
        response = await self._call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header, timeout=timeout)
        if not response.body:
            return {}
        return dict(self._body(ResetOffsetBody, response, addr).offset_table)


def _code_label(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"request {code}"


def encode_message_properties(properties: Mapping[str, str]) -> str:
    """The properties string of a send header; raises `MQClientError` for unencodable properties."""
    try:
        return encode_properties(properties)
    except InvalidPropertyError as exc:
        raise MQClientError(f"invalid message properties: {exc}") from None


__all__ = [
    "ADMIN_RPC_TIMEOUT",
    "DEFAULT_REGION",
    "LOCK_RPC_TIMEOUT",
    "OFFSET_RPC_TIMEOUT",
    "ClientAPI",
    "CommunicationMode",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "encode_message_properties",
    "process_pull_result",
]
