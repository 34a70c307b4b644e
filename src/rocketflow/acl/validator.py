"""Request checks of RocketMQ's plain ACL (``PlainAccessValidator`` + ``PlainPermissionManager``).

`required_permissions` says which resources a request needs (by request code, as
``PlainAccessValidator.parse``, with the send-back rules of 4.9.4+: CONSUMER_SEND_MSG_BACK needs SUB on
the group only, and a send to ``%RETRY%<group>`` SUB on that group, apache/rocketmq#4457 and #7917;
4.9.3 also wanted PUB on the original topic, so SUB-only consumers could not return messages).
`PlainAclValidator.validate` runs RocketMQ's order of checks:

1. the client address matches ``globalWhiteRemoteAddresses``: allowed;
2. no ``AccessKey``, or one the file does not define: refused;
3. the address matches the account's ``whiteRemoteAddress``: allowed (no signature needed);
4. the ``Signature`` is not the one the account's secret gives: refused;
5. an admin-only code from a non-admin account: refused;
6. every resource the request needs must be granted by ``topicPerms`` / ``groupPerms``, or else by
   ``defaultTopicPerm`` / ``defaultGroupPerm`` (an admin account listing no resources is granted all).

Checks that need more than the request (the topic of the message a VIEW_MESSAGE_BY_ID names, the
address a REGISTER_BROKER would replace) are made by the processors: `request_grant` gives them the
request's `AccessGrant` (`PlainAclValidator.authorize`: who sent it), which answers "may it SUB / PUB
this topic" and "is it admin".

`PlainAclFile` reloads the file when its modification time, size or inode changes (checked at most
once per ``check_interval`` seconds, on use).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Final, Protocol

from rocketflow.acl.address import host_of
from rocketflow.acl.config import (
    AccountConfig,
    Permission,
    PlainAclConfig,
    check_permission,
    describe_resource,
    is_group_resource,
    parse_plain_acl,
    permission_name,
    retry_topic,
)
from rocketflow.acl.errors import AclConfigError, AclDeniedError
from rocketflow.acl.signing import ACCESS_KEY_FIELD, SIGNATURE_FIELD, verify_signature
from rocketflow.protocol.bodies import HeartbeatData
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.names import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError

logger = logging.getLogger(__name__)

#: Codes RocketMQ 4.9.3 reserves for admin accounts (``Permission.ADMIN_CODE``).
ROCKETMQ_ADMIN_CODES: Final = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
})
#: The broker's admin-only codes: RocketMQ's, plus the other codes that change or drop broker state, and
#: the reads of the broker's configuration and of its whole tables (every topic, group, offset), which
#: only admin tools and slaves need.
BROKER_ADMIN_CODES: Final = ROCKETMQ_ADMIN_CODES | frozenset({
    RequestCode.RESET_CONSUMER_OFFSET_IN_BROKER, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
    RequestCode.TRIGGER_DELETE_FILES, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, RequestCode.CLEAN_UNUSED_TOPIC,
    RequestCode.CLONE_GROUP_OFFSET, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG,
    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.GET_BROKER_CONFIG, RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
    RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
    # makes a group's client consume a stored message of any topic (an operator's resend)
    RequestCode.CONSUME_MESSAGE_DIRECTLY,
})
#: The name server's admin-only codes (the 4.9.3 name server has no ACL): those that change its state or
#: keep a broker alive, and the reads of its configuration.
NAMESRV_ADMIN_CODES: Final = frozenset({
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.QUERY_DATA_VERSION,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG, RequestCode.UPDATE_NAMESRV_CONFIG,
    RequestCode.GET_KV_CONFIG, RequestCode.GET_KVLIST_BY_NAMESPACE, RequestCode.GET_NAMESRV_CONFIG,
})
#: Topics whose records belong to other topics (delayed, prepared and discarded transaction messages):
#: reading them directly (PULL_MESSAGE, QUERY_MESSAGE) needs an admin account.
MIXED_TOPICS: Final = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})
DEFAULT_CHECK_INTERVAL_SECONDS: Final = 1.0
#: HEART_BEAT bodies up to this size are decoded by the ACL check on the loop (a few ms at most); the
#: permissions of larger ones are checked by the heartbeat processor, which decodes them in a worker thread
HEARTBEAT_INLINE_BYTES: Final = 64 * 1024
REMARK_PREFIX: Final = "[ACL] "


def _code_text(code: int) -> str:
    try:
        return f"{code} ({RequestCode(code).name})"
    except ValueError:
        return str(code)


def required_permissions(request: RemotingCommand) -> dict[str, Permission]:
    """Resource -> permission a request needs (groups as ``%RETRY%<group>``); empty for codes without one.

    As RocketMQ, QUERY_CONSUMER_OFFSET and LOCK/UNLOCK_BATCH_MQ need no resource (any valid account);
    SEND_BATCH_MESSAGE is checked as SEND_MESSAGE_V2 (4.9's parse skips it, 5.x checks it). The reads
    of one group's clients and progress (GET_CONSUMER_CONNECTION_LIST, GET_CONSUME_STATS,
    GET_CONSUMER_RUNNING_INFO) need SUB on the group, as GET_CONSUMER_LIST_BY_GROUP does.
    Raises `AclDeniedError` when the body a decision depends on (HEART_BEAT) cannot be read.
    """
    fields = request.ext_fields
    needs: dict[str, Permission] = {}

    def need(resource: str | None, permission: Permission) -> None:
        if resource:
            needs[resource] = permission

    def group(name: str | None) -> str | None:
        return retry_topic(name) if name else None

    def send_to(topic: str | None) -> None:
        # a send to %RETRY%<group> is a consumer returning a message (the fallback when
        # CONSUMER_SEND_MSG_BACK fails): the retry topic is the group's resource, checked as SUB
        if topic:
            need(topic, Permission.SUB if is_group_resource(topic) else Permission.PUB)

    code = request.code
    if code == RequestCode.SEND_MESSAGE:
        send_to(fields.get("topic"))
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        send_to(fields.get("b"))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        need(group(fields.get("group")), Permission.SUB)
    elif code == RequestCode.PULL_MESSAGE:
        need(fields.get("topic"), Permission.SUB)
        need(group(fields.get("consumerGroup")), Permission.SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        need(fields.get("topic"), Permission.SUB)
    elif code == RequestCode.HEART_BEAT:
        if len(request.body or b"") > HEARTBEAT_INLINE_BYTES:
            return needs  # checked by the heartbeat processor, which decodes such bodies off the loop
        try:
            heartbeat = HeartbeatData.decode(request.body)
        except ProtocolError as exc:
            raise AclDeniedError(f"{REMARK_PREFIX}cannot read the HEART_BEAT body to check permissions: {exc}") \
                from None
        needs.update(heartbeat_permissions(heartbeat))
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                  RequestCode.GET_CONSUMER_CONNECTION_LIST, RequestCode.GET_CONSUME_STATS,
                  RequestCode.GET_CONSUMER_RUNNING_INFO):
        need(group(fields.get("consumerGroup")), Permission.SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        need(group(fields.get("consumerGroup")), Permission.SUB)
        need(fields.get("topic"), Permission.SUB)
    return needs


def heartbeat_permissions(heartbeat: HeartbeatData) -> dict[str, Permission]:
    """What a heartbeat needs: SUB on each consumer group (as ``%RETRY%<group>``) and subscribed topic."""
    needs: dict[str, Permission] = {}
    for consumer in heartbeat.consumer_data_set:
        if consumer.group_name:
            needs[retry_topic(consumer.group_name)] = Permission.SUB
        for subscription in consumer.subscription_data_set:
            if subscription.topic:
                needs[subscription.topic] = Permission.SUB
    return needs


def _resource_refusal(account: AccountConfig, resource: str, needed: Permission) -> str | None:
    """Why ``account`` may not use ``resource`` as ``needed`` says, or None if it may."""
    if account.resource_perms is None and account.admin:
        return None
    is_group = is_group_resource(resource)
    owned = (account.resource_perms or {}).get(resource)
    if owned is None:
        owned = account.default_group_perm if is_group else account.default_topic_perm
        source = f"{'defaultGroupPerm' if is_group else 'defaultTopicPerm'} is {permission_name(owned)}"
    else:
        source = f"{'groupPerms' if is_group else 'topicPerms'} gives {permission_name(owned)}"
    if check_permission(needed, owned):
        return None
    return (f"{REMARK_PREFIX}accessKey {account.access_key} has no {permission_name(needed)} "
            f"permission on {describe_resource(resource)} ({source})")


def _check_resources(account: AccountConfig, needs: Mapping[str, Permission]) -> None:
    for resource, needed in needs.items():
        refusal = _resource_refusal(account, resource, needed)
        if refusal is not None:
            raise AclDeniedError(refusal)


def _reads_mixed_topic(request: RemotingCommand) -> bool:
    return request.code in (RequestCode.PULL_MESSAGE, RequestCode.QUERY_MESSAGE) \
        and request.ext_fields.get("topic") in MIXED_TOPICS


def message_resource(topic: str, properties: Mapping[str, str]) -> str:
    """The topic a stored message's data belongs to: the resource to check before returning or moving it.

    A delayed or prepared message is stored under a system topic with its own in ``REAL_TOPIC``; a
    returned message is stored under ``%RETRY%<group>`` / ``%DLQ%<group>`` with the topic it was first
    consumed from in ``RETRY_TOPIC``. Those properties are set by the broker when it moves a message, so
    the message's data stays its first topic's. A retry message without ``RETRY_TOPIC`` (a consumer's
    own copy, sent to the retry topic) is its group's.
    """
    if topic in MIXED_TOPICS:
        topic = properties.get(MessageConst.REAL_TOPIC) or topic
    if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        topic = properties.get(MessageConst.RETRY_TOPIC) or topic
    return topic


@dataclass(frozen=True, slots=True)
class AccessGrant:
    """What one request may do, as the ACL decided when it let the request in.

    `OPEN` is the grant of every request when ACL is off: everything is allowed, nobody is admin.
    """

    #: whether ACL checked the request at all
    checked: bool
    #: the account of the request's AccessKey (None: ACL off, or a globally white-listed address)
    account: AccountConfig | None = None
    #: the address is white-listed (globally, or for this account): RocketMQ lets it do anything
    white_listed: bool = False

    OPEN: ClassVar[AccessGrant]

    @property
    def is_admin(self) -> bool:
        """An admin account or a white-listed address, with ACL on."""
        return self.checked and (self.white_listed or (self.account is not None and self.account.admin))

    @property
    def access_key(self) -> str | None:
        return self.account.access_key if self.account is not None else None

    def refusal(self, resource: str, needed: Permission) -> str | None:
        """Why this request may not use ``resource`` (a topic, or ``%RETRY%<group>``) as ``needed``
        says, or None if it may."""
        if not self.checked or self.white_listed:
            return None
        if self.account is None:
            return f"{REMARK_PREFIX}the request's AccessKey is no longer allowed"
        return _resource_refusal(self.account, resource, needed)

    def message_refusal(self, topic: str, properties: Mapping[str, str], needed: Permission) -> str | None:
        """`refusal` for the topic a stored message's data belongs to (`message_resource`)."""
        return self.refusal(message_resource(topic, properties), needed)


AccessGrant.OPEN = AccessGrant(checked=False)
#: the grant of a request that no longer passes the ACL: it may do nothing
_NOTHING: Final = AccessGrant(checked=True)


class PlainAclValidator:
    """Checks requests against a `PlainAclConfig` (given, or fetched per check from a callable)."""

    def __init__(self, config: PlainAclConfig | Callable[[], PlainAclConfig], *,
                 admin_codes: frozenset[int] = BROKER_ADMIN_CODES) -> None:
        self._config = config
        self.admin_codes = admin_codes

    @property
    def config(self) -> PlainAclConfig:
        config = self._config
        return config if isinstance(config, PlainAclConfig) else config()

    def validate(self, request: RemotingCommand, remote_address: str) -> None:
        """Return if ``request`` from ``remote_address`` (``host:port``) is allowed; raise `AclDeniedError` if not."""
        grant = self.authorize(request, remote_address)
        account = grant.account
        if grant.white_listed or account is None:
            return
        if (request.code in self.admin_codes or _reads_mixed_topic(request)) and not account.admin:
            raise AclDeniedError(f"{REMARK_PREFIX}request code {_code_text(request.code)} needs an admin account, "
                                 f"but accessKey {account.access_key} is not admin")
        _check_resources(account, required_permissions(request))

    def authorize(self, request: RemotingCommand, remote_address: str) -> AccessGrant:
        """Who ``request`` is from (steps 1 to 4: white lists, AccessKey, Signature); raise `AclDeniedError`
        if it cannot be trusted. Admin codes and resources are not checked here."""
        config = self.config
        host = host_of(remote_address)
        if any(pattern.matches(host) for pattern in config.global_white_remote_addresses):
            return AccessGrant(checked=True, white_listed=True)
        fields = request.ext_fields
        access_key = fields.get(ACCESS_KEY_FIELD)
        if not access_key:
            raise AclDeniedError(f"{REMARK_PREFIX}request code {_code_text(request.code)} has no AccessKey, and "
                                 f"{host} is not a globally white-listed address")
        account = config.accounts.get(access_key)
        if account is None:
            raise AclDeniedError(f"{REMARK_PREFIX}accessKey {access_key} is not configured")
        if account.white_remote_address.matches(host):
            return AccessGrant(checked=True, account=account, white_listed=True)
        if not fields.get(SIGNATURE_FIELD):
            raise AclDeniedError(f"{REMARK_PREFIX}request code {_code_text(request.code)} from accessKey "
                                 f"{access_key} has no Signature")
        if not verify_signature(fields, request.body, account.secret_key):
            raise AclDeniedError(f"{REMARK_PREFIX}signature check failed for accessKey {access_key} (wrong secretKey, "
                                 "or the request was changed after signing)")
        return AccessGrant(checked=True, account=account)

    def grant(self, request: RemotingCommand, remote_address: str) -> AccessGrant:
        """`authorize` for a request the hook already let in (a processor's question); a request that no
        longer passes (the file changed in between) gets a grant that allows nothing."""
        try:
            return self.authorize(request, remote_address)
        except AclDeniedError:
            return _NOTHING

    def check(self, request: RemotingCommand, remote_address: str) -> str | None:
        """None if allowed, else the refusal's reason."""
        try:
            self.validate(request, remote_address)
        except AclDeniedError as exc:
            return str(exc)
        return None


@dataclass(slots=True)
class _FileState:
    stamp: tuple[int, int, int] | None = None
    config: PlainAclConfig = field(default_factory=PlainAclConfig)
    next_check: float = 0.0


class PlainAclFile:
    """A ``plain_acl.yml`` on disk: `load` reads it (raising `AclConfigError`); `config` re-reads it when
    it changed, keeping the last good config (and logging) if the new content is broken or the file is gone."""

    def __init__(self, path: str | os.PathLike[str], *, check_interval: float = DEFAULT_CHECK_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if check_interval < 0:
            raise ValueError(f"check_interval must be >= 0 seconds, got {check_interval}")
        self.path = Path(path)
        self.check_interval = check_interval
        self._clock = clock
        self._state = _FileState()
        self._loaded = False
        #: times the file was (re)loaded successfully
        self.loads = 0

    def _stamp(self) -> tuple[int, int, int]:
        stat = os.stat(self.path)
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def load(self) -> PlainAclConfig:
        """Read and parse the file now."""
        try:
            stamp = self._stamp()
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise AclConfigError(f"ACL file {self.path} does not exist (acl is enabled)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise AclConfigError(f"cannot read ACL file {self.path}: {exc}") from None
        config = parse_plain_acl(text, str(self.path))
        self._state = _FileState(stamp, config, self._clock() + self.check_interval)
        self._loaded = True
        self.loads += 1
        return config

    def config(self) -> PlainAclConfig:
        """The current config (loading on first use, reloading when the file changed)."""
        if not self._loaded:
            return self.load()
        state = self._state
        now = self._clock()
        if now < state.next_check:
            return state.config
        state.next_check = now + self.check_interval
        try:
            stamp = self._stamp()
        except OSError as exc:
            logger.warning("ACL file %s cannot be checked (%s); keeping the last loaded rules", self.path, exc)
            return state.config
        if stamp != state.stamp:
            try:
                self.load()
                logger.info("ACL file %s reloaded", self.path)
            except AclConfigError as exc:
                state.stamp = stamp
                logger.error("ACL file %s changed but cannot be used, keeping the last loaded rules: %s",
                             self.path, exc)
        return self._state.config

    __call__ = config


class _HasRemoteAddress(Protocol):
    @property
    def remote_address(self) -> str: ...


class AclRequestHook:
    """A server request hook: None for an allowed request, else a NO_PERMISSION response saying why."""

    def __init__(self, validator: PlainAclValidator) -> None:
        self.validator = validator
        #: requests refused so far, and the reason of the last refusal
        self.refused = 0
        self.last_refusal: str | None = None

    def __call__(self, channel: _HasRemoteAddress, request: RemotingCommand) -> RemotingCommand | None:
        reason = self.validator.check(request, channel.remote_address)
        if reason is None:
            return None
        self.refused += 1
        self.last_refusal = reason
        logger.info("refused %s from %s: %s", request.describe(), channel.remote_address, reason)
        return request.make_response(ResponseCode.NO_PERMISSION, remark=reason)


def request_grant(hook: AclRequestHook | None, request: RemotingCommand, remote_address: str) -> AccessGrant:
    """The `AccessGrant` of a request a server's ACL hook (None: ACL off) let in."""
    return AccessGrant.OPEN if hook is None else hook.validator.grant(request, remote_address)


__all__ = [
    "BROKER_ADMIN_CODES",
    "DEFAULT_CHECK_INTERVAL_SECONDS",
    "HEARTBEAT_INLINE_BYTES",
    "MIXED_TOPICS",
    "NAMESRV_ADMIN_CODES",
    "ROCKETMQ_ADMIN_CODES",
    "AccessGrant",
    "AclRequestHook",
    "PlainAclFile",
    "PlainAclValidator",
    "heartbeat_permissions",
    "message_resource",
    "request_grant",
    "required_permissions",
]
