"""Push consumers resume within seconds of a broker restart, without flooding the log.

A restarted broker has lost the consumers' subscriptions (they live in memory, refreshed by heartbeats),
so every pull is answered SUBSCRIPTION_NOT_EXIST until the client's next heartbeat: with the periodic
round alone that is up to 30 s. The client heartbeats at once when it reconnects to a broker and when a
pull is answered SUBSCRIPTION_NOT_EXIST.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_helpers import ServerProcess, broker_args, wait_until

from rocketflow import Message, Producer, PushConsumer
from rocketflow.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
)
from rocketflow.client.admin import Admin
from rocketflow.protocol.message import MessageExt

pytestmark = pytest.mark.reliability

TOPIC = "RestartResumeT"
QUEUES = 4
#: Restart to the first consumed message sent after it: the pull's retry delay after a failure (3 s, as
#: RocketMQ's push consumer) plus a heartbeat; 23-27 s before the client heartbeat on demand.
RESUME_BOUND_S = 8.0


def _free_port_pair() -> int:
    """A port whose successor is free too (the broker's HA service takes listen port + 1)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise AssertionError("no free port pair")


class _Sent:
    """A producer thread sending one message every 20 ms, keys numbered."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.sent_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            key = f"k{index}"
            try:
                self.producer.send(Message(TOPIC, key.encode(), keys=key), sharding_key=f"s{index % 8}")
            except Exception:  # the broker is down: try again
                time.sleep(0.05)
                continue
            self.sent_at[key] = time.monotonic()
            index += 1
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


class _Received:
    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self._lock = threading.Lock()

    def record(self, msgs: list[MessageExt]) -> None:
        now = time.monotonic()
        with self._lock:
            for msg in msgs:
                self.at.setdefault(msg.keys or "", now)

    def first_after(self, moment: float) -> float | None:
        with self._lock:
            later = [at for at in self.at.values() if at >= moment]
        return min(later) if later else None


class _WarningCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("rocketflow.client"):
            self.messages.append(record.getMessage())


@pytest.fixture
def warnings_logged() -> Iterator[_WarningCounter]:
    handler = _WarningCounter()
    root = logging.getLogger("rocketflow")
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
def test_push_consumers_resume_within_seconds_of_a_broker_restart(tmp_path: Path, orderly: bool,
                                                                  warnings_logged: _WarningCounter) -> None:
    namesrv = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    port = _free_port_pair()
    args = broker_args(tmp_path / "store", namesrv=namesrv.address)
    args[args.index("--port") + 1] = str(port)
    broker = ServerProcess(args, tmp_path / "broker.log")
    producer = consumer = sender = None
    try:
        with Admin(namesrv.address) as admin:
            admin.create_topic(TOPIC, broker_addr=broker.address, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        producer = Producer("restart_pg", namesrv=namesrv.address, instance_name="restart-producer")
        producer.start()
        received = _Received()
        consumer = PushConsumer("restart_cg", namesrv=namesrv.address, instance_name="restart-consumer",
                                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(TOPIC, "*")
        if orderly:
            consumer.register_orderly_listener(
                lambda msgs, _context: received.record(msgs) or ConsumeOrderlyStatus.SUCCESS)
        else:
            consumer.register_concurrent_listener(
                lambda msgs, _context: received.record(msgs) or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        consumer.start()
        sender = _Sent(producer)
        wait_until(lambda: len(received.at) >= 20, 30, what="consumption before the restarts")
        resume_times: list[float] = []
        for stop in (ServerProcess.kill, ServerProcess.stop):  # SIGKILL, then SIGTERM
            stop(broker)
            time.sleep(0.5)
            broker = ServerProcess(args, tmp_path / "broker.log")
            restarted = time.monotonic()
            wait_until(lambda moment=restarted: received.first_after(moment) is not None, 40,
                       what="a message consumed after the restart")
            first = received.first_after(restarted)
            assert first is not None
            resume_times.append(first - restarted)
        sender.stop()
        wait_until(lambda: set(sender.sent_at) <= set(received.at), 30, what="every acked message consumed")
    finally:
        if sender is not None:
            sender.stop()
        if consumer is not None:
            consumer.shutdown()
        if producer is not None:
            producer.shutdown()
        broker.stop()
        namesrv.stop()
    print(f"restart -> first consumed: {[f'{seconds:.2f}s' for seconds in resume_times]}")
    assert max(resume_times) < RESUME_BOUND_S, resume_times
    failures = [message for message in warnings_logged.messages if "SUBSCRIPTION_NOT_EXIST" in message]
    # a repeated failure is logged once per interval with a count, not once per failed pull
    assert len(failures) <= 2 * 2, failures
