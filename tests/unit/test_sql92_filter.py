"""SQL92 message filters with RocketMQ 4.9.3 semantics (rocketflow.filter.sql92)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketflow.filter import (
    EXPRESSION_TYPE_SQL92,
    EXPRESSION_TYPE_TAG,
    FilterSyntaxError,
    Sql92Filter,
    compile_sql92,
)
from rocketflow.filter.sql92 import MAX_EXPRESSION_LENGTH, MAX_NESTING


def matches(expression: str, properties: Mapping[str, str] | None = None) -> bool:
    return compile_sql92(expression).matches(properties or {})


def syntax_error(expression: str) -> FilterSyntaxError:
    with pytest.raises(FilterSyntaxError) as info:
        compile_sql92(expression)
    return info.value


def test_exports() -> None:
    assert EXPRESSION_TYPE_TAG == "TAG"
    assert EXPRESSION_TYPE_SQL92 == "SQL92"
    assert issubclass(FilterSyntaxError, ValueError)
    compiled = compile_sql92("a > 5 AND b = 'x'")
    assert isinstance(compiled, Sql92Filter)
    assert compiled.expression == "a > 5 AND b = 'x'"
    assert compiled == Sql92Filter("a > 5 AND b = 'x'")
    assert hash(compiled) == hash(compile_sql92("a > 5 AND b = 'x'"))
    assert "a > 5" in repr(compiled)


# --- RocketMQ's own expectations (filter/src/test/.../ParserTest.java and ExpressionTest.java) --------

AND_EXPRESSION = "a=3 and b<>4 And c>5 AND d<=4"
OR_EXPRESSION = "a=3 or b<>4 Or c>5 OR d<=4"
IN_EXPRESSION = "a in ('3', '4', '5')"
NOT_IN_EXPRESSION = "a not in ('3', '4', '5')"
BETWEEN_EXPRESSION = "a between 2 and 10"
NOT_BETWEEN_EXPRESSION = "a not between 2 and 10"


@pytest.mark.parametrize("expression", [
    AND_EXPRESSION,
    "a=3  and    b<>4 And c>5 AND d<=4",
    OR_EXPRESSION,
    IN_EXPRESSION,
    "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
    "(a between 2 and 10) AND (b not between 6 and 9)",
    "a is null",
    "a is not null",
    "a <= now",  # `now` is an ordinary property name in 4.9.3
])
def test_rocketmq_parser_valid(expression: str) -> None:
    assert compile_sql92(expression).expression == expression


@pytest.mark.parametrize("expression", [
    "a and between 2 and 10",
    " a between 10 and 0",
    "a > 100000000000000000000000",
    "a > 1" + "1" * 400 + "." + "1" * 400 + "e400",
    "a > " + "1" * 3000 + "." + "1" * 3000,  # ParserTest's float overflow (also over the length limit)
])
def test_rocketmq_parser_invalid(expression: str) -> None:
    syntax_error(expression)


@pytest.mark.parametrize(("expression", "properties", "expected"), [
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    # stringCompare: a missing bound is UNKNOWN, a non-number string under BETWEEN fails the evaluation
    ("a between up and low", {"a": "3.14"}, False),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, False),
    ("key is not null and key between 0 and 100", {"key": "con"}, False),
    ("a between 0 and 100", {"a": "abc"}, False),
    ("a=b", {"a": "3.14", "b": "3.14"}, True),
    ("a<>b", {"a": "3.14", "b": "3.14"}, False),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True),
    ("a > 3.1E10", {"a": "3.1415E10"}, True),  # String.valueOf(3.1415 * 10^10)
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "20", "b": "10"}, True),
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {}, False),
    (AND_EXPRESSION, {"a": "3", "b": "5", "c": "6", "d": "1"}, True),
    (AND_EXPRESSION, {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
    (OR_EXPRESSION, {"a": "3"}, True),
    (OR_EXPRESSION, {"a": "4", "b": "5"}, True),
    (OR_EXPRESSION, {"a": "4", "b": "4", "c": "6"}, True),
    (OR_EXPRESSION, {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    (OR_EXPRESSION, {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    (IN_EXPRESSION, {"a": "3"}, True),
    (IN_EXPRESSION, {"a": "4"}, True),
    (IN_EXPRESSION, {"a": "5"}, True),
    (IN_EXPRESSION, {"a": "8"}, False),
    (NOT_IN_EXPRESSION, {"a": "8"}, True),
    (NOT_IN_EXPRESSION, {"a": "3"}, False),
    (NOT_IN_EXPRESSION, {"a": "4"}, False),
    (NOT_IN_EXPRESSION, {"a": "5"}, False),
    (BETWEEN_EXPRESSION, {"a": "2"}, True),
    (BETWEEN_EXPRESSION, {"a": "10"}, True),
    (BETWEEN_EXPRESSION, {"a": "3"}, True),
    (BETWEEN_EXPRESSION, {"a": "1"}, False),
    (BETWEEN_EXPRESSION, {"a": "11"}, False),
    (NOT_BETWEEN_EXPRESSION, {"a": "1"}, True),
    (NOT_BETWEEN_EXPRESSION, {"a": "11"}, True),
    (NOT_BETWEEN_EXPRESSION, {"a": "2"}, False),
    (NOT_BETWEEN_EXPRESSION, {"a": "10"}, False),
    (NOT_BETWEEN_EXPRESSION, {"a": "3"}, False),
    ("a is null", {"abc": "2"}, True),
    ("a is null", {"a": "2"}, False),
    ("a is not null", {"a": "2"}, True),
    ("a is not null", {"abc": "2"}, False),
])
def test_rocketmq_expression_expectations(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert matches(expression, properties) is expected


# --- three-valued logic (LogicExpressionTest's truth tables, with TRUE/FALSE/NULL literals) ---------

TRUTH = {"TRUE": True, "FALSE": False, "NULL": None}
AND_TABLE = {
    ("TRUE", "TRUE"): True, ("TRUE", "FALSE"): False, ("TRUE", "NULL"): None,
    ("FALSE", "TRUE"): False, ("FALSE", "FALSE"): False, ("FALSE", "NULL"): False,
    ("NULL", "TRUE"): None, ("NULL", "FALSE"): False, ("NULL", "NULL"): None,
}
OR_TABLE = {
    ("TRUE", "TRUE"): True, ("TRUE", "FALSE"): True, ("TRUE", "NULL"): True,
    ("FALSE", "TRUE"): True, ("FALSE", "FALSE"): False, ("FALSE", "NULL"): None,
    ("NULL", "TRUE"): True, ("NULL", "FALSE"): None, ("NULL", "NULL"): None,
}


@pytest.mark.parametrize(("left", "right"), list(AND_TABLE))
def test_three_valued_and_or(left: str, right: str) -> None:
    def outcome(expression: str) -> bool | None:
        # TRUE when it matches; FALSE when NOT(...) matches; UNKNOWN when neither does
        if matches(expression, {"x": "x"}):
            return True
        return False if matches(f"NOT ({expression})", {"x": "x"}) else None

    assert outcome(f"{left} AND {right}") is AND_TABLE[left, right]
    assert outcome(f"{left} OR {right}") is OR_TABLE[left, right]
    # a missing property gives UNKNOWN just like the NULL literal
    as_property = {"TRUE": "x = 'x'", "FALSE": "x = 'y'", "NULL": "missing = 'x'"}
    assert outcome(f"{as_property[left]} AND {as_property[right]}") is AND_TABLE[left, right]


@pytest.mark.parametrize(("expression", "expected"), [
    ("TRUE", True), ("FALSE", False), ("NULL", False),
    ("NOT TRUE", False), ("NOT FALSE", True), ("NOT NULL", False), ("NOT NOT NULL", False),
    ("NULL IS NULL", True), ("NULL IS NOT NULL", False), ("5 IS NULL", False), ("'x' IS NOT NULL", True),
])
def test_boolean_literals(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


def test_unknown_never_matches_and_not_unknown_is_unknown() -> None:
    for expression in ["a = 'x'", "a <> 'x'", "a > 1", "a < 1", "a IN ('x')", "a NOT IN ('x')",
                       "a BETWEEN 1 AND 2", "a NOT BETWEEN 1 AND 2"]:
        assert not matches(expression)
        assert not matches(f"NOT ({expression})")


def test_short_circuit_and_failed_conversion() -> None:
    bad = {"a": "abc", "b": "x"}
    # the right side is never evaluated once the left decides
    assert matches("TRUE OR a > 5", bad)
    assert matches("b = 'x' OR a > 5", bad)
    assert not matches("FALSE AND a > 5", bad)
    # a conversion failure aborts the whole evaluation: no match even with a TRUE alternative
    assert not matches("a > 5 OR b = 'x'", bad)
    assert not matches("NOT (a > 5)", bad)
    assert not matches("a = 5 OR TRUE", bad)


# --- operators -----------------------------------------------------------------------------------

PROPS = {"n": "10", "s": "hello", "f": "2.5", "neg": "-3", "t": "true", "e": ""}


@pytest.mark.parametrize(("expression", "expected"), [
    ("n = 10", True), ("n = 11", False), ("n <> 11", True), ("n <> 10", False),
    ("n > 9", True), ("n > 10", False), ("n >= 10", True), ("n >= 11", False),
    ("n < 11", True), ("n < 10", False), ("n <= 10", True), ("n <= 9", False),
    ("9 < n", True), ("10 >= n", True), ("11 <= n", False),
    ("n BETWEEN 10 AND 10", True), ("n BETWEEN 1 AND 9", False), ("n NOT BETWEEN 1 AND 9", True),
    ("n BETWEEN 9.5 AND 10.5", True), ("f BETWEEN 2.0 AND 3.0", True),
    ("f BETWEEN 2 AND 3", False), ("f BETWEEN 2.0 AND 3", False),  # '2.5' is no Integer: the upper check fails
    ("s IN ('a', 'hello')", True), ("s IN ('a', 'b', 'c', 'd', 'e', 'f')", False),
    ("s NOT IN ('a', 'b', 'c', 'd', 'e', 'hello')", False), ("s NOT IN ('hi')", True),
    ("s IS NULL", False), ("s IS NOT NULL", True), ("zz IS NULL", True), ("zz IS NOT NULL", False),
    ("s = 'hello'", True), ("s = 'Hello'", False), ("s <> 'Hello'", True), ("'hello' = s", True),
    ("e = ''", True), ("e IS NOT NULL", True),
    ("neg < 0", True), ("neg = -3", True), ("neg > -4", True), ("neg BETWEEN -5 AND -1", True),
    ("n > - -9", True), ("n = +10", True), ("+n = 10", True),
    ("f > 2", False),  # '2.5' against an Integer literal: Integer.valueOf fails, no match
    ("f > 2.4", True), ("f < 2.6", True), ("f = 2.5", True), ("f = 2.50", True),
    ("n > f", True), ("f > n", False),  # two property strings are ordered as doubles
    ("t = TRUE", True), ("t <> FALSE", True), ("s = TRUE", False), ("s = FALSE", True),
    ("n = 10 AND s = 'hello' AND f > 2.0 AND t = TRUE", True),
    ("n = 11 OR s = 'bye' OR f < 2.0 OR t = FALSE", False),
])
def test_operators(expression: str, expected: bool) -> None:
    assert matches(expression, PROPS) is expected


@pytest.mark.parametrize(("expression", "properties", "expected"), [
    # precedence: OR < AND < = <> IS < ordering/BETWEEN/IN < prefix
    ("TRUE OR FALSE AND FALSE", {}, True),  # TRUE OR (FALSE AND FALSE)
    ("(TRUE OR FALSE) AND FALSE", {}, False),
    ("a = 1 OR b = 1 AND c = 1", {"a": "1"}, True),
    ("a = 1 OR b = 1 AND c = 1", {"b": "1"}, False),
    ("a = 1 AND b = 1 OR c = 1", {"c": "1"}, True),
    ("a > 1 = TRUE", {"a": "2"}, True),  # (a > 1) = TRUE
    ("a = 1 = FALSE", {"a": "2"}, True),  # (a = 1) = FALSE
    ("a BETWEEN 1 AND 3 AND b = 'x'", {"a": "2", "b": "x"}, True),
    # prefix NOT binds tighter than comparisons: NOT a = 'x' is (NOT a) = 'x', never TRUE for a string
    ("NOT a = 'x'", {"a": "x"}, False),
    ("NOT a = 'x'", {"a": "y"}, False),
    ("NOT (a = 'x')", {"a": "y"}, True),
    ("NOT a IS NULL", {}, True),  # (NOT a) IS NULL
    ("NOT a", {"a": "x"}, True),  # a present property used as a condition is FALSE
    ("a", {"a": "true"}, False),
    ("a", {}, False),
])
def test_precedence_and_associativity(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert matches(expression, properties) is expected


# --- NULL (missing property) rules ---------------------------------------------------------------

@pytest.mark.parametrize(("expression", "properties", "expected"), [
    ("a = b", {}, True),  # NULL = NULL is TRUE in RocketMQ
    ("a = b", {"a": "x"}, False),  # value = NULL is FALSE
    ("NOT (a = b)", {"a": "x"}, True),
    ("a = b", {"b": "x"}, False),  # NULL = value is UNKNOWN ...
    ("NOT (a = b)", {"b": "x"}, False),  # ... so its negation does not match either
    ("NOT ('x' = a)", {}, True),  # the literal on the left: value = NULL, FALSE
    ("NOT (a = 'x')", {}, False),
    ("a <> 'x'", {}, False),
    ("a NOT IN ('x')", {}, False),
    ("a NOT BETWEEN 1 AND 2", {}, False),
    ("a > b", {"a": "1"}, False),
    ("NOT (a > b)", {"a": "1"}, False),
    ("a = -NULL", {}, True),  # negating anything but a number gives NULL
    ("a = -NULL", {"a": "x"}, False),
    ("-a > 5", {"a": "10"}, False),
    ("NOT (-a > 5)", {"a": "10"}, False),
])
def test_null_rules(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert matches(expression, properties) is expected


# --- numeric conversion of property strings (Java valueOf rules) ----------------------------------

@pytest.mark.parametrize(("expression", "value", "expected"), [
    # Integer literal: Integer.valueOf
    ("a = 5", "5", True), ("a = 5", "05", True), ("a = 5", "+5", True), ("a = 5", "0" * 30 + "5", True),
    ("a = 5", "\u0665", True),  # Arabic-Indic five: Java accepts Unicode decimal digits
    ("a = 5", " 5", False), ("a = 5", "5 ", False), ("a = 5", "5.0", False), ("a = 5", "0x5", False),
    ("a = 5", "", False), ("a = 5", "+", False), ("a = 5", "5_0", False), ("a = 5", "\u00b2", False),
    ("a = -5", "-5", True), ("a = 0", "-0", True),
    ("a > 2147483646", "2147483647", True),
    ("a > 2147483647", "2147483648", False),  # over Integer range: the parse fails
    ("a < 2147483647", "-2147483648", True), ("a < 2147483647", "-2147483649", False),
    # Long literal (outside 32 bits): Long.valueOf
    ("a = 2147483648", "2147483648", True), ("a > 2147483648", "9223372036854775807", True),
    ("a > 2147483648", "9223372036854775808", False), ("a < -2147483648", "-9223372036854775808", True),
    ("a > -2147483648", "-1", True),  # - 2147483648 is a negated Long, still parsed as a Long
    ("a = 5L", "5", True), ("a = 5l", "5", True),  # the L suffix does not force a Long
    # Double literal: Double.valueOf (trims, accepts NaN, Infinity, hex, f/d suffixes, exponents)
    ("a = 1.0", "1", True), ("a > 5.0", " 6 ", True), ("a > 5.0", "6f", True), ("a > 5.0", "6D", True),
    ("a > 5.0", "0x1.8p2", True), ("a > 5.0", "1e1", True), ("a > 5.0", ".6e1", True), ("a > 5.0", "6.", True),
    ("a > 5.0", "Infinity", True), ("a < 5.0", "-Infinity", True), ("a > 5.0", "inf", False),
    ("a > 5.0", "infinity", False), ("a > 5.0", "1_0", False), ("a > 5.0", "\u0666", False),
    ("a > 5.0", "6ff", False), ("a > 5.0", "0x6", False), ("a > 5.0", "", False),
    ("a > 1.5", "NaN", True), ("a < 1.5", "NaN", False), ("a = 1.5", "NaN", False),  # NaN sorts above all
    ("a > 1E308", "1e999", True),  # overflows to Infinity
    ("a > 5.0", "0x1p99999", True),
    # two strings under <, >, <=, >=: both as doubles
    ("a > b", "NaN", True),
    # booleans: Boolean.valueOf
    ("a = TRUE", "TRUE", True), ("a = TRUE", "tRuE", True), ("a = TRUE", "yes", False),
    ("a = FALSE", "no", True), ("a <> TRUE", "1", True),
])
def test_numeric_conversion(expression: str, value: str, expected: bool) -> None:
    assert matches(expression, {"a": value, "b": "1"}) is expected


def test_double_ordering_is_javas_total_order() -> None:
    assert matches("a < b", {"a": "-0.0", "b": "0.0"})
    assert not matches("a > b", {"a": "-0.0", "b": "0.0"})
    assert matches("a = 0", {"a": "-0"})
    assert matches("a >= b", {"a": "NaN", "b": "NaN"})
    assert matches("a > b", {"a": "NaN", "b": "Infinity"})


def test_string_equality_is_exact_while_ordering_is_numeric() -> None:
    assert not matches("a = b", {"a": "1.0", "b": "1"})
    assert matches("a >= b AND a <= b", {"a": "1.0", "b": "1"})
    assert not matches("a = '5'", {"a": "05"})
    assert matches("a = 5", {"a": "05"})


@pytest.mark.parametrize(("expression", "properties", "expected"), [
    ("TRUE = a", {}, False),  # value = NULL: FALSE
    ("NOT (TRUE = a)", {}, True),
    ("TRUE = a", {"a": "true"}, False),  # a boolean against a string fails in RocketMQ (ClassCastException)
    ("NOT (TRUE = a)", {"a": "true"}, False),
    ("1 = TRUE", {}, False),  # a number and a boolean are never equal
    ("1 <> TRUE", {}, True),
    ("'true' = TRUE", {}, True),
    ("1 = 1.0", {}, True),
    ("2147483648 > 1", {}, True),
    ("1.5 < 2", {}, True),
    ("(a = 'x') = (b = 'y')", {"a": "x", "b": "y"}, True),
])
def test_mixed_type_comparisons(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert matches(expression, properties) is expected


# --- lexical rules ----------------------------------------------------------------------------------

@pytest.mark.parametrize("expression", [
    "a IS NOT NULL AND b BETWEEN 1 AND 2 OR c IN ('x') AND NOT d = TRUE",
    "a is not null and b between 1 and 2 or c in ('x') and not d = true",
    "a Is NoT nUlL aNd b BeTwEeN 1 AnD 2 oR c In ('x') AnD nOt d = TrUe",
])
def test_keywords_ignore_case(expression: str) -> None:
    props = {"a": "1", "b": "1", "c": "x", "d": "false"}
    assert matches(expression, props)


def test_identifiers() -> None:
    assert not matches("A = 'x'", {"a": "x"})  # property names are case-sensitive
    assert matches("_a$1 = 'x' AND $ = 'y' AND UNIQ_KEY IS NOT NULL", {"_a$1": "x", "$": "y", "UNIQ_KEY": "k"})
    assert matches("nottrue = 'x' AND isnull = 'y' AND contains = 'z'",
                   {"nottrue": "x", "isnull": "y", "contains": "z"})
    assert compile_sql92("a > 5 AND (b = 'x' OR c IN ('1')) AND d IS NULL AND TRUE").property_names() == frozenset(
        {"a", "b", "c", "d"})
    assert compile_sql92("TRUE").property_names() == frozenset()


@pytest.mark.parametrize(("expression", "value"), [
    ("a = 'it''s'", "it's"),
    ("a = ''''", "'"),
    ("a = ''", ""),
    ("a = 'two\nlines'", "two\nlines"),
    ("a = '\u00e9\u4e2d\U0001f600'", "\u00e9\u4e2d\U0001f600"),
    ("a = '--not a comment /* nor this */'", "--not a comment /* nor this */"),
    ("a IN ('x''y', 'z')", "x'y"),
    ("a = 'back\\slash'", "back\\slash"),
])
def test_string_literals(expression: str, value: str) -> None:
    assert matches(expression, {"a": value})
    assert not matches(expression, {"a": value + "!"})


@pytest.mark.parametrize("expression", [
    "a = 1 /* comment */ AND b = 2",
    "/* leading */ a = 1 AND b = 2",
    "-- a line comment\na = 1 AND b = 2",
    "a = 1 -- trailing comment\r\n AND b = 2",
    "a = 1 AND /* ** tricky * / */ b = 2",
    "a=1 AND\tb=2\f",
    "a=1and b=2",  # tokens need no separating blanks
    "(a=1)AND(b=2)",
])
def test_blanks_and_comments(expression: str) -> None:
    assert matches(expression, {"a": "1", "b": "2"})


def test_a_dash_dash_without_line_break_is_two_minus_signs() -> None:
    assert matches("a = --1", {"a": "1"})
    compiled = compile_sql92("a > -- x")  # a > -(-x): negating a property gives NULL
    assert compiled.property_names() == frozenset({"a", "x"})
    assert not compiled.matches({"a": "1", "x": "0"})


@pytest.mark.parametrize(("literal", "value"), [
    ("0", "0"), ("7", "7"), ("2147483647", "2147483647"), ("9223372036854775807", "9223372036854775807"),
    ("1.5", "1.5"), ("1.", "1"), (".5", "0.5"), ("1e3", "1000"), ("1E+3", "1000"), ("2.5e-1", "0.25"),
    ("007.5", "7.5"), ("4.9E-324", "4.9E-324"),
])
def test_numeric_literals(literal: str, value: str) -> None:
    assert matches(f"a = {literal}", {"a": value})


@pytest.mark.parametrize("expression", [
    "a = 007",  # no octal: 0 then 07
    "a = 0x1F",  # no hex: 0 then x1F
    "a = 0L",  # only non-zero integers take the L suffix
    "a = 1.5.3",
    "a = 1e",
    "a > 0.0",  # RocketMQ rejects float literals below Double.MIN_VALUE, 0.0 included
    "a > .0",
    "a > 1e-400",
    "a > 1e309",
    "a > 9223372036854775808",
])
def test_bad_numeric_literals(expression: str) -> None:
    syntax_error(expression)


# --- compile-time checks and syntax errors ---------------------------------------------------------

@pytest.mark.parametrize(("expression", "position", "fragment"), [
    ("", 0, "empty expression"),
    ("   \n ", 0, "empty expression"),
    ("/* only a comment */", 0, "empty expression"),
    ("(a = 1", 6, "expected ')'"),
    ("((a = 1) AND (b = 2)", 20, "expected ')'"),
    ("a = 1)", 5, "end of input"),
    ("a = (1))", 7, "end of input"),
    ("a = 1 b = 2", 6, "identifier 'b'"),
    ("a = 1 'x'", 6, "end of input"),
    ("a = 1 TRUE", 6, "keyword TRUE"),
    ("a == 1", 2, "unknown operator '=='"),
    ("a != 1", 2, "unknown operator '!='"),
    ("a = 1 && b = 2", 6, "unknown operator '&&'"),
    ("a = 1 || b = 2", 6, "unknown operator '||'"),
    ("!a", 0, "use NOT"),
    ("a ~ 1", 2, "unexpected character '~'"),
    ("a = \"x\"", 4, "unexpected character '\"'"),
    ("a LIKE 'x%'", 2, "LIKE is not an operator"),
    ("a CONTAINS 'x'", 2, "CONTAINS is not an operator"),
    ("a STARTSWITH 'x'", 2, "STARTSWITH"),
    ("a = 'abc", 4, "unterminated string literal"),
    ("a = 'it''s", 8, "unterminated string literal"),  # 'it' then an unterminated 's
    ("a = 1 /* x", 6, "unterminated comment"),
    ("a >", 3, "expected a property name, a literal"),
    ("a > AND", 4, "keyword AND"),
    ("AND a = 1", 0, "keyword AND"),
    ("a = 1 AND", 9, "end of input"),
    ("a NOT = 1", 6, "expected BETWEEN or IN after NOT"),
    ("a = 1 NOT", 9, "expected BETWEEN or IN after NOT"),
    ("a IS 1", 5, "expected NULL or NOT NULL"),
    ("a IS NOT 1", 9, "expected NULL after IS NOT"),
    ("a BETWEEN 1", 11, "AND between the bounds"),
    ("a BETWEEN 1 OR 2", 12, "AND between the bounds"),
    ("a IN 'x'", 5, "'(' to open the IN list"),
    ("a IN ()", 6, "string literal in the IN list"),
    ("a IN (1, 2)", 6, "string literal in the IN list"),
    ("a IN ('x',)", 10, "string literal in the IN list"),
    ("a IN ('x' 'y')", 10, "',' or ')'"),
    ("'x' IN ('x')", 0, "before IN"),
    ("-a IN ('x')", 0, "before IN"),
    ("a = NULL", 4, "IS NULL"),
    ("NULL <> a", 0, "IS NULL"),
    ("TRUE = 1", 0, "TRUE compared with 1"),
    ("FALSE = 'x'", 0, "FALSE compared with 'x'"),
    ("a > 'x'", 4, "literal 'x' compared with '>'"),
    ("'1' < a", 0, "literal '1' compared with '<'"),
    ("a >= TRUE", 5, "literal TRUE compared"),
    ("a <= NULL", 5, "literal NULL compared"),
    ("(a = 1) > 1", 1, "a condition compared with '>'"),
    ("a > 1 > 2", 0, "a condition compared with '>'"),
    ("NOT a > 1", 0, "a condition compared with '>'"),
    ("a BETWEEN 'a' AND 'z'", 10, "compared with '>='"),
    ("a BETWEEN NULL AND 1", 10, "NULL bound of BETWEEN"),
    ("a BETWEEN 10 AND 0", 10, "out of order"),
    ("a BETWEEN 2.5 AND 2", 10, "out of order"),
    ("5", 0, "literal 5 used as a condition"),
    ("'yes'", 0, "used as a condition"),
    ("-a", 0, "a negation used as a condition"),
    ("a = 1 AND 5", 10, "right operand of AND"),
    ("'x' OR a = 1", 0, "left operand of OR"),
    ("NOT 5", 4, "operand of NOT"),
    ("+", 1, "expected a property name"),
])
def test_syntax_errors(expression: str, position: int, fragment: str) -> None:
    error = syntax_error(expression)
    assert error.position == position
    assert fragment in str(error)
    assert f"position {position}" in str(error)


def test_bounds_of_between_are_checked_only_when_both_are_literals() -> None:
    # a negated bound is not a literal to RocketMQ: no order check, the range is simply empty
    assert not matches("a BETWEEN -1 AND -5", {"a": "-3"})
    assert not matches("a BETWEEN b AND 1", {"a": "3", "b": "5"})
    # NOT BETWEEN is never checked: a < 10 OR a > 0 holds for every number
    assert matches("a NOT BETWEEN 10 AND 0", {"a": "5"})
    assert matches("a NOT BETWEEN 10 AND 0", {"a": "-5"})


def test_limits() -> None:
    longest = "a = '" + "x" * (MAX_EXPRESSION_LENGTH - 6) + "'"
    assert len(longest) == MAX_EXPRESSION_LENGTH
    assert matches(longest, {"a": "x" * (MAX_EXPRESSION_LENGTH - 6)})
    error = syntax_error(longest + " ")
    assert "too long" in str(error)

    assert matches("(" * MAX_NESTING + "a = 1" + ")" * MAX_NESTING, {"a": "1"})
    assert "nested deeper than 100" in str(syntax_error("(" * (MAX_NESTING + 1) + "a = 1" + ")" * (MAX_NESTING + 1)))
    assert matches("NOT " * (MAX_NESTING - 1) + "a", {"a": "x"})  # an odd number of NOTs over FALSE
    assert not matches("NOT " * MAX_NESTING + "a", {"a": "x"})
    assert "nested deeper than 100" in str(syntax_error("NOT " * (MAX_NESTING + 1) + "a"))
    assert "nested deeper than 100" in str(syntax_error("a" + " = a" * (MAX_NESTING + 1)))
    assert "nested deeper than 100" in str(syntax_error("(" * 4000))
    assert matches("- " * 1000 + "1 = 1")  # folded negations of a literal nest nothing
    # long flat chains are not nesting
    chain = " OR ".join(f"a = '{n}'" for n in range(300))
    assert matches(chain, {"a": "299"})
    assert not matches(chain, {"a": "300"})


def test_deep_but_allowed_expressions_compile_and_evaluate() -> None:
    depth = MAX_NESTING - 1
    nested = "".join(f"a = '{n}' OR (b = 1 AND (" for n in range(depth // 2)) + "TRUE" + "))" * (depth // 2)
    assert matches(nested, {"a": "3", "b": "1"})
    assert not matches(nested, {"a": "3"})  # b = 1 is UNKNOWN, and so is every OR above it
    assert matches(nested, {"b": "1"})
    assert not matches(nested, {"b": "2"})
    # the parser recursion through every precedence level at each of 100 parentheses stays an error, not a crash
    syntax_error("a OR b AND c = d > (" * MAX_NESTING + "e" + ")" * MAX_NESTING)


def test_non_string_input_is_a_syntax_error() -> None:
    with pytest.raises(FilterSyntaxError):
        compile_sql92(None)  # type: ignore[arg-type]
    with pytest.raises(FilterSyntaxError):
        compile_sql92(b"a = 1")  # type: ignore[arg-type]


def test_matches_never_raises_on_odd_inputs() -> None:
    compiled = compile_sql92("a > 5 AND b = 'x' OR c IN ('y')")
    assert compiled.matches({"a": 7, "b": "x"}) is False  # type: ignore[dict-item]
    assert compiled.matches(None) is False  # type: ignore[arg-type]
    assert compiled.matches({"a": None, "c": "y"}) is True  # type: ignore[dict-item]


# --- properties ------------------------------------------------------------------------------------

TOKENS = [
    "a", "b", "c", "TAGS", "now", "=", "<>", ">", ">=", "<", "<=", "(", ")", ",", "+", "-", "--", "*", "/*", "*/",
    "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "and", "not", "Is", "LIKE",
    "0", "1", "5", "-1", "2147483648", "1.5", ".5", "1e3", "0.0", "007", "99999999999999999999",
    "'x'", "'5'", "''", "'it''s'", "'open", "\n", "!", "==", "!=", ";", "\\",
]
VALUES = st.one_of(
    st.sampled_from(["", "0", "1", "5", "-3", "+7", "10", "2.5", "NaN", "-0.0", "Infinity", "true", "x", "abc",
                     "2147483648", "9223372036854775808", " 5", "0x1p3", "\u0665"]),
    st.text(max_size=8),
)
PROPERTY_MAPS = st.dictionaries(st.sampled_from(["a", "b", "c", "TAGS", "now", "d"]), VALUES, max_size=6)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_random_text_only_raises_filter_syntax_error(text: str) -> None:
    try:
        compile_sql92(text)
    except FilterSyntaxError as exc:
        assert str(exc)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14), st.lists(PROPERTY_MAPS, max_size=4))
def test_token_soup_compiles_or_fails_cleanly_and_matches_never_raises(
    tokens: list[str], property_maps: list[dict[str, str]],
) -> None:
    try:
        compiled = compile_sql92(" ".join(tokens))
    except FilterSyntaxError as exc:
        assert "position" in str(exc)
        return
    for properties in property_maps:
        assert compiled.matches(properties) in (True, False)


# A differential check of the compiled closures (with their specialisations and flattened AND/OR chains)
# against a direct, unoptimised reading of the rules on a subset: integer comparisons, IN, IS NULL, logic.

class Abort(Exception):
    pass


@dataclass(frozen=True)
class Ref:
    kind: str
    args: tuple[object, ...]


def java_int(text: str) -> int:
    body = text[1:] if text[:1] in "+-" else text
    if not body or not all("0" <= ch <= "9" for ch in body):
        raise Abort
    value = int(text)
    if not -(2 ** 31) <= value < 2 ** 31:
        raise Abort
    return value


def reference(node: Ref, props: Mapping[str, str]) -> bool | None:
    kind, args = node.kind, node.args
    if kind == "lit":
        return args[0]  # type: ignore[return-value]
    if kind == "cmp":
        name, op, number = args
        value = props.get(str(name))
        if value is None:
            return None
        parsed = java_int(value)
        assert isinstance(number, int)
        outcome = {"=": parsed == number, "<>": parsed != number, ">": parsed > number, ">=": parsed >= number,
                   "<": parsed < number, "<=": parsed <= number}[str(op)]
        return outcome
    if kind == "in":
        name, values, negated = args
        value = props.get(str(name))
        return None if value is None else (value in values) != negated  # type: ignore[operator]
    if kind == "isnull":
        name, negated = args
        return (props.get(str(name)) is None) != negated
    if kind == "not":
        inner = reference(args[0], props)  # type: ignore[arg-type]
        return None if inner is None else not inner
    left = reference(args[0], props)  # type: ignore[arg-type]
    decisive = kind == "or"
    if left is decisive:
        return decisive
    right = reference(args[1], props)  # type: ignore[arg-type]
    if right is decisive:
        return decisive
    return None if left is None or right is None else not decisive


def render(node: Ref, upper: bool) -> str:
    def kw(word: str) -> str:
        return word if upper else word.lower()

    kind, args = node.kind, node.args
    if kind == "lit":
        return kw({True: "TRUE", False: "FALSE", None: "NULL"}[args[0]])  # type: ignore[index]
    if kind == "cmp":
        return f"{args[0]} {args[1]} {args[2]}"
    if kind == "in":
        values = ", ".join(f"'{value}'" for value in sorted(args[1]))  # type: ignore[call-overload]
        return f"{args[0]} {kw('NOT IN') if args[2] else kw('IN')} ({values})"
    if kind == "isnull":
        return f"{args[0]} {kw('IS NOT NULL') if args[1] else kw('IS NULL')}"
    if kind == "not":
        return f"{kw('NOT')} ({render(args[0], upper)})"  # type: ignore[arg-type]
    return f"({render(args[0], upper)}) {kw(kind.upper())} ({render(args[1], upper)})"  # type: ignore[arg-type]


NAMES = st.sampled_from(["a", "b", "c"])
LEAVES = st.one_of(
    st.builds(lambda v: Ref("lit", (v,)), st.sampled_from([True, False, None])),
    st.builds(lambda n, op, k: Ref("cmp", (n, op, k)), NAMES, st.sampled_from(["=", "<>", ">", ">=", "<", "<="]),
              st.integers(-3, 12)),
    st.builds(lambda n, vs, neg: Ref("in", (n, frozenset(vs), neg)), NAMES,
              st.lists(st.sampled_from(["1", "5", "x", ""]), min_size=1, max_size=3), st.booleans()),
    st.builds(lambda n, neg: Ref("isnull", (n, neg)), NAMES, st.booleans()),
)
TREES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.builds(lambda c: Ref("not", (c,)), children),
        st.builds(lambda x, y: Ref("and", (x, y)), children, children),
        st.builds(lambda x, y: Ref("or", (x, y)), children, children),
    ),
    max_leaves=10,
)
SIMPLE_MAPS = st.dictionaries(NAMES, st.sampled_from(["1", "5", "-2", "12", "x", "", "+3", "007"]), max_size=3)


@settings(max_examples=500, deadline=None)
@given(TREES, st.lists(SIMPLE_MAPS, min_size=1, max_size=5), st.booleans())
def test_compiled_filter_agrees_with_a_direct_reading_of_the_rules(
    tree: Ref, property_maps: list[dict[str, str]], upper: bool,
) -> None:
    compiled = compile_sql92(render(tree, upper))
    for props in property_maps:
        try:
            expected = reference(tree, props) is True
        except Abort:
            expected = False
        assert compiled.matches(props) is expected, (compiled.expression, props)
