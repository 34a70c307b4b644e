"""The rocketmq source against a dev cluster: batch and streaming reads, starting offsets, filters, data loss."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PythonException, StreamingQueryException
from pyspark.sql import SparkSession
from spark_helpers import queued_total, send_messages

from rocketflow.client import Producer
from rocketflow.dev import DevCluster
from rocketflow.protocol.bodies import TopicConfig
from rocketflow.protocol.message import Message, MessageQueue
from rocketflow.spark.connection import get_connection
from rocketflow.spark.progress import track_group_progress
from rocketflow.store.put_request import PutMessageRequest


def _reader(spark: SparkSession, cluster: DevCluster, topic: str, **options: str) -> Any:
    reader = spark.read.format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _drain(spark: SparkSession, cluster: DevCluster, topic: str, tmp_path: Path, **options: str) -> tuple[list[Any],
                                                                                                        list[Any]]:
    """Run an availableNow stream into a memory table; returns (rows, progress list)."""
    name = f"t_{uuid.uuid4().hex[:8]}"
    stream = spark.readStream.format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        stream = stream.option(key, value)
    query = (stream.load().writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
        rows = spark.sql(f"select * from {name}").collect()
        return rows, list(query.recentProgress)
    finally:
        query.stop()


def test_batch_read_equals_what_was_sent(spark: SparkSession, cluster: DevCluster, producer: Producer,
                                         new_topic: Callable[..., str]) -> None:
    topic = new_topic(4)
    before = int(time.time() * 1000)
    sent: dict[tuple[int, int], tuple[Message, str]] = {}
    for round_index in range(6):
        batch = [Message(topic, b"body-%d-%d" % (round_index, i), tags=f"T{i % 2}", keys=f"k{round_index}-{i}")
                 for i in range(25)]
        for msg in batch:
            msg.properties["color"] = "blue"
        result = producer.send_batch(batch)
        ids = result.msg_id.split(",")
        for index, msg in enumerate(batch):
            sent[(result.message_queue.queue_id, result.queue_offset + index)] = (msg, ids[index])
    after = int(time.time() * 1000)
    rows = _reader(spark, cluster, topic, includeProperties="true").collect()
    assert len(rows) == len(sent) == 150
    for row in rows:
        msg, msg_id = sent[(row.queue_id, row.queue_offset)]
        assert (row.topic, row.broker, row.msg_id, row.keys, row.tags, bytes(row.body)) == (
            topic, "broker-a", msg_id, msg.keys, msg.tags, msg.body)
        assert row.reconsume_times == 0
        for stamp in (row.born_timestamp, row.store_timestamp):
            assert before - 1000 <= stamp.replace(tzinfo=UTC).timestamp() * 1000 <= after + 1000
        assert row.properties["color"] == "blue" and row.properties["UNIQ_KEY"] == msg_id
        assert row.properties["KEYS"] == msg.keys and row.properties["TAGS"] == msg.tags
    schema = {field.name: field.dataType.simpleString()
              for field in _reader(spark, cluster, topic, includeProperties="true").schema.fields}
    assert schema == {"topic": "string", "broker": "string", "queue_id": "int", "queue_offset": "bigint",
                      "msg_id": "string", "keys": "string", "tags": "string", "body": "binary",
                      "born_timestamp": "timestamp", "store_timestamp": "timestamp",
                      "properties": "map<string,string>", "reconsume_times": "int", "decode_error": "string"}
    # by default (as Kafka's headers) the map is left out; the columns read from it are not
    default = _reader(spark, cluster, topic)
    assert "properties" not in default.columns and default.columns == [name for name in schema if name != "properties"]
    plain = {(row.queue_id, row.queue_offset): row for row in default.collect()}
    for key, (msg, msg_id) in sent.items():
        assert (plain[key].msg_id, plain[key].keys, plain[key].tags, bytes(plain[key].body)) == (
            msg_id, msg.keys, msg.tags, msg.body)
    with pytest.raises(Exception, match="includeProperties must be true or false"):
        _reader(spark, cluster, topic, includeProperties="maybe").collect()


def test_batch_read_of_a_bounded_range_and_split_partitions(spark: SparkSession, cluster: DevCluster,
                                                            producer: Producer, new_topic: Callable[..., str]) -> None:
    topic = new_topic(2)
    send_messages(producer, topic, 400)
    assert _reader(spark, cluster, topic).count() == 400
    starting = json.dumps({topic: {"broker-a:0": 10, "broker-a:1": -2}})
    ending = json.dumps({topic: {"broker-a:0": 50, "broker-a:1": 7}})
    df = _reader(spark, cluster, topic, startingOffsets=starting, endingOffsets=ending, maxRecordsPerPartition="15")
    assert df.rdd.getNumPartitions() == 3 + 1
    rows = df.collect()
    got = sorted((row.queue_id, row.queue_offset) for row in rows)
    assert got == [(0, offset) for offset in range(10, 50)] + [(1, offset) for offset in range(7)]
    # within a partition rows keep queue order
    assert [row.queue_offset for row in rows if row.queue_id == 0] == list(range(10, 50))


def test_stream_available_now_drains_in_limited_batches(spark: SparkSession, cluster: DevCluster, producer: Producer,
                                                       new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(4)
    send_messages(producer, topic, 1000)
    rows, progress = _drain(spark, cluster, topic, tmp_path, startingOffsets="earliest", maxMessagesPerTrigger="300")
    sizes = [int(p["numInputRows"]) for p in progress if int(p["numInputRows"])]
    assert sizes == [300, 300, 300, 100]
    assert sorted(bytes(row.body) for row in rows) == sorted(b"m-%06d" % i for i in range(1000))
    last = json.loads(progress[-1]["sources"][0]["endOffset"])
    assert list(last) == [topic] and sum(last[topic].values()) == 1000


def test_starting_offsets_latest_json_and_timestamp(spark: SparkSession, cluster: DevCluster, producer: Producer,
                                                   new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(1)
    send_messages(producer, topic, 50)
    time.sleep(0.01)
    middle = int(time.time() * 1000)
    # The broker's search answers the NEAREST store time (m-49 here); the source must start at the
    # first message stored at or after the timestamp.
    time.sleep(0.3)
    send_messages(producer, topic, 30, body=lambda i: b"late-%d" % i)
    rows, _ = _drain(spark, cluster, topic, tmp_path, startingTimestamp=str(middle))
    assert sorted(bytes(row.body) for row in rows) == sorted(b"late-%d" % i for i in range(30))
    rows, _ = _drain(spark, cluster, topic, tmp_path, startingOffsets=json.dumps({topic: {"broker-a:0": 75}}))
    assert sorted(row.queue_offset for row in rows) == [75, 76, 77, 78, 79]
    rows, _ = _drain(spark, cluster, topic, tmp_path, startingOffsets="latest")
    assert rows == []


def test_group_offsets_start_and_commit(spark: SparkSession, cluster: DevCluster, producer: Producer,
                                        new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(2)
    group = f"spark_group_{uuid.uuid4().hex[:6]}"
    send_messages(producer, topic, 200)
    connection = get_connection(cluster.namesrv_addr)
    queues = connection.queues(topic)
    # committed offsets: queue 0 at 40; queue 1 has none (starts at earliest)
    connection.commit_group_offsets(group, {queues[0]: 40})
    rows, progress = _drain(spark, cluster, topic, tmp_path, startingOffsets="group", group=group,
                            maxMessagesPerTrigger="60")
    got = sorted((row.queue_id, row.queue_offset) for row in rows)
    ends = connection.max_offsets(queues)
    expected = [(0, offset) for offset in range(40, ends[queues[0]])] + [(1, offset) for offset in
                                                                        range(ends[queues[1]])]
    assert got == expected
    # commit() of batch N runs once batch N+1 is planned: every batch but the last is on the broker
    batches = [json.loads(p["sources"][0]["endOffset"]) for p in progress if int(p["numInputRows"])]
    assert len(batches) >= 3
    committed = connection.group_offsets(group, queues)
    candidates = [{mq: batch[topic][f"broker-a:{mq.queue_id}"] for mq in queues} for batch in batches]
    assert committed in candidates[:-1] or committed == candidates[-1]
    assert committed != {queues[0]: 40, queues[1]: None}


def test_sub_expression_filters_by_tag(spark: SparkSession, cluster: DevCluster, producer: Producer,
                                       new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(2)
    send_messages(producer, topic, 90, tags=lambda i: ("TagA", "TagB", "TagC")[i % 3])
    rows = _reader(spark, cluster, topic, subExpression="TagA || TagC").collect()
    assert sorted(bytes(row.body) for row in rows) == sorted(b"m-%06d" % i for i in range(90) if i % 3 != 1)
    assert {row.tags for row in rows} == {"TagA", "TagC"}
    rows, _ = _drain(spark, cluster, topic, tmp_path, startingOffsets="earliest", subExpression="TagB",
                     maxMessagesPerTrigger="20")
    assert sorted(bytes(row.body) for row in rows) == sorted(b"m-%06d" % i for i in range(90) if i % 3 == 1)


def test_an_undecodable_record_is_a_row_with_decode_error_or_fails_the_query(
        spark: SparkSession, cluster: DevCluster, producer: Producer, new_topic: Callable[..., str]) -> None:
    """A record stored flagged COMPRESSED whose body is not zlib (refused by today's broker, but a store may
    hold one): by default a row with its stored body and the reason, the records around it read as usual."""
    topic = new_topic(1)
    send_messages(producer, topic, 3)
    broker, loop = cluster.broker, cluster._loop
    assert broker is not None and loop is not None

    async def put_bad() -> None:
        broker.store.put_messages([PutMessageRequest(topic=topic, queue_id=0, body=b"not zlib", sys_flag=1,
                                                     properties={"KEYS": "bad"}, store_host=broker.store_host)])

    asyncio.run_coroutine_threadsafe(put_bad(), loop).result(10)
    deadline = time.monotonic() + 10
    while queued_total(producer, topic) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    send_messages(producer, topic, 2)
    rows = sorted(_reader(spark, cluster, topic).collect(), key=lambda row: row.queue_offset)
    assert [bytes(row.body) for row in rows] == [b"m-000000", b"m-000001", b"m-000002", b"not zlib", b"m-000000",
                                                 b"m-000001"]
    assert [row.decode_error is None for row in rows] == [True, True, True, False, True, True]
    assert "zlib" in rows[3].decode_error and rows[3].keys == "bad" and rows[3].queue_offset == 3
    with pytest.raises(PythonException, match=r"offset 3 cannot be decoded.*failOnBadRecords=false"):
        _reader(spark, cluster, topic, failOnBadRecords="true").collect()


def test_unknown_topic_fails_with_a_clear_error(spark: SparkSession, cluster: DevCluster) -> None:
    with pytest.raises(Exception, match="has no readable queue"):
        _reader(spark, cluster, "NoSuchTopic_x").collect()


# --------------------------------------------------------------------------- data loss


@pytest.fixture(scope="module")
def small_segment_cluster() -> Iterator[DevCluster]:
    """A cluster whose commit log rolls every 32 KiB, so retention can delete old messages."""
    dev = DevCluster.start_in_thread(broker_settings={"store.commit_log_segment_size": 32 * 1024,
                                                      "store.file_reserved_time_hours": 0.0})
    try:
        yield dev
    finally:
        dev.close()


def test_fail_on_data_loss_both_ways(spark: SparkSession, small_segment_cluster: DevCluster, tmp_path: Path) -> None:
    cluster = small_segment_cluster
    topic = "LossTopic"
    # its own instance name: client instances are shared per client id, and this is another cluster
    with Producer("loss_producer", namesrv=cluster.namesrv_addr, instance_name="loss_test") as loss_producer:
        instance = loss_producer.instance
        instance.run(instance.api.create_topic(cluster.broker_addr, TopicConfig(topic, 1, 1)))
        instance.run(instance.update_topic_route(topic))
        send_messages(loss_producer, topic, 100)
        # a stream into Parquet that read the first 100 messages
        checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"

        def run_stream(**options: str) -> Any:
            stream = (spark.readStream.format("rocketmq").option("namesrv", cluster.namesrv_addr)
                      .option("topic", topic).option("startingOffsets", "earliest"))
            for key, value in options.items():
                stream = stream.option(key, value)
            return (stream.load().select("queue_offset").writeStream.format("parquet").option("path", str(output))
                    .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())

        run_stream().awaitTermination(120)
        send_messages(loss_producer, topic, 900)
        deleted = cluster.broker.store.clean_expired(int(time.time() * 1000) + 3_600_000, manual=True)  # type: ignore[union-attr]
        assert deleted > 0
        mq = MessageQueue(topic, "broker-a", 0)
        low = get_connection(cluster.namesrv_addr).min_offsets([mq])[mq]
        assert low > 100
    # read [earliest checkpointed .. end) in a batch read with explicit offsets that are gone
    starting = json.dumps({topic: {"broker-a:0": 0}})
    reader = (spark.read.format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", topic)
              .option("startingOffsets", starting))
    with pytest.raises(PythonException, match="no longer"):
        reader.load().collect()
    rows = reader.option("failOnDataLoss", "false").load().collect()
    assert sorted(row.queue_offset for row in rows) == list(range(low, 1000))
    # the stream resumes where its checkpoint says: gone, so it fails unless told to skip
    failing = run_stream()
    with pytest.raises(StreamingQueryException, match="no longer"):
        failing.awaitTermination(120)
    skipping = run_stream(failOnDataLoss="false")
    skipping.awaitTermination(120)
    offsets = sorted(row.queue_offset for row in spark.read.parquet(str(output)).collect())
    assert offsets == list(range(100)) + list(range(low, 1000))


def test_two_topics_small_pulls_and_group_progress_listener(spark: SparkSession, cluster: DevCluster,
                                                            producer: Producer, new_topic: Callable[..., str],
                                                            tmp_path: Path) -> None:
    """A comma list of topics read with pulls of 7; the listener leaves the group at the query's end (lag 0)."""
    first, second = new_topic(2), new_topic(3)
    send_messages(producer, first, 90, body=lambda i: b"a-%d" % i)
    send_messages(producer, second, 61, body=lambda i: b"b-%d" % i)
    group = f"spark_listener_{uuid.uuid4().hex[:6]}"
    listener = track_group_progress(spark, cluster.namesrv_addr, group, topics=[first, second])
    try:
        rows, progress = _drain(spark, cluster, f"{first}, {second}", tmp_path, startingOffsets="earliest",
                                group=group, pullBatchSize="7", maxMessagesPerTrigger="50")
        deadline = time.monotonic() + 30  # listener events reach Python asynchronously
        connection = get_connection(cluster.namesrv_addr)
        queues = connection.queues(first) + connection.queues(second)
        ends = connection.max_offsets(queues)
        while connection.group_offsets(group, queues) != ends and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)
    assert sorted(bytes(row.body) for row in rows) == sorted(
        [b"a-%d" % i for i in range(90)] + [b"b-%d" % i for i in range(61)])
    assert {row.topic for row in rows} == {first, second}
    assert len([p for p in progress if int(p["numInputRows"])]) >= 4
    # the source's own commit() never writes the last batch: only the listener brings the group to lag 0
    assert connection.group_offsets(group, queues) == ends
    assert listener.committed_batches >= 1


def test_connection_cache_replaces_a_shut_down_instance(cluster: DevCluster, producer: Producer,
                                                        new_topic: Callable[..., str]) -> None:
    topic = new_topic(2)
    first = get_connection(cluster.namesrv_addr)
    assert get_connection(cluster.namesrv_addr) is first
    first.instance.shutdown()
    while first.instance.started:  # drop every reference (sink producers share the instance)
        first.instance.shutdown()
    second = get_connection(cluster.namesrv_addr)
    assert second is not first and second.instance.started
    assert len(second.queues(topic)) == 2
