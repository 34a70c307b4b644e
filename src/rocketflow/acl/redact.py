"""Keeping secrets out of answers, logs and tool output.

A setting is secret when its name, with case and separators ignored, names a secret, a password, a
token, a credential or a private key (``secretKey``, ``secret_key``, ``SECRETKEY``,
``tls.server.keyPassword``...). Its value is shown as `REDACTED` whatever it is, so neither the
value nor its length can be read back; an unset (empty) value stays empty, so an operator still
sees whether it is set. Access keys are not secret: they travel in clear in every signed request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, TypeVar

REDACTED: Final = "******"
_NOT_ALNUM: Final = re.compile(r"[^a-z0-9]")
_SECRET_MARKERS: Final = ("secret", "password", "passwd", "pwd", "token", "credential", "privatekey")

_V = TypeVar("_V")


def is_secret_setting(name: str) -> bool:
    """Whether a setting (or KV key) of this name holds a secret; case and separators do not matter."""
    normalized = _NOT_ALNUM.sub("", name.lower())
    return any(marker in normalized for marker in _SECRET_MARKERS)


def redact_value(name: str, value: str) -> str:
    """`REDACTED` for a non-empty value of a secret setting, else the value."""
    return REDACTED if value and is_secret_setting(name) else value


def redact_settings(settings: Mapping[str, _V]) -> dict[str, _V | str]:
    """A copy of ``settings`` whose secret settings are `REDACTED` (unset ones stay as they are)."""
    return {name: REDACTED if value not in (None, "") and is_secret_setting(name) else value
            for name, value in settings.items()}


__all__ = ["REDACTED", "is_secret_setting", "redact_settings", "redact_value"]
