"""The syntax tree of a parsed expression.

A node's depth counts the operator levels below and including it; leaves are 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rocketflow.filter.sql92.java import sql_literal


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    pos: int
    depth: int


@dataclass(frozen=True, slots=True, eq=False)
class Lit(Node):
    """A literal; ``boolean`` for TRUE, FALSE and NULL (RocketMQ's boolean constants)."""

    value: object
    boolean: bool


@dataclass(frozen=True, slots=True, eq=False)
class Prop(Node):
    name: str


@dataclass(frozen=True, slots=True, eq=False)
class Neg(Node):
    """Unary minus. ``folded``: the value is known (a negated number, else NULL) and evaluating cannot fail."""

    operand: Node
    folded: bool
    value: object


@dataclass(frozen=True, slots=True, eq=False)
class Cast(Node):
    """A bare property used as a boolean: UNKNOWN when missing, FALSE otherwise."""

    prop: Prop


@dataclass(frozen=True, slots=True, eq=False)
class Not(Node):
    operand: Node


@dataclass(frozen=True, slots=True, eq=False)
class And(Node):
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Or(Node):
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Eq(Node):
    left: Node
    right: Node


@dataclass(frozen=True, slots=True, eq=False)
class Order(Node):
    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True, eq=False)
class In(Node):
    prop: Prop
    values: frozenset[str]
    negated: bool


BOOLEAN_NODES: Final = (Cast, Not, And, Or, Eq, Order, In)
NULL_LIT: Final = Lit(0, 0, None, True)


def is_boolean(node: Node) -> bool:
    return isinstance(node, BOOLEAN_NODES) or (isinstance(node, Lit) and node.boolean)


def describe(node: Node) -> str:
    if isinstance(node, Lit):
        return f"literal {sql_literal(node.value)}"
    if isinstance(node, Prop):
        return f"property {node.name}"
    if isinstance(node, Neg):
        return "a negation"
    return "a boolean expression"


__all__ = [
    "BOOLEAN_NODES",
    "NULL_LIT",
    "And",
    "Cast",
    "Eq",
    "In",
    "Lit",
    "Neg",
    "Node",
    "Not",
    "Or",
    "Order",
    "Prop",
    "describe",
    "is_boolean",
]
