"""0.4.x's `PullConsumer` (``for msg in consumer.pull(topic)``) as its README uses it, against a dev cluster.

A pull reads each queue of the topic, queue after queue, from where the previous pull left it to the
queue's end; positions are kept in the class's ``offset_table``, never committed to the broker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from compat_helpers import unique

from rocketflow.client.admin import Admin
from rocketflow.compat.rocketmq.client import Message, Producer, PullConsumer, RecvMessage
from rocketflow.compat.rocketmq.exceptions import PullConsumerFetchMQFailed, PullConsumerStartFailed


@pytest.fixture(autouse=True)
def _fresh_offset_table() -> Iterator[None]:
    saved = dict(PullConsumer.offset_table)
    PullConsumer.offset_table.clear()
    yield
    PullConsumer.offset_table.clear()
    PullConsumer.offset_table.update(saved)


def send(namesrv: str, topic: str, bodies: list[str], tags: str = "T") -> None:
    producer = Producer("pg-for-pull")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for arg, body in enumerate(bodies):
            msg = Message(topic)
            msg.set_tags(tags)
            msg.set_keys(f"key-{body}")
            msg.set_body(body)
            producer.send_orderly(msg, arg)   # queue arg % 4: a known layout
    finally:
        producer.shutdown()


def test_readme_pull_consumer(namesrv: str, admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    topic = unique("YourTopic")
    admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    send(namesrv, topic, [f"m{index}" for index in range(10)])

    consumer = PullConsumer("CID_XXX")
    consumer.set_namesrv_addr(namesrv)
    consumer.set_session_credentials("XXX", "XXXX", "ALIYUN")
    consumer.start()
    for msg in consumer.pull(topic):
        print(msg.id, msg.body)
    consumer.shutdown()

    bodies = [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    # queue 0 (m0 m4 m8), then queue 1 (m1 m5 m9), queue 2 (m2 m6), queue 3 (m3 m7)
    assert bodies == ["b'm0'", "b'm4'", "b'm8'", "b'm1'", "b'm5'", "b'm9'", "b'm2'", "b'm6'", "b'm3'", "b'm7'"]
    key = f"{topic.encode()!s}@"
    assert PullConsumer.offset_table == {f"{key}0": 3, f"{key}1": 3, f"{key}2": 2, f"{key}3": 2}


def test_pull_continues_where_it_left_and_filters_tags(namesrv: str, admin: Admin) -> None:
    topic = unique("Pull")
    admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    send(namesrv, topic, ["a0", "a1", "a2"], tags="TagA")
    consumer = PullConsumer("cg-pull")
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    try:
        first = list(consumer.pull(topic))
        assert sorted(msg.body for msg in first) == [b"a0", b"a1", b"a2"]
        assert all(type(msg) is RecvMessage for msg in first)
        msg = first[0]
        assert (msg.topic, msg.keys, msg.tags, msg.queue_id, msg.queue_offset) == (topic, b"key-a0", b"TagA", 0, 0)
        assert list(consumer.pull(topic)) == []

        send(namesrv, topic, ["b0", "b1"], tags="TagB")
        send(namesrv, topic, ["a3"], tags="TagA")
        assert [msg.body for msg in consumer.pull(topic, "TagA || TagC")] == [b"a3"]
        assert list(consumer.pull(topic)) == []   # the TagB messages were passed over

        # another consumer of the process shares the positions (a class attribute, as in 0.4.x)
        other = PullConsumer("cg-pull-other")
        other.set_name_server_address(namesrv)
        other.start()
        try:
            assert list(other.pull(topic)) == []
            PullConsumer.offset_table.clear()
            assert len(list(other.pull(topic, max_num=2))) == 6
        finally:
            other.shutdown()
    finally:
        consumer.shutdown()


def test_leaving_a_pull_early_keeps_the_batch_position(namesrv: str, admin: Admin) -> None:
    topic = unique("Pull")
    admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    send(namesrv, topic, [f"m{index}" for index in range(5)])
    consumer = PullConsumer("cg-pull-early")
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    try:
        pulled = consumer.pull(topic)
        assert next(pulled).body == b"m0"
        pulled.close()
        # as in 0.4.x, the position moved past the whole batch read from the broker
        assert list(consumer.pull(topic)) == []
        consumer.set_message_queue_offset(_Queue(topic.encode(), 0), 3)
        assert consumer.get_message_queue_offset(_Queue(topic.encode(), 0)) == 3
        assert [msg.body for msg in consumer.pull(topic)] == [b"m3", b"m4"]
    finally:
        consumer.shutdown()


class _Queue:
    """What 0.4.x passed to the offset methods: the C struct, with ``topic`` (bytes) and ``queueId``."""

    def __init__(self, topic: bytes, queue_id: int) -> None:
        self.topic = topic
        self.queueId = queue_id


def test_errors(namesrv: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    with pytest.raises(PullConsumerStartFailed, match="name server"):
        PullConsumer("cg-pull-errors").start()
    consumer = PullConsumer("cg-pull-errors")
    with pytest.raises(PullConsumerFetchMQFailed, match="not started"):
        list(consumer.pull("T"))
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    try:
        with pytest.raises(PullConsumerFetchMQFailed, match="does not exist"):
            list(consumer.pull(unique("Missing")))
    finally:
        consumer.shutdown()
