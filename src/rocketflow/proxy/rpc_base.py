"""`ServiceBase`: what the servicer's RPCs share — its settings, who calls (the ``authorization``
header checked when the broker's ACL is on), the clients' sessions, and the topic, group and queue
lookups that refuse a call with the status RocketMQ 5's proxy answers."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Callable
from typing import Any, Final

import grpc
import orjson

from rocketflow.acl import AccessGrant, SessionCredentials
from rocketflow.acl.address import host_of
from rocketflow.broker.config import parse_delay_levels
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.names import InvalidNameError, validate_group, validate_topic
from rocketflow.proxy import convert
from rocketflow.proxy.access import MESSAGE_TYPE_ATTRIBUTE, BrokerAccess
from rocketflow.proxy.calls import Caller, ClientSession, Refused, peer_address, producer_group
from rocketflow.proxy.local import LocalChannel, invoke_local
from rocketflow.proxy.pop_service import PopService
from rocketflow.proxy.timer import TimerService
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

logger = logging.getLogger(__name__)

_AUTHORIZATION: Final = re.compile(
    r"^\s*MQv2-HMAC-SHA1\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9A-Fa-f]+)\s*$")
#: the message types a topic without a declared type accepts
_ALL_TYPES: Final[tuple[pb.MessageType.ValueType, ...]] = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)


class ServiceBase:
    """The servicer's state and the lookups its RPCs share; `rocketflow.proxy.service.MessagingService`
    puts the RPCs of each role on it."""

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

    def _queue_of(self, queue: pb.MessageQueue) -> tuple[str, int]:
        topic = self._topic_name(queue.topic)
        topic_config = self._topic(topic)
        if not 0 <= queue.id < topic_config.read_queue_nums:
            raise Refused(pb.BAD_REQUEST, f"queue {queue.id} is not a readable queue of {topic}")
        return topic, queue.id


__all__ = ["ServiceBase"]
