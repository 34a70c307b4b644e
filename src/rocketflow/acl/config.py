"""``plain_acl.yml`` in RocketMQ 4.x's format, parsed into `PlainAclConfig` (no I/O here).

::

    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.*"]
    accounts:
      - accessKey: RocketMQ
        secretKey: 12345678
        whiteRemoteAddress:
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
        groupPerms: ["groupA=DENY", "groupB=PUB|SUB", "groupC=SUB"]

Group resources are kept under their retry topic name (``%RETRY%<group>``), as RocketMQ does, so a
request's needs and an account's grants are compared in one table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketflow.acl.address import AddressPattern, parse_address_pattern
from rocketflow.acl.errors import AclConfigError

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
#: Keys and secrets must be longer than this (AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH).
KEY_MIN_LENGTH: Final = 6


class Permission(enum.IntFlag):
    """Permission bits (RocketMQ's ``Permission``)."""

    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


_PERM_NAMES: Final[Mapping[str, Permission]] = {
    "DENY": Permission.DENY,
    "PUB": Permission.PUB,
    "SUB": Permission.SUB,
    "PUB|SUB": Permission.PUB | Permission.SUB,
    "SUB|PUB": Permission.PUB | Permission.SUB,
}


def parse_permission(text: str | None, where: str) -> Permission:
    """``DENY``, ``PUB``, ``SUB``, ``PUB|SUB`` or ``SUB|PUB``; None (not set) is DENY, as in RocketMQ."""
    if text is None:
        return Permission.DENY
    permission = _PERM_NAMES.get(str(text).strip())
    if permission is None:
        raise AclConfigError(f"{where}: permission {text!r} is not one of DENY, PUB, SUB, PUB|SUB, SUB|PUB")
    return permission


def permission_name(permission: Permission) -> str:
    if permission & Permission.DENY:
        return "DENY"
    names = [name for name, bit in (("PUB", Permission.PUB), ("SUB", Permission.SUB)) if permission & bit]
    return "|".join(names) or "DENY"


def check_permission(needed: Permission, owned: Permission) -> bool:
    """RocketMQ's ``Permission.checkPermission``: DENY wins; ANY is satisfied by PUB or SUB."""
    if owned & Permission.DENY:
        return False
    if needed & Permission.ANY:
        return bool(owned & (Permission.PUB | Permission.SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_GROUP_TOPIC_PREFIX)


def describe_resource(resource: str) -> str:
    """``group G`` for a retry topic resource, else ``topic T``."""
    if is_group_resource(resource):
        return f"group {resource[len(RETRY_GROUP_TOPIC_PREFIX):]}"
    return f"topic {resource}"


@dataclass(frozen=True, slots=True)
class AccountConfig:
    """One entry of ``accounts``."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern = field(default_factory=lambda: parse_address_pattern(None))
    admin: bool = False
    default_topic_perm: Permission = Permission.DENY
    default_group_perm: Permission = Permission.DENY
    #: resource (topic, or ``%RETRY%group``) -> permission; None when the account lists none
    resource_perms: Mapping[str, Permission] | None = None


@dataclass(frozen=True, slots=True)
class PlainAclConfig:
    """A parsed ``plain_acl.yml``."""

    global_white_remote_addresses: tuple[AddressPattern, ...] = ()
    accounts: Mapping[str, AccountConfig] = field(default_factory=dict)


def _string(value: object, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise AclConfigError(f"{where} must be a string, got {value!r}")
    return str(value)


def _string_list(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{where} must be a list of strings, got {value!r}")
    return [_string(item, f"{where}[{index}]") or "" for index, item in enumerate(value)]


def _boolean(value: object, where: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclConfigError(f"{where} must be true or false, got {value!r}")


def _resource_perms(items: list[str], is_topic: bool, where: str, into: dict[str, Permission]) -> None:
    for index, item in enumerate(items):
        name, equals, perm = item.partition("=")
        if not equals or not name.strip() or not perm.strip() or "=" in perm:
            raise AclConfigError(f"{where}[{index}]: {item!r} is not 'name=PERM' (for example 'topicA=PUB|SUB')")
        resource = name.strip() if is_topic else retry_topic(name.strip())
        into[resource] = parse_permission(perm, f"{where}[{index}]")


def _account(data: object, where: str) -> AccountConfig:
    if not isinstance(data, dict):
        raise AclConfigError(f"{where} must be a mapping with accessKey, secretKey, ..., got {data!r}")
    access_key = _string(data.get("accessKey"), f"{where}.accessKey")
    secret_key = _string(data.get("secretKey"), f"{where}.secretKey")
    if access_key is None or secret_key is None or len(access_key) <= KEY_MIN_LENGTH \
            or len(secret_key) <= KEY_MIN_LENGTH:
        raise AclConfigError(f"{where}: accessKey and secretKey are required and must be longer than "
                             f"{KEY_MIN_LENGTH} characters (accessKey={access_key!r})")
    where = f"{where} (accessKey {access_key})"
    perms: dict[str, Permission] = {}
    _resource_perms(_string_list(data.get("groupPerms"), f"{where}.groupPerms"), False, f"{where}.groupPerms", perms)
    _resource_perms(_string_list(data.get("topicPerms"), f"{where}.topicPerms"), True, f"{where}.topicPerms", perms)
    has_perms = bool(data.get("topicPerms")) or bool(data.get("groupPerms"))
    try:
        white = parse_address_pattern(_string(data.get("whiteRemoteAddress"), f"{where}.whiteRemoteAddress"))
    except AclConfigError as exc:
        raise AclConfigError(f"{where}.whiteRemoteAddress: {exc}") from None
    return AccountConfig(
        access_key=access_key,
        secret_key=secret_key,
        white_remote_address=white,
        admin=_boolean(data.get("admin"), f"{where}.admin"),
        default_topic_perm=parse_permission(_string(data.get("defaultTopicPerm"), f"{where}.defaultTopicPerm"),
                                            f"{where}.defaultTopicPerm"),
        default_group_perm=parse_permission(_string(data.get("defaultGroupPerm"), f"{where}.defaultGroupPerm"),
                                            f"{where}.defaultGroupPerm"),
        resource_perms=perms if has_perms else None,
    )


def parse_plain_acl(text: str, source: str = "plain_acl.yml") -> PlainAclConfig:
    """Parse the YAML text of a ``plain_acl.yml``; `AclConfigError` names the first problem."""
    import yaml  # here, not at the top: clients import this package to sign requests, never to parse

    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise AclConfigError(f"{source}: expected a mapping with globalWhiteRemoteAddresses and/or accounts")
    patterns: list[AddressPattern] = []
    for index, item in enumerate(_string_list(data.get("globalWhiteRemoteAddresses"),
                                              f"{source}: globalWhiteRemoteAddresses")):
        try:
            pattern = parse_address_pattern(item)
        except AclConfigError as exc:
            raise AclConfigError(f"{source}: globalWhiteRemoteAddresses[{index}]: {exc}") from None
        if not pattern.is_blank:
            patterns.append(pattern)
    raw_accounts = data.get("accounts")
    if raw_accounts is None:
        raw_accounts = []
    if not isinstance(raw_accounts, list):
        raise AclConfigError(f"{source}: accounts must be a list, got {raw_accounts!r}")
    accounts: dict[str, AccountConfig] = {}
    for index, raw in enumerate(raw_accounts):
        account = _account(raw, f"{source}: accounts[{index}]")
        if account.access_key in accounts:
            raise AclConfigError(f"{source}: accounts[{index}]: accessKey {account.access_key!r} is defined twice")
        accounts[account.access_key] = account
    return PlainAclConfig(global_white_remote_addresses=tuple(patterns), accounts=accounts)


__all__ = [
    "KEY_MIN_LENGTH",
    "RETRY_GROUP_TOPIC_PREFIX",
    "AccountConfig",
    "Permission",
    "PlainAclConfig",
    "check_permission",
    "describe_resource",
    "is_group_resource",
    "parse_permission",
    "parse_plain_acl",
    "permission_name",
    "retry_topic",
]
