"""`rocketflow.compat.rocketmq.client.PushConsumer` used as the README and samples of Apache's
``rocketmq-client-python`` use it, against a dev cluster (retry delays of 1 s, see conftest).

Covers both callback contracts: 2.0.x's (the callback returns a ConsumeStatus; anything else means
"again later") and 0.4.x's (chosen by ``set_namesrv_addr``: the return value is ignored).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from compat_helpers import unique, wait_until

from rocketflow import Message as RfMessage
from rocketflow import Producer as RfProducer
from rocketflow.client.admin import Admin
from rocketflow.compat.rocketmq.client import (
    ConsumeStatus,
    Message,
    MessageModel,
    Producer,
    PushConsumer,
    ReceivedMessage,
    RecvMessage,
)
from rocketflow.compat.rocketmq.consts import MessageProperty
from rocketflow.compat.rocketmq.exceptions import NullPointerException, PushConsumerStartFailed


def produce(namesrv: str, topic: str, count: int, *, tags: str = "XXX", prefix: str = "body") -> list[str]:
    """Send ``count`` messages the samples' way; returns their ids."""
    producer = Producer("pg-for-consumers")
    producer.set_name_server_address(namesrv)
    producer.start()
    ids = []
    try:
        for index in range(count):
            msg = Message(topic)
            msg.set_keys(f"key-{index}")
            msg.set_tags(tags)
            msg.set_property("property", f"value-{index}")
            msg.set_body(f"{prefix} {index}")
            ids.append(producer.send_sync(msg).msg_id)
    finally:
        producer.shutdown()
    return ids


class Recorder:
    """A callback that records what it got, answering with ``answer(msg)``."""

    def __init__(self, answer: Any = ConsumeStatus.CONSUME_SUCCESS) -> None:
        self.answer = answer
        self.messages: list[ReceivedMessage] = []
        self.lock = threading.Lock()

    def __call__(self, msg: ReceivedMessage) -> Any:
        with self.lock:
            self.messages.append(msg)
        return self.answer(msg) if callable(self.answer) else self.answer

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [msg.body for msg in self.messages]


def test_sample_consumer(namesrv: str, capsys: pytest.CaptureFixture[str]) -> None:
    """samples/consumer.py: a callback printing ``msg.id, msg.body, msg.get_property('property')`` and
    returning CONSUME_SUCCESS; every message arrives once, with bytes where the original has bytes."""
    topic = unique("TopicTest")
    ids = produce(namesrv, topic, 5)
    received: list[ReceivedMessage] = []

    def callback(msg: ReceivedMessage) -> ConsumeStatus:
        print(msg.id, msg.body, msg.get_property("property"))
        received.append(msg)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("consumer_group")
    consumer.set_name_server_address(namesrv)
    consumer.subscribe(topic, callback)
    consumer.start()
    wait_until(lambda: len(received) >= 5, 15, "5 messages")
    time.sleep(0.3)  # nothing more comes
    consumer.shutdown()

    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == sorted(f"{msg_id} b'body {index}' b'value-{index}'" for index, msg_id in enumerate(ids))
    msg = next(msg for msg in received if msg.body == b"body 3")
    assert type(msg) is ReceivedMessage
    assert (msg.topic, msg.keys, msg.tags, msg.id) == (topic, b"key-3", b"XXX", ids[3])
    assert (msg.get_property("missing"), msg["property"], str(msg), bytes(msg)) == (b"", b"value-3", "body 3",
                                                                                     b"body 3")
    assert msg.get_property(MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == ids[3].encode()
    assert msg.get_property(MessageProperty.KEYS) == b"key-3"
    assert (msg.reconsume_times, msg.delay_time_level, msg.prepared_transaction_offset) == (0, 0, 0)
    assert msg.store_size > 0 and msg.commit_log_offset >= 0 and msg.queue_offset >= 0
    assert 0 < msg.born_timestamp <= msg.store_timestamp <= time.time() * 1000
    assert msg.queue_id in range(4)
    assert repr(msg) == f"<ReceivedMessage topic={topic!r} id={ids[3]!r} body=b'body 3'>"


def test_start_without_subscription_fails(namesrv: str) -> None:
    consumer = PushConsumer("cg-no-sub")
    consumer.set_name_server_address(namesrv)
    with pytest.raises(PushConsumerStartFailed, match="messageListener is null"):
        consumer.start()
    consumer.shutdown()
    recorder = Recorder()
    consumer.subscribe(unique("Late"), recorder)
    consumer.start()   # a consumer that never ran may start after a shutdown, as in the C++ client
    consumer.shutdown()


def test_readme_callback_without_return_is_consumed_again_in_2_0(namesrv: str) -> None:
    """2.0.x README's callback prints and returns None: 2.0.x treats that as an error and the message
    comes again (reconsume_times 1, 2, ...), as its users found out."""
    topic = unique("YourTopic")
    produce(namesrv, topic, 1)
    recorder = Recorder(answer=None)
    consumer = PushConsumer("CID_XXX")
    consumer.set_name_server_address(namesrv)
    consumer.subscribe(topic, recorder)
    consumer.start()
    try:
        wait_until(lambda: len(recorder.messages) >= 2, 20, "the message to come again")
    finally:
        consumer.shutdown()
    assert [msg.reconsume_times for msg in recorder.messages[:2]] == [0, 1]
    assert {msg.topic for msg in recorder.messages} == {topic}  # the retry topic is not shown
    assert recorder.messages[0].id == recorder.messages[1].id


def test_0_4_callback_contract(namesrv: str) -> None:
    """0.4.x (``set_namesrv_addr``): the callback's return value is ignored; only an exception makes a
    message come again. Its messages are RecvMessage."""
    topic = unique("YourTopic")
    produce(namesrv, topic, 3)
    failed_once: set[bytes] = set()

    def answer(msg: ReceivedMessage) -> Any:
        if msg.body == b"body 1" and msg.body not in failed_once:
            failed_once.add(msg.body)
            raise RuntimeError("failing once")
        return ConsumeStatus.RECONSUME_LATER if msg.body == b"body 2" else None

    recorder = Recorder(answer)
    consumer = PushConsumer("CID_XXX_04")
    consumer.set_namesrv_addr(namesrv)
    consumer.set_session_credentials("XXX", "XXXX", "ALIYUN")
    consumer.subscribe(topic, recorder)
    consumer.start()
    try:
        wait_until(lambda: len(recorder.messages) >= 4, 20, "4 deliveries")
        time.sleep(1.5)  # a RECONSUME_LATER would have come back by now (delay level 3 = 1 s)
    finally:
        consumer.shutdown()
    assert Counter(recorder.bodies()) == {b"body 0": 1, b"body 1": 2, b"body 2": 1}
    assert all(type(msg) is RecvMessage for msg in recorder.messages)
    assert repr(recorder.messages[0]).startswith("<RecvMessage topic=")


def test_exception_and_invalid_status_mean_later(namesrv: str) -> None:
    topic = unique("Later")
    produce(namesrv, topic, 2)
    first_seen: set[bytes] = set()

    def answer(msg: ReceivedMessage) -> Any:
        if msg.body in first_seen:
            return ConsumeStatus.CONSUME_SUCCESS
        first_seen.add(msg.body)
        if msg.body == b"body 0":
            raise ValueError("not yet")
        return "success"  # not a ConsumeStatus

    recorder = Recorder(answer)
    consumer = PushConsumer("cg-later")
    consumer.set_name_server_address(namesrv)
    consumer.subscribe(topic, recorder)
    consumer.start()
    try:
        wait_until(lambda: len(recorder.messages) >= 4, 20, "both messages twice")
    finally:
        consumer.shutdown()
    assert Counter(recorder.bodies()) == {b"body 0": 2, b"body 1": 2}
    assert sorted(msg.reconsume_times for msg in recorder.messages) == [0, 0, 1, 1]


def test_each_topic_goes_to_its_own_callback_with_tag_expressions(namesrv: str) -> None:
    topic_a, topic_b = unique("TopicA"), unique("TopicB")
    produce(namesrv, topic_a, 2, tags="TagA")
    produce(namesrv, topic_a, 2, tags="TagX", prefix="skipped")
    produce(namesrv, topic_b, 3, tags="TagB")
    on_a, on_b = Recorder(), Recorder()
    consumer = PushConsumer("cg-two-topics")
    consumer.set_name_server_address(namesrv)
    consumer.subscribe(topic_a, on_a, "TagA || TagZ")
    consumer.subscribe(topic_b, on_b)
    consumer.start()
    try:
        wait_until(lambda: len(on_a.messages) >= 2 and len(on_b.messages) >= 3, 15, "both topics")
        time.sleep(0.3)
    finally:
        consumer.shutdown()
    assert sorted(on_a.bodies()) == [b"body 0", b"body 1"]
    assert sorted(on_b.bodies()) == [b"body 0", b"body 1", b"body 2"]
    assert {msg.topic for msg in on_a.messages} == {topic_a} and {msg.topic for msg in on_b.messages} == {topic_b}


def test_broadcasting(namesrv: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two consumers of one group in BROADCASTING mode both get every message."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the local offset files go under ~/.rocketmq_offsets
    topic = unique("Broadcast")
    recorders = [Recorder(), Recorder()]
    consumers = []
    for index, recorder in enumerate(recorders):
        consumer = PushConsumer("cg-broadcast", message_model=MessageModel.BROADCASTING)
        consumer.set_name_server_address(namesrv)
        consumer.set_instance_name(f"broadcast-{index}")
        consumer.subscribe(topic, recorder)
        consumers.append(consumer)
    produce(namesrv, topic, 1)  # the topic exists before the consumers start
    for consumer in consumers:
        consumer.start()
    try:
        time.sleep(0.5)
        produce(namesrv, topic, 4, prefix="live")
        wait_until(lambda: all(len(r.messages) >= 4 for r in recorders), 15, "4 messages on each consumer")
    finally:
        for consumer in consumers:
            consumer.shutdown()
    for recorder in recorders:
        assert sorted(set(recorder.bodies()) - {b"body 0"}) == [b"live 0", b"live 1", b"live 2", b"live 3"]


def test_orderly_consumer_keeps_queue_order(namesrv: str, admin: Admin) -> None:
    topic = unique("Orderly")
    admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    producer = Producer("pg-orderly-c", True)
    producer.set_name_server_address(namesrv)
    producer.start()
    for index in range(20):
        msg = Message(topic)
        msg.set_body(f"{index % 2}:{index}")
        producer.send_orderly_with_sharding_key(msg, f"key-{index % 2}")
    producer.shutdown()
    seen: list[tuple[int, int]] = []
    failed = threading.Event()

    def callback(msg: ReceivedMessage) -> ConsumeStatus:
        if msg.body == b"1:9" and not failed.is_set():
            failed.set()   # suspends the queue a moment, then the same message comes again, in order
            return ConsumeStatus.RECONSUME_LATER
        seen.append((msg.queue_id, msg.queue_offset))
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("cg-orderly", orderly=True)
    consumer.set_name_server_address(namesrv)
    consumer.set_thread_count(4)
    consumer.set_message_batch_max_size(4)
    consumer.subscribe(topic, callback)
    consumer.start()
    try:
        wait_until(lambda: len(seen) >= 20, 20, "20 messages in order")
    finally:
        consumer.shutdown()
    for queue in {queue for queue, _ in seen}:
        offsets = [offset for q, offset in seen if q == queue]
        assert offsets == sorted(offsets) == list(range(len(offsets)))


def test_settings_validation_and_lifecycle(namesrv: str) -> None:
    consumer = PushConsumer("cg-settings")
    with pytest.raises(NullPointerException):
        consumer.set_thread_count(0)
    with pytest.raises(NullPointerException):
        consumer.set_message_batch_max_size(0)
    with pytest.raises(TypeError):
        consumer.subscribe("T", "not callable")  # type: ignore[arg-type]
    consumer.set_message_model(7)
    consumer.set_name_server_address(namesrv)
    consumer.subscribe(unique("Settings"), Recorder())
    with pytest.raises(PushConsumerStartFailed, match="messageModel"):
        consumer.start()
    consumer.set_message_model(MessageModel.CLUSTERING)
    consumer.set_group("cg-settings-2")
    with consumer:
        consumer.start()   # a second start does nothing
    consumer.shutdown()
    consumer.start()       # nor one after shutdown (the C++ client ignores it too)


def test_subscribe_while_running(namesrv: str) -> None:
    first, later = unique("First"), unique("Later")
    produce(namesrv, later, 1)
    on_first, on_later = Recorder(), Recorder()
    consumer = PushConsumer("cg-live-subscribe")
    consumer.set_name_server_address(namesrv)
    consumer.subscribe(first, on_first)
    consumer.start()
    try:
        consumer.subscribe(later, on_later)
        wait_until(lambda: len(on_later.messages) >= 1, 15, "the later topic's message")
    finally:
        consumer.shutdown()
    assert on_later.bodies() == [b"body 0"] and not on_first.messages


def test_messages_from_rocketflow_producers(namesrv: str) -> None:
    """A message without keys or tags: b"" for both, as the C++ client gives."""
    topic = unique("Plain")
    with RfProducer("pg-rf", namesrv) as producer:
        producer.send(RfMessage(topic, b"\x00\xffraw"))
    recorder = Recorder()
    consumer = PushConsumer("cg-plain")
    consumer.set_name_server_address(namesrv)
    consumer.subscribe(topic, recorder)
    consumer.start()
    try:
        wait_until(lambda: len(recorder.messages) >= 1, 15, "the message")
    finally:
        consumer.shutdown()
    (msg,) = recorder.messages
    assert (msg.body, msg.keys, msg.tags) == (b"\x00\xffraw", b"", b"")
