"""ACL attacks on a ``rocketflow namesrv`` and a ``rocketflow broker`` (subprocesses, ACL on, TLS on), by raw frames.

The accounts: an admin, the broker's own (admin: it signs the broker's registrations), a producer
with PUB on one topic and no SUB anywhere, a subscriber with SUB on one topic and its group, and a
wide reader (SUB on every topic but the secret one). The attacks:

- the producer reads GET_BROKER_CONFIG to learn the broker's secretKey and TLS key password, then signs
  admin requests with them (topic creation, a rogue REGISTER_BROKER): refused at the first step, and
  no answer to any state-reading request (nor the metrics, nor the servers' logs) carries a secret;
- the producer reads another topic's message by commit-log offset (VIEW_MESSAGE_BY_ID);
- the subscriber moves another topic's message into its group's retry topic (CONSUMER_SEND_MSG_BACK)
  to pull it from there;
- the wide reader reads a delayed message of the secret topic where it waits (SCHEDULE_TOPIC_XXXX);
- the producer commits another producer's prepared transaction message (END_TRANSACTION).

And the legitimate paths still work: the subscriber returns its own message and reads it back from
``%RETRY%<group>``; an admin views any message.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from reliability_helpers import RawConnection, ServerProcess, broker_args, pull_request, send_request, wait_until

from rocketflow.acl import SessionCredentials, sign
from rocketflow.protocol.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from rocketflow.protocol.codec import decode_records
from rocketflow.protocol.ids import decode_offset_msg_id
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import RegisterBrokerRequestHeader

pytestmark = pytest.mark.reliability

ADMIN = SessionCredentials("attackAdmin1", "adminSecret-9f2b7e")
BROKER = SessionCredentials("brokerAcct01", "brokerSecret-7c1d55")
#: PUB on PUB_TOPIC, nothing else: no SUB anywhere, not admin
PRODUCER = SessionCredentials("pubOnlyUser1", "producerSecret-3e8a0")
#: SUB on SUB_TOPIC and SUB_GROUP only
SUBSCRIBER = SessionCredentials("subscriber01", "subscriberSecret-5d0c")
#: SUB on every topic and group but SECRET_TOPIC
WIDE = SessionCredentials("wideReader01", "wideSecret-11aa42")
KEY_PASSWORD = "tlsKeyPassword-42f0c"
KV_SECRET = "kvStoredPassword-8b8b1"
#: every value no answer, metric or log line may contain
SECRETS = (ADMIN.secret_key, BROKER.secret_key, PRODUCER.secret_key, SUBSCRIBER.secret_key, WIDE.secret_key,
           KEY_PASSWORD, KV_SECRET)
REDACTED = "******"

SECRET_TOPIC = "PayrollT"
PUB_TOPIC = "ClicksT"
SUB_TOPIC = "OrdersT"
SUB_GROUP = "orders_cg"
SECRET_BODY = b"salary of the CEO: 1,000,000"
TIMEOUT = 10.0
#: level 1 is 1 s: a returned message is back in its retry topic a second later
DELAY_LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 2h"
LONG_DELAY_LEVEL = 18


def acl_yaml() -> str:
    def account(credentials: SessionCredentials, **extra: object) -> dict[str, object]:
        return {"accessKey": credentials.access_key, "secretKey": credentials.secret_key, **extra}

    return json.dumps({"globalWhiteRemoteAddresses": [], "accounts": [
        account(ADMIN, admin=True),
        account(BROKER, admin=True),
        account(PRODUCER, defaultTopicPerm="DENY", defaultGroupPerm="DENY", topicPerms=[f"{PUB_TOPIC}=PUB"]),
        account(SUBSCRIBER, defaultTopicPerm="DENY", defaultGroupPerm="DENY", topicPerms=[f"{SUB_TOPIC}=SUB"],
                groupPerms=[f"{SUB_GROUP}=SUB"]),
        account(WIDE, defaultTopicPerm="SUB", defaultGroupPerm="SUB", topicPerms=[f"{SECRET_TOPIC}=DENY"]),
    ]})  # JSON is YAML


def write_tls_files(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, encrypted with KEY_PASSWORD."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=2)).sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.BestAvailableEncryption(KEY_PASSWORD.encode())))
    return cert_path, key_path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Servers:
    namesrv: ServerProcess
    broker: ServerProcess
    namesrv_log: Path
    broker_log: Path
    metrics_port: int


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    directory = tmp_path_factory.mktemp("acl-attacks")
    acl = directory / "plain_acl.yml"
    acl.write_text(acl_yaml())
    cert, key = write_tls_files(directory)
    namesrv_log, broker_log = directory / "namesrv.log", directory / "broker.log"
    namesrv = ServerProcess(["namesrv", "--port", "0", "--acl-file", str(acl), "-v"], namesrv_log)
    metrics_port = free_port()
    try:
        broker = ServerProcess(
            [*broker_args(directory / "store", f"accessKey={BROKER.access_key}", f"secretKey={BROKER.secret_key}",
                          f"tls.server.keyPassword={KEY_PASSWORD}", f"tls.client.keyPassword={KEY_PASSWORD}",
                          f"messageDelayLevel={DELAY_LEVELS}", namesrv=namesrv.address),
             "--acl-file", str(acl), "--tls-cert", str(cert), "--tls-key", str(key),
             "--metrics-port", str(metrics_port), "-v"], broker_log)
    except BaseException:
        namesrv.stop()
        raise
    try:
        yield Servers(namesrv, broker, namesrv_log, broker_log, metrics_port)
    finally:
        broker.stop()
        namesrv.stop()


def call(address: str, code: int, fields: dict[str, str] | None = None, body: bytes = b"",
         who: SessionCredentials | None = None) -> RemotingCommand:
    """One request over a new connection, signed by ``who``."""
    request = RemotingCommand.request(code, fields, body)
    if who is not None:
        sign(request.ext_fields, request.body, who.access_key, who.secret_key)
    connection = RawConnection(address)
    try:
        response = connection.request(request, TIMEOUT)
    finally:
        connection.close()
    assert response is not None, f"the server closed the connection on {RequestCode(code).name}"
    return response


def signed(request: RemotingCommand, who: SessionCredentials) -> RemotingCommand:
    sign(request.ext_fields, request.body, who.access_key, who.secret_key)
    return request


def exchange(address: str, request: RemotingCommand) -> RemotingCommand:
    connection = RawConnection(address)
    try:
        response = connection.request(request, TIMEOUT)
    finally:
        connection.close()
    assert response is not None
    return response


def leaks(response: RemotingCommand) -> list[str]:
    """The secrets an answer carries, anywhere."""
    text = (response.remark or "") + json.dumps(response.ext_fields) + response.body.decode("latin-1")
    return [secret for secret in SECRETS if secret in text]


def create_topic(servers: Servers, topic: str) -> None:
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
              "topicFilterType": "SINGLE_TAG", "order": "false"}
    response = call(servers.broker.address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields, who=ADMIN)
    assert response.code == ResponseCode.SUCCESS, response.remark


def send(servers: Servers, topic: str, body: bytes, who: SessionCredentials = ADMIN, *, delay_level: int = 0,
         prepared: bool = False, producer_group: str = "attack_pg") -> RemotingCommand:
    properties = {"KEYS": "payroll", "WAIT": "true", "UNIQ_KEY": f"{topic}-{time.monotonic_ns():X}"}
    sys_flag = 0
    if delay_level:
        properties[MessageConst.DELAY_TIME_LEVEL] = str(delay_level)
    if prepared:
        properties[MessageConst.TRANSACTION_PREPARED] = "true"
        properties[MessageConst.PRODUCER_GROUP] = producer_group
        sys_flag = int(MessageSysFlag.TRANSACTION_PREPARED)
    request = signed(send_request(topic, body, properties, sys_flag=sys_flag, producer_group=producer_group), who)
    response = exchange(servers.broker.address, request)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return response


def commit_log_offset(send_response: RemotingCommand) -> int:
    return decode_offset_msg_id(send_response.ext_fields["msgId"])[2]


def pull(servers: Servers, who: SessionCredentials, group: str, topic: str, offset: int = 0) -> RemotingCommand:
    request = signed(pull_request(group, topic, 0, offset, suspend=False), who)
    return exchange(servers.broker.address, request)


def pulled(response: RemotingCommand) -> list[MessageExt]:
    return decode_records(response.body) if response.code == ResponseCode.SUCCESS and response.body else []


@pytest.fixture(scope="module")
def secret_message(servers: Servers) -> int:
    """The commit-log offset of a message of SECRET_TOPIC (the first one the broker stores)."""
    for topic in (SECRET_TOPIC, PUB_TOPIC, SUB_TOPIC):
        create_topic(servers, topic)
    return commit_log_offset(send(servers, SECRET_TOPIC, SECRET_BODY))


# ---------------------------------------------------------------------- a non-admin account becomes admin


def test_non_admin_cannot_read_the_broker_config_nor_use_its_keys(servers: Servers, secret_message: int) -> None:
    response = call(servers.broker.address, RequestCode.GET_BROKER_CONFIG, who=PRODUCER)
    assert response.code == ResponseCode.NO_PERMISSION, response.body[:200]
    assert "needs an admin account" in (response.remark or "")
    assert not leaks(response)
    # without the broker's key, the escalation's next steps stay refused
    fields = {"topic": "EvilT", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
              "topicFilterType": "SINGLE_TAG", "order": "false"}
    assert call(servers.broker.address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields,
                who=PRODUCER).code == ResponseCode.NO_PERMISSION
    assert register_rogue(servers, PRODUCER).code == ResponseCode.NO_PERMISSION


def register_rogue(servers: Servers, who: SessionCredentials) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper({SECRET_TOPIC: TopicConfig(SECRET_TOPIC, 8, 8)}, DataVersion(1, 1))
    body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper).encode()
    header = RegisterBrokerRequestHeader(broker_name="broker-rogue", broker_addr="127.0.0.1:1",
                                         cluster_name="DefaultCluster", ha_server_addr="127.0.0.1:2", broker_id=0)
    return call(servers.namesrv.address, RequestCode.REGISTER_BROKER, header.to_ext_fields(), body, who=who)


@pytest.mark.parametrize("who", [ADMIN, BROKER], ids=["admin", "broker-account"])
def test_admin_reads_the_broker_config_with_secrets_redacted(servers: Servers, who: SessionCredentials) -> None:
    response = call(servers.broker.address, RequestCode.GET_BROKER_CONFIG, who=who)
    assert response.code == ResponseCode.SUCCESS, response.remark
    settings = dict(line.split("=", 1) for line in response.body.decode().splitlines() if "=" in line)
    assert settings["secretKey"] == REDACTED
    assert settings["tlsServerKeyPassword"] == REDACTED
    assert settings["tlsClientKeyPassword"] == REDACTED
    assert settings["accessKey"] == BROKER.access_key  # an identifier, sent in clear with every request
    assert settings["aclEnable"] == "true"
    assert not leaks(response)


@pytest.mark.parametrize("setting", ["secretKey", "secret_key", "SECRETKEY", "SecretKey", "secretKEY", "SECRET_KEY",
                                     "accessKey", "aclEnable", "ACL_ENABLE", "aclFile",
                                     "tls.server.keyPassword", "tlsServerKeyPassword", "TLS_SERVER_KEY_PASSWORD"])
def test_update_broker_config_cannot_change_keys_or_acl(servers: Servers, setting: str) -> None:
    body = f"{setting}=attackerChosen1\n".encode()
    refused = call(servers.broker.address, RequestCode.UPDATE_BROKER_CONFIG, body=body, who=PRODUCER)
    assert refused.code == ResponseCode.NO_PERMISSION
    answer = call(servers.broker.address, RequestCode.UPDATE_BROKER_CONFIG, body=body, who=ADMIN)
    assert answer.code != ResponseCode.SUCCESS, setting  # fixed at start, or no such setting
    config = call(servers.broker.address, RequestCode.GET_BROKER_CONFIG, who=ADMIN).body.decode()
    assert "attackerChosen1" not in config and "aclEnable=true" in config


def generic_fields(servers: Servers, secret_offset: int) -> dict[str, str]:
    """Every header field the read requests take, filled in (the servers ignore those a code does not use)."""
    return {
        "topic": SECRET_TOPIC, "consumerGroup": SUB_GROUP, "group": SUB_GROUP, "queueId": "0", "timestamp": "0",
        "offset": str(secret_offset), "key": "payroll", "maxNum": "32", "beginTimestamp": "0",
        "endTimestamp": str(1 << 50), "producerGroup": "attack_pg", "clientId": "127.0.0.1@1", "namespace": "app",
        "cluster": "DefaultCluster", "clusterName": "DefaultCluster", "brokerName": "broker-a",
        "brokerAddr": servers.broker.address, "brokerId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
        "expressionType": "TAG", "jstackEnable": "false", "index": "0", "count": "32", "statsName": "TOPIC_PUT_NUMS",
        "statsKey": SECRET_TOPIC, "isOrder": "false", "compareGroup": SUB_GROUP, "filterGroups": "",
    }


#: Every code that reads a broker's state (handled or not), and every one that reads a name server's.
BROKER_READS = [
    RequestCode.PULL_MESSAGE, RequestCode.QUERY_MESSAGE, RequestCode.QUERY_BROKER_OFFSET,
    RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_TOPIC_CONFIG_LIST,
    RequestCode.GET_TOPIC_NAME_LIST, RequestCode.GET_BROKER_CONFIG, RequestCode.GET_BROKER_RUNTIME_INFO,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.GET_EARLIEST_MSG_STORETIME, RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
    RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.CHECK_CLIENT_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RequestCode.GET_TOPIC_STATS_INFO,
    RequestCode.GET_CONSUMER_CONNECTION_LIST, RequestCode.GET_PRODUCER_CONNECTION_LIST, RequestCode.GET_CONSUME_STATS,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, RequestCode.QUERY_CONSUME_TIME_SPAN,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, RequestCode.GET_CONSUMER_RUNNING_INFO,
    RequestCode.CONSUME_MESSAGE_DIRECTLY,
    RequestCode.QUERY_CORRECTION_OFFSET, RequestCode.VIEW_BROKER_STATS_DATA, RequestCode.GET_BROKER_CONSUME_STATS,
    RequestCode.QUERY_CONSUME_QUEUE, RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
    RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, RequestCode.GET_KV_CONFIG, RequestCode.GET_NAMESRV_CONFIG,
]
NAMESRV_READS = [
    RequestCode.GET_KV_CONFIG, RequestCode.GET_KVLIST_BY_NAMESPACE, RequestCode.GET_ROUTEINFO_BY_TOPIC,
    RequestCode.GET_BROKER_CLUSTER_INFO, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
    RequestCode.GET_TOPICS_BY_CLUSTER, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, RequestCode.GET_UNIT_TOPIC_LIST,
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    RequestCode.GET_NAMESRV_CONFIG, RequestCode.QUERY_DATA_VERSION, RequestCode.GET_BROKER_CONFIG,
]
ACCOUNTS = [ADMIN, BROKER, PRODUCER, WIDE]
ACCOUNT_IDS = ["admin", "broker-account", "producer", "wide-reader"]


@pytest.fixture(scope="module")
def kv_secret(servers: Servers) -> None:
    """A KV entry whose key names a secret, on the name server."""
    response = call(servers.namesrv.address, RequestCode.PUT_KV_CONFIG,
                    {"namespace": "app", "key": "dbPassword", "value": KV_SECRET}, who=ADMIN)
    assert response.code == ResponseCode.SUCCESS, response.remark


@pytest.mark.parametrize("who", ACCOUNTS, ids=ACCOUNT_IDS)
@pytest.mark.parametrize("code", BROKER_READS, ids=lambda code: code.name)
def test_no_broker_answer_carries_a_secret(servers: Servers, secret_message: int, code: RequestCode,
                                           who: SessionCredentials) -> None:
    response = call(servers.broker.address, code, generic_fields(servers, secret_message), who=who)
    assert not leaks(response), (code.name, response.code, response.remark)


@pytest.mark.parametrize("who", ACCOUNTS, ids=ACCOUNT_IDS)
@pytest.mark.parametrize("code", NAMESRV_READS, ids=lambda code: code.name)
def test_no_name_server_answer_carries_a_secret(servers: Servers, kv_secret: None, code: RequestCode,
                                                who: SessionCredentials) -> None:
    fields = {**generic_fields(servers, 0), "key": "dbPassword"}
    body = DataVersion(1, 1).encode() if code == RequestCode.QUERY_DATA_VERSION else b""
    response = call(servers.namesrv.address, code, fields, body, who=who)
    assert not leaks(response), (code.name, response.code, response.remark)


def test_kv_secret_is_redacted_for_the_admin_and_refused_to_others(servers: Servers, kv_secret: None) -> None:
    fields = {"namespace": "app", "key": "dbPassword"}
    value = call(servers.namesrv.address, RequestCode.GET_KV_CONFIG, fields, who=ADMIN)
    assert value.code == ResponseCode.SUCCESS and value.ext_fields["value"] == REDACTED
    table = call(servers.namesrv.address, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "app"}, who=ADMIN)
    assert table.code == ResponseCode.SUCCESS and REDACTED.encode() in table.body
    for code in (RequestCode.GET_KV_CONFIG, RequestCode.GET_KVLIST_BY_NAMESPACE):
        assert call(servers.namesrv.address, code, fields, who=PRODUCER).code == ResponseCode.NO_PERMISSION


def test_metrics_carry_no_secret(servers: Servers, secret_message: int) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{servers.metrics_port}/metrics", timeout=TIMEOUT) as answer:
        text = answer.read().decode()
    assert "rocketflow_" in text
    assert not [secret for secret in SECRETS if secret in text]


# ---------------------------------------------------------------------- reading a topic without SUB


def test_view_message_by_id_needs_sub_on_the_message_topic(servers: Servers, secret_message: int) -> None:
    for offset in {0, secret_message}:
        response = call(servers.broker.address, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)},
                        who=PRODUCER)
        assert response.code == ResponseCode.NO_PERMISSION, response.remark
        assert SECRET_BODY not in response.body
        assert f"no SUB permission on topic {SECRET_TOPIC}" in (response.remark or "")
    # the admin views any message
    viewed = call(servers.broker.address, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(secret_message)},
                  who=ADMIN)
    assert viewed.code == ResponseCode.SUCCESS
    assert decode_records(viewed.body)[0].body == SECRET_BODY


def send_back(servers: Servers, who: SessionCredentials, offset: int, *, delay_level: int = 1) -> RemotingCommand:
    fields = {"offset": str(offset), "group": SUB_GROUP, "delayLevel": str(delay_level), "originMsgId": "",
              "originTopic": SUB_TOPIC, "unitMode": "false", "maxReconsumeTimes": "16"}
    return call(servers.broker.address, RequestCode.CONSUMER_SEND_MSG_BACK, fields, who=who)


def test_send_back_cannot_move_another_topics_message_into_the_retry_topic(servers: Servers,
                                                                          secret_message: int) -> None:
    response = send_back(servers, SUBSCRIBER, secret_message)
    assert response.code == ResponseCode.NO_PERMISSION, response.remark
    assert f"no SUB permission on topic {SECRET_TOPIC}" in (response.remark or "")
    retry = f"%RETRY%{SUB_GROUP}"
    deadline = time.monotonic() + 3.0  # past the 1 s delay the message would have waited
    while time.monotonic() < deadline:
        assert all(msg.body != SECRET_BODY for msg in pulled(pull(servers, SUBSCRIBER, SUB_GROUP, retry))), \
            "another topic's message reached the subscriber through its retry topic"
        time.sleep(0.2)


def test_subscriber_still_returns_its_own_messages_and_reads_them_back(servers: Servers,
                                                                      secret_message: int) -> None:
    send(servers, SUB_TOPIC, b"order 1")
    messages = pulled(pull(servers, SUBSCRIBER, SUB_GROUP, SUB_TOPIC))
    assert [msg.body for msg in messages][-1:] == [b"order 1"]
    assert send_back(servers, SUBSCRIBER, messages[-1].commit_log_offset).code == ResponseCode.SUCCESS
    retry = f"%RETRY%{SUB_GROUP}"
    returned: list[MessageExt] = []

    def back() -> bool:
        returned[:] = [msg for msg in pulled(pull(servers, SUBSCRIBER, SUB_GROUP, retry)) if msg.body == b"order 1"]
        return bool(returned)

    wait_until(back, timeout=15, what="the returned message in the retry topic")
    assert returned[0].properties[MessageConst.RETRY_TOPIC] == SUB_TOPIC
    # a message read from the retry topic goes back again (it is still the subscribed topic's)
    assert send_back(servers, SUBSCRIBER, returned[0].commit_log_offset).code == ResponseCode.SUCCESS


def test_delayed_messages_are_not_readable_where_they_wait(servers: Servers, secret_message: int) -> None:
    """A delayed message waits in SCHEDULE_TOPIC_XXXX with its topic in REAL_TOPIC: reading it there needs
    the admin, or SUB on that topic."""
    waiting = commit_log_offset(send(servers, SECRET_TOPIC, SECRET_BODY, delay_level=LONG_DELAY_LEVEL))
    queue = LONG_DELAY_LEVEL - 1
    pull_schedule = signed(pull_request("any_cg", "SCHEDULE_TOPIC_XXXX", queue, 0, suspend=False), WIDE)
    response = exchange(servers.broker.address, pull_schedule)
    assert response.code == ResponseCode.NO_PERMISSION, response.remark
    assert SECRET_BODY not in response.body
    viewed = call(servers.broker.address, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(waiting)}, who=WIDE)
    assert viewed.code == ResponseCode.NO_PERMISSION and SECRET_BODY not in viewed.body
    query = {"topic": "SCHEDULE_TOPIC_XXXX", "key": "payroll", "maxNum": "32", "beginTimestamp": "0",
             "endTimestamp": str(1 << 50)}
    queried = call(servers.broker.address, RequestCode.QUERY_MESSAGE, query, who=WIDE)
    assert queried.code == ResponseCode.NO_PERMISSION and SECRET_BODY not in queried.body
    # the wide reader reads the topics it may: a message of another topic, by offset
    other = commit_log_offset(send(servers, PUB_TOPIC, b"click"))
    assert call(servers.broker.address, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(other)},
                who=WIDE).code == ResponseCode.SUCCESS


def test_end_transaction_needs_pub_on_the_prepared_message_topic(servers: Servers, secret_message: int) -> None:
    prepared = send(servers, SECRET_TOPIC, b"pending payroll run", prepared=True, producer_group="payroll_pg")
    fields = {"producerGroup": "payroll_pg", "tranStateTableOffset": prepared.ext_fields["queueOffset"],
              "commitLogOffset": str(commit_log_offset(prepared)), "commitOrRollback": "8",
              "msgId": prepared.ext_fields["msgId"], "fromTransactionCheck": "false"}
    refused = call(servers.broker.address, RequestCode.END_TRANSACTION, fields, who=PRODUCER)
    assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
    assert f"no PUB permission on topic {SECRET_TOPIC}" in (refused.remark or "")
    assert call(servers.broker.address, RequestCode.END_TRANSACTION, fields, who=ADMIN).code == ResponseCode.SUCCESS


# ---------------------------------------------------------------------- last: what the servers logged


def test_server_logs_carry_no_secret(servers: Servers, secret_message: int) -> None:
    time.sleep(0.3)  # let the last requests' log lines reach the files
    for log in (servers.namesrv_log, servers.broker_log):
        text = log.read_text(errors="replace")
        assert text, f"{log.name} is empty (the servers run with -v)"
        assert not [secret for secret in SECRETS if secret in text], log.name


def big_heartbeat(group: str, topics: list[str]) -> bytes:
    """A heartbeat body over the ACL hook's inline size (so the heartbeat processor checks it, off the loop)."""
    from rocketflow.acl import HEARTBEAT_INLINE_BYTES
    from rocketflow.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData

    subscriptions = [SubscriptionData(topic, " || ".join(f"tag{index}" for index in range(200)),
                                      {f"tag{index}" for index in range(200)}, set(), 1) for topic in topics]
    body = HeartbeatData("acl-big-heartbeat", [], [ConsumerData(group, subscription_data_set=subscriptions)]).encode()
    assert len(body) > HEARTBEAT_INLINE_BYTES
    return body


def test_a_big_heartbeat_is_checked_like_a_small_one(servers: Servers) -> None:
    """Past the size the ACL hook decodes on the loop, the heartbeat processor checks the same permissions."""
    allowed = call(servers.broker.address, RequestCode.HEART_BEAT, body=big_heartbeat(SUB_GROUP, [SUB_TOPIC] * 40),
                   who=SUBSCRIBER)
    assert allowed.code == ResponseCode.SUCCESS, allowed.remark
    for group, topics, denied in ((SUB_GROUP, [SUB_TOPIC] * 39 + [SECRET_TOPIC], f"topic {SECRET_TOPIC}"),
                                  ("payroll_cg", [SUB_TOPIC] * 40, "payroll_cg")):
        refused = call(servers.broker.address, RequestCode.HEART_BEAT, body=big_heartbeat(group, topics),
                       who=SUBSCRIBER)
        assert refused.code == ResponseCode.NO_PERMISSION and denied in (refused.remark or ""), refused.remark
