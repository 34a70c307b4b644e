"""Java's conversions and comparisons, as RocketMQ applies them when a property string meets a typed value."""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any, Final

from rocketflow.filter.sql92.errors import EvalAbort

INT_MIN: Final = -(1 << 31)
INT_MAX: Final = (1 << 31) - 1
LONG_MIN: Final = -(1 << 63)
LONG_MAX: Final = (1 << 63) - 1


class JLong(int):
    """An integer literal typed as a Java Long (outside the 32-bit range); plain ``int`` is an Integer."""

    __slots__ = ()


_JAVA_DOUBLE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)"
)
_JAVA_TRIM: Final = "".join(chr(code) for code in range(0x21))  # String.trim() drops chars <= ' '


def _parse_java_integral(text: str, low: int, high: int) -> int:
    """``Integer.parseInt`` / ``Long.parseLong`` in base 10: optional sign, Unicode decimal digits."""
    sign = ""
    body = text
    if text[:1] in ("+", "-"):
        sign, body = text[0], text[1:]
    if not body.isdecimal():
        raise EvalAbort
    if not body.isascii() and any(ord(ch) > 0xFFFF for ch in body):
        raise EvalAbort  # Java sees a surrogate pair, not a digit
    if len(body) > 19:  # leading zeros are allowed, any number of them
        start = 0
        while start < len(body) and unicodedata.decimal(body[start]) == 0:
            start += 1
        body = body[start:] or "0"
        if len(body) > 19:
            raise EvalAbort
    value = int(sign + body)
    if low <= value <= high:
        return value
    raise EvalAbort


def parse_int(text: str) -> int:
    if len(text) <= 9 and text.isascii() and text.isdigit():
        return int(text)
    return _parse_java_integral(text, INT_MIN, INT_MAX)


def parse_long(text: str) -> int:
    if len(text) <= 18 and text.isascii() and text.isdigit():
        return int(text)
    return _parse_java_integral(text, LONG_MIN, LONG_MAX)


def parse_double(text: str) -> float:
    """``Double.valueOf``: trimmed, decimal or hex (``0x1.8p1``), ``NaN``/``Infinity``, optional f/d suffix."""
    body = text.strip(_JAVA_TRIM)
    if _JAVA_DOUBLE.fullmatch(body) is None:
        raise EvalAbort
    if body[-1] in "fFdD":
        body = body[:-1]
    if body[-1] == "N":
        return float("nan")
    if body[-1] == "y":
        return float("-inf") if body[0] == "-" else float("inf")
    if "x" in body or "X" in body:
        try:
            return float.fromhex(body)
        except OverflowError:
            return float("-inf") if body[0] == "-" else float("inf")
    return float(body)


def java_bool(text: str) -> bool:
    """``Boolean.valueOf(String)``."""
    return len(text) == 4 and text.lower() == "true"


def double_cmp(a: float, b: float) -> int:
    """``Double.compare``: a total order with -0.0 < 0.0 and NaN above everything (equal to itself)."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a != 0.0:
            return 0
        sign_a, sign_b = math.copysign(1.0, a), math.copysign(1.0, b)
        return 0 if sign_a == sign_b else (-1 if sign_a < sign_b else 1)
    a_nan, b_nan = a != a, b != b
    if a_nan and b_nan:
        return 0
    return 1 if a_nan else -1


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)  # type: ignore[no-any-return]


def jcompare(lv: object, rv: object) -> int:
    """RocketMQ's ``__compare`` of two non-null values (string conversion on); may raise `EvalAbort`."""
    if isinstance(lv, str):
        if isinstance(rv, str):
            return _cmp(lv, rv)
        if isinstance(rv, bool):
            return _cmp(java_bool(lv), rv)
        if isinstance(rv, JLong):
            return _cmp(parse_long(lv), rv)
        if isinstance(rv, int):
            return _cmp(parse_int(lv), rv)
        if isinstance(rv, float):
            return double_cmp(parse_double(lv), rv)
        return -1
    if isinstance(lv, bool):
        if isinstance(rv, bool):
            return _cmp(lv, rv)
        if isinstance(rv, str):
            raise EvalAbort  # a ClassCastException in RocketMQ
        return -1
    if isinstance(lv, float):
        if isinstance(rv, float):
            return double_cmp(lv, rv)
        if isinstance(rv, bool):
            return -1
        if isinstance(rv, int):
            return double_cmp(lv, float(rv))
        if isinstance(rv, str):
            return double_cmp(lv, parse_double(rv))
        return -1
    if isinstance(lv, int):
        if isinstance(rv, bool):
            return -1
        if isinstance(rv, float):
            return double_cmp(float(lv), rv)
        if isinstance(rv, int):
            return _cmp(lv, rv)
        if isinstance(rv, str):
            return _cmp(lv, parse_long(rv) if isinstance(lv, JLong) else parse_int(rv))
        return -1
    return -1


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(int(value)) if isinstance(value, int) else repr(value)


__all__ = [
    "INT_MAX",
    "INT_MIN",
    "LONG_MAX",
    "LONG_MIN",
    "JLong",
    "double_cmp",
    "is_number",
    "java_bool",
    "jcompare",
    "parse_double",
    "parse_int",
    "parse_long",
    "sql_literal",
]
