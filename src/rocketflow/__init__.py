"""rocketflow: RocketMQ's messaging model, wire-compatible, in Python."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
