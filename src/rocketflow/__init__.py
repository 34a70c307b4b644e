"""rocketflow: RocketMQ's messaging model, wire-compatible, in Python."""

from __future__ import annotations

__version__ = "0.1.0"

from rocketflow.client.producer import Producer
from rocketflow.protocol.message import Message, MessageExt, MessageQueue

__all__ = ["Message", "MessageExt", "MessageQueue", "Producer", "__version__"]
