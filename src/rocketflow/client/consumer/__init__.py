"""Consuming: the push and pull consumers and the parts they are built of (see docs/design/consumer.md)."""
