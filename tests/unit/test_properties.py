"""The message properties string."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketflow.protocol.properties import (
    InvalidPropertyError,
    decode_properties,
    decode_properties_bytes,
    encode_properties,
    encode_properties_bytes,
)


def java_string_to_properties(text: str) -> dict[str, str]:
    """An index-by-index port of RocketMQ's parser, to compare ours against."""
    result: dict[str, str] = {}
    index = 0
    length = len(text)
    while index < length:
        new_index = text.find("\x02", index)
        if new_index < 0:
            new_index = length
        if new_index - index >= 3:
            separator = text.find("\x01", index)
            if index < separator < new_index - 1:
                result[text[index:separator]] = text[separator + 1:new_index]
        index = new_index + 1
    return result


keys = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=12
)
values = st.text(
    st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)), min_size=1, max_size=20
)
property_maps = st.dictionaries(keys, values, max_size=8)


def test_encode_known_layout() -> None:
    text = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "WAIT": "true"})
    assert text == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02WAIT\x01true"
    assert not text.endswith("\x02")


def test_encode_empty_and_none_values() -> None:
    assert encode_properties({}) == ""
    assert encode_properties({"A": None, "B": "1", "C": None}) == "B\x011"
    assert encode_properties({"A": None}) == ""


def test_encode_keeps_empty_values_like_java_and_decode_drops_them() -> None:
    text = encode_properties({"A": "", "B": "x"})
    assert text == "A\x01\x02B\x01x"
    assert decode_properties(text) == {"B": "x"}


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"K\x01Y": "v"}, "key"),
        ({"K\x02": "v"}, "key"),
        ({"K": "v\x02w"}, "value of property 'K'"),
    ],
)
def test_encode_rejects_separators(props: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidPropertyError, match=fragment):
        encode_properties(props)


def test_value_may_contain_name_value_separator() -> None:
    text = encode_properties({"K": "a\x01b"})
    assert decode_properties(text) == {"K": "a\x01b"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("A\x01B", {"A": "B"}),
        ("A\x01B\x02", {"A": "B"}),
        ("\x02A\x01B", {"A": "B"}),
        ("A\x01B\x02\x02C\x01D", {"A": "B", "C": "D"}),
        ("\x01B", {}),  # empty key
        ("AB\x01", {}),  # empty value
        ("AB", {}),  # no separator
        ("A\x01", {}),  # shorter than 3
        ("A\x01B\x01C", {"A": "B\x01C"}),
        ("A\x011\x02A\x012", {"A": "2"}),  # last one wins
        ("\x02\x02\x02", {}),
    ],
)
def test_decode_rules(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected
    assert java_string_to_properties(text) == expected


@given(property_maps)
def test_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props
    assert decode_properties_bytes(encode_properties_bytes(props)) == props


@settings(max_examples=500)
@given(st.text(st.sampled_from("ab\x01\x02é"), max_size=30))
def test_decode_matches_java_algorithm(text: str) -> None:
    assert decode_properties(text) == java_string_to_properties(text)


def test_bytes_helpers() -> None:
    assert encode_properties_bytes({"K": "é"}) == "K\x01é".encode()
    assert decode_properties_bytes(b"") == {}
    assert decode_properties_bytes(memoryview(b"K\x01v")) == {"K": "v"}
    with pytest.raises(InvalidPropertyError, match="UTF-8"):
        decode_properties_bytes(b"K\x01\xff")
    with pytest.raises(InvalidPropertyError, match="UTF-8"):
        encode_properties_bytes({"K": "\ud800"})
