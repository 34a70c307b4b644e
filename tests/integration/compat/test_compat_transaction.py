"""`TransactionMQProducer` used as samples/producer.py of Apache's ``rocketmq-client-python`` 2.0.x uses
it, against a dev cluster whose broker checks pending transactions every 200 ms after 1 s (conftest).

A message is visible to consumers once its transaction commits, never when it rolls back; a local
transaction left UNKNOWN (returned, raised, or a value that is not a TransactionStatus) is settled by
the check callback.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from compat_helpers import has_route, unique, wait_until

from rocketflow.client.admin import Admin
from rocketflow.compat.rocketmq.client import (
    Message,
    ReceivedMessage,
    SendStatus,
    TransactionMQProducer,
    TransactionStatus,
)
from rocketflow.compat.rocketmq.exceptions import RocketMQException


def visible_bodies(admin: Admin, topic: str, wait: float) -> list[bytes]:
    """What consumers of ``topic`` can read after ``wait`` seconds (sorted)."""
    deadline = time.monotonic() + wait
    while not has_route(admin, topic):
        if time.monotonic() > deadline:
            return []
        time.sleep(0.05)
    bodies: list[bytes] = []
    with admin.open_tail(topic, from_now=False) as tail:
        while True:
            bodies.extend(msg.body for msg in tail.poll(0.2))
            if time.monotonic() > deadline:
                return sorted(bodies)


def test_sample_transaction_unknown_then_checked(namesrv: str, admin: Admin,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """samples/producer.py: the local transaction answers UNKNOWN, the check callback COMMIT."""
    topic = unique("TopicTest")
    checked = threading.Event()

    def check_callback(msg: ReceivedMessage) -> TransactionStatus:
        print("check: " + msg.body.decode("utf-8"))
        checked.set()
        return TransactionStatus.COMMIT

    def local_execute(msg: ReceivedMessage, user_args: Any) -> TransactionStatus:
        print("local:   " + msg.body.decode("utf-8"))
        return TransactionStatus.UNKNOWN

    producer = TransactionMQProducer("test", check_callback)
    producer.set_name_server_address(namesrv)
    producer.start()
    try:
        msg = Message(topic)
        msg.set_keys("XXX")
        msg.set_tags("XXX")
        msg.set_property("property", "test")
        msg.set_body("message body")
        ret = producer.send_message_in_transaction(msg, local_execute, None)
        print("send message status: " + str(ret.status) + " msgId: " + ret.msg_id)
        assert visible_bodies(admin, topic, 0.5) == []   # a half message: not visible yet
        assert checked.wait(15)
        wait_until(lambda: visible_bodies(admin, topic, 0.3) == [b"message body"], 15, "the committed message")
    finally:
        producer.shutdown()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "local:   message body"
    assert re.fullmatch(r"send message status: 0 msgId: [0-9A-F]{32}", lines[1])
    assert "check: message body" in lines[2:]


def test_commit_rollback_and_user_args(namesrv: str, admin: Admin) -> None:
    topic = unique("Tx")
    calls: list[tuple[bytes, Any, str]] = []
    checks: list[bytes] = []

    def local_execute(msg: ReceivedMessage, user_args: Any) -> TransactionStatus:
        calls.append((msg.body, user_args, msg.topic))
        assert msg.id and msg.keys == b"tx-key" and msg.queue_offset == 0
        return TransactionStatus.COMMIT if msg.body == b"commit" else TransactionStatus.ROLLBACK

    producer = TransactionMQProducer("pg-tx", checks.append)
    producer.set_name_server_address(namesrv)
    producer.start()
    try:
        results = []
        for body, user_args in ((b"commit", {"order": 1}), (b"rollback", None)):
            msg = Message(topic)
            msg.set_keys("tx-key")
            msg.set_body(body)
            results.append(producer.send_message_in_transaction(msg, local_execute, user_args))
        # the producer is a producer too
        plain = Message(topic)
        plain.set_body("plain")
        assert producer.send_sync(plain).status is SendStatus.OK
        assert visible_bodies(admin, topic, 2.5) == [b"commit", b"plain"]
    finally:
        producer.shutdown()
    assert [result.status for result in results] == [SendStatus.OK, SendStatus.OK]
    assert calls == [(b"commit", {"order": 1}, topic), (b"rollback", None, topic)]
    assert checks == []  # both were settled at once: the broker never asked


@pytest.mark.parametrize("outcome", ["raise", "not a status"])
def test_unsettled_local_transaction_is_checked(namesrv: str, admin: Admin, outcome: str) -> None:
    topic = unique("Tx")

    def local_execute(msg: ReceivedMessage, user_args: Any) -> Any:
        if outcome == "raise":
            raise RuntimeError("the database is down")
        return "COMMIT"

    def check(msg: ReceivedMessage) -> TransactionStatus:
        return TransactionStatus.ROLLBACK if msg.body == b"drop" else TransactionStatus.COMMIT

    producer = TransactionMQProducer("pg-tx-unsettled", check)
    producer.set_name_server_address(namesrv)
    producer.start()
    try:
        for body in ("keep", "drop"):
            msg = Message(topic)
            msg.set_body(body)
            assert producer.send_message_in_transaction(msg, local_execute).status is SendStatus.OK
        wait_until(lambda: visible_bodies(admin, topic, 0.3) == [b"keep"], 15, "the check to commit 'keep'")
        assert visible_bodies(admin, topic, 1.5) == [b"keep"]
    finally:
        producer.shutdown()


def test_send_failure_raises_the_base_exception(namesrv: str) -> None:
    producer = TransactionMQProducer("pg-tx-fail", lambda msg: TransactionStatus.COMMIT)
    msg = Message(unique("Tx"))
    msg.set_body("x")
    with pytest.raises(RocketMQException, match="not started"):
        producer.send_message_in_transaction(msg, lambda msg, args: TransactionStatus.COMMIT)
    producer.set_name_server_address(namesrv)
    producer.start()
    try:
        delayed = Message(unique("Tx"))
        delayed.set_body("x")
        delayed.set_delay_time_level(2)
        with pytest.raises(RocketMQException, match="delay"):
            producer.send_message_in_transaction(delayed, lambda msg, args: TransactionStatus.COMMIT)
    finally:
        producer.shutdown()
    with pytest.raises(TypeError):
        TransactionMQProducer("pg-tx", None)  # type: ignore[arg-type]
