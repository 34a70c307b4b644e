"""Access control compatible with RocketMQ 4.x's plain ACL (``plain_acl.yml``, signed requests).

Servers check requests with `PlainAclValidator` (installed as an `AclRequestHook`); clients sign
them with `AclClientHook` / `sign`. See docs/acl.md.
"""

from __future__ import annotations

from rocketflow.acl.address import AddressPattern, parse_address_pattern
from rocketflow.acl.config import (
    AccountConfig,
    Permission,
    PlainAclConfig,
    check_permission,
    parse_permission,
    parse_plain_acl,
)
from rocketflow.acl.errors import AclConfigError, AclDeniedError
from rocketflow.acl.redact import REDACTED, is_secret_setting, redact_settings, redact_value
from rocketflow.acl.signing import (
    AclClientHook,
    SessionCredentials,
    calculate_signature,
    sign,
    signature_content,
    verify_signature,
)
from rocketflow.acl.validator import (
    BROKER_ADMIN_CODES,
    HEARTBEAT_INLINE_BYTES,
    MIXED_TOPICS,
    NAMESRV_ADMIN_CODES,
    ROCKETMQ_ADMIN_CODES,
    AccessGrant,
    AclRequestHook,
    PlainAclFile,
    PlainAclValidator,
    heartbeat_permissions,
    message_resource,
    request_grant,
    required_permissions,
)

__all__ = [
    "BROKER_ADMIN_CODES",
    "HEARTBEAT_INLINE_BYTES",
    "MIXED_TOPICS",
    "NAMESRV_ADMIN_CODES",
    "REDACTED",
    "ROCKETMQ_ADMIN_CODES",
    "AccessGrant",
    "AccountConfig",
    "AclClientHook",
    "AclConfigError",
    "AclDeniedError",
    "AclRequestHook",
    "AddressPattern",
    "Permission",
    "PlainAclConfig",
    "PlainAclFile",
    "PlainAclValidator",
    "SessionCredentials",
    "calculate_signature",
    "check_permission",
    "heartbeat_permissions",
    "is_secret_setting",
    "message_resource",
    "parse_address_pattern",
    "parse_permission",
    "parse_plain_acl",
    "redact_settings",
    "redact_value",
    "request_grant",
    "required_permissions",
    "sign",
    "signature_content",
    "verify_signature",
]
