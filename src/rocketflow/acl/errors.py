"""Errors of the ACL package."""

from __future__ import annotations

from rocketflow.errors import RocketflowError


class AclConfigError(RocketflowError, ValueError):
    """A ``plain_acl.yml`` that cannot be used (unreadable, bad YAML, bad account, bad pattern)."""


class AclDeniedError(RocketflowError):
    """A request the ACL refuses; the message says which key, resource and permission."""


__all__ = ["AclConfigError", "AclDeniedError"]
