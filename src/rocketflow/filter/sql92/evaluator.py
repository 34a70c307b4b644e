"""The evaluator: a syntax tree compiled to closures.

Each closure takes the property getter and returns True, False, None (UNKNOWN) or a value.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Final

from rocketflow.filter.sql92.java import JLong, double_cmp, java_bool, jcompare, parse_double, parse_int, parse_long
from rocketflow.filter.sql92.tree import And, Cast, Eq, In, Lit, Neg, Node, Not, Or, Order, Prop

_Getter = Callable[[str], str | None]
_Eval = Callable[[_Getter], object]

_ORDER_OPS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}


def _constant(value: object) -> _Eval:
    def constant(get: _Getter) -> object:
        return value

    return constant


def compile_tree(node: Node) -> _Eval:
    if isinstance(node, Lit):
        return _constant(node.value)
    if isinstance(node, Prop):
        name = node.name

        def prop(get: _Getter) -> object:
            return get(name)

        return prop
    if isinstance(node, Neg):
        if node.folded:
            return _constant(node.value)
        inner = compile_tree(node.operand)

        def negate(get: _Getter) -> object:
            inner(get)  # evaluated for its failures only: negating a non-number gives NULL
            return None

        return negate
    if isinstance(node, Cast):
        name = node.prop.name

        def cast(get: _Getter) -> object:
            return None if get(name) is None else False

        return cast
    if isinstance(node, Not):
        return _compile_not(node)
    if isinstance(node, And | Or):
        return _compile_logic(node)
    if isinstance(node, Eq):
        return _compile_equal(node)
    if isinstance(node, Order):
        return _compile_order(node)
    if isinstance(node, In):
        return _compile_in(node)
    raise AssertionError(f"unknown node {node!r}")


def _compile_not(node: Not) -> _Eval:
    operand = node.operand
    if isinstance(operand, Eq) and isinstance(operand.left, Prop) and isinstance(operand.right, Lit):
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
    inner = compile_tree(operand)

    def not_(get: _Getter) -> object:
        result = inner(get)
        return None if result is None else not result

    return not_


def _compile_logic(node: And | Or) -> _Eval:
    evals = tuple(compile_tree(operand) for operand in node.operands)
    decisive = isinstance(node, Or)  # OR stops at TRUE, AND at FALSE
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


def _compile_equal(node: Eq) -> _Eval:
    left, right = node.left, node.right
    if isinstance(left, Prop) and isinstance(right, Lit):
        return _compile_property_equal(left.name, right.value)
    left_eval, right_eval = compile_tree(left), compile_tree(right)

    def equal(get: _Getter) -> object:
        lv = left_eval(get)
        rv = right_eval(get)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        return jcompare(lv, rv) == 0

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
            return None if found is None else java_bool(found) is value

        return equal_bool
    if isinstance(value, int):
        parse = parse_long if isinstance(value, JLong) else parse_int

        def equal_int(get: _Getter) -> object:
            found = get(name)
            return None if found is None else parse(found) == value

        return equal_int
    assert isinstance(value, float)

    def equal_double(get: _Getter) -> object:
        found = get(name)
        return None if found is None else double_cmp(parse_double(found), value) == 0

    return equal_double


def _compile_order(node: Order) -> _Eval:
    compare = _ORDER_OPS[node.op]
    left, right = node.left, node.right
    if isinstance(left, Prop) and isinstance(right, Lit) and isinstance(right.value, int | float):
        name, value = left.name, right.value
        if isinstance(value, int):
            parse = parse_long if isinstance(value, JLong) else parse_int

            def order_int(get: _Getter) -> object:
                found = get(name)
                return None if found is None else compare(parse(found), value)

            return order_int

        def order_double(get: _Getter) -> object:
            found = get(name)
            return None if found is None else compare(double_cmp(parse_double(found), value), 0)

        return order_double
    left_eval, right_eval = compile_tree(left), compile_tree(right)

    def order(get: _Getter) -> object:
        lv = left_eval(get)
        if lv is None:
            return None
        rv = right_eval(get)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            return compare(double_cmp(parse_double(lv), parse_double(rv)), 0)
        return compare(jcompare(lv, rv), 0)

    return order


def _compile_in(node: In) -> _Eval:
    name, values, negated = node.prop.name, node.values, node.negated

    def in_(get: _Getter) -> object:
        found = get(name)
        return None if found is None else (found in values) is not negated

    return in_


__all__ = ["compile_tree"]
