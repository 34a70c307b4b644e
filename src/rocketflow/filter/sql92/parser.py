"""The parser: precedence climbing over the levels OR < AND < equality < ordering < prefix.

It makes the compile-time checks of the package doc while it builds the tree.
"""

from __future__ import annotations

from typing import Final

from rocketflow.filter.sql92.errors import MAX_NESTING, FilterSyntaxError
from rocketflow.filter.sql92.java import INT_MAX, LONG_MAX, JLong, is_number, jcompare, sql_literal
from rocketflow.filter.sql92.lexer import (
    END,
    FLOAT,
    IDENTIFIER,
    INTEGER,
    KEYWORD,
    OPERATOR,
    STRING,
    UNSUPPORTED,
    Token,
    tokenize,
)
from rocketflow.filter.sql92.tree import (
    NULL_LIT,
    And,
    Cast,
    Eq,
    In,
    Lit,
    Neg,
    Node,
    Not,
    Or,
    Order,
    Prop,
    describe,
    is_boolean,
)

_LEVEL_OR: Final = 1
_LEVEL_AND: Final = 2
_LEVEL_EQUALITY: Final = 3
_LEVEL_ORDER: Final = 4
_OPERATOR_LEVELS: Final = {
    (KEYWORD, "OR"): _LEVEL_OR, (KEYWORD, "AND"): _LEVEL_AND,
    (OPERATOR, "="): _LEVEL_EQUALITY, (OPERATOR, "<>"): _LEVEL_EQUALITY, (KEYWORD, "IS"): _LEVEL_EQUALITY,
    (OPERATOR, ">"): _LEVEL_ORDER, (OPERATOR, ">="): _LEVEL_ORDER, (OPERATOR, "<"): _LEVEL_ORDER,
    (OPERATOR, "<="): _LEVEL_ORDER,
    (KEYWORD, "BETWEEN"): _LEVEL_ORDER, (KEYWORD, "IN"): _LEVEL_ORDER, (KEYWORD, "NOT"): _LEVEL_ORDER,
}
_CONTINUATIONS: Final = "AND, OR, =, <>, <, <=, >, >=, BETWEEN, IN, IS"


class Parser:
    __slots__ = ("_i", "_parens", "_tokens", "names")

    def __init__(self, text: str) -> None:
        self._tokens = tokenize(text)
        self._i = 0
        self._parens = 0
        self.names: set[str] = set()

    def parse(self) -> Node:
        if self._tokens[0].kind == END:
            raise FilterSyntaxError("empty expression at position 0: expected a condition such as a > 5", 0)
        node = self._expr(_LEVEL_OR)
        tok = self._tokens[self._i]
        if tok.kind != END:
            raise self._unexpected(tok, f"{_CONTINUATIONS} or end of input")
        return self._as_boolean(node, "the expression")

    # -- helpers -------------------------------------------------------------------------------------

    def _unexpected(self, tok: Token, expected: str) -> FilterSyntaxError:
        hint = ""
        if tok.kind == IDENTIFIER and tok.text.upper() in UNSUPPORTED:
            hint = f" ({tok.text.upper()} is not an operator in RocketMQ 4.9.3 SQL92)"
        if tok.kind == END:
            return FilterSyntaxError(f"unexpected end of input at position {tok.pos}: expected {expected}", tok.pos)
        return FilterSyntaxError(f"unexpected {tok.describe()} at position {tok.pos}: expected {expected}{hint}",
                                 tok.pos)

    @staticmethod
    def _invalid(node: Node, problem: str, expected: str) -> FilterSyntaxError:
        return FilterSyntaxError(f"{problem} at position {node.pos}: expected {expected}", node.pos)

    def _checked(self, node: Node) -> Node:
        if node.depth > MAX_NESTING:
            raise FilterSyntaxError(f"expression nested deeper than {MAX_NESTING} levels at position {node.pos}",
                                    node.pos)
        return node

    def _take(self, kind: str, text: str | None, expected: str) -> Token:
        tok = self._tokens[self._i]
        if tok.kind != kind or (text is not None and tok.text != text):
            raise self._unexpected(tok, expected)
        self._i += 1
        return tok

    def _as_boolean(self, node: Node, role: str) -> Node:
        if is_boolean(node):
            return node
        if isinstance(node, Prop):
            return Cast(node.pos, node.depth, node)
        raise self._invalid(node, f"{describe(node)} used as a condition",
                            f"{role} to be a comparison, TRUE, FALSE, NULL or a property")

    # -- levels --------------------------------------------------------------------------------------

    def _expr(self, min_level: int) -> Node:
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
                    left = self._checked(Not(left.pos, left.depth + 1, left))
            elif op == "IS":
                negated = tokens[self._i].kind == KEYWORD and tokens[self._i].text == "NOT"
                if negated:
                    self._i += 1
                self._take(KEYWORD, "NULL", "NULL after IS NOT" if negated else "NULL or NOT NULL after IS")
                left = self._checked(Eq(left.pos, left.depth + 1, left, NULL_LIT))
                if negated:
                    left = self._checked(Not(left.pos, left.depth + 1, left))
            elif op == "BETWEEN":
                left = self._between(left, negated=False)
            elif op == "IN":
                left = self._in(left, negated=False)
            elif op == "NOT":
                after = tokens[self._i]
                if after.kind == KEYWORD and after.text == "BETWEEN":
                    self._i += 1
                    left = self._between(left, negated=True)
                elif after.kind == KEYWORD and after.text == "IN":
                    self._i += 1
                    left = self._in(left, negated=True)
                else:
                    raise self._unexpected(after, "BETWEEN or IN after NOT (to negate a condition, "
                                                  "put NOT before it: NOT (a = 1))")
            else:
                right = self._unary()
                left = self._order(op, left, right)

    def _unary(self) -> Node:
        prefixes: list[Token] = []
        tokens = self._tokens
        while (tok := tokens[self._i]).text in ("NOT", "-", "+") and tok.kind in (KEYWORD, OPERATOR):
            prefixes.append(tok)
            self._i += 1
        node = self._primary()
        for tok in reversed(prefixes):
            if tok.text == "NOT":
                operand = self._as_boolean(node, "the operand of NOT")
                node = self._checked(Not(tok.pos, operand.depth + 1, operand))
            elif tok.text == "-":
                node = self._negate(node, tok)
        return node

    def _negate(self, node: Node, tok: Token) -> Node:
        if isinstance(node, Lit | Prop) or (isinstance(node, Neg) and node.folded):
            value = node.value if isinstance(node, Lit | Neg) else None
            if is_number(value):
                assert isinstance(value, int | float)
                value = JLong(-value) if isinstance(value, JLong) else -value
            else:
                value = None
            return Neg(tok.pos, 0, node, True, value)
        return self._checked(Neg(tok.pos, node.depth + 1, node, False, None))

    def _primary(self) -> Node:
        tok = self._tokens[self._i]
        kind = tok.kind
        if kind == IDENTIFIER:
            self._i += 1
            self.names.add(tok.text)
            return Prop(tok.pos, 0, tok.text)
        if kind == STRING:
            self._i += 1
            return Lit(tok.pos, 0, tok.text[1:-1].replace("''", "'"), False)
        if kind == INTEGER:
            self._i += 1
            return Lit(tok.pos, 0, self._integer(tok), False)
        if kind == FLOAT:
            self._i += 1
            return Lit(tok.pos, 0, self._floating(tok), False)
        if kind == KEYWORD and tok.text in ("TRUE", "FALSE", "NULL"):
            self._i += 1
            return Lit(tok.pos, 0, None if tok.text == "NULL" else tok.text == "TRUE", True)
        if kind == OPERATOR and tok.text == "(":
            self._i += 1
            self._parens += 1
            if self._parens > MAX_NESTING:
                raise FilterSyntaxError(f"expression nested deeper than {MAX_NESTING} levels of parentheses "
                                        f"at position {tok.pos}", tok.pos)
            node = self._expr(_LEVEL_OR)
            self._take(OPERATOR, ")", f"')' to close the '(' at position {tok.pos}, or {_CONTINUATIONS}")
            self._parens -= 1
            return node
        raise self._unexpected(tok, "a property name, a literal, '(', NOT, '+' or '-'")

    @staticmethod
    def _integer(tok: Token) -> int:
        digits = tok.text.rstrip("lL")
        value = int(digits) if len(digits) <= 19 else LONG_MAX + 1
        if value > LONG_MAX:
            raise FilterSyntaxError(f"integer literal {tok.text} at position {tok.pos} is out of range: "
                                    f"expected at most {LONG_MAX}", tok.pos)
        return value if value <= INT_MAX else JLong(value)

    @staticmethod
    def _floating(tok: Token) -> float:
        value = float(tok.text)
        if value == float("inf"):
            raise FilterSyntaxError(f"float literal {tok.text} at position {tok.pos} is out of range: "
                                    "expected at most 1.7976931348623157E308", tok.pos)
        if value == 0.0:
            raise FilterSyntaxError(f"float literal {tok.text} at position {tok.pos} is out of range: expected "
                                    "at least 4.9E-324 (RocketMQ rejects 0.0; compare with 0 instead)", tok.pos)
        return value

    # -- node builders with RocketMQ's compile-time checks ---------------------------------------

    def _logic(self, op: str, left: Node, right: Node) -> Node:
        left = self._as_boolean(left, f"the left operand of {op}")
        right = self._as_boolean(right, f"the right operand of {op}")
        kind = Or if op == "OR" else And
        if isinstance(left, kind):
            operands = (*left.operands, right)
            return self._checked(kind(left.pos, max(left.depth, right.depth + 1), operands))
        return self._checked(kind(left.pos, max(left.depth, right.depth) + 1, (left, right)))

    def _equal(self, left: Node, right: Node, tok: Token) -> Node:
        for side in (left, right):
            if isinstance(side, Lit) and side.value is None:
                raise self._invalid(side, f"NULL compared with '{tok.text}'", "IS NULL or IS NOT NULL instead")
        if isinstance(left, Lit) and isinstance(right, Lit) and left.boolean and not right.boolean:
            raise self._invalid(left, f"{sql_literal(left.value)} compared with {sql_literal(right.value)}",
                                "TRUE or FALSE to be compared with a property or a condition")
        return self._checked(Eq(left.pos, max(left.depth, right.depth) + 1, left, right))

    def _order(self, op: str, left: Node, right: Node) -> Node:
        for side in (left, right):
            if isinstance(side, Lit) and not is_number(side.value):
                raise self._invalid(side, f"{describe(side)} compared with '{op}'",
                                    "a number literal or a property (only numbers are ordered)")
            if is_boolean(side):
                raise self._invalid(side, f"a condition compared with '{op}'", "a number literal or a property")
        return self._checked(Order(left.pos, max(left.depth, right.depth) + 1, op, left, right))

    def _between(self, value: Node, negated: bool) -> Node:
        low = self._unary()
        self._take(KEYWORD, "AND", "AND between the bounds of BETWEEN")
        high = self._unary()
        if not negated and isinstance(low, Lit) and isinstance(high, Lit):
            if low.value is None or high.value is None:
                raise self._invalid(low if low.value is None else high, "NULL bound of BETWEEN",
                                    "number literals or properties as bounds")
            # non-number literals are refused by the operand checks below
            if is_number(low.value) and is_number(high.value) and jcompare(high.value, low.value) < 0:
                raise self._invalid(low, f"BETWEEN bounds out of order ({sql_literal(low.value)} > "
                                         f"{sql_literal(high.value)})", "the lower bound first")
        if negated:
            parts = (self._order("<", value, low), self._order(">", value, high))
            return self._checked(Or(value.pos, max(part.depth for part in parts) + 1, parts))
        parts = (self._order(">=", value, low), self._order("<=", value, high))
        return self._checked(And(value.pos, max(part.depth for part in parts) + 1, parts))

    def _in(self, value: Node, negated: bool) -> Node:
        self._take(OPERATOR, "(", "'(' to open the IN list")
        values = [self._string_literal()]
        while self._tokens[self._i].kind == OPERATOR and self._tokens[self._i].text == ",":
            self._i += 1
            values.append(self._string_literal())
        self._take(OPERATOR, ")", "',' or ')' in the IN list")
        if not isinstance(value, Prop):
            raise self._invalid(value, f"{describe(value)} before IN", "a property name before IN")
        return self._checked(In(value.pos, 1, value, frozenset(values), negated))

    def _string_literal(self) -> str:
        tok = self._take(STRING, None, "a string literal in the IN list (IN takes only quoted strings)")
        return tok.text[1:-1].replace("''", "'")


__all__ = ["Parser"]
