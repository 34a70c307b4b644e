"""``set_session_credentials`` against a broker with the plain ACL on: the keys sign every request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_helpers import DevCluster, start_cluster, unique, wait_until

from rocketflow.compat.rocketmq.client import (
    ConsumeStatus,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SendStatus,
)
from rocketflow.compat.rocketmq.exceptions import ProducerSendSyncFailed

ACCESS_KEY, SECRET_KEY = "compatUser01", "compatSecret01"
TOPIC = "CompatAclTopic"


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    acl_file = tmp_path_factory.mktemp("acl") / "plain_acl.yml"
    acl_file.write_text(f"""
accounts:
  - accessKey: {ACCESS_KEY}
    secretKey: {SECRET_KEY}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: ["{TOPIC}=PUB|SUB"]
""")
    cluster = start_cluster(broker_settings={"acl_enable": True, "acl_file": Path(acl_file)})
    try:
        yield cluster
    finally:
        cluster.close()


def test_signed_producer_and_consumers(acl_cluster: DevCluster) -> None:
    namesrv = acl_cluster.namesrv_addr
    producer = Producer("pg-acl")
    producer.set_name_server_address(namesrv)
    producer.set_session_credentials(ACCESS_KEY, SECRET_KEY, "LOCAL")
    producer.start()
    body = unique("signed")
    try:
        msg = Message(TOPIC)
        msg.set_body(body)
        assert producer.send_sync(msg).status is SendStatus.OK
        denied = Message("CompatAclDenied")
        denied.set_body("x")
        with pytest.raises(ProducerSendSyncFailed):
            producer.send_sync(denied)
    finally:
        producer.shutdown()

    received: list[bytes] = []

    def callback(msg: ReceivedMessage) -> ConsumeStatus:
        received.append(msg.body)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("cg-acl")
    consumer.set_name_server_address(namesrv)
    consumer.set_session_credentials(ACCESS_KEY, SECRET_KEY, "LOCAL")
    consumer.subscribe(TOPIC, callback)
    consumer.start()
    try:
        wait_until(lambda: body.encode() in received, 15, "the signed message")
    finally:
        consumer.shutdown()

    puller = PullConsumer("cg-acl-pull")
    puller.set_namesrv_addr(namesrv)
    puller.set_session_credentials(ACCESS_KEY, SECRET_KEY, "LOCAL")
    puller.start()
    try:
        assert body.encode() in [msg.body for msg in puller.pull(TOPIC)]
    finally:
        puller.shutdown()


def test_unsigned_and_wrongly_signed_sends_are_refused(acl_cluster: DevCluster) -> None:
    for keys in (None, (ACCESS_KEY, "wrong-secret")):
        producer = Producer("pg-acl-refused")
        producer.set_name_server_address(acl_cluster.namesrv_addr)
        if keys is not None:
            producer.set_session_credentials(*keys, "LOCAL")
        producer.start()
        try:
            msg = Message(TOPIC)
            msg.set_body("refused")
            with pytest.raises(ProducerSendSyncFailed):
                producer.send_sync(msg)
        finally:
            producer.shutdown()
