"""SQL92 message filters as RocketMQ 4.9.3 evaluates them (``MessageSelector.bySql``).

The modules: `lexer` (tokens), `parser` (syntax tree of `tree`, compile-time checks), `evaluator`
(the tree compiled to closures), `java` (Java's conversions), `errors` (limits and errors).

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

from collections.abc import Mapping

from rocketflow.filter.sql92.errors import MAX_EXPRESSION_LENGTH, MAX_NESTING, FilterSyntaxError
from rocketflow.filter.sql92.evaluator import compile_tree
from rocketflow.filter.sql92.parser import Parser


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
            parser = Parser(expression)
            tree = parser.parse()
            evaluate = compile_tree(tree)
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
