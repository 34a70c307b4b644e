"""Route hijacks on a ``rocketflow namesrv`` without ACL (RocketMQ's default), by raw frames, with a real
``rocketflow broker`` and producer (subprocess servers).

A rogue REGISTER_BROKER naming the live broker's name and id with another address is refused (the
producer's sends all reach the real broker), as is a rogue UNREGISTER_BROKER; the real broker,
killed and restarted on its address, registers again at once. A name server listening beyond
loopback without ACL says so at start, on stderr; ``rocketflow dev --ns-acl`` puts the ACL on it.
"""

from __future__ import annotations

import socket
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from reliability_helpers import RawConnection, ServerProcess, broker_args, wait_until

from rocketflow import Message, Producer
from rocketflow.acl import SessionCredentials, sign
from rocketflow.client.instance import shutdown_all
from rocketflow.protocol.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rocketflow.protocol.ids import decode_offset_msg_id
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import RegisterBrokerRequestHeader

pytestmark = pytest.mark.reliability

TOPIC = "HijackT"
SENDS = 20
TIMEOUT = 10.0
WARNING = "without ACL"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Cluster:
    namesrv: ServerProcess
    broker: ServerProcess
    broker_args: list[str]
    broker_log: Path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    namesrv = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    args = [*broker_args(tmp_path / "store", namesrv=namesrv.address), "--port", str(free_port())]
    try:
        broker = ServerProcess(args, tmp_path / "broker.log")
    except BaseException:
        namesrv.stop()
        raise
    state = Cluster(namesrv, broker, args, tmp_path / "broker.log")
    try:
        yield state
    finally:
        shutdown_all()
        state.broker.stop()
        namesrv.stop()


def request(address: str, command: RemotingCommand, connection: RawConnection | None = None) -> RemotingCommand:
    own = connection is None
    connection = connection or RawConnection(address)
    try:
        response = connection.request(command, TIMEOUT)
    finally:
        if own:
            connection.close()
    assert response is not None
    return response


def rogue_register(broker_addr: str) -> RemotingCommand:
    """broker-a (the real broker's name), id 0, at ``broker_addr``, serving TOPIC."""
    wrapper = TopicConfigSerializeWrapper({TOPIC: TopicConfig(TOPIC, 8, 8)}, DataVersion(1, 1))
    body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper).encode()
    header = RegisterBrokerRequestHeader(broker_name="broker-a", broker_addr=broker_addr, cluster_name="DefaultCluster",
                                         ha_server_addr=broker_addr, broker_id=0,
                                         body_crc32=zlib.crc32(body) & 0x7FFFFFFF)
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)


def route_addrs(cluster: Cluster) -> dict[int, str]:
    reply = request(cluster.namesrv.address,
                    RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}))
    if reply.code != ResponseCode.SUCCESS:
        return {}
    return {broker_id: addr for broker in TopicRouteData.decode(reply.body).broker_datas
            for broker_id, addr in broker.broker_addrs.items()}


def create_topic(cluster: Cluster) -> None:
    fields = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
              "topicFilterType": "SINGLE_TAG", "order": "false"}
    created = request(cluster.broker.address, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
    assert created.code == ResponseCode.SUCCESS, created.remark
    wait_until(lambda: route_addrs(cluster) == {0: cluster.broker.address}, what="the topic's route")


def send_all(cluster: Cluster, count: int, instance: str) -> list[int]:
    """Send ``count`` messages; the broker port of each (from its offset msg id)."""
    producer = Producer("hijack_pg", namesrv=cluster.namesrv.address, instance_name=instance,
                        retry_times_when_send_failed=0)
    producer.start()
    try:
        return [decode_offset_msg_id(producer.send(Message(TOPIC, f"m{index}".encode())).offset_msg_id)[1]
                for index in range(count)]
    finally:
        producer.shutdown()


def test_rogue_registration_and_unregistration_leave_the_route_to_the_real_broker(cluster: Cluster) -> None:
    create_topic(cluster)
    real = cluster.broker.address
    rogue = RawConnection(cluster.namesrv.address)  # stays open: a registration over it would stay live
    try:
        refused = request(cluster.namesrv.address, rogue_register(f"127.0.0.1:{free_port()}"), rogue)
        assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
        unregister = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {
            "brokerName": "broker-a", "brokerAddr": real, "clusterName": "DefaultCluster", "brokerId": "0"})
        assert request(cluster.namesrv.address, unregister, rogue).code == ResponseCode.NO_PERMISSION
        # registering the real address is no move, but leaving then must not take the route with it
        assert request(cluster.namesrv.address, rogue_register(real), rogue).code == ResponseCode.SUCCESS
        assert route_addrs(cluster) == {0: real}
        ports = send_all(cluster, SENDS, "hijack-1")
    finally:
        rogue.close()
    assert ports == [int(real.rsplit(":", 1)[1])] * SENDS
    time.sleep(0.3)  # the name server sees the rogue's connection close
    assert route_addrs(cluster) == {0: real}


def test_killed_broker_restarted_on_its_address_registers_again(cluster: Cluster) -> None:
    create_topic(cluster)
    real = cluster.broker.address
    cluster.broker.kill()
    cluster.broker = ServerProcess(cluster.broker_args, cluster.broker_log)
    assert cluster.broker.address == real
    wait_until(lambda: route_addrs(cluster) == {0: real}, what="the restarted broker's route")
    assert send_all(cluster, 5, "hijack-2") == [int(real.rsplit(":", 1)[1])] * 5


@pytest.mark.parametrize(("args", "warned"), [
    (["namesrv", "--host", "0.0.0.0", "--port", "0"], True),
    (["namesrv", "--host", "127.0.0.1", "--port", "0"], False),
    (["dev", "--host", "0.0.0.0", "--namesrv-port", "0", "--broker-port", "0"], True),
], ids=["namesrv-wildcard", "namesrv-loopback", "dev-wildcard"])
def test_name_server_beyond_loopback_without_acl_warns(tmp_path: Path, args: list[str], warned: bool) -> None:
    log = tmp_path / "stderr.log"
    server = ServerProcess(args, log)
    server.stop()
    text = log.read_text()
    assert (WARNING in text) is warned, text
    if warned:
        assert "WARNING" in text and "docs/acl.md" in text


def test_dev_ns_acl_checks_the_acl_file_on_the_name_server(tmp_path: Path) -> None:
    admin = SessionCredentials("devNsAdmin1", "devNsAdminSecret")
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(f"accounts:\n  - accessKey: {admin.access_key}\n    secretKey: {admin.secret_key}\n"
                   "    admin: true\n")
    server = ServerProcess(["dev", "--host", "0.0.0.0", "--namesrv-port", "0", "--broker-port", "0",
                            "--acl-file", str(acl), "--ns-acl", "--set", f"accessKey={admin.access_key}",
                            "--set", f"secretKey={admin.secret_key}"], tmp_path / "dev.log")
    try:
        cluster_info = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        assert request(server.address, cluster_info).code == ResponseCode.NO_PERMISSION  # unsigned

        def registered() -> bool:
            signed = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            sign(signed.ext_fields, signed.body, admin.access_key, admin.secret_key)
            answer = request(server.address, signed)
            return answer.code == ResponseCode.SUCCESS and b"broker-a" in answer.body

        wait_until(registered, what="the broker registered (signed) with the ACL name server")
    finally:
        server.stop()
    assert WARNING not in (tmp_path / "dev.log").read_text()
