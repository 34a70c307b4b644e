"""Messages a RocketMQ 5.x client sends over gRPC, read by the Spark source: body, keys, tags, user
properties and the 5.x message id intact."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import grpc
from pyspark.sql import SparkSession

from rocketflow.dev import DevCluster
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.grpc_protocol import service_pb2_grpc as sgrpc


def send_over_grpc(address: str, topic: str, count: int) -> list[str]:
    """Send ``count`` messages as a 5.x client does; the message ids the endpoint answered."""
    ids: list[str] = []
    with grpc.insecure_channel(address) as channel:
        stub = sgrpc.MessagingServiceStub(channel)
        metadata = (("x-mq-client-id", f"spark-test-{uuid.uuid4().hex[:8]}"), ("x-mq-protocol", "v2"))
        for i in range(count):
            message = pb.Message(topic=pb.Resource(name=topic), body=b"five-%d" % i)
            system = message.system_properties
            system.message_id = uuid.uuid4().hex.upper()
            system.tag = f"T{i % 2}"
            system.keys.extend([f"order-{i}", "batch"])
            system.born_timestamp.FromMilliseconds(int(time.time() * 1000))
            system.born_host = "127.0.0.1"
            system.message_type = pb.NORMAL
            message.user_properties["region"] = "eu"
            message.user_properties["n"] = str(i)
            response = stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=metadata, timeout=10)
            assert response.status.code == pb.OK, response.status
            ids.append(response.entries[0].message_id)
    return ids


def test_5x_messages_read_by_the_spark_source(spark: SparkSession, cluster: DevCluster,
                                              new_topic: Callable[..., str]) -> None:
    assert cluster.broker is not None and cluster.broker.grpc is not None
    topic = new_topic(4)
    ids = send_over_grpc(cluster.broker.grpc.address, topic, 20)
    rows = (spark.read.format("rocketmq").option("namesrv", cluster.namesrv_addr).option("topic", topic)
            .option("includeProperties", "true").load().collect())
    assert len(rows) == 20
    by_body = {bytes(row.body): row for row in rows}
    for i, message_id in enumerate(ids):
        row = by_body[b"five-%d" % i]
        assert (row.msg_id, row.keys, row.tags, row.decode_error) == (message_id, f"order-{i} batch", f"T{i % 2}", None)
        assert row.properties["region"] == "eu" and row.properties["n"] == str(i)
