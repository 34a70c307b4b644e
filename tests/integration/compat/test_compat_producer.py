"""Producers of `rocketflow.compat.rocketmq.client` used as the README and samples of Apache's
``rocketmq-client-python`` use them (2.0.x, and the 0.4.x spellings), against a dev cluster.

What a snippet prints is checked, and what it stored is read back with rocketflow's admin API.
"""

from __future__ import annotations

import ctypes
import http.server
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from compat_helpers import stored_messages, unique, wait_until

from rocketflow.client.admin import Admin
from rocketflow.compat.rocketmq.client import (
    Message,
    Producer,
    ReceivedMessage,
    SendResult,
    SendStatus,
    cxx_string_hash,
)
from rocketflow.compat.rocketmq.exceptions import (
    ProducerSendAsyncFailed,
    ProducerSendOrderlyFailed,
    ProducerSendSyncFailed,
    ProducerStartFailed,
    RocketMQException,
)

#: an id as the rocketflow producer makes them (UNIQ_KEY: 32 hex digits)
MSG_ID = re.compile(r"[0-9A-F]{32}")


def test_readme_producer(namesrv: str, admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    """2.0.x README: create, set the name server, start, send one message, print the result, shut down."""
    topic = unique("YourTopic")
    producer = Producer("PID-XXX")
    producer.set_name_server_address(namesrv)
    producer.start()

    msg = Message(topic)
    msg.set_keys("XXX")
    msg.set_tags("XXX")
    msg.set_body("XXXX")
    ret = producer.send_sync(msg)
    print(ret.status, ret.msg_id, ret.offset)
    producer.shutdown()

    status, msg_id, offset = capsys.readouterr().out.split()
    assert status == "0"  # an IntEnum prints as its value on Python 3.11+, as SendStatus.OK does there
    assert MSG_ID.fullmatch(msg_id) and offset == "0"
    assert isinstance(ret, SendResult) and ret.status is SendStatus.OK
    (stored,) = stored_messages(admin, topic, 1)
    assert (stored.body, stored.keys, stored.tags, stored.uniq_key) == (b"XXXX", "XXX", "XXX", msg_id)


def test_readme_producer_0_4_spellings(namesrv: str, admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    """0.4.x README: ``set_namesrv_addr`` and credentials that the broker (no ACL) does not ask for."""
    topic = unique("YourTopic")
    producer = Producer("PID-XXX")
    producer.set_namesrv_addr(namesrv)
    producer.set_session_credentials("XXX", "XXXX", "ALIYUN")
    producer.start()
    msg = Message(topic)
    msg.set_keys("XXX")
    msg.set_tags("XXX")
    msg.set_body("XXXX")
    ret = producer.send_sync(msg)
    print(ret.status, ret.msg_id, ret.offset)
    producer.shutdown()
    assert capsys.readouterr().out.split()[0] == "0"
    assert stored_messages(admin, topic, 1)[0].body == b"XXXX"


def create_message(topic: str) -> Message:
    """The samples' message: keys, tags, a user property and a body."""
    msg = Message(topic)
    msg.set_keys("XXX")
    msg.set_tags("XXX")
    msg.set_property("property", "test")
    msg.set_body("message body")
    return msg


def test_sample_send_message_sync(namesrv: str, admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    """samples/producer.py ``send_message_sync(count)``."""
    topic = unique("TopicTest")
    producer = Producer("test")
    producer.set_name_server_address(namesrv)
    producer.start()
    for _ in range(5):
        ret = producer.send_sync(create_message(topic))
        print("send message status: " + str(ret.status) + " msgId: " + ret.msg_id)
    print("send sync message done")
    producer.shutdown()

    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "send sync message done"
    ids = [re.fullmatch(r"send message status: 0 msgId: ([0-9A-F]{32})", line) for line in lines[:-1]]
    assert len(ids) == 5 and all(ids)
    stored = stored_messages(admin, topic, 5)
    assert {msg.uniq_key for msg in stored} == {match.group(1) for match in ids if match}
    assert {(msg.body, msg.get_property("property")) for msg in stored} == {(b"message body", "test")}


def test_sample_orderly_with_sharding_key(namesrv: str, admin: Admin) -> None:
    """samples/producer.py ``send_orderly_with_sharding_key``: ``Producer(gid, True)``, one key, one queue,
    the queue the C++ client picks for that key (``std::hash(key) % queues``), the key recorded."""
    topic = unique("TopicTest")
    admin.create_topic(topic, read_queue_nums=8, write_queue_nums=8)
    producer = Producer("test", True)
    producer.set_name_server_address(namesrv)
    producer.start()
    offsets = [producer.send_orderly_with_sharding_key(create_message(topic), "orderId").offset for _ in range(4)]
    other = producer.send_orderly_with_sharding_key(create_message(topic), "order-1")
    producer.shutdown()

    assert offsets == [0, 1, 2, 3] and other.status is SendStatus.OK
    stored = stored_messages(admin, topic, 5)
    by_key = {msg.get_property("__SHARDINGKEY"): msg.queue_id for msg in stored}
    assert by_key == {"orderId": cxx_string_hash(b"orderId") % 8, "order-1": cxx_string_hash(b"order-1") % 8}
    assert [msg.queue_offset for msg in stored if msg.get_property("__SHARDINGKEY") == "orderId"] == [0, 1, 2, 3]


def test_send_oneway_and_setters(namesrv: str, admin: Admin) -> None:
    topic = unique("Oneway")
    producer = Producer("pg-oneway", timeout=5000, compress_level=9, max_message_size=1 << 20)
    producer.set_name_server_address(namesrv)
    producer.set_group("pg-oneway-2")
    producer.start()
    msg = Message(topic)
    msg.set_body(b"\x00binary\x00body" + bytes(range(256)) * 40)   # compressed (over 4 KiB), NULs kept
    msg.set_property(b"bytes-key", b"bytes-value")
    assert producer.send_oneway(msg) is None
    producer.shutdown()
    (stored,) = stored_messages(admin, topic, 1)
    assert stored.body == b"\x00binary\x00body" + bytes(range(256)) * 40
    assert stored.get_property("bytes-key") == "bytes-value"
    assert stored.get_property("PGROUP") is None  # not a transaction


def test_send_failures_raise_the_original_classes(namesrv: str) -> None:
    producer = Producer("pg-errors")
    producer.set_name_server_address(namesrv)
    msg = Message(unique("Errors"))
    msg.set_body("x")
    with pytest.raises(ProducerSendSyncFailed, match="not started"):
        producer.send_sync(msg)
    producer.start()
    producer.start()  # a second start does nothing, as in the C++ client
    with pytest.raises(ProducerSendSyncFailed, match="empty"):
        producer.send_sync(Message(unique("Errors")))
    big = Message(unique("Errors"))
    big.set_body(b"x" * (128 * 1024 + 1))  # the C++ client's default maximum is 128 KiB
    with pytest.raises(ProducerSendSyncFailed, match="maximum"):
        producer.send_sync(big)
    producer.set_max_message_size(256 * 1024)
    assert producer.send_sync(big).status is SendStatus.OK
    producer.shutdown()
    producer.shutdown()
    with pytest.raises(ProducerSendSyncFailed, match="shut down"):
        producer.send_sync(msg)


def test_start_failures(namesrv: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    with pytest.raises(ProducerStartFailed, match="name server"):
        Producer("pg-no-namesrv").start()
    producer = Producer("DEFAULT_PRODUCER")
    producer.set_name_server_address(namesrv)
    with pytest.raises(ProducerStartFailed, match="DEFAULT_PRODUCER"):
        producer.start()


def test_0_4_positional_settings(namesrv: str) -> None:
    """0.4.x's ``Producer(group_id, timeout, compress_level, max_message_size)``."""
    producer = Producer("pg-positional", 5000, 3, 1024)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    msg = Message(unique("Positional"))
    msg.set_body(b"y" * 1025)
    with pytest.raises(ProducerSendSyncFailed, match="1024"):
        producer.send_sync(msg)
    producer.shutdown()


def test_0_4_send_async(namesrv: str, admin: Admin) -> None:
    topic = unique("Async")
    producer = Producer("pg-async")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    results: list[SendResult] = []
    errors: list[ProducerSendAsyncFailed] = []
    threads: list[str] = []
    done = threading.Event()

    def on_success(result: SendResult) -> None:
        threads.append(threading.current_thread().name)
        # a callback may send: it does not run on the client's event loop
        follow_up = Message(topic)
        follow_up.set_body("from the callback")
        results.append(result)
        results.append(producer.send_sync(follow_up))
        done.set()

    msg = Message(topic)
    msg.set_body("async")
    assert producer.send_async(msg, on_success, errors.append) is None
    assert done.wait(10)
    assert [result.status for result in results] == [SendStatus.OK, SendStatus.OK] and not errors
    assert threads[0].startswith("rocketmq-compat-send-callback")
    with pytest.raises(RocketMQException, match="empty"):  # refused before sending: no callback runs
        producer.send_async(Message(topic), on_success, errors.append)
    producer.shutdown()
    assert sorted(stored.body for stored in stored_messages(admin, topic, 2)) == [b"async", b"from the callback"]


def test_0_4_send_async_failure_reaches_the_exception_callback(namesrv: str) -> None:
    producer = Producer("pg-async-fail", timeout=3000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    errors: list[ProducerSendAsyncFailed] = []
    msg = Message("not a topic name!")
    msg.set_body("x")
    try:
        producer.send_async(msg, lambda result: None, errors.append)
        wait_until(lambda: bool(errors), 10, "the exception callback")
    finally:
        producer.shutdown()
    assert isinstance(errors[0], ProducerSendAsyncFailed)
    assert errors[0].type == "MQClientError" and "not a topic name!" in str(errors[0])


def test_0_4_send_batch(namesrv: str, admin: Admin) -> None:
    topic = unique("Batch")
    producer = Producer("pg-batch")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    msgs = []
    for index in range(3):
        msg = Message(topic)
        msg.set_keys(f"bk{index}")
        msg.set_body(f"batch {index}")
        msgs.append(msg)
    result = producer.send_batch(msgs)
    with pytest.raises(AssertionError):
        producer.send_batch([])
    producer.shutdown()
    assert result.status is SendStatus.OK and result.msg_id.count(",") == 2
    stored = stored_messages(admin, topic, 3)
    assert [(msg.body, msg.keys) for msg in stored] == [(b"batch 0", "bk0"), (b"batch 1", "bk1"), (b"batch 2", "bk2")]
    assert len({msg.queue_id for msg in stored}) == 1


def test_0_4_send_orderly_selectors(namesrv: str, admin: Admin) -> None:
    """0.4.x ``send_orderly(msg, arg)``: queue ``arg % queues`` by default; a custom selector gets
    ``(queue count, RecvMessage, address of a C int arg)`` and reads it with ctypes, as there."""
    topic = unique("Orderly")
    admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    producer = Producer("pg-orderly")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    seen: list[tuple[int, bytes, int]] = []

    def last_queue(mq_size: int, msg: ReceivedMessage, arg: Any) -> int:
        value = ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0]
        seen.append((mq_size, msg.body, value))
        return mq_size - 1

    for arg in range(6):
        msg = Message(topic)
        msg.set_body(f"arg {arg}")
        assert producer.send_orderly(msg, arg).status is SendStatus.OK
    custom = Message(topic)
    custom.set_body("custom")
    producer.send_orderly(custom, 42, queue_selector=last_queue)
    oneway = Message(topic)
    oneway.set_body("oneway")
    producer.send_oneway_orderly(oneway, 2)
    with pytest.raises(ProducerSendOrderlyFailed, match="selector"):
        producer.send_orderly(custom, 1, retry_times=0, queue_selector=lambda size, msg, arg: size)
    producer.shutdown()

    assert seen == [(4, b"custom", 42)]
    queues = {msg.body: msg.queue_id for msg in stored_messages(admin, topic, 8)}
    assert queues == {b"arg 0": 0, b"arg 1": 1, b"arg 2": 2, b"arg 3": 3, b"arg 4": 0, b"arg 5": 1,
                      b"custom": 3, b"oneway": 2}


class _NamesrvList(http.server.BaseHTTPRequestHandler):
    """Serves the name server list, as the endpoint of ``set_name_server_domain`` does."""

    addresses = ""

    def do_GET(self) -> None:
        body = (self.addresses + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture()
def namesrv_domain(namesrv: str) -> Iterator[str]:
    handler = type("Handler", (_NamesrvList,), {"addresses": namesrv})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/rocketmq/nsaddr"
    finally:
        server.shutdown()
        server.server_close()


def test_name_server_domain(namesrv_domain: str, admin: Admin) -> None:
    topic = unique("Domain")
    producer = Producer("pg-domain")
    producer.set_name_server_domain(namesrv_domain)
    producer.start()
    msg = Message(topic)
    msg.set_body("found through the domain")
    assert producer.send_sync(msg).status is SendStatus.OK
    producer.shutdown()
    assert stored_messages(admin, topic, 1)[0].body == b"found through the domain"
    unreachable = Producer("pg-domain-2")
    unreachable.set_namesrv_domain("http://127.0.0.1:1/nsaddr")
    with pytest.raises(ProducerStartFailed, match="cannot fetch"):
        unreachable.start()


def test_context_manager(namesrv: str) -> None:
    producer = Producer("pg-with")
    producer.set_name_server_address(namesrv)
    with producer as started:
        msg = Message(unique("With"))
        msg.set_body("x")
        assert started.send_sync(msg).status is SendStatus.OK
    with pytest.raises(ProducerSendSyncFailed):
        producer.send_sync(msg)
