"""``apache.rocketmq.v2.MessagingService`` on rocketflow's broker: what RocketMQ 5's proxy answers.

Every RPC works on the broker's own store and tables (see docs/grpc.md). Sends, transaction ends and
dead-lettering go through the broker's remoting processors (`rocketflow.proxy.local`); receives,
acks and invisibility changes through `PopService`; delivery times through `TimerService`. Status
codes follow the proxy's, so the official clients raise the exceptions their users expect.

`ReceiveMessage` and `AckMessage`, the calls a consumer makes per message, answer with serialized
responses (`rocketflow.proxy.wire`; see `RAW_RESPONSES`); the other RPCs answer protobuf objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
import orjson
from google.protobuf.duration_pb2 import Duration

from rocketflow.acl import AccessGrant, Permission, SessionCredentials
from rocketflow.acl.address import host_of
from rocketflow.broker.config import parse_delay_levels
from rocketflow.errors import RocketflowError
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.ids import decode_offset_msg_id
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import (
    InvalidNameError,
    is_readable,
    is_writeable,
    retry_topic,
    validate_group,
    validate_topic,
)
from rocketflow.proxy import convert, wire
from rocketflow.proxy.access import MESSAGE_TYPE_ATTRIBUTE, BrokerAccess
from rocketflow.proxy.local import LocalChannel, invoke_local
from rocketflow.proxy.pop_service import MessageFilter, PopService, now_ms
from rocketflow.proxy.timer import TIMER_TOPIC, TimerService, send_fields
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

logger = logging.getLogger(__name__)

_TRANSACTION_PREPARED: Final = 4
_COMMIT: Final = 8
_ROLLBACK: Final = 12
_AUTHORIZATION: Final = re.compile(
    r"^\s*MQv2-HMAC-SHA1\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9A-Fa-f]+)\s*$")
#: remoting response codes of a send -> the 5.x status code the proxy answers with
_SEND_CODES: Final[dict[int, pb.Code.ValueType]] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
}
_ALL_TYPES: Final[tuple[pb.MessageType.ValueType, ...]] = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
#: RPCs whose methods return (or yield) serialized responses rather than protobuf objects
RAW_RESPONSES: Final = frozenset({"ReceiveMessage", "AckMessage"})
_RECEIVE_OK: Final = spb.ReceiveMessageResponse(status=pb.Status(code=pb.OK, message="OK")).SerializeToString()
_RECEIVE_NOT_FOUND: Final = spb.ReceiveMessageResponse(
    status=pb.Status(code=pb.MESSAGE_NOT_FOUND, message="no new message")).SerializeToString()


def status(code: int, message: str = "") -> pb.Status:
    value = pb.Code.ValueType(code)
    return pb.Status(code=value, message=message or pb.Code.Name(value))


def _ok() -> pb.Status:
    return pb.Status(code=pb.OK, message="OK")


def duration_ms(value: Duration) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def to_duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def producer_group(topic: str) -> str:
    """The producer group 5.x producers of ``topic`` stand for (5.x producers have none): transaction
    check-backs of the topic's half messages go to a producer of it."""
    return f"{topic}%GRPC_PRODUCER"


class Refused(RocketflowError):
    """A request answered with a status other than OK."""

    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(text or pb.Code.Name(pb.Code.ValueType(code)))
        self.code = code
        self.text = str(self)

    @property
    def status(self) -> pb.Status:
        return status(self.code, self.text)


@dataclass(slots=True)
class Caller:
    """Who made a call: client id, address, and (ACL on) the account and its permissions."""

    client_id: str
    address: str
    grant: AccessGrant
    credentials: SessionCredentials | None

    def require(self, resource: str, needed: Permission) -> None:
        refusal = self.grant.refusal(resource, needed)
        if refusal is not None:
            raise Refused(pb.FORBIDDEN, refusal)


@dataclass(slots=True)
class ClientSession:
    """A 5.x client known by its id: its settings, its stand-in channel and its telemetry stream."""

    client_id: str
    channel: LocalChannel
    credentials: SessionCredentials | None = None
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    producer_groups: set[str] = field(default_factory=set)
    outbox: asyncio.Queue[spb.TelemetryCommand] = field(default_factory=asyncio.Queue)
    streams: int = 0
    last_seen: float = field(default_factory=time.monotonic)


def peer_address(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """``host:port`` of the caller (gRPC names it ``ipv4:host:port`` or ``ipv6:[host]:port``)."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        rest = rest.replace("%5B", "[").replace("%5D", "]")
        host, _, port = rest.rpartition(":")
        return f"{host.strip('[]')}:{port}"
    return rest or peer


class MessagingService:
    """The RPCs of ``apache.rocketmq.v2.MessagingService``, one method each (named as the RPC);
    `rocketflow.proxy.server.GrpcServer` serves them."""

    def __init__(self, access: BrokerAccess, pop: PopService, timer: TimerService, *,
                 endpoint: Callable[[], tuple[str, int]]) -> None:
        self.access = access
        self.pop = pop
        self.timer = timer
        self._endpoint = endpoint
        self.sessions: dict[str, ClientSession] = {}
        config = access.config
        self.min_invisible_ms = config.grpc_min_invisible_time_ms
        self.max_invisible_ms = config.grpc_max_invisible_time_ms
        self.default_invisible_ms = config.grpc_default_invisible_time_ms
        self.long_polling_ms = config.grpc_long_polling_timeout_ms
        self.max_batch = config.grpc_max_receive_batch
        self.max_delay_ms = config.grpc_max_delay_ms
        self.consumer_backoff_ms = parse_delay_levels(config.grpc_consumer_backoff)

    # ------------------------------------------------------------------ callers and sessions

    def _caller(self, context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
        metadata = {key.lower(): value for key, value in (context.invocation_metadata() or ())
                    if isinstance(value, str)}
        address = peer_address(context)
        client_id = metadata.get("x-mq-client-id", "")
        acl = self.access.acl_config
        if acl is None:
            return Caller(client_id, address, AccessGrant.OPEN, None)
        host = host_of(address)
        if any(pattern.matches(host) for pattern in acl.global_white_remote_addresses):
            return Caller(client_id, address, AccessGrant(checked=True, white_listed=True), None)
        authorization = metadata.get("authorization")
        if not authorization:
            raise Refused(pb.UNAUTHORIZED, "the request has no authorization header and the address is not "
                                           "white-listed")
        match = _AUTHORIZATION.match(authorization)
        if match is None:
            raise Refused(pb.UNAUTHORIZED, "the authorization header is not MQv2-HMAC-SHA1")
        access_key, signed_headers, signature = match.groups()
        account = acl.accounts.get(access_key)
        if account is None:
            raise Refused(pb.UNAUTHORIZED, f"accessKey {access_key} is not configured")
        credentials = SessionCredentials(account.access_key, account.secret_key)
        if account.white_remote_address.matches(host):
            return Caller(client_id, address, AccessGrant(checked=True, account=account, white_listed=True),
                          credentials)
        signed = "".join(metadata.get(name.strip().lower(), "") for name in signed_headers.split(";"))
        expected = hmac.new(account.secret_key.encode(), signed.encode(), hashlib.sha1).hexdigest()
        if not hmac.compare_digest(expected.upper(), signature.upper()):
            raise Refused(pb.UNAUTHORIZED, f"signature check failed for accessKey {access_key}")
        return Caller(client_id, address, AccessGrant(checked=True, account=account), credentials)

    def _session(self, caller: Caller) -> ClientSession:
        session = self.sessions.get(caller.client_id)
        if session is None or session.channel.closed:
            channel = LocalChannel(caller.address, on_request=lambda request: self._to_client(caller.client_id,
                                                                                                request))
            session = ClientSession(caller.client_id, channel)
            self.sessions[caller.client_id] = session
        session.last_seen = time.monotonic()
        if caller.credentials is not None:
            session.credentials = caller.credentials
        return session

    def _to_client(self, client_id: str, request: RemotingCommand) -> None:
        """A request the broker sends to a client: a transaction check-back becomes a telemetry command."""
        session = self.sessions.get(client_id)
        if session is None or request.code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        try:
            half, _ = decode_record(request.body)
        except RecordDecodeError as exc:
            logger.error("cannot decode the half message of a check-back: %s", exc)
            return
        fields = request.ext_fields
        transaction_id = f"{fields.get('commitLogOffset', '')}:{fields.get('tranStateTableOffset', '')}"
        command = spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=convert.incoming(half, topic=half.topic, store_host=self.access.store_host),
            transaction_id=transaction_id))
        session.outbox.put_nowait(command)

    async def _register_producers(self, session: ClientSession, topics: list[str]) -> None:
        groups = {producer_group(topic) for topic in topics} | session.producer_groups
        body = orjson.dumps({"clientID": session.client_id, "producerDataSet": [{"groupName": g} for g in groups],
                             "consumerDataSet": []})
        response = await invoke_local(self.access.processor, session.channel, RequestCode.HEART_BEAT, {}, body,
                                      credentials=session.credentials)
        if response.code == ResponseCode.SUCCESS:
            session.producer_groups = groups
        else:
            logger.warning("cannot register 5.x producer %s: %s %s", session.client_id, response.code,
                           response.remark)

    async def _end_session(self, client_id: str) -> None:
        session = self.sessions.pop(client_id, None)
        if session is None:
            return
        for group in session.producer_groups:
            with contextlib.suppress(Exception):
                await invoke_local(self.access.processor, session.channel, RequestCode.UNREGISTER_CLIENT,
                                   {"clientID": client_id, "producerGroup": group}, credentials=session.credentials)
        session.channel.close()

    # ------------------------------------------------------------------ checks

    @staticmethod
    def _topic_name(resource: pb.Resource) -> str:
        name = resource.name
        try:
            validate_topic(name)
        except InvalidNameError as exc:
            raise Refused(pb.ILLEGAL_TOPIC, str(exc)) from None
        return name

    @staticmethod
    def _group_name(resource: pb.Resource) -> str:
        name = resource.name
        try:
            validate_group(name)
        except InvalidNameError as exc:
            raise Refused(pb.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
        return name

    def _topic(self, name: str) -> Any:
        config = self.access.topic(name)
        if config is None:
            raise Refused(pb.TOPIC_NOT_FOUND, f"topic {name} does not exist")
        return config

    def _group(self, name: str) -> Any:
        config = self.access.group(name)
        if config is None:
            raise Refused(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name} does not exist")
        if not config.consume_enable:
            raise Refused(pb.FORBIDDEN, f"consumer group {name} may not consume (consumeEnable is false)")
        return config

    @staticmethod
    def accepted_types(topic_config: Any) -> tuple[pb.MessageType.ValueType, ...]:
        attributes = getattr(topic_config, "attributes", None) or {}
        declared = str(attributes.get(MESSAGE_TYPE_ATTRIBUTE, "")).upper()
        if declared in convert.TYPES_BY_NAME:
            return (convert.TYPES_BY_NAME[declared],)
        return _ALL_TYPES

    def _endpoints(self, requested: pb.Endpoints | None) -> pb.Endpoints:
        if requested is not None and requested.addresses:
            return requested
        host, port = self._endpoint()
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=port)])

    def _broker(self, requested: pb.Endpoints | None) -> pb.Broker:
        return pb.Broker(name=self.access.broker_name, id=0, endpoints=self._endpoints(requested))

    def _max_attempts(self, group_config: Any) -> int:
        return int(group_config.retry_max_times) + 1

    # ------------------------------------------------------------------ route, heartbeat, settings

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
        return spb.QueryRouteResponse(status=_ok(), message_queues=queues)

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
        return spb.HeartbeatResponse(status=_ok())

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: grpc.aio.ServicerContext[Any, Any]
                                      ) -> spb.NotifyClientTerminationResponse:
        try:
            caller = self._caller(context)
        except Refused as refused:
            return spb.NotifyClientTerminationResponse(status=refused.status)
        await self._end_session(caller.client_id)
        return spb.NotifyClientTerminationResponse(status=_ok())

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
        return spb.TelemetryCommand(status=_ok(), settings=self.server_settings(settings))

    # ------------------------------------------------------------------ send

    async def SendMessage(self, request: spb.SendMessageRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> spb.SendMessageResponse:
        try:
            caller = self._caller(context)
            if not request.messages:
                raise Refused(pb.BAD_REQUEST, "the request has no message")
        except Refused as refused:
            return spb.SendMessageResponse(status=refused.status)
        session = self._session(caller)
        entries = []
        for message in request.messages:
            try:
                entries.append(await self._send_one(caller, session, message))
            except Refused as refused:
                entries.append(spb.SendResultEntry(status=refused.status,
                                                   message_id=message.system_properties.message_id))
        codes = {entry.status.code for entry in entries}
        overall = entries[0].status if len(entries) == 1 else _ok() if codes == {pb.OK} else status(
            pb.MULTIPLE_RESULTS)
        return spb.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, caller: Caller, session: ClientSession, message: pb.Message) -> spb.SendResultEntry:
        config = self.access.config
        topic = self._topic_name(message.topic)
        try:
            out = convert.outgoing(message, max_body_size=config.max_message_size,
                                   max_decompressed=config.max_message_size)
        except convert.BadMessage as bad:
            raise Refused(bad.code, str(bad)) from None
        topic_config = self._topic(topic)
        accepted = self.accepted_types(topic_config)
        if out.message_type not in accepted:
            raise Refused(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                          f"topic {topic} accepts {', '.join(convert.type_name(t) for t in accepted)} messages, "
                          f"not {convert.type_name(out.message_type)}")
        caller.require(topic, Permission.PUB)
        properties = out.properties
        queue_id = -1
        if out.message_group is not None:
            queue_nums = max(topic_config.write_queue_nums, 1)
            queue_id = abs(convert.java_hash(out.message_group) % queue_nums)
        send_topic = topic
        sys_flag = 0
        timer = False
        group = producer_group(topic)
        if out.deliver_ms is not None:
            now = now_ms()
            if out.deliver_ms - now > self.max_delay_ms:
                raise Refused(pb.ILLEGAL_DELIVERY_TIME,
                              f"the delivery time is more than {self.max_delay_ms // 1000} s away")
            properties[convert.DELIVER_MS_PROPERTY] = str(out.deliver_ms)
            if out.deliver_ms > now:
                if queue_id < 0:
                    queue_id = (now // 7) % max(topic_config.write_queue_nums, 1)
                properties[MessageConst.REAL_TOPIC] = topic
                properties[MessageConst.REAL_QUEUE_ID] = str(queue_id)
                send_topic, queue_id, timer = TIMER_TOPIC, 0, True
        if out.message_type == pb.TRANSACTION:
            properties[MessageConst.TRANSACTION_PREPARED] = "true"
            properties[MessageConst.PRODUCER_GROUP] = group
            sys_flag = _TRANSACTION_PREPARED
            if group not in session.producer_groups:
                await self._register_producers(session, [topic])
        fields = send_fields(send_topic, queue_id, properties, out.born_ms or now_ms(), producer_group=group,
                             sys_flag=sys_flag)
        response = await invoke_local(self.access.processor, session.channel, RequestCode.SEND_MESSAGE, fields,
                                      out.body, credentials=caller.credentials)
        code = _SEND_CODES.get(response.code, pb.INTERNAL_SERVER_ERROR)
        if code != pb.OK:
            raise Refused(code, response.remark or f"send failed with code {response.code}")
        queue_offset = int(response.ext_fields.get("queueOffset", "0") or 0)
        if timer:
            self.timer.added(queue_offset, out.deliver_ms or 0)
        transaction_id = ""
        if out.message_type == pb.TRANSACTION:
            offset_msg_id = response.ext_fields.get("msgId", "")
            try:
                commit_log_offset = decode_offset_msg_id(offset_msg_id)[2]
            except ValueError:
                raise Refused(pb.INTERNAL_SERVER_ERROR,
                              f"the broker answered an unreadable msgId {offset_msg_id!r}") from None
            transaction_id = f"{commit_log_offset}:{queue_offset}"
        return spb.SendResultEntry(status=_ok(), message_id=out.message_id, transaction_id=transaction_id,
                                   offset=queue_offset)

    async def EndTransaction(self, request: spb.EndTransactionRequest,
                             context: grpc.aio.ServicerContext[Any, Any]) -> spb.EndTransactionResponse:
        try:
            caller = self._caller(context)
            topic = self._topic_name(request.topic)
            caller.require(topic, Permission.PUB)
            commit_text, _, queue_text = request.transaction_id.partition(":")
            if not commit_text.isdigit() or not queue_text.isdigit():
                raise Refused(pb.INVALID_TRANSACTION_ID, f"unknown transaction id {request.transaction_id!r}")
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                raise Refused(pb.BAD_REQUEST, "the resolution must be COMMIT or ROLLBACK")
        except Refused as refused:
            return spb.EndTransactionResponse(status=refused.status)
        session = self._session(caller)
        fields = {
            "producerGroup": producer_group(topic), "tranStateTableOffset": queue_text,
            "commitLogOffset": commit_text, "commitOrRollback": str(_COMMIT if request.resolution == pb.COMMIT
                                                                    else _ROLLBACK),
            "fromTransactionCheck": "true" if request.source == pb.SOURCE_SERVER_CHECK else "false",
            "msgId": request.message_id, "transactionId": request.message_id,
        }
        response = await invoke_local(self.access.processor, session.channel, RequestCode.END_TRANSACTION, fields,
                                      credentials=caller.credentials)
        if response.code == ResponseCode.SUCCESS:
            return spb.EndTransactionResponse(status=_ok())
        code = pb.FORBIDDEN if response.code == ResponseCode.NO_PERMISSION else pb.INVALID_TRANSACTION_ID
        return spb.EndTransactionResponse(status=status(code, response.remark or "end transaction failed"))

    # ------------------------------------------------------------------ consume

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest,
                              context: grpc.aio.ServicerContext[Any, Any]) -> spb.QueryAssignmentResponse:
        try:
            caller = self._caller(context)
            topic = self._topic_name(request.topic)
            group = self._group_name(request.group)
            topic_config = self._topic(topic)
            self._group(group)
            caller.require(topic, Permission.SUB)
        except Refused as refused:
            return spb.QueryAssignmentResponse(status=refused.status)
        if not is_readable(topic_config.perm):
            return spb.QueryAssignmentResponse(status=_ok())
        # one assignment for the whole broker: a receive takes from all its queues, as the proxy's pop does
        queue = pb.MessageQueue(topic=request.topic, id=-1, permission=pb.READ_WRITE,
                                broker=self._broker(request.endpoints if request.HasField("endpoints") else None),
                                accept_message_types=self.accepted_types(topic_config))
        return spb.QueryAssignmentResponse(status=_ok(), assignments=[pb.Assignment(message_queue=queue)])

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[bytes]:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic = self._topic_name(request.message_queue.topic)
            topic_config = self._topic(topic)
            group_config = self._group(group)
            caller.require(topic, Permission.SUB)
            caller.require(retry_topic(group), Permission.SUB)
            if not 0 < request.batch_size <= self.max_batch:
                raise Refused(pb.BAD_REQUEST, f"batch_size must be in 1..{self.max_batch}, got {request.batch_size}")
            if request.HasField("invisible_duration"):
                invisible_ms = duration_ms(request.invisible_duration)
            elif request.auto_renew:
                invisible_ms = self.default_invisible_ms
            else:
                raise Refused(pb.ILLEGAL_INVISIBLE_TIME, "a receive without auto_renew needs an invisible_duration")
            if not self.min_invisible_ms <= invisible_ms <= self.max_invisible_ms:
                raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"the invisible duration must be in {self.min_invisible_ms}.."
                                                         f"{self.max_invisible_ms} ms, got {invisible_ms} ms")
            expression = request.filter_expression
            kind = "SQL" if expression.type == pb.SQL else "TAG"
            if kind == "SQL" and not self.access.config.enable_property_filter:
                raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, "SQL filters need enablePropertyFilter on the broker")
            message_filter = MessageFilter.parse(kind, expression.expression)
            if isinstance(message_filter, str):
                raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, message_filter)
            polling_ms = duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") \
                else self.long_polling_ms
            if polling_ms < 0 or polling_ms > max(self.long_polling_ms, 30_000) * 2:
                raise Refused(pb.ILLEGAL_POLLING_TIME, f"the long polling timeout {polling_ms} ms is out of range")
        except Refused as refused:
            yield spb.ReceiveMessageResponse(status=refused.status).SerializeToString()
            return
        session = self._session(caller)
        loop = asyncio.get_running_loop()
        remaining = context.time_remaining()
        wait_s = polling_ms / 1000
        if remaining is not None:  # answer before the client's deadline
            wait_s = min(wait_s, max(0.0, remaining - min(1.0, remaining / 5)))
        queue_ids = list(range(topic_config.read_queue_nums)) if is_readable(topic_config.perm) else []
        found = await self.pop.receive(
            group, topic, queue_ids, request.batch_size, invisible_ms,
            fifo=bool(getattr(group_config, "consume_message_orderly", False)), message_filter=message_filter,
            max_attempts=self._max_attempts(group_config), deadline=loop.time() + wait_s,
            credentials=caller.credentials, channel=session.channel)
        if not found:
            yield _RECEIVE_NOT_FOUND
            return
        yield _RECEIVE_OK
        encoder = wire.ReceiveEncoder(topic, store_host=self.access.store_host, invisible_ms=invisible_ms)
        for item in found:
            yield encoder.encode(item.message, item.handle, item.attempt)
        yield spb.ReceiveMessageResponse(delivery_timestamp=convert.to_timestamp(now_ms())).SerializeToString()

    async def AckMessage(self, request: spb.AckMessageRequest,
                         context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic = self._topic_name(request.topic)
            caller.require(topic, Permission.SUB)
            if not request.entries:
                raise Refused(pb.BAD_REQUEST, "the request has no entry")
        except Refused as refused:
            return spb.AckMessageResponse(status=refused.status).SerializeToString()
        entries = [(entry.message_id, entry.receipt_handle) for entry in request.entries]
        errors = self.pop.ack_many(group, topic, [handle for _, handle in entries])
        statuses = [wire.STATUS_OK if error is None else wire.status(pb.INVALID_RECEIPT_HANDLE, error.value)
                    for error in errors]
        if len(statuses) == 1:
            overall = statuses[0]
        else:
            overall = wire.STATUS_OK if errors.count(None) == len(errors) else wire.status(
                pb.MULTIPLE_RESULTS, pb.Code.Name(pb.MULTIPLE_RESULTS))
        return wire.ack_response(overall, ((message_id, handle, entry_status) for (message_id, handle), entry_status
                                           in zip(entries, statuses, strict=True)))

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: grpc.aio.ServicerContext[Any, Any]
                                      ) -> spb.ChangeInvisibleDurationResponse:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic = self._topic_name(request.topic)
            caller.require(topic, Permission.SUB)
            invisible_ms = duration_ms(request.invisible_duration)
            if not 0 <= invisible_ms <= self.max_invisible_ms:
                raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"the invisible duration must be in 0.."
                                                         f"{self.max_invisible_ms} ms, got {invisible_ms} ms")
            changed = self.pop.change_invisible(group, topic, request.receipt_handle, invisible_ms)
            if not isinstance(changed, tuple):
                raise Refused(pb.INVALID_RECEIPT_HANDLE, changed.value)
        except Refused as refused:
            return spb.ChangeInvisibleDurationResponse(status=refused.status)
        return spb.ChangeInvisibleDurationResponse(status=_ok(), receipt_handle=changed[0])

    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                              context: grpc.aio.ServicerContext[Any, Any]
                                              ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic = self._topic_name(request.topic)
            group_config = self._group(group)
            caller.require(topic, Permission.SUB)
        except Refused as refused:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=refused.status)
        session = self._session(caller)
        outcome = await self.pop.forward_to_dlq(group, topic, request.receipt_handle,
                                                self._max_attempts(group_config), caller.credentials, session.channel)
        if outcome is None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=_ok())
        if isinstance(outcome, str):
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INTERNAL_SERVER_ERROR, outcome))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INVALID_RECEIPT_HANDLE, outcome.value))

    # ------------------------------------------------------------------ offsets and pull

    def _queue_of(self, queue: pb.MessageQueue) -> tuple[str, int]:
        topic = self._topic_name(queue.topic)
        topic_config = self._topic(topic)
        if not 0 <= queue.id < topic_config.read_queue_nums:
            raise Refused(pb.BAD_REQUEST, f"queue {queue.id} is not a readable queue of {topic}")
        return topic, queue.id

    async def QueryOffset(self, request: spb.QueryOffsetRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> spb.QueryOffsetResponse:
        try:
            self._caller(context)
            topic, queue_id = self._queue_of(request.message_queue)
        except Refused as refused:
            return spb.QueryOffsetResponse(status=refused.status)
        if request.query_offset_policy == spb.BEGINNING:  # type: ignore[attr-defined]
            offset = self.access.min_offset(topic, queue_id)
        elif request.query_offset_policy == spb.END:  # type: ignore[attr-defined]
            offset = self.access.max_offset(topic, queue_id)
        else:
            offset = self.access.offset_by_time(topic, queue_id, convert.timestamp_ms(request.timestamp))
        return spb.QueryOffsetResponse(status=_ok(), offset=offset)

    async def GetOffset(self, request: spb.GetOffsetRequest,
                        context: grpc.aio.ServicerContext[Any, Any]) -> spb.GetOffsetResponse:
        try:
            self._caller(context)
            group = self._group_name(request.group)
            topic, queue_id = self._queue_of(request.message_queue)
        except Refused as refused:
            return spb.GetOffsetResponse(status=refused.status)
        offset = self.access.committed_offset(group, topic, queue_id)
        if offset < 0:
            return spb.GetOffsetResponse(status=status(pb.OFFSET_NOT_FOUND, "the group has no offset in this queue"))
        return spb.GetOffsetResponse(status=_ok(), offset=offset)

    async def UpdateOffset(self, request: spb.UpdateOffsetRequest,
                           context: grpc.aio.ServicerContext[Any, Any]) -> spb.UpdateOffsetResponse:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic, queue_id = self._queue_of(request.message_queue)
            caller.require(topic, Permission.SUB)
            if request.offset < 0:
                raise Refused(pb.ILLEGAL_OFFSET, "the offset must not be negative")
        except Refused as refused:
            return spb.UpdateOffsetResponse(status=refused.status)
        self.access.commit_offset(group, topic, queue_id, request.offset)
        return spb.UpdateOffsetResponse(status=_ok())

    async def PullMessage(self, request: spb.PullMessageRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[spb.PullMessageResponse]:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic, queue_id = self._queue_of(request.message_queue)
            caller.require(topic, Permission.SUB)
            if not 0 < request.batch_size <= self.max_batch:
                raise Refused(pb.BAD_REQUEST, f"batch_size must be in 1..{self.max_batch}")
            expression = request.filter_expression
            message_filter = MessageFilter.parse("SQL" if expression.type == pb.SQL else "TAG", expression.expression)
            if isinstance(message_filter, str):
                raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, message_filter)
        except Refused as refused:
            yield spb.PullMessageResponse(status=refused.status)
            return
        read = self.access.read(topic, queue_id, request.offset, request.batch_size, group)
        messages = [m for m in read.messages if message_filter.matches(m)]
        yield spb.PullMessageResponse(status=_ok() if messages else status(pb.MESSAGE_NOT_FOUND, "no new message"))
        for message in messages:
            yield spb.PullMessageResponse(message=convert.incoming(message, topic=topic,
                                                                   store_host=self.access.store_host))
        yield spb.PullMessageResponse(next_offset=read.next_offset)

    async def RecallMessage(self, request: spb.RecallMessageRequest,
                            context: grpc.aio.ServicerContext[Any, Any]) -> spb.RecallMessageResponse:
        return spb.RecallMessageResponse(status=status(pb.NOT_IMPLEMENTED, "recalling messages is not supported"))

    async def SyncLiteSubscription(self, request: spb.SyncLiteSubscriptionRequest,
                                   context: grpc.aio.ServicerContext[Any, Any]) -> spb.SyncLiteSubscriptionResponse:
        return spb.SyncLiteSubscriptionResponse(status=status(pb.NOT_IMPLEMENTED, "lite topics are not supported"))


__all__ = ["RAW_RESPONSES", "Caller", "ClientSession", "MessagingService", "Refused", "producer_group", "status"]
