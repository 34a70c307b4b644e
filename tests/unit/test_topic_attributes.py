"""RocketMQ 5's topic attributes and FIFO groups in the admin path: parsing, storing, 4.x shapes kept."""

from __future__ import annotations

import json

from rocketflow.broker.processors.admin.topics import parse_topic_attributes
from rocketflow.protocol.bodies import SubscriptionGroupConfig, TopicConfig


def test_attributes_are_added_changed_and_removed() -> None:
    assert parse_topic_attributes("+message.type=FIFO", {}) == {"message.type": "FIFO"}
    assert parse_topic_attributes(" +message.type=DELAY , +queue.type=SimpleCQ", {"message.type": "FIFO"}) == {
        "message.type": "DELAY", "queue.type": "SimpleCQ"}
    assert parse_topic_attributes("-message.type", {"message.type": "FIFO"}) == {}
    assert parse_topic_attributes(None, {"message.type": "NORMAL"}) == {"message.type": "NORMAL"}


def test_bad_attributes_are_refused() -> None:
    for text in ("+message.type=ORDERED", "message.type=FIFO", "+nope=1", "+message.type", "+=x"):
        assert isinstance(parse_topic_attributes(text, {}), str), text


def test_configs_keep_the_4x_shape_unless_set() -> None:
    plain = json.loads(TopicConfig("t").encode())
    assert "attributes" not in plain
    typed = TopicConfig.decode(TopicConfig("t", attributes={"message.type": "FIFO"}).encode())
    assert typed.attributes == {"message.type": "FIFO"}
    assert "consumeMessageOrderly" not in json.loads(SubscriptionGroupConfig("g").encode())
    fifo = SubscriptionGroupConfig.decode(SubscriptionGroupConfig("g", consume_message_orderly=True).encode())
    assert fifo.consume_message_orderly
