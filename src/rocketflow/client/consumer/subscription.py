"""What a consumer subscribes to: `MessageSelector` (by tag or by an SQL92 expression over properties) and
the `SubscriptionData` both consumers build from it (the table of subscriptions is the rebalance's)."""

from __future__ import annotations

from dataclasses import dataclass

from rocketflow.client.errors import MQClientError
from rocketflow.filter import EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG, FilterSyntaxError, compile_sql92
from rocketflow.protocol.bodies import SubscriptionData
from rocketflow.protocol.names import InvalidNameError, validate_topic
from rocketflow.protocol.tags import SubscriptionParseError, parse_subscription


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """RocketMQ's ``MessageSelector``: ``by_tag("TagA || TagB")`` or ``by_sql("amount > 100 AND region = 'eu'")``.

    SQL92 selection runs on the broker, which must have ``enablePropertyFilter=true``; the expression
    sees the message's properties (user properties and ones like ``TAGS`` and ``KEYS``).
    """

    expression_type: str
    expression: str

    @classmethod
    def by_tag(cls, expression: str = "*") -> MessageSelector:
        return cls(EXPRESSION_TYPE_TAG, expression)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        return cls(EXPRESSION_TYPE_SQL92, expression)


def subscription_data(topic: str, selector: str | MessageSelector) -> SubscriptionData:
    """The subscription of ``topic`` for a tag expression or a selector; `MQClientError` if it does not parse."""
    if isinstance(selector, str):
        selector = MessageSelector.by_tag(selector)
    elif not isinstance(selector, MessageSelector):
        raise MQClientError(f"subscribe to {topic!r}: expected a tag expression or a MessageSelector, "
                            f"got {type(selector).__name__}")
    if selector.expression_type == EXPRESSION_TYPE_SQL92:
        try:
            compile_sql92(selector.expression)
        except FilterSyntaxError as exc:
            raise MQClientError(f"subscribe to {topic!r}: bad SQL92 expression: {exc}") from None
        return SubscriptionData(topic, selector.expression, expression_type=EXPRESSION_TYPE_SQL92)
    if selector.expression_type != EXPRESSION_TYPE_TAG:
        raise MQClientError(f"subscribe to {topic!r}: unknown expression type {selector.expression_type!r} "
                            "(TAG or SQL92)")
    try:
        parsed = parse_subscription(selector.expression)
    except SubscriptionParseError as exc:
        raise MQClientError(f"subscribe to {topic!r}: {exc}") from None
    return SubscriptionData(topic, parsed.sub_string, set(parsed.tags_set), set(parsed.code_set))


def checked_subscription(topic: str, selector: str | MessageSelector) -> SubscriptionData:
    """The subscription ``subscribe(topic, selector)`` asks for; `MQClientError` for a bad topic name or selector."""
    try:
        validate_topic(topic)
    except InvalidNameError as exc:
        raise MQClientError(f"subscribe: {exc}") from None
    return subscription_data(topic, selector)


__all__ = ["MessageSelector", "checked_subscription", "subscription_data"]
