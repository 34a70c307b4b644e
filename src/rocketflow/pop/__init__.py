"""Consumption by invisibility (RocketMQ 5's "pop"): the state of what each group has out, persisted
on its own (see `rocketflow.pop.state` and docs/design/pop.md)."""

from rocketflow.pop.state import Handle, HandleError, Inflight, PopState, QueueState

__all__ = ["Handle", "HandleError", "Inflight", "PopState", "QueueState"]
