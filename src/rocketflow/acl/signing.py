"""Request signatures of RocketMQ's plain ACL (``AclClientRPCHook`` / ``AclUtils``).

The signed content is the ext-field *values* in the order of their sorted keys (``Signature``
itself and ``_UNIQUE_KEY_QUERY`` left out, as the 4.9.3 broker does), UTF-8 encoded, followed by
the body bytes; the signature is ``base64(HMAC-SHA1(secretKey, content))``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from rocketflow.remoting.command import RemotingCommand

ACCESS_KEY_FIELD: Final = "AccessKey"
SIGNATURE_FIELD: Final = "Signature"
SECURITY_TOKEN_FIELD: Final = "SecurityToken"
#: Added by clients to QUERY_MESSAGE; the 4.9.3 broker leaves it out of the signed content.
UNIQUE_KEY_QUERY_FIELD: Final = "_UNIQUE_KEY_QUERY"
_UNSIGNED_FIELDS: Final = frozenset({SIGNATURE_FIELD, UNIQUE_KEY_QUERY_FIELD})


def signature_content(ext_fields: Mapping[str, str], body: bytes = b"", *,
                      include_unique_key_query: bool = False) -> bytes:
    """The bytes a signature covers (Java's client-side hook includes ``_UNIQUE_KEY_QUERY``, its broker does not)."""
    skipped = {SIGNATURE_FIELD} if include_unique_key_query else _UNSIGNED_FIELDS
    text = "".join(ext_fields[key] for key in sorted(ext_fields) if key not in skipped)
    return text.encode("utf-8") + bytes(body)


def calculate_signature(content: bytes, secret_key: str) -> str:
    """``base64(HMAC-SHA1(secret_key, content))``."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign(ext_fields: dict[str, str], body: bytes, access_key: str, secret_key: str,
         security_token: str | None = None) -> str:
    """Add ``AccessKey`` (and ``SecurityToken``) to ``ext_fields``, then its ``Signature``; returns the signature."""
    ext_fields[ACCESS_KEY_FIELD] = access_key
    if security_token is not None:
        ext_fields[SECURITY_TOKEN_FIELD] = security_token
    signature = calculate_signature(signature_content(ext_fields, body), secret_key)
    ext_fields[SIGNATURE_FIELD] = signature
    return signature


def verify_signature(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> bool:
    """True if the ``Signature`` field is the one ``secret_key`` gives (compared in constant time).

    A signature over ``_UNIQUE_KEY_QUERY`` too is accepted as well: Java's 4.9.x clients sign it, and
    the 4.9.3 broker's refusal of their query-by-key requests is a known RocketMQ bug.
    """
    given = ext_fields.get(SIGNATURE_FIELD)
    if not given:
        return False
    given_bytes = given.encode("utf-8", errors="replace")
    expected = calculate_signature(signature_content(ext_fields, body), secret_key)
    if hmac.compare_digest(expected.encode("ascii"), given_bytes):
        return True
    if UNIQUE_KEY_QUERY_FIELD not in ext_fields:
        return False
    expected = calculate_signature(signature_content(ext_fields, body, include_unique_key_query=True), secret_key)
    return hmac.compare_digest(expected.encode("ascii"), given_bytes)


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """The keys a client signs its requests with."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.access_key, str) or not self.access_key:
            raise ValueError(f"access_key must be a non-empty string, got {self.access_key!r}")
        if not isinstance(self.secret_key, str) or not self.secret_key:
            raise ValueError("secret_key must be a non-empty string")
        if self.security_token is not None and not isinstance(self.security_token, str):
            raise ValueError("security_token must be a string or None")


class AclClientHook:
    """An RPC hook for `RemotingClient`: signs every outgoing request (RocketMQ's ``AclClientRPCHook``)."""

    def __init__(self, credentials: SessionCredentials) -> None:
        self.credentials = credentials

    def __call__(self, addr: str, request: RemotingCommand) -> None:
        credentials = self.credentials
        sign(request.ext_fields, request.body, credentials.access_key, credentials.secret_key,
             credentials.security_token)

    def __repr__(self) -> str:
        return f"AclClientHook(access_key={self.credentials.access_key!r})"


__all__ = [
    "ACCESS_KEY_FIELD",
    "SECURITY_TOKEN_FIELD",
    "SIGNATURE_FIELD",
    "UNIQUE_KEY_QUERY_FIELD",
    "AclClientHook",
    "SessionCredentials",
    "calculate_signature",
    "sign",
    "signature_content",
    "verify_signature",
]
