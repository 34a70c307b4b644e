"""SQL92 message filters as RocketMQ 4.9.3 evaluates them (``MessageSelector.bySql``).

A consumer's expression is compiled once (`compile_sql92`) and then tested against the properties of
every message the broker scans (`Sql92Filter.matches`). The rules below are those of RocketMQ 4.9.3's
``filter`` module (its JavaCC grammar ``SelectorParser.jj`` and the ``expression`` package), restated.

Lexical rules
    * Blanks are space, tab, CR, LF and form feed. ``/* ... */`` is a comment; so is ``--`` up to a
      line break, but only when a line break follows (otherwise each ``-`` is a minus sign).
    * Keywords ``NOT AND OR BETWEEN IN TRUE FALSE NULL IS`` ignore case; nothing else is reserved
      (4.9.3 has no LIKE, CONTAINS, STARTSWITH or ENDSWITH). Identifiers are ``[A-Za-z_$][A-Za-z0-9_$]*``
      and name properties case-sensitively.
    * Strings are single-quoted; a doubled quote stands for one quote. Integers are decimal
      (``0`` or a non-zero digit then digits, optional ``L``): there are no hex or octal literals, and
      ``007`` is three tokens. A value that fits 32 bits is a Java Integer, otherwise a Long; over
      2^63-1 is an error. Floats are ``1.5``, ``1.``, ``.5``, ``1e3``, ``1.5E-3`` (Java doubles). A float
      literal that overflows to infinity or rounds to 0 (so ``0.0`` itself) is rejected, as in 4.9.3.

Grammar, loosest first: ``OR``; ``AND``; ``=`` ``<>`` ``IS [NOT] NULL``; ``>`` ``>=`` ``<`` ``<=``
``[NOT] BETWEEN x AND y`` ``[NOT] IN ('s', ...)``; prefix ``NOT``, ``-`` and ``+``; operands. All binary
levels associate left. Prefix ``NOT`` binds tighter than comparisons, so ``NOT a = 'x'`` means
``(NOT a) = 'x'``; write ``NOT (a = 'x')``. Checks made while compiling, each a `FilterSyntaxError`:

    * ``=`` and ``<>`` refuse a NULL literal (use ``IS NULL``) and ``TRUE``/``FALSE`` compared with a
      string or number literal on its right;
    * ``>``, ``>=``, ``<``, ``<=`` and ``BETWEEN`` take only number literals, properties and negations,
      never a string, TRUE/FALSE/NULL or a boolean expression;
    * ``BETWEEN`` with two literal bounds needs them in order (low <= high); ``IN`` lists only string
      literals and needs a property on its left;
    * operands of AND, OR, NOT and the whole expression must be boolean: a comparison, TRUE, FALSE,
      NULL, or a bare property (which is UNKNOWN when missing and FALSE when present).

Values and comparison
    * A property is its string value, or NULL when the message lacks it. Negating anything but a
      number gives NULL, so ``-a`` is always NULL.
    * ``x = y``: NULL = NULL is TRUE; NULL = value is UNKNOWN; value = NULL is FALSE (the order
      matters, as in RocketMQ). Two strings compare exactly. ``IS NULL`` is TRUE exactly when x is NULL.
    * Ordering (and ``=`` between different types) converts like RocketMQ's ``__compare``: a string
      against an Integer/Long/Double literal is parsed the Java way (``Integer.valueOf``,
      ``Long.valueOf``, ``Double.valueOf``), so ``a > 5`` needs ``a`` to be a 32-bit integer string,
      ``a > 3000000000`` a 64-bit one and ``a > 5.0`` any Java double (``NaN``, ``1e3``, ``0x1p3``...).
      A string against TRUE/FALSE is true exactly when it equals "true" ignoring case. Two strings
      under ``<`` etc. are both parsed as doubles. Doubles order as ``Double.compareTo`` does (NaN
      above everything, -0.0 below 0.0). A number against a boolean is simply unequal.
    * Ordering with a NULL side is UNKNOWN; ``IN``/``NOT IN`` on a missing property are UNKNOWN.
    * AND/OR/NOT are three-valued (FALSE AND x = FALSE, TRUE OR x = TRUE, NOT UNKNOWN = UNKNOWN) and
      evaluate left to right, skipping the right side once the result is decided.
    * A conversion that fails (``a > 5`` with ``a = 'abc'``, ``TRUE = a`` with ``a`` present) aborts the
      whole evaluation and the message does not match: RocketMQ's evaluation throws and the broker
      treats the error as "no match", even inside an OR whose other side would be TRUE.
    * Only TRUE matches; FALSE, UNKNOWN and an aborted evaluation do not.

Deliberate deviations from 4.9.3
    * RocketMQ stops parsing at the first token that cannot continue the expression and silently
      drops the rest (``a = 1 b``, ``a = 1)``, ``a = 1 -- note`` without a line break); here anything
      left over is a `FilterSyntaxError`.
    * Limits RocketMQ does not have: at most 4096 characters, and at most 100 levels of nesting
      (parentheses, or an operator applied to an operator: ``NOT NOT ...``, ``a = b = c ...``).
    * Only ASCII letters form identifiers (the JavaCC scanner may also accept a few exotic letters
      that case-fold to ASCII, such as the Kelvin sign).
"""

from __future__ import annotations

import math
import operator
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from rocketflow.errors import RocketflowError

MAX_EXPRESSION_LENGTH: Final = 4096
MAX_NESTING: Final = 100

_INT_MIN: Final = -(1 << 31)
_INT_MAX: Final = (1 << 31) - 1
_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1


class FilterSyntaxError(RocketflowError, ValueError):
    """An SQL92 expression that does not compile; ``position`` is the 0-based offset of the problem, if any."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class _EvalAbort(Exception):
    """A conversion failed while evaluating: RocketMQ throws, and the message does not match."""


class _JLong(int):
    """An integer literal typed as a Java Long (outside the 32-bit range); plain ``int`` is an Integer."""

    __slots__ = ()


# ---------------------------------------------------------------------------------------------------
# Java conversions used when a property string meets a typed value
# ---------------------------------------------------------------------------------------------------

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
        raise _EvalAbort
    if not body.isascii() and any(ord(ch) > 0xFFFF for ch in body):
        raise _EvalAbort  # Java sees a surrogate pair, not a digit
    if len(body) > 19:  # leading zeros are allowed, any number of them
        start = 0
        while start < len(body) and unicodedata.decimal(body[start]) == 0:
            start += 1
        body = body[start:] or "0"
        if len(body) > 19:
            raise _EvalAbort
    value = int(sign + body)
    if low <= value <= high:
        return value
    raise _EvalAbort


def _parse_int(text: str) -> int:
    if len(text) <= 9 and text.isascii() and text.isdigit():
        return int(text)
    return _parse_java_integral(text, _INT_MIN, _INT_MAX)


def _parse_long(text: str) -> int:
    if len(text) <= 18 and text.isascii() and text.isdigit():
        return int(text)
    return _parse_java_integral(text, _LONG_MIN, _LONG_MAX)


def _parse_double(text: str) -> float:
    """``Double.valueOf``: trimmed, decimal or hex (``0x1.8p1``), ``NaN``/``Infinity``, optional f/d suffix."""
    body = text.strip(_JAVA_TRIM)
    if _JAVA_DOUBLE.fullmatch(body) is None:
        raise _EvalAbort
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


def _java_bool(text: str) -> bool:
    """``Boolean.valueOf(String)``."""
    return len(text) == 4 and text.lower() == "true"


def _double_cmp(a: float, b: float) -> int:
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


def _jcompare(lv: object, rv: object) -> int:
    """RocketMQ's ``__compare`` of two non-null values (string conversion on); may raise `_EvalAbort`."""
    if isinstance(lv, str):
        if isinstance(rv, str):
            return _cmp(lv, rv)
        if isinstance(rv, bool):
            return _cmp(_java_bool(lv), rv)
        if isinstance(rv, _JLong):
            return _cmp(_parse_long(lv), rv)
        if isinstance(rv, int):
            return _cmp(_parse_int(lv), rv)
        if isinstance(rv, float):
            return _double_cmp(_parse_double(lv), rv)
        return -1
    if isinstance(lv, bool):
        if isinstance(rv, bool):
            return _cmp(lv, rv)
        if isinstance(rv, str):
            raise _EvalAbort  # a ClassCastException in RocketMQ
        return -1
    if isinstance(lv, float):
        if isinstance(rv, float):
            return _double_cmp(lv, rv)
        if isinstance(rv, bool):
            return -1
        if isinstance(rv, int):
            return _double_cmp(lv, float(rv))
        if isinstance(rv, str):
            return _double_cmp(lv, _parse_double(rv))
        return -1
    if isinstance(lv, int):
        if isinstance(rv, bool):
            return -1
        if isinstance(rv, float):
            return _double_cmp(float(lv), rv)
        if isinstance(rv, int):
            return _cmp(lv, rv)
        if isinstance(rv, str):
            return _cmp(lv, _parse_long(rv) if isinstance(lv, _JLong) else _parse_int(rv))
        return -1
    return -1


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(int(value)) if isinstance(value, int) else repr(value)


# ---------------------------------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------------------------------

_EOF: Final = "end"
_KW: Final = "keyword"
_ID: Final = "identifier"
_INT: Final = "integer"
_FLOAT: Final = "float"
_STR: Final = "string"
_OP: Final = "operator"

_KEYWORDS: Final = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
_UNSUPPORTED: Final = frozenset({"LIKE", "ESCAPE", "CONTAINS", "STARTSWITH", "ENDSWITH"})
_BLANKS: Final = " \t\n\r\f"
_LINE_COMMENT: Final = re.compile(r"--[^\n\r]*(?:\r\n|\n|\r)")
_BLOCK_COMMENT: Final = re.compile(r"/\*[^*]*\*+(?:[^*/][^*]*\*+)*/")
_STRING: Final = re.compile(r"'(?:''|[^'])*'")
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOATING: Final = re.compile(
    r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
)
_IDENT: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_IDENT_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_DIGITS: Final = frozenset("0123456789")
_OPERATOR_HINTS: Final = {"!=": "<>", "==": "=", "&&": "AND", "||": "OR", "!": "NOT", "&": "AND", "|": "OR"}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str  # keywords upper-cased; otherwise the source text
    pos: int

    def describe(self) -> str:
        if self.kind == _EOF:
            return "end of input"
        if self.kind == _KW:
            return f"keyword {self.text}"
        if self.kind == _OP:
            return f"'{self.text}'"
        if self.kind == _STR:
            shown = self.text if len(self.text) <= 40 else self.text[:37] + "..."
            return f"string {shown}"
        return f"{self.kind} {self.text}" if self.kind != _ID else f"identifier '{self.text}'"


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    n = len(text)
    i = 0
    while True:
        while i < n:  # blanks and comments
            ch = text[i]
            if ch in _BLANKS:
                i += 1
            elif ch == "-" and text.startswith("--", i) and (found := _LINE_COMMENT.match(text, i)) is not None:
                i = found.end()
            elif ch == "/" and text.startswith("/*", i):
                found = _BLOCK_COMMENT.match(text, i)
                if found is None:
                    raise FilterSyntaxError(f"unterminated comment starting at position {i}: expected '*/'", i)
                i = found.end()
            else:
                break
        if i >= n:
            tokens.append(_Token(_EOF, "", n))
            return tokens
        ch = text[i]
        if ch == "'":
            found = _STRING.match(text, i)
            if found is None:
                raise FilterSyntaxError(f"unterminated string literal starting at position {i}: "
                                        "expected a closing quote (write '' for a quote inside)", i)
            tokens.append(_Token(_STR, found.group(), i))
            i = found.end()
        elif ch in _DIGITS or (ch == "." and i + 1 < n and text[i + 1] in _DIGITS):
            floating = _FLOATING.match(text, i)
            decimal = _DECIMAL.match(text, i)
            if floating is not None and (decimal is None or floating.end() > decimal.end()):
                tokens.append(_Token(_FLOAT, floating.group(), i))
                i = floating.end()
            else:
                assert decimal is not None
                tokens.append(_Token(_INT, decimal.group(), i))
                i = decimal.end()
        elif ch in _IDENT_START:
            found = _IDENT.match(text, i)
            assert found is not None
            word = found.group()
            upper = word.upper()
            tokens.append(_Token(_KW, upper, i) if upper in _KEYWORDS else _Token(_ID, word, i))
            i = found.end()
        else:
            pair = text[i:i + 2]
            if pair in ("<>", "<=", ">="):
                tokens.append(_Token(_OP, pair, i))
                i += 2
            elif pair in _OPERATOR_HINTS:
                raise FilterSyntaxError(f"unknown operator '{pair}' at position {i}: "
                                        f"expected {_OPERATOR_HINTS[pair]!r}", i)
            elif ch in "=<>(),+-":
                tokens.append(_Token(_OP, ch, i))
                i += 1
            else:
                hint = f"; use {_OPERATOR_HINTS[ch]}" if ch in _OPERATOR_HINTS else ""
                raise FilterSyntaxError(f"unexpected character {ch!r} at position {i}: expected an operator, "
                                        f"a property name, a literal or a parenthesis{hint}", i)


# ---------------------------------------------------------------------------------------------------
# Syntax tree (depth: operator levels below and including this node; leaves are 0)
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, eq=False)
class _Node:
    pos: int
    depth: int


@dataclass(frozen=True, slots=True, eq=False)
class _Lit(_Node):
    """A literal; ``boolean`` for TRUE, FALSE and NULL (RocketMQ's boolean constants)."""

    value: object
    boolean: bool


@dataclass(frozen=True, slots=True, eq=False)
class _Prop(_Node):
    name: str


@dataclass(frozen=True, slots=True, eq=False)
class _Neg(_Node):
    """Unary minus. ``folded``: the value is known (a negated number, else NULL) and evaluating cannot fail."""

    operand: _Node
    folded: bool
    value: object


@dataclass(frozen=True, slots=True, eq=False)
class _Cast(_Node):
    """A bare property used as a boolean: UNKNOWN when missing, FALSE otherwise."""

    prop: _Prop


@dataclass(frozen=True, slots=True, eq=False)
class _Not(_Node):
    operand: _Node


@dataclass(frozen=True, slots=True, eq=False)
class _And(_Node):
    operands: tuple[_Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class _Or(_Node):
    operands: tuple[_Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class _Eq(_Node):
    left: _Node
    right: _Node


@dataclass(frozen=True, slots=True, eq=False)
class _Order(_Node):
    op: str
    left: _Node
    right: _Node


@dataclass(frozen=True, slots=True, eq=False)
class _In(_Node):
    prop: _Prop
    values: frozenset[str]
    negated: bool


_BOOLEAN_NODES: Final = (_Cast, _Not, _And, _Or, _Eq, _Order, _In)
_NULL_LIT: Final = _Lit(0, 0, None, True)


def _is_boolean(node: _Node) -> bool:
    return isinstance(node, _BOOLEAN_NODES) or (isinstance(node, _Lit) and node.boolean)


def _describe(node: _Node) -> str:
    if isinstance(node, _Lit):
        return f"literal {_sql_literal(node.value)}"
    if isinstance(node, _Prop):
        return f"property {node.name}"
    if isinstance(node, _Neg):
        return "a negation"
    return "a boolean expression"


# ---------------------------------------------------------------------------------------------------
# Parser: precedence climbing over the levels OR < AND < equality < ordering < prefix
# ---------------------------------------------------------------------------------------------------

_LEVEL_OR: Final = 1
_LEVEL_AND: Final = 2
_LEVEL_EQUALITY: Final = 3
_LEVEL_ORDER: Final = 4
_OPERATOR_LEVELS: Final = {
    (_KW, "OR"): _LEVEL_OR, (_KW, "AND"): _LEVEL_AND,
    (_OP, "="): _LEVEL_EQUALITY, (_OP, "<>"): _LEVEL_EQUALITY, (_KW, "IS"): _LEVEL_EQUALITY,
    (_OP, ">"): _LEVEL_ORDER, (_OP, ">="): _LEVEL_ORDER, (_OP, "<"): _LEVEL_ORDER, (_OP, "<="): _LEVEL_ORDER,
    (_KW, "BETWEEN"): _LEVEL_ORDER, (_KW, "IN"): _LEVEL_ORDER, (_KW, "NOT"): _LEVEL_ORDER,
}
_CONTINUATIONS: Final = "AND, OR, =, <>, <, <=, >, >=, BETWEEN, IN, IS"


class _Parser:
    __slots__ = ("_i", "_parens", "_tokens", "names")

    def __init__(self, text: str) -> None:
        self._tokens = _tokenize(text)
        self._i = 0
        self._parens = 0
        self.names: set[str] = set()

    def parse(self) -> _Node:
        if self._tokens[0].kind == _EOF:
            raise FilterSyntaxError("empty expression at position 0: expected a condition such as a > 5", 0)
        node = self._expr(_LEVEL_OR)
        tok = self._tokens[self._i]
        if tok.kind != _EOF:
            raise self._unexpected(tok, f"{_CONTINUATIONS} or end of input")
        return self._as_boolean(node, "the expression")

    # -- helpers -------------------------------------------------------------------------------------

    def _unexpected(self, tok: _Token, expected: str) -> FilterSyntaxError:
        hint = ""
        if tok.kind == _ID and tok.text.upper() in _UNSUPPORTED:
            hint = f" ({tok.text.upper()} is not an operator in RocketMQ 4.9.3 SQL92)"
        if tok.kind == _EOF:
            return FilterSyntaxError(f"unexpected end of input at position {tok.pos}: expected {expected}", tok.pos)
        return FilterSyntaxError(f"unexpected {tok.describe()} at position {tok.pos}: expected {expected}{hint}",
                                 tok.pos)

    @staticmethod
    def _invalid(node: _Node, problem: str, expected: str) -> FilterSyntaxError:
        return FilterSyntaxError(f"{problem} at position {node.pos}: expected {expected}", node.pos)

    def _checked(self, node: _Node) -> _Node:
        if node.depth > MAX_NESTING:
            raise FilterSyntaxError(f"expression nested deeper than {MAX_NESTING} levels at position {node.pos}",
                                    node.pos)
        return node

    def _take(self, kind: str, text: str | None, expected: str) -> _Token:
        tok = self._tokens[self._i]
        if tok.kind != kind or (text is not None and tok.text != text):
            raise self._unexpected(tok, expected)
        self._i += 1
        return tok

    def _as_boolean(self, node: _Node, role: str) -> _Node:
        if _is_boolean(node):
            return node
        if isinstance(node, _Prop):
            return _Cast(node.pos, node.depth, node)
        raise self._invalid(node, f"{_describe(node)} used as a condition",
                            f"{role} to be a comparison, TRUE, FALSE, NULL or a property")

    # -- levels --------------------------------------------------------------------------------------

    def _expr(self, min_level: int) -> _Node:
        left = self._unary()
        tokens = self._tokens
        while True:
            tok = tokens[self._i]
            level = _OPERATOR_LEVELS.get((tok.kind, tok.text))
            if level is None or level < min_level:
                return left
            self._i += 1
            op = tok.text
            if level in (_LEVEL_OR, _LEVEL_AND):
                right = self._expr(level + 1)
                left = self._logic(op, left, right)
            elif op in ("=", "<>"):
                right = self._expr(_LEVEL_ORDER)
                left = self._equal(left, right, tok)
                if op == "<>":
                    left = self._checked(_Not(left.pos, left.depth + 1, left))
            elif op == "IS":
                negated = tokens[self._i].kind == _KW and tokens[self._i].text == "NOT"
                if negated:
                    self._i += 1
                self._take(_KW, "NULL", "NULL after IS NOT" if negated else "NULL or NOT NULL after IS")
                left = self._checked(_Eq(left.pos, left.depth + 1, left, _NULL_LIT))
                if negated:
                    left = self._checked(_Not(left.pos, left.depth + 1, left))
            elif op == "BETWEEN":
                left = self._between(left, negated=False)
            elif op == "IN":
                left = self._in(left, negated=False)
            elif op == "NOT":
                after = tokens[self._i]
                if after.kind == _KW and after.text == "BETWEEN":
                    self._i += 1
                    left = self._between(left, negated=True)
                elif after.kind == _KW and after.text == "IN":
                    self._i += 1
                    left = self._in(left, negated=True)
                else:
                    raise self._unexpected(after, "BETWEEN or IN after NOT (to negate a condition, "
                                                  "put NOT before it: NOT (a = 1))")
            else:
                right = self._unary()
                left = self._order(op, left, right)

    def _unary(self) -> _Node:
        prefixes: list[_Token] = []
        tokens = self._tokens
        while (tok := tokens[self._i]).text in ("NOT", "-", "+") and tok.kind in (_KW, _OP):
            prefixes.append(tok)
            self._i += 1
        node = self._primary()
        for tok in reversed(prefixes):
            if tok.text == "NOT":
                operand = self._as_boolean(node, "the operand of NOT")
                node = self._checked(_Not(tok.pos, operand.depth + 1, operand))
            elif tok.text == "-":
                node = self._negate(node, tok)
        return node

    def _negate(self, node: _Node, tok: _Token) -> _Node:
        if isinstance(node, _Lit | _Prop) or (isinstance(node, _Neg) and node.folded):
            value = node.value if isinstance(node, _Lit | _Neg) else None
            if _is_number(value):
                assert isinstance(value, int | float)
                value = _JLong(-value) if isinstance(value, _JLong) else -value
            else:
                value = None
            return _Neg(tok.pos, 0, node, True, value)
        return self._checked(_Neg(tok.pos, node.depth + 1, node, False, None))

    def _primary(self) -> _Node:
        tok = self._tokens[self._i]
        kind = tok.kind
        if kind == _ID:
            self._i += 1
            self.names.add(tok.text)
            return _Prop(tok.pos, 0, tok.text)
        if kind == _STR:
            self._i += 1
            return _Lit(tok.pos, 0, tok.text[1:-1].replace("''", "'"), False)
        if kind == _INT:
            self._i += 1
            return _Lit(tok.pos, 0, self._integer(tok), False)
        if kind == _FLOAT:
            self._i += 1
            return _Lit(tok.pos, 0, self._floating(tok), False)
        if kind == _KW and tok.text in ("TRUE", "FALSE", "NULL"):
            self._i += 1
            return _Lit(tok.pos, 0, None if tok.text == "NULL" else tok.text == "TRUE", True)
        if kind == _OP and tok.text == "(":
            self._i += 1
            self._parens += 1
            if self._parens > MAX_NESTING:
                raise FilterSyntaxError(f"expression nested deeper than {MAX_NESTING} levels of parentheses "
                                        f"at position {tok.pos}", tok.pos)
            node = self._expr(_LEVEL_OR)
            self._take(_OP, ")", f"')' to close the '(' at position {tok.pos}, or {_CONTINUATIONS}")
            self._parens -= 1
            return node
        raise self._unexpected(tok, "a property name, a literal, '(', NOT, '+' or '-'")

    @staticmethod
    def _integer(tok: _Token) -> int:
        digits = tok.text.rstrip("lL")
        value = int(digits) if len(digits) <= 19 else _LONG_MAX + 1
        if value > _LONG_MAX:
            raise FilterSyntaxError(f"integer literal {tok.text} at position {tok.pos} is out of range: "
                                    f"expected at most {_LONG_MAX}", tok.pos)
        return value if value <= _INT_MAX else _JLong(value)

    @staticmethod
    def _floating(tok: _Token) -> float:
        value = float(tok.text)
        if value == float("inf"):
            raise FilterSyntaxError(f"float literal {tok.text} at position {tok.pos} is out of range: "
                                    "expected at most 1.7976931348623157E308", tok.pos)
        if value == 0.0:
            raise FilterSyntaxError(f"float literal {tok.text} at position {tok.pos} is out of range: expected "
                                    "at least 4.9E-324 (RocketMQ rejects 0.0; compare with 0 instead)", tok.pos)
        return value

    # -- node builders with RocketMQ's compile-time checks ---------------------------------------

    def _logic(self, op: str, left: _Node, right: _Node) -> _Node:
        left = self._as_boolean(left, f"the left operand of {op}")
        right = self._as_boolean(right, f"the right operand of {op}")
        kind = _Or if op == "OR" else _And
        if isinstance(left, kind):
            operands = (*left.operands, right)
            return self._checked(kind(left.pos, max(left.depth, right.depth + 1), operands))
        return self._checked(kind(left.pos, max(left.depth, right.depth) + 1, (left, right)))

    def _equal(self, left: _Node, right: _Node, tok: _Token) -> _Node:
        for side in (left, right):
            if isinstance(side, _Lit) and side.value is None:
                raise self._invalid(side, f"NULL compared with '{tok.text}'", "IS NULL or IS NOT NULL instead")
        if isinstance(left, _Lit) and isinstance(right, _Lit) and left.boolean and not right.boolean:
            raise self._invalid(left, f"{_sql_literal(left.value)} compared with {_sql_literal(right.value)}",
                                "TRUE or FALSE to be compared with a property or a condition")
        return self._checked(_Eq(left.pos, max(left.depth, right.depth) + 1, left, right))

    def _order(self, op: str, left: _Node, right: _Node) -> _Node:
        for side in (left, right):
            if isinstance(side, _Lit) and not _is_number(side.value):
                raise self._invalid(side, f"{_describe(side)} compared with '{op}'",
                                    "a number literal or a property (only numbers are ordered)")
            if _is_boolean(side):
                raise self._invalid(side, f"a condition compared with '{op}'", "a number literal or a property")
        return self._checked(_Order(left.pos, max(left.depth, right.depth) + 1, op, left, right))

    def _between(self, value: _Node, negated: bool) -> _Node:
        low = self._unary()
        self._take(_KW, "AND", "AND between the bounds of BETWEEN")
        high = self._unary()
        if not negated and isinstance(low, _Lit) and isinstance(high, _Lit):
            if low.value is None or high.value is None:
                raise self._invalid(low if low.value is None else high, "NULL bound of BETWEEN",
                                    "number literals or properties as bounds")
            # non-number literals are refused by the operand checks below
            if _is_number(low.value) and _is_number(high.value) and _jcompare(high.value, low.value) < 0:
                raise self._invalid(low, f"BETWEEN bounds out of order ({_sql_literal(low.value)} > "
                                         f"{_sql_literal(high.value)})", "the lower bound first")
        if negated:
            parts = (self._order("<", value, low), self._order(">", value, high))
            return self._checked(_Or(value.pos, max(part.depth for part in parts) + 1, parts))
        parts = (self._order(">=", value, low), self._order("<=", value, high))
        return self._checked(_And(value.pos, max(part.depth for part in parts) + 1, parts))

    def _in(self, value: _Node, negated: bool) -> _Node:
        self._take(_OP, "(", "'(' to open the IN list")
        values = [self._string_literal()]
        while self._tokens[self._i].kind == _OP and self._tokens[self._i].text == ",":
            self._i += 1
            values.append(self._string_literal())
        self._take(_OP, ")", "',' or ')' in the IN list")
        if not isinstance(value, _Prop):
            raise self._invalid(value, f"{_describe(value)} before IN", "a property name before IN")
        return self._checked(_In(value.pos, 1, value, frozenset(values), negated))

    def _string_literal(self) -> str:
        tok = self._take(_STR, None, "a string literal in the IN list (IN takes only quoted strings)")
        return tok.text[1:-1].replace("''", "'")


# ---------------------------------------------------------------------------------------------------
# Compilation to closures: each takes the property getter and returns True, False, None or a value
# ---------------------------------------------------------------------------------------------------

_Getter = Callable[[str], str | None]
_Eval = Callable[[_Getter], object]

_ORDER_OPS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}


def _constant(value: object) -> _Eval:
    def constant(get: _Getter) -> object:
        return value

    return constant


def _compile(node: _Node) -> _Eval:
    if isinstance(node, _Lit):
        return _constant(node.value)
    if isinstance(node, _Prop):
        name = node.name

        def prop(get: _Getter) -> object:
            return get(name)

        return prop
    if isinstance(node, _Neg):
        if node.folded:
            return _constant(node.value)
        inner = _compile(node.operand)

        def negate(get: _Getter) -> object:
            inner(get)  # evaluated for its failures only: negating a non-number gives NULL
            return None

        return negate
    if isinstance(node, _Cast):
        name = node.prop.name

        def cast(get: _Getter) -> object:
            return None if get(name) is None else False

        return cast
    if isinstance(node, _Not):
        return _compile_not(node)
    if isinstance(node, _And | _Or):
        return _compile_logic(node)
    if isinstance(node, _Eq):
        return _compile_equal(node)
    if isinstance(node, _Order):
        return _compile_order(node)
    if isinstance(node, _In):
        return _compile_in(node)
    raise AssertionError(f"unknown node {node!r}")


def _compile_not(node: _Not) -> _Eval:
    operand = node.operand
    if isinstance(operand, _Eq) and isinstance(operand.left, _Prop) and isinstance(operand.right, _Lit):
        name, value = operand.left.name, operand.right.value
        if isinstance(value, str):  # a <> 'x'
            def not_equal_string(get: _Getter) -> object:
                found = get(name)
                return None if found is None else found != value

            return not_equal_string
        if value is None:  # a IS NOT NULL
            def is_not_null(get: _Getter) -> object:
                return get(name) is not None

            return is_not_null
    inner = _compile(operand)

    def not_(get: _Getter) -> object:
        result = inner(get)
        return None if result is None else not result

    return not_


def _compile_logic(node: _And | _Or) -> _Eval:
    evals = tuple(_compile(operand) for operand in node.operands)
    decisive = isinstance(node, _Or)  # OR stops at TRUE, AND at FALSE
    if len(evals) == 2:
        first, second = evals

        def logic2(get: _Getter) -> object:
            left = first(get)
            if left is decisive:
                return decisive
            right = second(get)
            if right is decisive:
                return decisive
            if left is None or right is None:
                return None
            return not decisive

        return logic2

    def logic(get: _Getter) -> object:
        unknown = False
        for evaluate in evals:
            result = evaluate(get)
            if result is decisive:
                return decisive
            if result is None:
                unknown = True
        return None if unknown else not decisive

    return logic


def _compile_equal(node: _Eq) -> _Eval:
    left, right = node.left, node.right
    if isinstance(left, _Prop) and isinstance(right, _Lit):
        return _compile_property_equal(left.name, right.value)
    left_eval, right_eval = _compile(left), _compile(right)

    def equal(get: _Getter) -> object:
        lv = left_eval(get)
        rv = right_eval(get)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        return _jcompare(lv, rv) == 0

    return equal


def _compile_property_equal(name: str, value: object) -> _Eval:
    if value is None:  # IS NULL
        def is_null(get: _Getter) -> object:
            return get(name) is None

        return is_null
    if isinstance(value, str):
        def equal_string(get: _Getter) -> object:
            found = get(name)
            return None if found is None else found == value

        return equal_string
    if isinstance(value, bool):
        def equal_bool(get: _Getter) -> object:
            found = get(name)
            return None if found is None else _java_bool(found) is value

        return equal_bool
    if isinstance(value, int):
        parse = _parse_long if isinstance(value, _JLong) else _parse_int

        def equal_int(get: _Getter) -> object:
            found = get(name)
            return None if found is None else parse(found) == value

        return equal_int
    assert isinstance(value, float)

    def equal_double(get: _Getter) -> object:
        found = get(name)
        return None if found is None else _double_cmp(_parse_double(found), value) == 0

    return equal_double


def _compile_order(node: _Order) -> _Eval:
    compare = _ORDER_OPS[node.op]
    left, right = node.left, node.right
    if isinstance(left, _Prop) and isinstance(right, _Lit) and isinstance(right.value, int | float):
        name, value = left.name, right.value
        if isinstance(value, int):
            parse = _parse_long if isinstance(value, _JLong) else _parse_int

            def order_int(get: _Getter) -> object:
                found = get(name)
                return None if found is None else compare(parse(found), value)

            return order_int

        def order_double(get: _Getter) -> object:
            found = get(name)
            return None if found is None else compare(_double_cmp(_parse_double(found), value), 0)

        return order_double
    left_eval, right_eval = _compile(left), _compile(right)

    def order(get: _Getter) -> object:
        lv = left_eval(get)
        if lv is None:
            return None
        rv = right_eval(get)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            return compare(_double_cmp(_parse_double(lv), _parse_double(rv)), 0)
        return compare(_jcompare(lv, rv), 0)

    return order


def _compile_in(node: _In) -> _Eval:
    name, values, negated = node.prop.name, node.values, node.negated

    def in_(get: _Getter) -> object:
        found = get(name)
        return None if found is None else (found in values) is not negated

    return in_


# ---------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------

class Sql92Filter:
    """A compiled SQL92 expression; `matches` tests one message's properties against it."""

    __slots__ = ("_evaluate", "_names", "expression")

    expression: str

    def __init__(self, expression: str) -> None:
        """Compile ``expression``; raises `FilterSyntaxError` when it is not a valid 4.9.3 SQL92 filter."""
        if not isinstance(expression, str):
            raise FilterSyntaxError(f"an SQL92 expression must be a string, not {type(expression).__name__}")
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise FilterSyntaxError(f"expression too long at position {MAX_EXPRESSION_LENGTH}: expected at most "
                                    f"{MAX_EXPRESSION_LENGTH} characters, got {len(expression)}",
                                    MAX_EXPRESSION_LENGTH)
        try:
            parser = _Parser(expression)
            tree = parser.parse()
            evaluate = _compile(tree)
        except RecursionError:
            raise FilterSyntaxError("expression nested too deeply") from None
        self.expression = expression
        self._evaluate = evaluate
        self._names = frozenset(parser.names)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """True only when the expression is TRUE for these properties (FALSE, UNKNOWN and errors are False)."""
        try:
            return self._evaluate(properties.get) is True
        except Exception:
            return False

    def property_names(self) -> frozenset[str]:
        """The property names the expression reads."""
        return self._names

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sql92Filter) and other.expression == self.expression

    def __hash__(self) -> int:
        return hash(self.expression)


def compile_sql92(text: str) -> Sql92Filter:
    """Compile a ``MessageSelector.bySql`` expression; raises `FilterSyntaxError` (naming the position) if invalid."""
    return Sql92Filter(text)


__all__ = ["MAX_EXPRESSION_LENGTH", "MAX_NESTING", "FilterSyntaxError", "Sql92Filter", "compile_sql92"]
