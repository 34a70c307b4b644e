"""Messages a RocketMQ 5.x client sends over gRPC, read by the Spark source: body, keys, tags, user
properties and the 5.x message id intact."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

from raw_grpc import RawClient
from rocketflow.dev import DevCluster
from rocketflow.grpc_protocol import definition_pb2 as pb


def test_5x_messages_read_by_the_spark_source(spark: SparkSession, cluster: DevCluster,
                                              new_topic: Callable[..., str]) -> None:
    assert cluster.broker is not None and cluster.broker.grpc is not None
    topic = new_topic(4)
    client = RawClient(cluster.broker.grpc.address)
    ids: list[str] = []
    try:
        for i in range(20):
            response = client.send(topic, b"five-%d" % i, tag=f"T{i % 2}", keys=(f"order-{i}", "batch"),
                                   properties={"region": "eu", "n": str(i)})
            assert response.status.code == pb.OK, response.status
            ids.append(response.entries[0].message_id)
    finally:
        client.close()
    rows = (spark.read.format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", topic)
            .option("includeProperties", "true").load().collect())
    assert len(rows) == 20
    by_body = {bytes(row.body): row for row in rows}
    for i, message_id in enumerate(ids):
        row = by_body[b"five-%d" % i]
        assert (row.msg_id, row.keys, row.tags, row.decode_error) == (message_id, f"order-{i} batch", f"T{i % 2}", None)
        assert row.properties["region"] == "eu" and row.properties["n"] == str(i)
