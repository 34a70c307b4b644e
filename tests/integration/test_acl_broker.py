"""A real broker (and name server) with the plain ACL on: signed clients, refusals, white lists, reloads."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rocketflow import Message, Producer, PushConsumer
from rocketflow.acl import AclClientHook, AclConfigError, SessionCredentials
from rocketflow.broker.config import build_broker_config, config_overrides_from_properties
from rocketflow.broker.controller import BrokerController
from rocketflow.client import (
    ClientConfig,
    ClientInstance,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    MQError,
    PullStatus,
)
from rocketflow.client.instance import shutdown_all
from rocketflow.dev import DevCluster
from rocketflow.namesrv import NameServer, NamesrvConfig
from rocketflow.net import RemotingClient
from rocketflow.protocol.codec import decode_records
from rocketflow.protocol.message import MessageConst, MessageExt, MessageQueue
from rocketflow.protocol.sysflag import PullSysFlag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import PullMessageRequestHeader
from testkit import create_topic as create_routed_topic
from testkit import wait_until

ADMIN = SessionCredentials("aclAdmin01", "adminSecret01")
USER = SessionCredentials("aclUser001", "userSecret01")
#: a subscribe-only account: SUB on SUB_TOPIC and SUB_GROUP, nothing else (no PUB anywhere)
SUBSCRIBER = SessionCredentials("aclSubOnly1", "subSecret01")
TOPIC = "AclTopic"
DENIED_TOPIC = "AclDenied"
GROUP = "acl_cg"
SUB_TOPIC = "AclSubOnlyT"
SUB_GROUP = "acl_sub_only_cg"
#: short delay levels (3 = 1 s) so a retry takes a second
DELAY_LEVELS = "1s 1s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s"
FAST_CLIENT = {"persist_first_delay": 0.2, "persist_consumer_offset_interval": 0.2, "poll_name_server_interval": 1.0}


def acl_yaml(*, white: list[str] | None = None, denied_perm: str = "DENY") -> str:
    return f"""
globalWhiteRemoteAddresses: {white or []}
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=PUB|SUB
      - {DENIED_TOPIC}={denied_perm}
  - accessKey: {SUBSCRIBER.access_key}
    secretKey: {SUBSCRIBER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["{SUB_TOPIC}=SUB"]
    groupPerms: ["{SUB_GROUP}=SUB"]
"""


def write_acl(path: Path, text: str) -> None:
    """Write the file and move its mtime forward, so a change is seen even on coarse-mtime file systems."""
    previous = path.stat().st_mtime_ns if path.exists() else time.time_ns()
    path.write_text(text)
    stamp = max(previous + 1_000_000_000, time.time_ns())
    os.utime(path, ns=(stamp, stamp))




@pytest.fixture(scope="module")
def acl_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("acl") / "plain_acl.yml"
    write_acl(path, acl_yaml())
    return path


@pytest.fixture(scope="module")
def cluster(acl_path: Path) -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={
        "acl_enable": True, "acl_file": acl_path, "acl_reload_check_interval_ms": 50,
        "message_delay_level": DELAY_LEVELS})
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def reset_acl_file(acl_path: Path) -> Iterator[None]:
    yield
    shutdown_all()
    if acl_path.read_text() != acl_yaml():
        write_acl(acl_path, acl_yaml())
        time.sleep(0.2)  # past the broker's check interval before the next test


def call(addr: str, request: RemotingCommand, credentials: SessionCredentials | None = None) -> RemotingCommand:
    """One request over a fresh connection, signed with ``credentials`` (unsigned if None)."""

    async def main() -> RemotingCommand:
        client = RemotingClient(rpc_hook=AclClientHook(credentials) if credentials is not None else None)
        try:
            return await client.invoke(addr, request, 5.0)
        finally:
            await client.close()

    return asyncio.run(main())


@contextmanager
def admin_instance(cluster: DevCluster) -> Iterator[ClientInstance]:
    """A started client instance signing with the admin account."""
    config = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name=f"acl-admin-{time.monotonic_ns()}",
                          access_key=ADMIN.access_key, secret_key=ADMIN.secret_key)
    instance = ClientInstance.get_or_create(config)
    instance.start()
    try:
        yield instance
    finally:
        instance.shutdown()


def create_topic(cluster: DevCluster, topic: str, queues: int = 2) -> None:
    with admin_instance(cluster) as instance:
        create_routed_topic(instance, cluster.broker_addr, topic, queues)


def read_queue(instance: ClientInstance, broker_addr: str, mq: MessageQueue) -> list[MessageExt]:
    """Every message of ``mq``, by raw PULL_MESSAGE (no suspend, no offset commit)."""
    found: list[MessageExt] = []
    while True:
        header = PullMessageRequestHeader(
            consumer_group="acl_reader", topic=mq.topic, queue_id=mq.queue_id, queue_offset=len(found),
            max_msg_nums=32, sys_flag=int(PullSysFlag.SUBSCRIPTION), commit_offset=0, suspend_timeout_millis=0,
            sub_version=0, subscription="*", expression_type="TAG")
        result = instance.run(instance.api.pull_message(broker_addr, header, 5.0))
        if result.status is not PullStatus.FOUND:
            return found
        found.extend(decode_records(result.body))


def send_request(topic: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "acl_pg", "b": topic, "c": "TBW102",
                                                                  "d": "4", "e": "0", "f": "0", "g": "0"}, b"hi")


def test_right_keys_send_and_consume(cluster: DevCluster) -> None:
    create_topic(cluster, TOPIC)
    producer = Producer("acl_pg", namesrv=cluster.namesrv_addr, instance_name="acl-producer",
                        access_key=USER.access_key, secret_key=USER.secret_key)
    producer.start()
    try:
        sent = [producer.send(Message(TOPIC, f"m{index}".encode(), keys=f"k{index}")) for index in range(10)]
    finally:
        producer.shutdown()
    assert all(result.msg_id for result in sent)
    received: list[str] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            received.extend(msg.keys or "" for msg in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(GROUP, namesrv=cluster.namesrv_addr, instance_name="acl-consumer",
                            access_key=USER.access_key, secret_key=USER.secret_key,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **FAST_CLIENT)
    consumer.subscribe(TOPIC, "*")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    try:
        wait_until(lambda: len(received) >= 10, what="10 messages consumed")
        # offsets are committed with UPDATE_CONSUMER_OFFSET, which the ACL checks too
        wait_until(lambda: sum(consumer.committed_offsets(TOPIC).values()) == 10, what="offsets committed")
    finally:
        consumer.shutdown()
    assert sorted(received) == sorted(f"k{index}" for index in range(10))
    assert cluster.broker is not None and cluster.broker.acl_file is not None


def test_subscribe_only_account_sends_failed_messages_back_to_retry_and_dlq(cluster: DevCluster) -> None:
    """CONSUMER_SEND_MSG_BACK needs only SUB on the group (RocketMQ 4.9.4+): a consumer without any PUB
    permission returns failed messages to %RETRY% and, past max_reconsume_times, to %DLQ%."""
    create_topic(cluster, SUB_TOPIC, 1)
    producer = Producer("acl_sub_pg", namesrv=cluster.namesrv_addr, instance_name="acl-sub-producer",
                        access_key=ADMIN.access_key, secret_key=ADMIN.secret_key)
    producer.start()
    try:
        for index in range(3):
            producer.send(Message(SUB_TOPIC, f"m{index}".encode(), keys=f"fail{index}"))
        producer.send(Message(SUB_TOPIC, b"ok", keys="ok"))
    finally:
        producer.shutdown()
    # the account really cannot publish: its own send to the topic is refused
    refused = call(cluster.broker_addr, send_request(SUB_TOPIC), SUBSCRIBER)
    assert refused.code == ResponseCode.NO_PERMISSION and "no PUB permission" in (refused.remark or "")
    assert cluster.broker is not None and cluster.broker.acl_hook is not None
    refusals_before = cluster.broker.acl_hook.refused
    seen: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            seen.extend((msg.keys or "", context.message_queue.topic, msg.reconsume_times) for msg in msgs)
        if any((msg.keys or "").startswith("fail") for msg in msgs):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(SUB_GROUP, namesrv=cluster.namesrv_addr, instance_name="acl-sub-consumer",
                            access_key=SUBSCRIBER.access_key, secret_key=SUBSCRIBER.secret_key,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, max_reconsume_times=1,
                            **FAST_CLIENT)
    consumer.subscribe(SUB_TOPIC, "*")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    try:
        def deliveries(key: str) -> list[tuple[str, int]]:
            with lock:
                return [(topic, times) for seen_key, topic, times in seen if seen_key == key]

        fails = [f"fail{index}" for index in range(3)]
        wait_until(lambda: all(len(deliveries(key)) >= 2 for key in fails), timeout=20,
                   what="each failing message consumed twice (once from %RETRY%)")
        retry = f"%RETRY%{SUB_GROUP}"
        for key in fails:
            assert deliveries(key)[:2] == [(SUB_TOPIC, 0), (retry, 1)], deliveries(key)
        assert deliveries("ok") == [(SUB_TOPIC, 0)]
        broker_name = cluster.broker_config.broker_name
        with admin_instance(cluster) as instance:
            retried = read_queue(instance, cluster.broker_addr, MessageQueue(retry, broker_name, 0))
            assert sorted(msg.keys or "" for msg in retried) == fails
            dlq = MessageQueue(f"%DLQ%{SUB_GROUP}", broker_name, 0)

            def dead() -> list[MessageExt]:
                return read_queue(instance, cluster.broker_addr, dlq)

            wait_until(lambda: len(dead()) == 3, timeout=15, what="the three failing messages in %DLQ%")
            letters = dead()
        assert sorted(msg.keys or "" for msg in letters) == fails
        assert all(msg.properties[MessageConst.RETRY_TOPIC] == SUB_TOPIC for msg in letters)
        time.sleep(0.5)
        assert all(len(deliveries(key)) == 2 for key in fails)  # dead-lettered: no more deliveries
    finally:
        consumer.shutdown()
    # every request of the subscribe-only consumer was allowed, send-backs included
    assert cluster.broker.acl_hook.refused == refusals_before, cluster.broker.acl_hook.last_refusal


def test_wrong_secret_is_refused_with_no_permission(cluster: DevCluster) -> None:
    wrong = SessionCredentials(USER.access_key, "not-the-secret")
    response = call(cluster.broker_addr, send_request(TOPIC), wrong)
    assert response.code == ResponseCode.NO_PERMISSION
    assert response.remark is not None and f"signature check failed for accessKey {USER.access_key}" in response.remark
    unsigned = call(cluster.broker_addr, send_request(TOPIC))
    assert unsigned.code == ResponseCode.NO_PERMISSION and "has no AccessKey" in (unsigned.remark or "")
    producer = Producer("acl_pg_wrong", namesrv=cluster.namesrv_addr, instance_name="acl-wrong",
                        access_key=wrong.access_key, secret_key=wrong.secret_key, retry_times_when_send_failed=0)
    producer.start()
    try:
        with pytest.raises(MQError, match="signature check failed"):
            producer.send(Message(TOPIC, b"x"))
    finally:
        producer.shutdown()


def test_denied_topic_is_refused(cluster: DevCluster) -> None:
    response = call(cluster.broker_addr, send_request(DENIED_TOPIC), USER)
    assert response.code == ResponseCode.NO_PERMISSION
    assert response.remark == (f"[ACL] accessKey {USER.access_key} has no PUB permission on topic {DENIED_TOPIC} "
                               "(topicPerms gives DENY)")
    other = call(cluster.broker_addr, send_request("NotListed"), USER)
    assert other.code == ResponseCode.NO_PERMISSION and "(defaultTopicPerm is DENY)" in (other.remark or "")


def test_admin_only_code_is_refused_for_a_non_admin(cluster: DevCluster) -> None:
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "AclAdminT", "readQueueNums": "1",
                                                                         "writeQueueNums": "1", "perm": "6"})
    response = call(cluster.broker_addr, request, USER)
    assert response.code == ResponseCode.NO_PERMISSION
    assert "needs an admin account" in (response.remark or "") and USER.access_key in (response.remark or "")
    create_topic(cluster, "AclAdminT")  # the admin account may
    assert cluster.broker is not None and "AclAdminT" in cluster.broker.topics.topics


def test_white_listed_address_works_without_keys_after_a_file_edit(cluster: DevCluster, acl_path: Path) -> None:
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
    refused = call(cluster.broker_addr, request)
    assert refused.code == ResponseCode.NO_PERMISSION
    write_acl(acl_path, acl_yaml(white=["127.0.0.1"]))

    def accepted() -> bool:
        again = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
        return call(cluster.broker_addr, again).code != ResponseCode.NO_PERMISSION

    wait_until(accepted, what="the white list to be reloaded")


def test_file_edit_reloads_permissions(cluster: DevCluster, acl_path: Path) -> None:
    assert call(cluster.broker_addr, send_request(DENIED_TOPIC), USER).code == ResponseCode.NO_PERMISSION
    write_acl(acl_path, acl_yaml(denied_perm="PUB"))
    # the topic does not exist, so an allowed send fails further on, with another code
    wait_until(lambda: call(cluster.broker_addr, send_request(DENIED_TOPIC), USER).code != ResponseCode.NO_PERMISSION,
               what="the permission change to be reloaded")
    write_acl(acl_path, "accounts: [")  # a broken edit keeps the last good rules
    time.sleep(0.3)
    assert call(cluster.broker_addr, send_request(DENIED_TOPIC), USER).code != ResponseCode.NO_PERMISSION
    assert call(cluster.broker_addr, send_request("NotListed"), USER).code == ResponseCode.NO_PERMISSION


def test_broker_conf_and_a_missing_file(tmp_path: Path) -> None:
    overrides = config_overrides_from_properties(f"aclEnable=true\naclFile={tmp_path / 'x.yml'}\n")
    assert overrides == {"acl_enable": True, "acl_file": tmp_path / "x.yml"}
    config = build_broker_config({"acl_enable": True, "listen_port": 0, "store.store_root": tmp_path / "store"})
    assert config.acl_file_path == tmp_path / "store" / "conf" / "plain_acl.yml"

    async def main() -> None:
        broker = BrokerController(config)
        with pytest.raises(AclConfigError, match="does not exist"):
            await broker.start()
        assert not broker.server.is_serving

    asyncio.run(main())


def test_name_server_with_acl(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    write_acl(path, acl_yaml())

    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(port=0, acl_enable=True, acl_file=path))
        await namesrv.start()
        try:
            addr = namesrv.address
            for credentials, expected in ((None, ResponseCode.NO_PERMISSION), (USER, ResponseCode.TOPIC_NOT_EXIST)):
                client = RemotingClient(rpc_hook=AclClientHook(credentials) if credentials else None)
                try:
                    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
                    response = await client.invoke(addr, request, 5.0)
                    assert response.code == expected, response
                    put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG,
                                                  {"namespace": "ns", "key": "k", "value": "v"})
                    refused = await client.invoke(addr, put, 5.0)
                    assert refused.code == ResponseCode.NO_PERMISSION
                finally:
                    await client.close()
        finally:
            await namesrv.stop()

    asyncio.run(main())


def test_spark_options_take_acl_keys(cluster: DevCluster) -> None:
    from rocketflow.spark.connection import SourceError, get_connection
    from rocketflow.spark.options import ReaderOptions, WriterOptions

    create_topic(cluster, "AclSparkT")
    options = ReaderOptions.parse({"namesrv": cluster.namesrv_addr, "topic": "AclSparkT",
                                   "accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key}, streaming=False)
    assert options.access_key == ADMIN.access_key and ADMIN.secret_key not in repr(options)
    writer = WriterOptions.parse({"namesrv": cluster.namesrv_addr, "accessKey": USER.access_key,
                                  "secretKey": USER.secret_key})
    assert (writer.access_key, writer.secret_key) == (USER.access_key, USER.secret_key)
    with pytest.raises(SourceError, match="accessKey and secretKey must be set together"):
        ReaderOptions.parse({"namesrv": cluster.namesrv_addr, "topic": "AclSparkT", "accessKey": "x"},
                            streaming=False)
    connection = get_connection(options.namesrv, options.access_key, options.secret_key)
    queues = connection.queues("AclSparkT")
    assert connection.min_offsets(queues) == {mq: 0 for mq in queues}
    unsigned = get_connection(cluster.namesrv_addr)
    assert unsigned is not connection
    with pytest.raises((MQError, SourceError), match="has no AccessKey"):
        unsigned.min_offsets(queues)


def test_cli_acl_file_option_turns_acl_on(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rocketflow.cli.main import cli

    bad = tmp_path / "plain_acl.yml"
    bad.write_text("accounts: [")
    result = CliRunner().invoke(cli, ["broker", "--port", "0", "--store-dir", str(tmp_path / "store"),
                                      "--acl-file", str(bad)])
    assert result.exit_code == 1, result.output
    assert "not valid YAML" in result.output and str(bad) in result.output
    result = CliRunner().invoke(cli, ["dev", "--namesrv-port", "0", "--broker-port", "0",
                                      "--acl-file", str(tmp_path / "missing.yml")])
    assert result.exit_code == 2 and "does not exist" in result.output
