"""Helpers every test folder shares (tests/ is on the import path of every test module)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rocketflow.client import ClientInstance
from rocketflow.protocol.bodies import TopicConfig


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition", *,
               interval: float = 0.05) -> None:
    """Return once ``predicate()`` is true; `AssertionError` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout:g}s")
        time.sleep(interval)


def client_threads() -> list[threading.Thread]:
    """The threads of rocketflow client instances (their loops and consume pools) now running."""
    return [thread for thread in threading.enumerate() if thread.name.startswith("rocketflow-client")]


def create_topic(instance: ClientInstance, broker_addr: str, topic: str, queues: int) -> None:
    """Create ``topic`` on one broker and wait until the name server routes it there."""
    instance.run(instance.api.create_topic(broker_addr, TopicConfig(topic, queues, queues)))

    def routed() -> bool:
        route = instance.run(instance.api.get_topic_route(topic))
        return route is not None and any(broker_addr in broker.broker_addrs.values() for broker in route.broker_datas)

    wait_until(routed, what=f"the route of {topic}")


__all__ = ["client_threads", "create_topic", "wait_until"]
