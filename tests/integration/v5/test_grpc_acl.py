"""The gRPC endpoint with the broker's ACL on: calls are checked through the 5.x ``authorization`` header
against the same plain_acl.yml accounts and permissions as 4.x requests."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from v5_helpers import DevCluster, RawClient

from rocketflow.grpc_protocol import definition_pb2 as pb

ACL = """
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: admin-key
    secretKey: admin-secret-1234
    admin: true
  - accessKey: reader-key
    secretKey: reader-secret-1234
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: ["acl-topic=SUB"]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    acl_path: Path = tmp_path_factory.mktemp("acl") / "plain_acl.yml"
    acl_path.write_text(ACL)
    settings = {"grpc_port": 0, "acl_enable": True, "acl_file": acl_path, "access_key": "admin-key",
                "secret_key": "admin-secret-1234"}
    with DevCluster.start_in_thread(broker_settings=settings) as dev:
        yield dev


def signed(client: RawClient, access_key: str, secret_key: str) -> RawClient:
    now = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    signature = hmac.new(secret_key.encode(), now.encode(), hashlib.sha1).hexdigest()
    client.metadata = (*client.metadata, ("x-mq-date-time", now), ("authorization", (
        f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature}")))
    return client


@pytest.fixture
def address(cluster: DevCluster) -> str:
    assert cluster.broker is not None and cluster.broker.grpc is not None
    return cluster.broker.grpc.address


def test_acl_through_the_authorization_header(cluster: DevCluster, address: str) -> None:
    admin = signed(RawClient(address), "admin-key", "admin-secret-1234")
    reader = signed(RawClient(address), "reader-key", "reader-secret-1234")
    forger = signed(RawClient(address), "reader-key", "not-the-secret")
    anonymous = RawClient(address)
    try:
        assert anonymous.route("acl-topic").status.code == pb.UNAUTHORIZED
        assert forger.route("acl-topic").status.code == pb.UNAUTHORIZED
        assert signed(RawClient(address), "nobody", "x").route("acl-topic").status.code == pb.UNAUTHORIZED
        assert admin.route("acl-topic").status.code == pb.TOPIC_NOT_FOUND  # authenticated, then routed
        from rocketflow.client.admin import Admin
        with Admin(cluster.namesrv_addr, access_key="admin-key", secret_key="admin-secret-1234") as session:
            session.ensure_topic("acl-topic", queues=1)
        assert admin.send("acl-topic", b"by admin").status.code == pb.OK
        assert reader.send("acl-topic", b"by reader").status.code == pb.FORBIDDEN
        assert anonymous.send("acl-topic", b"anonymous").status.code == pb.UNAUTHORIZED
        got = reader.receive_all("acl-group", "acl-topic", 1)
        assert [m.body for m in got] == [b"by admin"]
        assert forger.ack("acl-group", "acl-topic", got[0].system_properties.receipt_handle).status.code == \
            pb.UNAUTHORIZED
        assert reader.ack("acl-group", "acl-topic", got[0].system_properties.receipt_handle).status.code == pb.OK
    finally:
        for client in (admin, reader, forger, anonymous):
            client.close()
