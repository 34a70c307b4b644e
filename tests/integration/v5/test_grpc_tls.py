"""The gRPC endpoint over TLS with the broker's TLS settings: a 5.x client that trusts the CA sends and
receives; a plaintext client, one that trusts another CA, and (with client auth required) one without a
certificate get no answer; a password-protected key works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from v5_helpers import DevCluster, RawClient

from rocketflow.client.admin import Admin
from rocketflow.grpc_protocol import definition_pb2 as pb
from testpki import KEY_PASSWORD, Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("grpc-pki"))


def tls_cluster(**tls: Any) -> DevCluster:
    return DevCluster.start_in_thread(broker_settings={"grpc_port": 0, "grpc_long_polling_timeout_ms": 500, **tls})


def grpc_address(cluster: DevCluster) -> str:
    assert cluster.broker is not None and cluster.broker.grpc is not None and cluster.broker.grpc.tls
    return cluster.broker.grpc.address


def trusting(pki: Pki, ca: Path | None = None, *, with_client_cert: bool = False) -> grpc.ChannelCredentials:
    if with_client_cert:
        return grpc.ssl_channel_credentials((ca or pki.ca).read_bytes(), pki.client_key.read_bytes(),
                                            pki.client_cert.read_bytes())
    return grpc.ssl_channel_credentials((ca or pki.ca).read_bytes())


def refused(address: str, credentials: grpc.ChannelCredentials | None) -> bool:
    client = RawClient(address, credentials)
    try:
        client.route("tls-topic")
    except grpc.RpcError as exc:
        return exc.code() is grpc.StatusCode.UNAVAILABLE  # a refused handshake: no connection
    finally:
        client.close()
    return False


def round_trip(cluster: DevCluster, credentials: grpc.ChannelCredentials, topic: str) -> None:
    with Admin(cluster.namesrv_addr) as admin:
        admin.ensure_topic(topic, queues=2)
    client = RawClient(grpc_address(cluster), credentials)
    try:
        assert client.route(topic).status.code == pb.OK
        assert client.send(topic, b"over tls", tag="T").status.code == pb.OK
        [got] = client.receive_all(f"{topic}-group", topic, 1)
        assert got.body == b"over tls"
        assert client.ack(f"{topic}-group", topic, got.system_properties.receipt_handle).status.code == pb.OK
    finally:
        client.close()


@pytest.fixture(scope="module")
def server_tls(pki: Pki) -> Iterator[DevCluster]:
    with tls_cluster(tls_server_cert_path=pki.server_cert, tls_server_key_path=pki.server_key) as cluster:
        yield cluster


def test_tls_clients_that_trust_the_ca_are_served_and_others_refused(server_tls: DevCluster, pki: Pki) -> None:
    round_trip(server_tls, trusting(pki), "tls-topic")
    address = grpc_address(server_tls)
    assert refused(address, None), "a plaintext client was answered by a TLS endpoint"
    assert refused(address, trusting(pki, pki.other_ca)), "a client trusting another CA was answered"


def test_client_certificates_when_required(pki: Pki) -> None:
    with tls_cluster(tls_server_cert_path=pki.server_cert, tls_server_key_path=pki.server_key,
                     tls_server_trust_cert_path=pki.ca, tls_server_need_client_auth="require") as cluster:
        assert refused(grpc_address(cluster), trusting(pki)), "a client without a certificate was answered"
        round_trip(cluster, trusting(pki, with_client_cert=True), "mtls-topic")


def test_password_protected_key(pki: Pki) -> None:
    with tls_cluster(tls_server_cert_path=pki.server_cert, tls_server_key_path=pki.server_key_encrypted,
                     tls_server_key_password=KEY_PASSWORD) as cluster:
        round_trip(cluster, trusting(pki), "pw-topic")
