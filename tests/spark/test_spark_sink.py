"""The rocketmq sink: batch and streaming writes, per-row topics, sharding keys keep per-key order in one queue."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from rocketflow.client import Producer
from rocketflow.dev import DevCluster
from rocketflow.spark.connection import get_connection


def _read_back(spark: SparkSession, cluster: DevCluster, topic: str) -> list[object]:
    return (spark.read.format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", topic)
            .option("includeProperties", "true").load().orderBy("queue_id", "queue_offset").collect())


def test_batch_write_with_sharding_keys_and_row_topics(spark: SparkSession, cluster: DevCluster, producer: Producer,
                                                       new_topic: Callable[..., str]) -> None:
    topic, other = new_topic(4), new_topic(2)
    rows = [(f"order-{i % 7}", f"{i:04d}", f"k{i}", "TagA" if i % 2 else None, other if i % 10 == 0 else None)
            for i in range(300)]
    df = spark.createDataFrame(rows, "sharding_key string, body string, keys string, tags string, topic string")
    df.coalesce(1).write.mode("append").format("rocketmq").option("namesrv", cluster.namesrv_addr) \
        .option("topic", topic).save()
    main, extra = _read_back(spark, cluster, topic), _read_back(spark, cluster, other)
    assert len(main) == 270 and len(extra) == 30
    by_key: dict[str, list[tuple[int, int, int]]] = {}
    for row in main + extra:
        index = int(bytes(row.body))
        assert row.keys == f"k{index}" and row.tags == ("TagA" if index % 2 else None)
        assert row.properties["__SHARDINGKEY"] == f"order-{index % 7}"
        by_key.setdefault(row.properties["__SHARDINGKEY"], []).append((row.queue_id, row.queue_offset, index))
    for key, placed in by_key.items():
        main_rows = [item for item in placed if item[2] % 10]
        assert len({queue for queue, _, _ in main_rows}) == 1, f"{key} went to several queues"
        assert [index for _, _, index in sorted(main_rows)] == sorted(index for _, _, index in main_rows)


def test_batch_write_round_robin_and_binary_body(spark: SparkSession, cluster: DevCluster,
                                                 new_topic: Callable[..., str]) -> None:
    topic = new_topic(4)
    df = spark.createDataFrame([(bytes([i % 256]) * 10,) for i in range(1000)], "body binary").repartition(3)
    df.write.mode("append").format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", topic).save()
    rows = _read_back(spark, cluster, topic)
    assert sorted(bytes(row.body) for row in rows) == sorted(bytes([i % 256]) * 10 for i in range(1000))
    assert len({row.queue_id for row in rows}) == 4


def test_write_rejects_bad_frames(spark: SparkSession, cluster: DevCluster, new_topic: Callable[..., str]) -> None:
    topic = new_topic(1)
    with pytest.raises(Exception, match="needs a body column"):
        spark.createDataFrame([("x",)], "value string").write.mode("append").format("rocketmq") \
            .option("namesrv", cluster.namesrv_addr).option("topic", topic).save()
    with pytest.raises(Exception, match="body must be binary or string"):
        spark.createDataFrame([(1,)], "body int").write.mode("append").format("rocketmq") \
            .option("namesrv", cluster.namesrv_addr).option("topic", topic).save()
    with pytest.raises(Exception, match="has no topic"):
        spark.createDataFrame([("x",)], "body string").write.mode("append").format("rocketmq") \
            .option("namesrv", cluster.namesrv_addr).save()


def test_stream_write_copies_a_topic(spark: SparkSession, cluster: DevCluster, producer: Producer,
                                     new_topic: Callable[..., str], tmp_path: Path) -> None:
    source, target = new_topic(2), new_topic(2)
    from spark_helpers import send_messages

    send_messages(producer, source, 200, tags=lambda i: "even" if i % 2 == 0 else None)
    query = (spark.readStream.format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", source)
             .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "80").load()
             .selectExpr("body", "keys", "tags", "cast(queue_id as string) as sharding_key")
             .writeStream.format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", target)
             .option("checkpointLocation", str(tmp_path / f"cp-{uuid.uuid4().hex[:6]}"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    rows = _read_back(spark, cluster, target)
    assert sorted(bytes(row.body) for row in rows) == sorted(b"m-%06d" % i for i in range(200))
    assert all(row.tags == ("even" if int(bytes(row.body)[2:]) % 2 == 0 else None) for row in rows)
    queues = get_connection(cluster.namesrv_addr).queues(target)
    assert len(queues) == 2
