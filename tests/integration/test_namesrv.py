"""The name server over TCP: broker registration, routes, expiry, KV config, bad requests."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketflow.acl import AclClientHook, SessionCredentials
from rocketflow.broker import BrokerController
from rocketflow.broker.config import build_broker_config
from rocketflow.cli.main import cli
from rocketflow.namesrv import (
    NameServer,
    NamesrvConfig,
    NamesrvConfigError,
    build_namesrv_config,
    namesrv_overrides_from_properties,
)
from rocketflow.net import RemotingClient
from rocketflow.net.tls import TlsMode
from rocketflow.protocol.bodies import (
    ClusterInfo,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import RegisterBrokerRequestHeader, RegisterBrokerResponseHeader

Scenario = Callable[[NameServer, RemotingClient], Awaitable[None]]


def run(scenario: Scenario, **config: object) -> None:
    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(port=0, **config))  # type: ignore[arg-type]
        await namesrv.start()
        client = RemotingClient()
        try:
            await scenario(namesrv, client)
        finally:
            await client.close()
            await namesrv.stop()

    asyncio.run(main())


def register_request(
    broker_name: str,
    addr: str,
    topics: dict[str, int],
    *,
    broker_id: int = 0,
    cluster: str = "DefaultCluster",
    compressed: bool = False,
    counter: int = 1,
    bad_crc: bool = False,
) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table={name: TopicConfig(name, queues, queues) for name, queues in topics.items()},
        data_version=DataVersion(timestamp=1_700_000_000_000, counter=counter),
    )
    body_obj = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper)
    body = body_obj.encode_compressed() if compressed else body_obj.encode()
    crc = zlib.crc32(body) & 0x7FFFFFFF
    header = RegisterBrokerRequestHeader(
        broker_name=broker_name,
        broker_addr=addr,
        cluster_name=cluster,
        ha_server_addr=addr.replace("10911", "10912"),
        broker_id=broker_id,
        compressed=compressed,
        body_crc32=(crc + 1) & 0x7FFFFFFF if bad_crc else crc,
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)


async def route(client: RemotingClient, namesrv: NameServer, topic: str) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return await client.invoke(namesrv.address, request, 3)


def test_register_and_route() -> None:
    async def scenario(namesrv: NameServer, client: RemotingClient) -> None:
        response = await client.invoke(
            namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"Orders": 4, "TBW102": 8}), 3
        )
        assert response.code == ResponseCode.SUCCESS, response.remark
        response = await client.invoke(
            namesrv.address,
            register_request("broker-b", "10.0.0.2:10911", {"Orders": 2}, compressed=True),
            3,
        )
        assert response.code == ResponseCode.SUCCESS, response.remark

        reply = await route(client, namesrv, "Orders")
        assert reply.code == ResponseCode.SUCCESS
        assert b'"brokerAddrs":{0:"10.0.0.1:10911"}' in reply.body  # fastjson's unquoted int keys
        data = TopicRouteData.decode(reply.body)
        assert [(q.broker_name, q.read_queue_nums, q.perm) for q in data.queue_datas] == [
            ("broker-a", 4, 6),
            ("broker-b", 2, 6),
        ]
        assert {b.broker_name: b.broker_addrs for b in data.broker_datas} == {
            "broker-a": {0: "10.0.0.1:10911"},
            "broker-b": {0: "10.0.0.2:10911"},
        }

        missing = await route(client, namesrv, "Nope")
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        assert missing.remark and "No topic route info in name server for the topic: Nope" in missing.remark

        info = ClusterInfo.decode(
            (await client.invoke(namesrv.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)).body
        )
        assert info.cluster_addr_table == {"DefaultCluster": {"broker-a", "broker-b"}}
        topics = TopicList.decode(
            (
                await client.invoke(
                    namesrv.address, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), 3
                )
            ).body
        )
        assert topics.topic_list == {"Orders", "TBW102"}

    run(scenario)


def test_slave_learns_master_and_unregister_removes_routes() -> None:
    async def scenario(namesrv: NameServer, client: RemotingClient) -> None:
        await client.invoke(namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"T": 4}), 3)
        slave = await client.invoke(
            namesrv.address, register_request("broker-a", "10.0.0.9:10911", {"T": 4}, broker_id=1), 3
        )
        header = RegisterBrokerResponseHeader.from_ext_fields(slave.ext_fields)
        assert header.master_addr == "10.0.0.1:10911"
        assert header.ha_server_addr == "10.0.0.1:10912"
        data = TopicRouteData.decode((await route(client, namesrv, "T")).body)
        assert data.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.9:10911"}

        for broker_id, addr in ((0, "10.0.0.1:10911"), (1, "10.0.0.9:10911")):
            fields = {"brokerName": "broker-a", "brokerAddr": addr, "clusterName": "DefaultCluster",
                      "brokerId": str(broker_id)}
            reply = await client.invoke(
                namesrv.address, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields), 3
            )
            assert reply.code == ResponseCode.SUCCESS
        assert (await route(client, namesrv, "T")).code == ResponseCode.TOPIC_NOT_EXIST

    run(scenario)


def test_broker_connection_loss_removes_its_routes() -> None:
    async def scenario(namesrv: NameServer, client: RemotingClient) -> None:
        broker_conn = RemotingClient()
        await broker_conn.invoke(namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"T": 4}), 3)
        assert (await route(client, namesrv, "T")).code == ResponseCode.SUCCESS
        await broker_conn.close()
        for _ in range(100):
            if (await route(client, namesrv, "T")).code == ResponseCode.TOPIC_NOT_EXIST:
                break
            await asyncio.sleep(0.02)
        assert (await route(client, namesrv, "T")).code == ResponseCode.TOPIC_NOT_EXIST

    run(scenario)


def test_silent_broker_expires() -> None:
    async def scenario(namesrv: NameServer, client: RemotingClient) -> None:
        await client.invoke(namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"T": 4}), 3)
        assert (await route(client, namesrv, "T")).code == ResponseCode.SUCCESS
        await asyncio.sleep(0.6)
        assert (await route(client, namesrv, "T")).code == ResponseCode.TOPIC_NOT_EXIST

    run(
        scenario,
        broker_channel_expired_seconds=0.2,
        scan_not_active_broker_interval_seconds=0.05,
        scan_initial_delay_seconds=0.05,
    )


def test_topic_table_only_reread_when_data_version_changes() -> None:
    async def scenario(namesrv: NameServer, client: RemotingClient) -> None:
        await client.invoke(namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"T": 4}, counter=1), 3)
        await client.invoke(namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"T": 8}, counter=1), 3)
        data = TopicRouteData.decode((await route(client, namesrv, "T")).body)
        assert data.queue_datas[0].read_queue_nums == 4  # same data version: ignored, as RocketMQ does
        await client.invoke(namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"T": 8}, counter=2), 3)
        data = TopicRouteData.decode((await route(client, namesrv, "T")).body)
        assert data.queue_datas[0].read_queue_nums == 8

        query = RemotingCommand.request(
            RequestCode.QUERY_DATA_VERSION,
            {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911", "clusterName": "DefaultCluster",
             "brokerId": "0"},
            DataVersion(timestamp=1_700_000_000_000, counter=2).encode(),
        )
        reply = await client.invoke(namesrv.address, query, 3)
        assert reply.ext_fields["changed"] == "false"
        assert DataVersion.decode(reply.body).counter == 2

    run(scenario)


def test_write_perm_wipe_and_add() -> None:
    async def scenario(namesrv: NameServer, client: RemotingClient) -> None:
        await client.invoke(namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"T": 4, "U": 1}), 3)
        wipe = RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        reply = await client.invoke(namesrv.address, wipe, 3)
        assert reply.ext_fields["wipeTopicCount"] == "2"
        assert TopicRouteData.decode((await route(client, namesrv, "T")).body).queue_datas[0].perm == 4
        add = RemotingCommand.request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        assert (await client.invoke(namesrv.address, add, 3)).ext_fields["addTopicCount"] == "2"
        assert TopicRouteData.decode((await route(client, namesrv, "T")).body).queue_datas[0].perm == 6

    run(scenario)


def test_kv_config_and_order_topic_conf(tmp_path: Path) -> None:
    async def scenario(namesrv: NameServer, client: RemotingClient) -> None:
        put = RemotingCommand.request(
            RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"}
        )
        assert (await client.invoke(namesrv.address, put, 3)).code == ResponseCode.SUCCESS
        get = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
        assert (await client.invoke(namesrv.address, get, 3)).ext_fields["value"] == "broker-a:4"
        reply = await client.invoke(namesrv.address, register_request("broker-a", "10.0.0.1:10911", {"T": 4}), 3)
        assert KVTable.decode(reply.body).table == {"T": "broker-a:4"}
        data = TopicRouteData.decode((await route(client, namesrv, "T")).body)
        assert data.order_topic_conf == "broker-a:4"
        delete = RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
        await client.invoke(namesrv.address, delete, 3)
        assert (await client.invoke(namesrv.address, get, 3)).code == ResponseCode.QUERY_NOT_FOUND

    run(scenario, order_message_enable=True, kv_config_path=tmp_path / "kvConfig.json")


def test_bad_requests_get_clear_errors_and_change_nothing() -> None:
    async def scenario(namesrv: NameServer, client: RemotingClient) -> None:
        bad_crc = register_request("broker-a", "10.0.0.1:10911", {"T": 4}, bad_crc=True)
        reply = await client.invoke(namesrv.address, bad_crc, 3)
        assert (reply.code, reply.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")

        no_name = register_request("broker-a", "10.0.0.1:10911", {"T": 4})
        del no_name.ext_fields["brokerName"]
        reply = await client.invoke(namesrv.address, no_name, 3)
        assert reply.code == ResponseCode.SYSTEM_ERROR and reply.remark and "brokerName" in reply.remark

        garbage_body = register_request("broker-a", "10.0.0.1:10911", {"T": 4})
        garbage_body.body = b"{not json"
        garbage_body.ext_fields["bodyCrc32"] = "0"
        reply = await client.invoke(namesrv.address, garbage_body, 3)
        assert reply.code == ResponseCode.SYSTEM_ERROR

        assert (await route(client, namesrv, "T")).code == ResponseCode.TOPIC_NOT_EXIST
        unknown = await client.invoke(namesrv.address, RemotingCommand.request(9999), 3)
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    run(scenario)


NS_ADMIN = SessionCredentials("nsAdmin001", "nsSecret001")
NS_ACL = f"""
accounts:
  - accessKey: {NS_ADMIN.access_key}
    secretKey: {NS_ADMIN.secret_key}
    admin: true
"""


def test_namesrv_command_settings_and_acl(tmp_path: Path) -> None:
    """``rocketflow namesrv -c FILE --set K=V --acl-file PATH``: a signed broker registers, a wrongly signed one
    does not; the file's and --set's RocketMQ settings apply."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(NS_ACL)
    conf = tmp_path / "namesrv.properties"
    conf.write_text("# RocketMQ style\nlistenPort=0\norderMessageEnable=true\nrocketmqHome=/opt/rocketmq\n")
    kv_path = tmp_path / "kv" / "kvConfig.json"
    process = subprocess.Popen(
        [sys.executable, "-c", "from rocketflow.cli.main import cli; cli()", "namesrv", "-c", str(conf),
         "--set", f"kvConfigPath={kv_path}", "--set", "serverChannelMaxIdleTimeSeconds=60", "--acl-file", str(acl)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.fullmatch(r"namesrv listening on (\S+)\n", line)
        assert match, (line, process.stderr.read() if process.poll() is not None and process.stderr else "")
        addr = match.group(1)
        assert not addr.endswith(":9876")

        async def main() -> None:
            admin = RemotingClient(rpc_hook=AclClientHook(NS_ADMIN))
            brokers = []
            try:
                for name, secret in (("broker-right", NS_ADMIN.secret_key), ("broker-wrong", "not-the-secret")):
                    broker = BrokerController(build_broker_config({
                        "listen_port": 0, "broker_name": name, "namesrv_addr": addr,
                        "store.store_root": tmp_path / name, "access_key": NS_ADMIN.access_key,
                        "secret_key": secret}))
                    await broker.start()
                    brokers.append(broker)
                cluster_info = ClusterInfo.decode((await admin.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 5)).body)
                assert cluster_info.cluster_addr_table == {"DefaultCluster": {"broker-right"}}
                for hook in (AclClientHook(SessionCredentials(NS_ADMIN.access_key, "not-the-secret")), None):
                    other = RemotingClient(rpc_hook=hook)
                    try:
                        refused = await other.invoke(addr, register_request("broker-x", "10.0.0.7:10911", {"X": 1}),
                                                     5)
                    finally:
                        await other.close()
                    assert refused.code == ResponseCode.NO_PERMISSION, refused
                # orderMessageEnable (from -c) puts the order conf into routes; kvConfigPath (--set) persists it
                put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {
                    "namespace": "ORDER_TOPIC_CONFIG", "key": "TBW102", "value": "broker-right:8"})
                assert (await admin.invoke(addr, put, 5)).code == ResponseCode.SUCCESS
                routed = await admin.invoke(addr, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}), 5)
                assert TopicRouteData.decode(routed.body).order_topic_conf == "broker-right:8"
                for _ in range(100):  # the KV persister thread writes it within milliseconds of the answer
                    if kv_path.exists() and "broker-right:8" in kv_path.read_text():
                        break
                    await asyncio.sleep(0.05)
                assert "broker-right:8" in kv_path.read_text()
            finally:
                for broker in brokers:
                    await broker.stop()
                await admin.close()

        asyncio.run(main())
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_namesrv_settings_are_checked(tmp_path: Path) -> None:
    overrides = namesrv_overrides_from_properties(
        "listenPort=9999\ntls.server.mode=disabled\nclusterTest=false\nbroker_channel_expired_seconds=30\n")
    assert overrides == {"port": 9999, "tls_mode": TlsMode.DISABLED, "broker_channel_expired_seconds": 30.0}
    with pytest.raises(NamesrvConfigError, match="noSuchSetting"):
        namesrv_overrides_from_properties("noSuchSetting=1")
    with pytest.raises(NamesrvConfigError, match="orderMessageEnable"):
        namesrv_overrides_from_properties("orderMessageEnable=maybe")
    conf = tmp_path / "namesrv.properties"
    conf.write_text("listenPort=1234\nkvConfigPath=~/kv.json\n")
    config = build_namesrv_config({"port": 0}, conf_file=conf)
    assert (config.port, config.kv_config_path) == (0, Path("~/kv.json").expanduser())
    result = CliRunner().invoke(cli, ["namesrv", "--set", "listenPort=abc"])
    assert result.exit_code == 2 and "listenPort" in result.output
