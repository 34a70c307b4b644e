"""Plain ACL: plain_acl.yml parsing, address patterns, signatures, per-code permission decisions, reloads."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketflow.acl import (
    REDACTED,
    AccessGrant,
    AclClientHook,
    AclConfigError,
    AclRequestHook,
    Permission,
    PlainAclFile,
    PlainAclValidator,
    SessionCredentials,
    check_permission,
    is_secret_setting,
    message_resource,
    parse_address_pattern,
    parse_plain_acl,
    redact_settings,
    redact_value,
    required_permissions,
    sign,
    signature_content,
    verify_signature,
)
from rocketflow.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

ACL_YAML = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{7,8}
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""
CLIENT = "127.0.0.1:53211"


def make_request(code: int, fields: dict[str, str] | None = None, body: bytes = b"", *,
                 access_key: str | None = "RocketMQ", secret_key: str = "12345678") -> RemotingCommand:
    request = RemotingCommand.request(code, fields or {}, body)
    if access_key is not None:
        sign(request.ext_fields, request.body, access_key, secret_key)
    return request


@pytest.fixture
def validator() -> PlainAclValidator:
    return PlainAclValidator(parse_plain_acl(ACL_YAML))


# ============================================================================ signatures


def test_signature_matches_an_independently_computed_hmac_sha1() -> None:
    fields = {"b": "TopicA", "a": "group", "AccessKey": "RocketMQ"}
    # Java's TreeMap order: "AccessKey" < "a" < "b" (upper case sorts first)
    content = b"RocketMQ" + b"group" + b"TopicA" + b"hello"
    expected = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert expected == "vzb11ea6GY1+lwBpi/gKeK4ATSY="  # the same value from `openssl dgst -sha1 -hmac`
    assert signature_content(fields, b"hello") == content
    signed = dict(fields)
    assert sign(signed, b"hello", "RocketMQ", "12345678") == expected
    assert signed["Signature"] == expected


def test_sign_adds_access_key_and_security_token_and_skips_signature_and_unique_key_flag() -> None:
    fields = {"topic": "T", "_UNIQUE_KEY_QUERY": "true", "Signature": "stale"}
    signature = sign(fields, b"", "RocketMQ", "12345678", security_token="tok")
    assert fields["AccessKey"] == "RocketMQ" and fields["SecurityToken"] == "tok" and fields["Signature"] == signature
    content = b"RocketMQtokT"  # AccessKey, SecurityToken, topic; no Signature, no _UNIQUE_KEY_QUERY
    assert signature == base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert verify_signature(fields, b"", "12345678")
    assert not verify_signature(fields, b"", "87654321")
    assert not verify_signature(fields, b"x", "12345678")  # body is covered


def test_signature_over_unique_key_flag_as_java_clients_make_it_is_accepted_too() -> None:
    fields = {"topic": "T", "_UNIQUE_KEY_QUERY": "true", "AccessKey": "RocketMQ"}
    content = b"RocketMQtrueT"  # sorted: AccessKey, _UNIQUE_KEY_QUERY ('_' > 'A'), topic
    fields["Signature"] = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert verify_signature(fields, b"", "12345678")


def test_client_hook_signs_requests_and_resigning_is_stable() -> None:
    hook = AclClientHook(SessionCredentials("RocketMQ", "12345678"))
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "1"})
    hook("127.0.0.1:10911", request)
    first = request.ext_fields["Signature"]
    hook("127.0.0.1:10912", request)  # a retry re-signs the same command
    assert request.ext_fields["Signature"] == first
    assert verify_signature(request.ext_fields, b"", "12345678")
    assert "12345678" not in repr(hook) and "12345678" not in repr(hook.credentials)


def test_session_credentials_reject_empty_keys() -> None:
    with pytest.raises(ValueError, match="access_key"):
        SessionCredentials("", "12345678")
    with pytest.raises(ValueError, match="secret_key"):
        SessionCredentials("RocketMQ", "")


# ============================================================================ plain_acl.yml


def test_parse_plain_acl() -> None:
    config = parse_plain_acl(ACL_YAML)
    assert [pattern.text for pattern in config.global_white_remote_addresses] == ["10.10.103.*", "192.168.0.{7,8}"]
    first = config.accounts["RocketMQ"]
    assert first.secret_key == "12345678" and not first.admin
    assert first.default_topic_perm == Permission.DENY and first.default_group_perm == Permission.SUB
    assert first.white_remote_address.is_blank
    assert first.resource_perms == {
        "topicA": Permission.DENY, "topicB": Permission.PUB | Permission.SUB, "topicC": Permission.SUB,
        "%RETRY%groupA": Permission.DENY, "%RETRY%groupB": Permission.PUB | Permission.SUB,
        "%RETRY%groupC": Permission.SUB,
    }
    second = config.accounts["rocketmq2"]
    assert second.admin and second.resource_perms is None and second.default_topic_perm == Permission.DENY
    assert second.white_remote_address.matches("192.168.1.77")
    assert "12345678" not in repr(first)


@pytest.mark.parametrize(("text", "message"), [
    ("accounts: [", "not valid YAML"),
    ("- a\n- b\n", "expected a mapping"),
    ("", "expected a mapping"),
    ("accounts: {}", "accounts must be a list"),
    ("accounts:\n  - accessKey: short\n    secretKey: '12345678'\n", "longer than 6"),
    ("accounts:\n  - accessKey: RocketMQ\n", "secretKey are required"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: '12345678'\n    topicPerms: [topicA]\n", "'name=PERM'"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: '12345678'\n    topicPerms: [topicA=ALL]\n",
     "not one of DENY"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: '12345678'\n    defaultTopicPerm: WRITE\n",
     "defaultTopicPerm"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: '12345678'\n    admin: maybe\n", "admin must be true"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: '12345678'\n    whiteRemoteAddress: 300.1.1.1\n",
     "whiteRemoteAddress"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: '12345678'\n  - accessKey: RocketMQ\n"
     "    secretKey: '87654321'\n", "defined twice"),
    ("globalWhiteRemoteAddresses: [1.2.3.x]\n", "globalWhiteRemoteAddresses\\[0\\]"),
    ("globalWhiteRemoteAddresses: 10.0.0.1\n", "must be a list"),
])
def test_bad_plain_acl_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(AclConfigError, match=message):
        parse_plain_acl(text, "conf/plain_acl.yml")


def test_numeric_yaml_keys_are_taken_as_strings() -> None:
    config = parse_plain_acl("accounts:\n  - accessKey: 12345678\n    secretKey: 87654321\n")
    assert config.accounts["12345678"].secret_key == "87654321"


# ============================================================================ address patterns


@pytest.mark.parametrize(("pattern", "matching", "not_matching"), [
    ("192.168.0.1", ["192.168.0.1", "::ffff:192.168.0.1"], ["192.168.0.2"]),
    ("*", ["1.2.3.4", "::1"], []),
    ("*.*.*.*", ["1.2.3.4"], []),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
    ("10.0.0.1,10.0.0.9", ["10.0.0.1", "10.0.0.9"], ["10.0.0.5"]),
    ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.6", "192.168.1.0", "192.168.2.3"]),
    ("192.168.*", ["192.168.0.1", "192.168.255.255"], ["192.169.0.1"]),
    ("192.168.*.*", ["192.168.9.9"], ["10.168.9.9"]),
    ("192.168.1-5.*", ["192.168.3.200"], ["192.168.6.1"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["::2", "127.0.0.1"]),
    ("2001:db8::{1,2}", ["2001:db8::1", "2001:db8::2"], ["2001:db8::3"]),
    ("2001:db8:0:0:0:0:0:1-ff", ["2001:db8::a"], ["2001:db8::100"]),
    ("", [], ["127.0.0.1"]),
])
def test_address_patterns(pattern: str, matching: list[str], not_matching: list[str]) -> None:
    parsed = parse_address_pattern(pattern)
    for host in matching:
        assert parsed.matches(host), (pattern, host)
    for host in not_matching:
        assert not parsed.matches(host), (pattern, host)
    assert not parsed.matches("not-an-ip") or parsed.match_all


@pytest.mark.parametrize("pattern", ["1.2.3", "1.2.3.256", "1.2.3.5-1", "1.2.3.-1", "1.2.x.*", "1.2.3.{1,x}",
                                     "{1,2}", "2001:db8::*", "host.example"])
def test_bad_address_patterns(pattern: str) -> None:
    with pytest.raises(AclConfigError, match="remote address pattern"):
        parse_address_pattern(pattern)


@given(st.integers(0, 255), st.integers(0, 255), st.ip_addresses(v=4))
def test_range_pattern_matches_exactly_the_range(low: int, high: int, address: ipaddress.IPv4Address) -> None:
    low, high = min(low, high), max(low, high)
    octets = str(address).split(".")
    pattern = parse_address_pattern(f"{octets[0]}.{octets[1]}.{low}-{high}.*")
    assert pattern.matches(str(address)) == (low <= int(octets[2]) <= high)
    assert not parse_address_pattern(f"{(int(octets[0]) + 1) % 256}.{octets[1]}.*.*").matches(str(address))


# ============================================================================ permission decisions


def test_permission_bits_follow_rocketmq() -> None:
    assert check_permission(Permission.PUB, Permission.PUB | Permission.SUB)
    assert not check_permission(Permission.PUB, Permission.SUB)
    assert not check_permission(Permission.SUB, Permission.DENY | Permission.SUB)
    assert check_permission(Permission.ANY, Permission.SUB)
    assert not check_permission(Permission.ANY, Permission.DENY)


def heartbeat(group: str, *topics: str) -> bytes:
    consumer = ConsumerData(group_name=group, subscription_data_set=[
        SubscriptionData(topic=topic, sub_string="*") for topic in topics])
    return HeartbeatData(client_id="127.0.0.1@1", consumer_data_set=[consumer]).encode()


@pytest.mark.parametrize(("code", "fields", "body", "needs"), [
    (RequestCode.SEND_MESSAGE, {"topic": "T"}, b"x", {"T": Permission.PUB}),
    (RequestCode.SEND_MESSAGE_V2, {"b": "T", "a": "pg"}, b"x", {"T": Permission.PUB}),
    (RequestCode.SEND_BATCH_MESSAGE, {"b": "T"}, b"x", {"T": Permission.PUB}),
    # a send to a retry topic is a consumer returning a message: SUB on the group the topic names
    (RequestCode.SEND_MESSAGE, {"topic": "%RETRY%g", "producerGroup": "CLIENT_INNER_PRODUCER"}, b"x",
     {"%RETRY%g": Permission.SUB}),
    (RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%g", "a": "CLIENT_INNER_PRODUCER"}, b"x", {"%RETRY%g": Permission.SUB}),
    (RequestCode.SEND_BATCH_MESSAGE, {"b": "%RETRY%g", "a": "pg"}, b"x", {"%RETRY%g": Permission.SUB}),
    (RequestCode.SEND_MESSAGE_V2, {"b": "%DLQ%g", "a": "pg"}, b"x", {"%DLQ%g": Permission.PUB}),
    # 4.9.4+ (apache/rocketmq#4457): only SUB on the group, no PUB on the original topic
    (RequestCode.CONSUMER_SEND_MSG_BACK, {"originTopic": "T", "group": "g", "offset": "7"}, b"",
     {"%RETRY%g": Permission.SUB}),
    (RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "g"}, b"",
     {"T": Permission.SUB, "%RETRY%g": Permission.SUB}),
    (RequestCode.QUERY_MESSAGE, {"topic": "T"}, b"", {"T": Permission.SUB}),
    (RequestCode.HEART_BEAT, {}, heartbeat("g", "T", "%RETRY%g"), {"T": Permission.SUB, "%RETRY%g": Permission.SUB}),
    (RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "producerGroup": "pg"}, b"", {}),
    (RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": "g"}, b"", {"%RETRY%g": Permission.SUB}),
    (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"}, b"", {"%RETRY%g": Permission.SUB}),
    (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T"}, b"",
     {"T": Permission.SUB, "%RETRY%g": Permission.SUB}),
    (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "%RETRY%g"}, b"",
     {"%RETRY%g": Permission.SUB}),
    # RocketMQ's parse has no case for these: any valid account
    (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T"}, b"", {}),
    (RequestCode.LOCK_BATCH_MQ, {}, b'{"consumerGroup":"g","clientId":"c","mqSet":[]}', {}),
    (RequestCode.UNLOCK_BATCH_MQ, {}, b'{"consumerGroup":"g","clientId":"c","mqSet":[]}', {}),
    (RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"}, b"", {}),
    (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, b"", {}),
])
def test_required_permissions_per_code(code: int, fields: dict[str, str], body: bytes,
                                       needs: dict[str, Permission]) -> None:
    assert required_permissions(RemotingCommand.request(code, fields, body)) == needs


@pytest.mark.parametrize(("code", "fields", "body", "refusal"), [
    (RequestCode.SEND_MESSAGE_V2, {"b": "topicB"}, b"x", None),
    (RequestCode.SEND_MESSAGE_V2, {"b": "topicA"}, b"x", "no PUB permission on topic topicA (topicPerms gives DENY)"),
    (RequestCode.SEND_MESSAGE, {"topic": "topicC"}, b"x", "no PUB permission on topic topicC (topicPerms gives SUB)"),
    (RequestCode.SEND_MESSAGE, {"topic": "other"}, b"x", "on topic other (defaultTopicPerm is DENY)"),
    (RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupC"}, b"", None),
    (RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupA"}, b"",
     "no SUB permission on group groupA (groupPerms gives DENY)"),
    (RequestCode.PULL_MESSAGE, {"topic": "%RETRY%groupB", "consumerGroup": "groupB"}, b"", None),
    (RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "anyGroup"}, b"", None),  # defaultGroupPerm SUB
    (RequestCode.HEART_BEAT, {}, heartbeat("groupC", "topicB", "%RETRY%groupC"), None),
    (RequestCode.HEART_BEAT, {}, heartbeat("groupC", "topicA"), "no SUB permission on topic topicA"),
    (RequestCode.HEART_BEAT, {}, b"not json", "cannot read the HEART_BEAT body"),
    (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "groupC", "topic": "topicX"}, b"",
     "on topic topicX (defaultTopicPerm is DENY)"),
    (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "groupA", "topic": "topicA"}, b"", None),
    # a SUB-only consumer (topicC=SUB, groupC=SUB) may return messages, by RPC or by the fallback send
    (RequestCode.CONSUMER_SEND_MSG_BACK, {"originTopic": "topicC", "group": "groupC", "offset": "1"}, b"", None),
    (RequestCode.CONSUMER_SEND_MSG_BACK, {"originTopic": "topicA", "group": "groupA", "offset": "1"}, b"",
     "no SUB permission on group groupA (groupPerms gives DENY)"),
    (RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%groupC", "a": "CLIENT_INNER_PRODUCER"}, b"x", None),
    (RequestCode.SEND_MESSAGE, {"topic": "%RETRY%groupA", "producerGroup": "pg"}, b"x",
     "no SUB permission on group groupA (groupPerms gives DENY)"),
    (RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%other", "a": "pg"}, b"x", None),  # defaultGroupPerm SUB
    (RequestCode.GET_MAX_OFFSET, {"topic": "topicA", "queueId": "0"}, b"", None),  # no resource: any valid account
    (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "topicA"}, b"", None),
    (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "topicB"}, b"",
     "request code 17 (UPDATE_AND_CREATE_TOPIC) needs an admin account, but accessKey RocketMQ is not admin"),
    (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "groupB"}, b"", "needs an admin account"),
    (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "topicB", "group": "groupB"}, b"", "needs an admin account"),
])
def test_decisions_for_a_non_admin_account(validator: PlainAclValidator, code: int, fields: dict[str, str],
                                           body: bytes, refusal: str | None) -> None:
    reason = validator.check(make_request(code, fields, body), CLIENT)
    if refusal is None:
        assert reason is None
    else:
        assert reason is not None and refusal in reason and reason.startswith("[ACL] ")


def test_admin_account_without_resource_perms_may_do_everything(validator: PlainAclValidator) -> None:
    for code, fields in ((RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"}),
                         (RequestCode.SEND_MESSAGE_V2, {"b": "X"}),
                         (RequestCode.PULL_MESSAGE, {"topic": "X", "consumerGroup": "g"})):
        assert validator.check(make_request(code, fields, access_key="rocketmq2"), CLIENT) is None


def test_admin_account_with_resource_perms_is_still_bound_by_them() -> None:
    text = ("accounts:\n  - accessKey: adminKey1\n    secretKey: '12345678'\n    admin: true\n"
            "    topicPerms: [secret=DENY]\n    defaultTopicPerm: PUB\n")
    checker = PlainAclValidator(parse_plain_acl(text))
    assert checker.check(make_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"}, access_key="adminKey1"),
                         CLIENT) is None
    assert checker.check(make_request(RequestCode.SEND_MESSAGE_V2, {"b": "X"}, access_key="adminKey1"), CLIENT) is None
    reason = checker.check(make_request(RequestCode.SEND_MESSAGE_V2, {"b": "secret"}, access_key="adminKey1"), CLIENT)
    assert reason is not None and "topic secret" in reason


def test_authentication_failures(validator: PlainAclValidator) -> None:
    fields = {"b": "topicB"}
    wrong_secret = validator.check(make_request(RequestCode.SEND_MESSAGE_V2, fields, secret_key="wrong-secret"),
                                   CLIENT)
    assert wrong_secret is not None and "signature check failed for accessKey RocketMQ" in wrong_secret
    unknown = validator.check(make_request(RequestCode.SEND_MESSAGE_V2, fields, access_key="nobody00"), CLIENT)
    assert unknown is not None and "accessKey nobody00 is not configured" in unknown
    anonymous = validator.check(make_request(RequestCode.SEND_MESSAGE_V2, fields, access_key=None), CLIENT)
    assert anonymous is not None and "has no AccessKey" in anonymous and "127.0.0.1" in anonymous
    unsigned = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "topicB", "AccessKey": "RocketMQ"})
    reason = validator.check(unsigned, CLIENT)
    assert reason is not None and "has no Signature" in reason
    tampered = make_request(RequestCode.SEND_MESSAGE_V2, {"b": "topicB"})
    tampered.ext_fields["b"] = "topicA"
    reason = validator.check(tampered, CLIENT)
    assert reason is not None and "signature check failed" in reason


def test_white_listed_addresses(validator: PlainAclValidator) -> None:
    anonymous = make_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "topicA"}, access_key=None)
    assert validator.check(anonymous, "10.10.103.5:40000") is None  # global white list: anything goes
    assert validator.check(anonymous, "192.168.0.8:40000") is None
    assert validator.check(anonymous, "192.168.0.9:40000") is not None
    # the account's whiteRemoteAddress skips the signature check (RocketMQ's order of checks)
    unsigned = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "x", "AccessKey": "rocketmq2"})
    assert validator.check(unsigned, "192.168.1.20:1234") is None
    assert validator.check(unsigned, "192.168.2.20:1234") is not None
    assert validator.check(anonymous, "[::ffff:10.10.103.9]:5000") is None


def test_request_hook_answers_no_permission() -> None:
    class FakeChannel:
        remote_address = CLIENT

    hook = AclRequestHook(PlainAclValidator(parse_plain_acl(ACL_YAML)))
    allowed = make_request(RequestCode.SEND_MESSAGE_V2, {"b": "topicB"})
    assert hook(FakeChannel(), allowed) is None
    refused = make_request(RequestCode.SEND_MESSAGE_V2, {"b": "topicA"})
    response = hook(FakeChannel(), refused)
    assert response is not None and response.code == ResponseCode.NO_PERMISSION
    assert response.opaque == refused.opaque and response.is_response
    assert response.remark is not None and "topicA" in response.remark and "PUB" in response.remark
    assert hook.refused == 1


# ============================================================================ reloading


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str, mtime_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_acl_file_reloads_on_change_and_keeps_last_good_rules(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    clock = FakeClock()
    write(path, ACL_YAML, 1_000_000_000)
    acl_file = PlainAclFile(path, check_interval=1.0, clock=clock)
    assert set(acl_file.config().accounts) == {"RocketMQ", "rocketmq2"}
    write(path, ACL_YAML.replace("rocketmq2", "rocketmq3"), 2_000_000_000)
    assert "rocketmq2" in acl_file.config().accounts  # not checked again within the interval
    clock.now += 1.5
    assert set(acl_file.config().accounts) == {"RocketMQ", "rocketmq3"}
    assert acl_file.loads == 2
    write(path, "accounts: [", 3_000_000_000)
    clock.now += 1.5
    assert "rocketmq3" in acl_file.config().accounts  # broken edit: last good rules stay
    path.unlink()
    clock.now += 1.5
    assert "rocketmq3" in acl_file.config().accounts
    write(path, ACL_YAML, 4_000_000_000)
    clock.now += 1.5
    assert "rocketmq2" in acl_file.config().accounts
    checker = PlainAclValidator(acl_file)
    assert checker.check(make_request(RequestCode.SEND_MESSAGE_V2, {"b": "topicB"}), CLIENT) is None


def test_missing_or_unreadable_acl_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AclConfigError, match="does not exist"):
        PlainAclFile(tmp_path / "nope.yml").load()
    bad = tmp_path / "bad.yml"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(AclConfigError, match="cannot read ACL file"):
        PlainAclFile(bad).load()


# ============================================================================ client settings


def test_client_config_credentials() -> None:
    from rocketflow.client import ClientConfig, MQClientError

    config = ClientConfig(access_key="RocketMQ", secret_key="12345678", security_token="tok")
    assert config.credentials() == SessionCredentials("RocketMQ", "12345678", "tok")
    assert "12345678" not in repr(config) and "tok" not in repr(config)
    assert ClientConfig().credentials() is None
    with pytest.raises(MQClientError, match="set together"):
        ClientConfig(access_key="RocketMQ")
    with pytest.raises(MQClientError, match="security_token needs"):
        ClientConfig(security_token="tok")
    with pytest.raises(MQClientError, match="secret_key must be a non-empty string"):
        ClientConfig(access_key="RocketMQ", secret_key="")


# ============================================================================ grants, message topics, redaction


@pytest.mark.parametrize("name", ["secretKey", "secret_key", "SECRETKEY", "SecretKey", "secret-key",
                                  "tls.server.keyPassword", "tlsClientKeyPassword", "TLS_SERVER_KEY_PASSWORD",
                                  "dbPasswd", "securityToken", "credentials", "privateKey"])
def test_secret_settings_are_recognised_whatever_their_spelling(name: str) -> None:
    assert is_secret_setting(name)
    assert redact_value(name, "hunter2hunter2") == REDACTED
    assert redact_value(name, "") == ""  # unset stays visible as unset
    assert redact_settings({name: "x", "listenPort": "10911", "accessKey": "ak"}) == {
        name: REDACTED, "listenPort": "10911", "accessKey": "ak"}


@pytest.mark.parametrize("name", ["accessKey", "aclFile", "tlsServerKeyPath", "brokerName", "listenPort"])
def test_other_settings_are_shown(name: str) -> None:
    assert not is_secret_setting(name)
    assert redact_value(name, "value") == "value"


def test_message_resource_is_the_topic_the_data_belongs_to() -> None:
    assert message_resource("Orders", {}) == "Orders"
    assert message_resource("Orders", {"REAL_TOPIC": "Payroll", "RETRY_TOPIC": "Payroll"}) == "Orders"
    assert message_resource("SCHEDULE_TOPIC_XXXX", {"REAL_TOPIC": "Payroll"}) == "Payroll"
    assert message_resource("RMQ_SYS_TRANS_HALF_TOPIC", {"REAL_TOPIC": "Payroll"}) == "Payroll"
    assert message_resource("%RETRY%cg", {"RETRY_TOPIC": "Orders"}) == "Orders"
    assert message_resource("%DLQ%cg", {"RETRY_TOPIC": "Orders"}) == "Orders"
    assert message_resource("%RETRY%cg", {}) == "%RETRY%cg"
    # a delayed retry: waiting in the schedule topic for the group's retry topic
    assert message_resource("SCHEDULE_TOPIC_XXXX", {"REAL_TOPIC": "%RETRY%cg", "RETRY_TOPIC": "Orders"}) == "Orders"
    assert message_resource("SCHEDULE_TOPIC_XXXX", {}) == "SCHEDULE_TOPIC_XXXX"


def test_access_grant_of_a_request(validator: PlainAclValidator) -> None:
    def grant(access_key: str, address: str = CLIENT) -> AccessGrant:
        request = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "0"})
        sign(request.ext_fields, request.body, access_key, "12345678")
        return validator.grant(request, address)

    user = grant("RocketMQ")
    assert user.checked and not user.is_admin and user.access_key == "RocketMQ"
    assert user.refusal("topicB", Permission.SUB) is None
    assert "no SUB permission on topic topicA" in (user.refusal("topicA", Permission.SUB) or "")
    assert user.message_refusal("%RETRY%groupC", {"RETRY_TOPIC": "topicC"}, Permission.SUB) is None
    assert user.message_refusal("%RETRY%groupC", {"RETRY_TOPIC": "topicA"}, Permission.SUB) is not None
    assert grant("rocketmq2", "10.0.0.1:1").is_admin
    assert grant("RocketMQ", "10.10.103.4:1").is_admin  # a globally white-listed address may do anything
    nobody = grant("unknownKey1")
    assert nobody.checked and not nobody.is_admin and nobody.refusal("topicB", Permission.SUB) is not None
    assert AccessGrant.OPEN.refusal("topicA", Permission.SUB) is None and not AccessGrant.OPEN.is_admin


def test_config_reads_are_admin_only_and_mixed_topics_need_an_admin(validator: PlainAclValidator) -> None:
    def check(code: int, fields: dict[str, str]) -> str | None:
        request = RemotingCommand.request(code, fields)
        sign(request.ext_fields, request.body, "RocketMQ", "12345678")
        return validator.check(request, CLIENT)

    for code in (RequestCode.GET_BROKER_CONFIG, RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_ALL_CONSUMER_OFFSET,
                 RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RequestCode.GET_ALL_DELAY_OFFSET):
        assert "needs an admin account" in (check(code, {}) or "")
    pull = {"consumerGroup": "groupC", "topic": "SCHEDULE_TOPIC_XXXX", "queueId": "0"}
    assert "needs an admin account" in (check(RequestCode.PULL_MESSAGE, pull) or "")
    assert check(RequestCode.PULL_MESSAGE, {**pull, "topic": "topicC"}) is None
    stats = {"consumerGroup": "groupA"}
    assert "no SUB permission on group groupA" in (check(RequestCode.GET_CONSUME_STATS, stats) or "")
    assert check(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "groupC"}) is None
