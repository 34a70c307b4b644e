"""Restarts on the same store, two brokers under one name server, broker.conf, the CLI as a subprocess."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from broker_helpers import decoded, message_properties, pull, send, wait_for

from rocketflow.broker import BrokerConfigError, BrokerController, build_broker_config
from rocketflow.broker.config import config_overrides_from_properties
from rocketflow.namesrv import NameServer, NamesrvConfig
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import SubscriptionGroupConfig, SubscriptionGroupWrapper, TopicRouteData
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.store import FlushDiskType


def test_restart_keeps_messages_topics_offsets_and_groups(tmp_path: Path) -> None:
    async def main() -> None:
        settings = {"listen_port": 0, "store.store_root": tmp_path}
        client = RemotingClient()
        try:
            broker = BrokerController(build_broker_config(settings))
            await broker.start()
            addr = broker.address
            for index in range(5):
                assert (await send(client, addr, "Durable", b"m%d" % index, message_properties())).code == 0
            await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "dg", "topic": "Durable", "queueId": "0", "commitOffset": "3"}), 5)
            group = SubscriptionGroupConfig("custom_group", retry_max_times=3)
            response = await client.invoke(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group.encode()), 5)
            assert response.code == ResponseCode.SUCCESS
            await broker.stop()
            await client.close_connection(addr)
            assert json.loads((tmp_path / "config" / "topics.json").read_text())["topicConfigTable"]["Durable"]
            broker = BrokerController(build_broker_config(settings))
            await broker.start()
            addr = broker.address
            try:
                pulled = await pull(client, addr, "dg", "Durable", 0, 0)
                assert [m.body for m in decoded(pulled)] == [b"m%d" % index for index in range(5)]
                offset = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
                    "consumerGroup": "dg", "topic": "Durable", "queueId": "0"}), 5)
                assert offset.ext_fields["offset"] == "3"
                groups = SubscriptionGroupWrapper.decode((await client.invoke(addr, RemotingCommand.request(
                    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 5)).body)
                assert groups.subscription_group_table["custom_group"].retry_max_times == 3
                assert (await send(client, addr, "Durable", b"m5", message_properties())).ext_fields[
                    "queueOffset"] == "5"
            finally:
                await broker.stop()
        finally:
            await client.close()

    asyncio.run(main())


def test_two_brokers_register_and_a_topic_spans_both(tmp_path: Path) -> None:
    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(port=0))
        await namesrv.start()
        brokers = [
            BrokerController(build_broker_config({
                "broker_name": name, "listen_port": 0, "namesrv_addr": namesrv.address,
                "store.store_root": tmp_path / name}))
            for name in ("broker-a", "broker-b")
        ]
        client = RemotingClient()
        try:
            for broker in brokers:
                await broker.start()
            for broker in brokers:
                assert (await send(client, broker.address, "Spanning", b"x", message_properties())).code == 0

            async def spans_both() -> bool:
                response = await client.invoke(namesrv.address, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Spanning"}), 5)
                if response.code != ResponseCode.SUCCESS:
                    return False
                route = TopicRouteData.decode(response.body)
                return {data.broker_name for data in route.queue_datas} == {"broker-a", "broker-b"}

            await wait_for(spans_both, 5)
            response = await client.invoke(namesrv.address, RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Spanning"}), 5)
            route = TopicRouteData.decode(response.body)
            addresses = {data.broker_name: data.broker_addrs[0] for data in route.broker_datas}
            assert addresses == {broker.config.broker_name: broker.address for broker in brokers}
            await brokers[1].stop()

            async def only_a() -> bool:
                response = await client.invoke(namesrv.address, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Spanning"}), 5)
                route = TopicRouteData.decode(response.body)
                return {data.broker_name for data in route.broker_datas} == {"broker-a"}

            await wait_for(only_a, 5)
        finally:
            await client.close()
            for broker in brokers:
                await broker.stop()
            await namesrv.stop()

    asyncio.run(main())


def test_broker_conf_is_parsed_and_unknown_keys_are_rejected(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a RocketMQ-style file\n"
        "brokerClusterName = MyCluster\n"
        "brokerName=broker-x\n"
        "brokerId=0\n"
        "listenPort=10999\n"
        f"storePathRootDir={tmp_path / 'store'}\n"
        "flushDiskType=SYNC_FLUSH\n"
        "autoCreateTopicEnable=false\n"
        "deleteWhen=04\n"
        "fileReservedTime=48\n"
        "brokerRole=ASYNC_MASTER\n"
    )
    config = build_broker_config({"listen_port": 0}, conf_file=conf)
    assert (config.cluster, config.broker_name, config.listen_port) == ("MyCluster", "broker-x", 0)
    assert config.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.store.store_root == tmp_path / "store" and config.store.file_reserved_time_hours == 48
    assert config.auto_create_topic_enable is False
    with pytest.raises(BrokerConfigError, match="noSuchSetting"):
        config_overrides_from_properties("noSuchSetting=1")
    with pytest.raises(BrokerConfigError, match="listenPort"):
        config_overrides_from_properties("listenPort=abc")
    with pytest.raises(BrokerConfigError, match="message_delay_level"):
        build_broker_config({"message_delay_level": "1s 5x"})


def test_sync_flush_broker_serves_sends(tmp_path: Path) -> None:
    async def main() -> None:
        broker = BrokerController(build_broker_config({
            "listen_port": 0, "store.store_root": tmp_path, "store.flush_disk_type": FlushDiskType.SYNC_FLUSH}))
        await broker.start()
        client = RemotingClient()
        try:
            responses = await asyncio.gather(*(send(client, broker.address, "Synced", b"s%d" % i,
                                                    message_properties()) for i in range(20)))
            assert all(response.code == ResponseCode.SUCCESS for response in responses)
            assert len(decoded(await pull(client, broker.address, "g", "Synced", 0, 0))) == 20
        finally:
            await client.close()
            await broker.stop()

    asyncio.run(main())


def test_dev_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    store = tmp_path / "store"
    process = subprocess.Popen(
        [sys.executable, "-c", "from rocketflow.cli.main import cli; cli()", "dev", "--namesrv-port", "0",
         "--broker-port", "0", "--store-dir", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        namesrv_line = process.stdout.readline()
        broker_line = process.stdout.readline()
        namesrv_match = re.fullmatch(r"namesrv listening on (\S+)\n", namesrv_line)
        broker_match = re.fullmatch(r"broker broker-a listening on (\S+)\n", broker_line)
        assert namesrv_match and broker_match, (namesrv_line, broker_line)
        broker_addr = broker_match.group(1)
        namesrv_addr = namesrv_match.group(1)

        async def use() -> None:
            client = RemotingClient()
            try:
                assert (await send(client, broker_addr, "CliTopic", b"hello", message_properties())).code == 0
                update = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": "cli_group", "topic": "CliTopic", "queueId": "0", "commitOffset": "1"})
                assert (await client.invoke(broker_addr, update, 5)).code == ResponseCode.SUCCESS
                route = await client.invoke(namesrv_addr, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}), 5)
                assert route.code == ResponseCode.SUCCESS
            finally:
                await client.close()

        asyncio.run(use())
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    offsets = (store / "config" / "consumerOffset.json").read_text()
    assert re.search(r'"CliTopic@cli_group":\s*\{\s*0:1\s*\}', offsets), offsets
