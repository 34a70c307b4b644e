"""Names, permissions and system topics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketflow.protocol import names
from rocketflow.protocol.names import (
    DEFAULT_TOPIC,
    MAX_MESSAGE_SIZE,
    SCHEDULE_TOPIC,
    InvalidNameError,
    PermName,
    dlq_topic,
    group_of_dlq_topic,
    group_of_retry_topic,
    is_dlq_topic,
    is_inherited,
    is_readable,
    is_retry_topic,
    is_system_topic,
    is_writeable,
    perm_to_string,
    retry_topic,
    validate_group,
    validate_topic,
)

legal_chars = st.sampled_from("%|abcXYZ019_-")


def test_perm_values() -> None:
    assert PermName.PRIORITY == 8
    assert PermName.READ == 4
    assert PermName.WRITE == 2
    assert PermName.INHERIT == 1
    assert PermName.READ | PermName.WRITE == 6


@pytest.mark.parametrize(
    ("perm", "text", "readable", "writeable", "inherited"),
    [
        (0, "---", False, False, False),
        (6, "RW-", True, True, False),
        (7, "RWX", True, True, True),
        (4, "R--", True, False, False),
        (2, "-W-", False, True, False),
        (1, "--X", False, False, True),
        (8 | 4, "R--", True, False, False),
    ],
)
def test_perm_helpers(perm: int, text: str, readable: bool, writeable: bool, inherited: bool) -> None:
    assert perm_to_string(perm) == text
    assert is_readable(perm) is readable
    assert is_writeable(perm) is writeable
    assert is_inherited(perm) is inherited


def test_constants() -> None:
    assert DEFAULT_TOPIC == "TBW102"
    assert SCHEDULE_TOPIC == "SCHEDULE_TOPIC_XXXX"
    assert MAX_MESSAGE_SIZE == 4 * 1024 * 1024
    assert names.RETRY_GROUP_TOPIC_PREFIX == "%RETRY%"
    assert names.DLQ_GROUP_TOPIC_PREFIX == "%DLQ%"


def test_retry_and_dlq_topics() -> None:
    assert retry_topic("g1") == "%RETRY%g1"
    assert dlq_topic("g1") == "%DLQ%g1"
    assert is_retry_topic("%RETRY%g1")
    assert not is_retry_topic("%DLQ%g1")
    assert is_dlq_topic("%DLQ%g1")
    assert not is_dlq_topic("g1")
    assert group_of_retry_topic("%RETRY%g1") == "g1"
    assert group_of_dlq_topic("%DLQ%g1") == "g1"
    with pytest.raises(InvalidNameError, match="not a retry topic"):
        group_of_retry_topic("TopicTest")
    with pytest.raises(InvalidNameError, match="not a dead-letter topic"):
        group_of_dlq_topic("%RETRY%g1")


@given(st.text(legal_chars, min_size=1, max_size=50))
def test_retry_topic_round_trip(group: str) -> None:
    assert group_of_retry_topic(retry_topic(group)) == group
    assert group_of_dlq_topic(dlq_topic(group)) == group


@pytest.mark.parametrize(
    "topic",
    [
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "rmq_sys_anything",
    ],
)
def test_system_topics(topic: str) -> None:
    assert is_system_topic(topic)


def test_cluster_and_broker_names_are_system_topics() -> None:
    assert not is_system_topic("DefaultCluster")
    assert is_system_topic("DefaultCluster", cluster="DefaultCluster")
    assert is_system_topic("broker-a", cluster="DefaultCluster", broker="broker-a")
    assert not is_system_topic("TopicTest", cluster="DefaultCluster", broker="broker-a")
    assert not is_system_topic("RMQ_SYS_other")  # the prefix is lower case


@pytest.mark.parametrize("name", ["TopicTest", "a", "%RETRY%g1", "x|y", "A-b_c", "1" * 127])
def test_valid_topics(name: str) -> None:
    validate_topic(name)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "blank"),
        ("   ", "blank"),
        ("a" * 128, "128 characters long; at most 127"),
        ("topic name", "illegal characters ' '"),
        ("tópic", "illegal characters 'ó'"),
        ("a.b/c", "illegal characters './'"),
        ("a\n", "illegal characters"),
    ],
)
def test_invalid_topics(name: str, fragment: str) -> None:
    with pytest.raises(InvalidNameError, match=fragment) as info:
        validate_topic(name)
    assert "topic" in str(info.value)


def test_group_length_limit() -> None:
    validate_group("g" * 255)
    with pytest.raises(InvalidNameError, match="group name is 256 characters long; at most 255"):
        validate_group("g" * 256)
    with pytest.raises(InvalidNameError, match="group name is blank"):
        validate_group("")
    with pytest.raises(InvalidNameError, match="must be a string"):
        validate_group(None)  # type: ignore[arg-type]


@given(st.text(max_size=140))
def test_validate_topic_agrees_with_the_charset(name: str) -> None:
    legal = bool(name) and len(name) <= 127 and all(char in "%|_-" or (char.isascii() and char.isalnum())
                                                    for char in name)
    try:
        validate_topic(name)
    except InvalidNameError:
        assert not legal
    else:
        assert legal
