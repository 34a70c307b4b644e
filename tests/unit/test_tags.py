"""Tag hash codes and subscriptions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketflow.protocol.tags import (
    SUB_ALL,
    Subscription,
    SubscriptionParseError,
    java_string_hash,
    parse_subscription,
    tags_code,
)


def reference_hash(text: str) -> int:
    """Closed form of Java's hashCode: sum of unit * 31^(n-1-i) over UTF-16 units, as int32."""
    raw = text.encode("utf-16-le", "surrogatepass")
    units = [int.from_bytes(raw[i:i + 2], "little") for i in range(0, len(raw), 2)]
    total = sum(unit * pow(31, len(units) - 1 - i, 1 << 32) for i, unit in enumerate(units)) % (1 << 32)
    return total - (1 << 32) if total >= 1 << 31 else total


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),
        ("TagB", 2598920),
        ("*", 42),
        ("", 0),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -2147483648),  # wraps exactly to Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair counts as two units
        ("é", 0xE9),
    ],
)
def test_known_hashes(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@given(st.text(max_size=60))
def test_hash_matches_closed_form(text: str) -> None:
    value = java_string_hash(text)
    assert value == reference_hash(text)
    assert -(1 << 31) <= value < 1 << 31


def test_tags_code() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("TagA||TagB") == java_string_hash("TagA||TagB")


@pytest.mark.parametrize("expression", [None, "", "   ", "*", " * "])
def test_sub_all(expression: str | None) -> None:
    subscription = parse_subscription(expression)
    assert subscription.sub_string == SUB_ALL
    assert subscription.is_sub_all
    assert subscription.tags_set == []
    assert subscription.code_set == []
    assert subscription.matches_tags_code(12345)
    assert subscription.matches_tags(None)
    assert subscription.matches_tags("anything")


def test_parse_tags() -> None:
    subscription = parse_subscription(" TagA ||TagB|| TagA ||  ")
    assert subscription.sub_string == " TagA ||TagB|| TagA ||  "
    assert not subscription.is_sub_all
    assert subscription.tags_set == ["TagA", "TagB"]
    assert subscription.code_set == [2598919, 2598920]


def test_single_tag_with_inner_spaces_is_kept() -> None:
    assert parse_subscription("Tag A").tags_set == ["Tag A"]


def test_colliding_tags_share_a_code() -> None:
    subscription = parse_subscription("Aa || BB")
    assert subscription.tags_set == ["Aa", "BB"]
    assert subscription.code_set == [2112]


@pytest.mark.parametrize("expression", ["||", " || || "])
def test_expression_without_tags_is_an_error(expression: str) -> None:
    with pytest.raises(SubscriptionParseError, match="names no tag"):
        parse_subscription(expression)


def test_non_string_expression_is_an_error() -> None:
    with pytest.raises(SubscriptionParseError, match="must be a string"):
        parse_subscription(5)  # type: ignore[arg-type]


def test_broker_side_matching_by_code() -> None:
    subscription = parse_subscription("TagA || TagB")
    assert subscription.matches_tags_code(2598919)
    assert subscription.matches_tags_code(2598920)
    assert not subscription.matches_tags_code(42)
    assert not subscription.matches_tags_code(0)
    # The store keeps codes as i64; the broker compares them cast to int.
    assert subscription.matches_tags_code(2598919 + (1 << 32))


def test_client_side_matching_by_string() -> None:
    subscription = parse_subscription("TagA || TagB")
    assert subscription.matches_tags("TagA")
    assert subscription.matches_tags("TagB")
    assert not subscription.matches_tags(None)
    assert not subscription.matches_tags("TagC")
    # Same hash, different string: the broker lets it through, the client drops it.
    colliding = parse_subscription("Aa")
    assert colliding.matches_tags_code(java_string_hash("BB"))
    assert not colliding.matches_tags("BB")


def test_subscription_equality_ignores_lookup_caches() -> None:
    assert parse_subscription("TagA") == Subscription("TagA", ["TagA"], [2598919])
    assert parse_subscription("*") == Subscription(SUB_ALL)


tag_lists = st.lists(
    st.text(st.characters(blacklist_characters="|"), min_size=1, max_size=10), min_size=1, max_size=6
)


@given(tag_lists)
def test_parse_subscription_properties(tags: list[str]) -> None:
    expression = " || ".join(tags)
    stripped = [tag.strip() for tag in tags if tag.strip()]
    if expression.strip() in ("", "*"):
        assert parse_subscription(expression).is_sub_all
        return
    if not stripped:
        with pytest.raises(SubscriptionParseError):
            parse_subscription(expression)
        return
    subscription = parse_subscription(expression)
    assert subscription.tags_set == list(dict.fromkeys(stripped))
    for tag in stripped:
        assert subscription.matches_tags(tag)
        assert subscription.matches_tags_code(tags_code(tag))


def test_parsing_is_linear_in_the_number_of_tags() -> None:
    """A subscription of 64,000 tags took 15 s to parse (list membership per tag): now a few tens of ms."""
    import time

    def parse_time(count: int) -> float:
        expression = " || ".join(f"tag{index}" for index in range(count))
        started = time.perf_counter()
        parsed = parse_subscription(expression)
        elapsed = time.perf_counter() - started
        assert len(parsed.tags_set) == count and len(parsed.code_set) == count
        return elapsed

    parse_time(1000)  # warm up
    small, large = min(parse_time(4000) for _ in range(3)), min(parse_time(64_000) for _ in range(3))
    assert large < 0.5 and large < 16 * small * 3, (small, large)


def test_bounds_of_a_subscription_are_refused_clearly() -> None:
    expression = " || ".join(f"t{index}" for index in range(11))
    assert len(parse_subscription(expression, max_tags=11).tags_set) == 11
    assert len(parse_subscription(expression + " || t0 || t1", max_tags=11).tags_set) == 11  # repeats count once
    with pytest.raises(SubscriptionParseError, match="names 11 tags, more than 10"):
        parse_subscription(expression, max_tags=10)
    with pytest.raises(SubscriptionParseError, match=r"is \d+ characters long, more than 20"):
        parse_subscription(expression, max_length=20)
    assert parse_subscription("*", max_tags=0, max_length=1).is_sub_all
