"""Wire bodies: exact fastjson encodings of reference examples, lenient decoding, compressed
REGISTER_BROKER bodies, and malformed input (always `BodyDecodeError`)."""

from __future__ import annotations

import contextlib
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketflow.protocol.bodies import (
    BrokerData,
    CheckClientRequestBody,
    ClusterInfo,
    Connection,
    ConsumeFromWhere,
    ConsumerConnection,
    ConsumerData,
    ConsumerListBody,
    ConsumerOffsetTable,
    ConsumerRunningInfo,
    ConsumeStats,
    ConsumeStatus,
    ConsumeType,
    DataVersion,
    DelayOffsetTable,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    OffsetSerializeWrapper,
    OffsetWrapper,
    ProcessQueueInfo,
    ProducerConnection,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    ResetOffsetBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicFilterType,
    TopicList,
    TopicOffset,
    TopicRouteData,
    TopicStatsTable,
    UnlockBatchRequestBody,
    WireBody,
    register_body_crc32,
)
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting import fastjson
from rocketflow.remoting.codes import LanguageCode
from rocketflow.remoting.errors import BodyDecodeError

MQ_A0 = MessageQueue("T", "broker-a", 0)

# --------------------------------------------------------------------------- reference examples

HEARTBEAT_JSON = (
    '{"clientID":"192.168.1.5@12345#8264937482",'
    '"consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",'
    '"groupName":"cg","messageModel":"CLUSTERING",'
    '"subscriptionDataSet":['
    '{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA",'
    '"subVersion":1650000000000,"tagsSet":["TagA"],"topic":"TopicTest"},'
    '{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
    '"subVersion":1650000000001,"tagsSet":[],"topic":"%RETRY%cg"}],'
    '"unitMode":false}],'
    '"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}'
)
HEARTBEAT = HeartbeatData(
    client_id="192.168.1.5@12345#8264937482",
    producer_data_set=[ProducerData("CLIENT_INNER_PRODUCER")],
    consumer_data_set=[
        ConsumerData(
            group_name="cg",
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=MessageModel.CLUSTERING,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            subscription_data_set=[
                SubscriptionData("TopicTest", "TagA", {"TagA"}, {2598919}, 1650000000000),
                SubscriptionData("%RETRY%cg", "*", set(), set(), 1650000000001),
            ],
        )
    ],
)

TOPICS_WRAPPER = TopicConfigSerializeWrapper(
    {"T": TopicConfig("T", 4, 4)}, DataVersion(timestamp=1650000000000, counter=7)
)
TOPICS_JSON = (
    '{"dataVersion":{"counter":7,"timestamp":1650000000000},"topicConfigTable":{"T":{"order":false,"perm":6,'
    '"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}'
)

EXAMPLES: list[tuple[WireBody, str]] = [
    (HEARTBEAT, HEARTBEAT_JSON),
    (
        LockBatchRequestBody("cg", "ip@pid#n", {MQ_A0}),
        '{"clientId":"ip@pid#n","consumerGroup":"cg","mqSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}',
    ),
    (
        UnlockBatchRequestBody("cg", "ip@pid#n", {MessageQueue("T", "broker-a", 1), MQ_A0}),
        '{"clientId":"ip@pid#n","consumerGroup":"cg","mqSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"},'
        '{"brokerName":"broker-a","queueId":1,"topic":"T"}]}',
    ),
    (
        LockBatchResponseBody({MQ_A0}),
        '{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}',
    ),
    (
        ConsumeStats({MQ_A0: OffsetWrapper(120, 100, 1650000000000)}, 0.0),
        '{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        '{"brokerOffset":120,"consumerOffset":100,"lastTimestamp":1650000000000}}}',
    ),
    (
        TopicRouteData(
            queue_datas=[QueueData("broker-a", 4, 4, 6, 0)],
            broker_datas=[BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})],
        ),
        '{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
        '"cluster":"DefaultCluster"}],"filterServerTable":{},'
        '"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}',
    ),
    (
        TopicRouteData(order_topic_conf="broker-a:4"),
        '{"brokerDatas":[],"filterServerTable":{},"orderTopicConf":"broker-a:4","queueDatas":[]}',
    ),
    (
        ClusterInfo(
            {"broker-a": BrokerData("DefaultCluster", "broker-a", {0: "ip:10911"})},
            {"DefaultCluster": {"broker-a"}},
        ),
        '{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"ip:10911"},"brokerName":"broker-a",'
        '"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}',
    ),
    (TOPICS_WRAPPER, TOPICS_JSON),
    (
        RegisterBrokerBody(TOPICS_WRAPPER, []),
        '{"filterServerList":[],"topicConfigSerializeWrapper":' + TOPICS_JSON + "}",
    ),
    (
        ConsumerOffsetTable({"TopicTest@g": {0: 123, 1: 98}}),
        '{"offsetTable":{"TopicTest@g":{0:123,1:98}}}',
    ),
    (DelayOffsetTable({1: 0, 3: 27}), '{"offsetTable":{1:0,3:27}}'),
    (
        SubscriptionGroupWrapper({"g": SubscriptionGroupConfig("g")}, DataVersion(1650000000000, 1)),
        '{"dataVersion":{"counter":1,"timestamp":1650000000000},"subscriptionGroupTable":{"g":{"brokerId":0,'
        '"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,"groupName":"g",'
        '"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}}}',
    ),
    (
        OffsetSerializeWrapper({MessageQueue("t", "b", 0): 1024}),
        '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:1024}}',
    ),
    (
        ResetOffsetBody({MessageQueue("t", "b", 1): 7, MessageQueue("t", "b", 0): 5}),
        '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:5,{"brokerName":"b","queueId":1,"topic":"t"}:7}}',
    ),
    (
        TopicStatsTable({MQ_A0: TopicOffset(0, 12, 1650000000000)}),
        '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        '{"lastUpdateTimestamp":1650000000000,"maxOffset":12,"minOffset":0}}}',
    ),
    (ConsumerListBody(["ip@pid#nanotime", "ip2@1"]), '{"consumerIdList":["ip@pid#nanotime","ip2@1"]}'),
    (TopicList({"b", "a"}), '{"topicList":["a","b"]}'),
    (TopicList({"a"}, "1.2.3.4:10911"), '{"brokerAddr":"1.2.3.4:10911","topicList":["a"]}'),
    (KVTable({"b": "2", "a": "1"}), '{"table":{"a":"1","b":"2"}}'),
    (DataVersion(1650000000000, 3), '{"counter":3,"timestamp":1650000000000}'),
    (
        ConsumerConnection(
            [Connection("cid", "127.0.0.1:5555", LanguageCode.CPP, 63)],
            {"T": SubscriptionData("T", "*", set(), set(), 5)},
            ConsumeType.CONSUME_PASSIVELY,
            MessageModel.CLUSTERING,
            ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        ),
        '{"connectionSet":[{"clientAddr":"127.0.0.1:5555","clientId":"cid","language":"CPP","version":63}],'
        '"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",'
        '"subscriptionTable":{"T":{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
        '"subVersion":5,"tagsSet":[],"topic":"T"}}}',
    ),
    (
        ProducerConnection([Connection("pid", "1.1.1.1:1", LanguageCode.PYTHON, 399)]),
        '{"connectionSet":[{"clientAddr":"1.1.1.1:1","clientId":"pid","language":"PYTHON","version":399}]}',
    ),
    (CheckClientRequestBody("cid", "g"), '{"clientId":"cid","group":"g"}'),
    (
        ConsumerRunningInfo(
            properties={"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
            mq_table={MQ_A0: ProcessQueueInfo(commit_offset=5, locked=True)},
            status_table={"T": ConsumeStatus(pull_rt=1.5, consume_failed_msgs=2)},
        ),
        '{"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"cachedMsgCount":0,"cachedMsgMaxOffset":0,'
        '"cachedMsgMinOffset":0,"cachedMsgSizeInMiB":0,"commitOffset":5,"droped":false,"lastConsumeTimestamp":0,'
        '"lastLockTimestamp":0,"lastPullTimestamp":0,"locked":true,"transactionMsgCount":0,'
        '"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,"tryUnlockTimes":0}},'
        '"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"},'
        '"statusTable":{"T":{"consumeFailedMsgs":2,"consumeFailedTPS":0.0,"consumeOKTPS":0.0,"consumeRT":0.0,'
        '"pullRT":1.5,"pullTPS":0.0}},"subscriptionSet":[]}',
    ),
]


@pytest.mark.parametrize(("body", "expected"), EXAMPLES, ids=[type(body).__name__ for body, _ in EXAMPLES])
def test_exact_encoding_and_decoding(body: WireBody, expected: str) -> None:
    assert body.encode().decode() == expected
    assert type(body).decode(expected.encode()) == body
    assert type(body).decode(expected + "\n") == body


def _assert_keys_sorted(value: Any) -> None:
    if isinstance(value, dict):
        string_keys = [key for key in value if isinstance(key, str)]
        assert string_keys == sorted(string_keys)
        for item in value.values():
            _assert_keys_sorted(item)
    elif isinstance(value, list):
        for item in value:
            _assert_keys_sorted(item)


@pytest.mark.parametrize(("body", "expected"), EXAMPLES, ids=[type(body).__name__ for body, _ in EXAMPLES])
def test_bean_keys_are_written_sorted(body: WireBody, expected: str) -> None:
    _assert_keys_sorted(fastjson.loads(body.encode()))


def test_pretty_config_file_encoding() -> None:
    expected = (
        "{\n"
        '\t"dataVersion":{\n'
        '\t\t"counter":7,\n'
        '\t\t"timestamp":1650000000000\n'
        "\t},\n"
        '\t"topicConfigTable":{\n'
        '\t\t"T":{\n'
        '\t\t\t"order":false,\n'
        '\t\t\t"perm":6,\n'
        '\t\t\t"readQueueNums":4,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n'
        '\t\t\t"topicName":"T",\n'
        '\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":4\n'
        "\t\t}\n"
        "\t}\n"
        "}"
    )
    assert TOPICS_WRAPPER.encode(pretty=True).decode() == expected
    assert TopicConfigSerializeWrapper.decode(expected) == TOPICS_WRAPPER
    offsets = ConsumerOffsetTable({"T@g": {1: 5, 0: 4}})
    assert offsets.encode(pretty=True).decode() == '{\n\t"offsetTable":{\n\t\t"T@g":{0:4,1:5\n\t\t}\n\t}\n}'
    assert ConsumerOffsetTable.decode(offsets.encode(pretty=True)) == offsets


# --------------------------------------------------------------------------- defaults


def test_defaults_follow_the_protocol() -> None:
    config = TopicConfig("T")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (16, 16, 6)
    assert config.topic_filter_type is TopicFilterType.SINGLE_TAG
    assert (config.topic_sys_flag, config.order) == (0, False)
    group = SubscriptionGroupConfig("g")
    assert group.consume_enable and group.consume_from_min_enable and group.consume_broadcast_enable
    assert group.notify_consumer_ids_changed_enable
    assert (group.retry_queue_nums, group.retry_max_times, group.broker_id) == (1, 16, 0)
    assert group.which_broker_when_consume_slowly == 1
    # missing keys decode to the same defaults
    assert TopicConfig.decode(b'{"topicName":"T"}') == config
    assert SubscriptionGroupConfig.decode(b'{"groupName":"g"}') == group


def test_data_version_next_version() -> None:
    version = DataVersion(timestamp=1, counter=4)
    version.next_version()
    assert version.counter == 5 and version.timestamp > 1
    other = DataVersion(0, 0)
    other.assign_from(version)
    assert other == version


def test_table_keys_fill_missing_names() -> None:
    wrapper = TopicConfigSerializeWrapper.decode(b'{"topicConfigTable":{"T":{"perm":7}}}')
    assert wrapper.topic_config_table["T"].topic_name == "T"
    assert wrapper.topic_config_table["T"].perm == 7


def test_broker_data_addresses() -> None:
    broker = BrokerData.decode(b'{"brokerAddrs":{"1":"slave:10911",0:"master:10911"},"brokerName":"b"}')
    assert broker.broker_addrs == {0: "master:10911", 1: "slave:10911"}
    assert broker.master_addr == broker.select_broker_addr() == "master:10911"
    slave_only = BrokerData("c", "b", {2: "s2", 1: "s1"})
    assert slave_only.master_addr is None and slave_only.select_broker_addr() == "s1"
    assert BrokerData("c", "b").select_broker_addr() is None


def test_consume_stats_total_diff() -> None:
    stats = ConsumeStats({MQ_A0: OffsetWrapper(120, 100), MessageQueue("T", "broker-a", 1): OffsetWrapper(10, 10)})
    assert stats.compute_total_diff() == 20


def test_register_body_crc32() -> None:
    assert register_body_crc32(b"") == 0
    assert register_body_crc32(b"123456789") == 0xCBF43926 & 0x7FFFFFFF


# --------------------------------------------------------------------------- what real clients send


CPP_ORDERLY_HEARTBEAT = (
    b'{"clientID":"13238-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
    b'"groupName":"g1","messageModel":1,"subscriptionDataSet":[{"subString":"*","subVersion":"1795311516070",'
    b'"topic":"%RETRY%g1"},{"subString":"*","subVersion":"1795311516070","topic":"TopicTest"}]}]}\n'
)


def test_cpp_heartbeat_with_integer_enums() -> None:
    heartbeat = HeartbeatData.decode(CPP_ORDERLY_HEARTBEAT)
    assert heartbeat.client_id == "13238-127.0.0.1@DEFAULT"
    assert heartbeat.producer_data_set == []
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.group_name == "g1"
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model is MessageModel.CLUSTERING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert consumer.unit_mode is False
    assert [sub.topic for sub in consumer.subscription_data_set] == ["%RETRY%g1", "TopicTest"]
    for sub in consumer.subscription_data_set:
        assert (sub.sub_string, sub.sub_version, sub.expression_type) == ("*", 1795311516070, "TAG")
        assert sub.tags_set == set() and sub.code_set == set() and sub.class_filter_mode is False
    # re-encoded the Java way: names, not numbers
    reencoded = fastjson.loads(heartbeat.encode())
    assert reencoded["consumerDataSet"][0]["consumeType"] == "CONSUME_PASSIVELY"
    assert reencoded["consumerDataSet"][0]["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
    assert reencoded["producerDataSet"] == []


def test_cpp_pull_consumer_heartbeat_without_subscriptions() -> None:
    body = b'{"clientID":"13838-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":0,"groupName":"g1","messageModel":1}]}\n'  # noqa: E501
    (consumer,) = HeartbeatData.decode(body).consumer_data_set
    assert consumer.consume_type is ConsumeType.CONSUME_ACTIVELY
    assert consumer.subscription_data_set == []


JAVA_ORDINALS = {
    ConsumeType: ["CONSUME_ACTIVELY", "CONSUME_PASSIVELY"],
    MessageModel: ["BROADCASTING", "CLUSTERING"],
    ConsumeFromWhere: [
        "CONSUME_FROM_LAST_OFFSET",
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        "CONSUME_FROM_MIN_OFFSET",
        "CONSUME_FROM_MAX_OFFSET",
        "CONSUME_FROM_FIRST_OFFSET",
        "CONSUME_FROM_TIMESTAMP",
    ],
}
_ENUM_KEYS = {ConsumeType: "consumeType", MessageModel: "messageModel", ConsumeFromWhere: "consumeFromWhere"}


@pytest.mark.parametrize(
    ("enum_type", "ordinal"),
    [(enum_type, ordinal) for enum_type, names in JAVA_ORDINALS.items() for ordinal in range(len(names))],
)
def test_enum_ordinals_and_names(enum_type: type, ordinal: int) -> None:
    key = _ENUM_KEYS[enum_type]
    name = JAVA_ORDINALS[enum_type][ordinal]
    for raw in (ordinal, str(ordinal), name):
        consumer = ConsumerData.from_json_dict({"groupName": "g", key: raw})
        assert getattr(consumer, _attr(key)).name == name


def _attr(key: str) -> str:
    return {"consumeType": "consume_type", "messageModel": "message_model", "consumeFromWhere": "consume_from_where"}[
        key
    ]


@pytest.mark.parametrize("raw", [6, -1, "BOGUS", True, 1.5, [], {}])
def test_bad_enum_values(raw: Any) -> None:
    with pytest.raises(BodyDecodeError, match=r"consumerDataSet\[0\]\.consumeFromWhere"):
        HeartbeatData.decode(fastjson.dumps({"clientID": "c", "consumerDataSet": [{"consumeFromWhere": raw}]}))


def test_lock_body_from_cpp() -> None:
    body = (
        b'{"clientId":"13238-127.0.0.1@DEFAULT","consumerGroup":"g1","mqSet":['
        b'{"brokerName":"broker-a","queueId":0,"topic":"%RETRY%g1"}]}\n'
    )
    decoded = LockBatchRequestBody.decode(body)
    assert decoded == LockBatchRequestBody("g1", "13238-127.0.0.1@DEFAULT", {MessageQueue("%RETRY%g1", "broker-a", 0)})


def test_numbers_as_strings_and_string_map_keys_are_accepted() -> None:
    stats = ConsumeStats.decode(
        b'{"consumeTps":"1.5","offsetTable":{"{\\"brokerName\\":\\"b\\",\\"queueId\\":\\"2\\",\\"topic\\":\\"t\\"}":'
        b'{"brokerOffset":"9","consumerOffset":3.0}}}'
    )
    assert stats == ConsumeStats({MessageQueue("t", "b", 2): OffsetWrapper(9, 3, 0)}, 1.5)
    assert DelayOffsetTable.decode(b'{"offsetTable":{"1":"5"}}') == DelayOffsetTable({1: 5})
    assert Connection.decode(b'{"clientId":"c","language":1}').language is LanguageCode.CPP


def test_unknown_keys_and_nulls_are_ignored() -> None:
    decoded = HeartbeatData.decode(
        b'{"clientID":"c","heartbeatFingerprint":1,"isWithoutSub":false,"producerDataSet":null,'
        b'"consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"T","filterClassSource":"x",'
        b'"tagsSet":null}]}]}'
    )
    assert decoded.producer_data_set == []
    assert decoded.consumer_data_set[0].subscription_data_set[0].tags_set == set()
    lock = LockBatchRequestBody.decode(b'{"clientId":"c","consumerGroup":"g","mqSet":[],"onlyThisBroker":true}')
    assert lock.mq_set == set()


# --------------------------------------------------------------------------- compressed REGISTER_BROKER


def _register_body() -> RegisterBrokerBody:
    wrapper = TopicConfigSerializeWrapper(
        {
            "TopicTest": TopicConfig("TopicTest", 4, 4, 6),
            "%RETRY%g1": TopicConfig("%RETRY%g1", 1, 1, 6),
            "Ordered": TopicConfig("Ordered", 8, 2, 4, TopicFilterType.MULTI_TAG, topic_sys_flag=3, order=True),
        },
        DataVersion(timestamp=1650000000000, counter=12),
    )
    return RegisterBrokerBody(wrapper, ["10.0.0.9:7000"])


def test_compressed_register_body_layout() -> None:
    body = _register_body()
    raw = zlib.decompress(body.encode_compressed())
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        (length,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        payload = raw[pos : pos + length]
        pos += length
        return payload

    assert chunk() == b'{"counter":12,"timestamp":1650000000000}'
    (count,) = struct.unpack_from(">i", raw, pos)
    pos += 4
    assert count == 3
    assert sorted(chunk() for _ in range(count)) == [
        b"%RETRY%g1 1 1 6 SINGLE_TAG",
        b"Ordered 8 2 4 MULTI_TAG",
        b"TopicTest 4 4 6 SINGLE_TAG",
    ]
    assert chunk() == b'["10.0.0.9:7000"]'
    assert pos == len(raw)


def test_compressed_register_body_round_trip() -> None:
    body = _register_body()
    decoded = RegisterBrokerBody.decode_compressed(body.encode_compressed())
    assert decoded.filter_server_list == body.filter_server_list
    assert decoded.topic_config_serialize_wrapper.data_version == body.topic_config_serialize_wrapper.data_version
    expected = dict(body.topic_config_serialize_wrapper.topic_config_table)
    # the compact form does not carry topicSysFlag and order
    expected["Ordered"] = TopicConfig("Ordered", 8, 2, 4, TopicFilterType.MULTI_TAG)
    assert decoded.topic_config_serialize_wrapper.topic_config_table == expected
    # and the JSON form keeps everything
    assert RegisterBrokerBody.decode(body.encode()) == body


def _compress_parts(*parts: bytes) -> bytes:
    return zlib.compress(b"".join(parts))


def _chunk(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not zlib at all",
        zlib.compress(b"x" * 100)[:-5],
        _compress_parts(b"\x00\x00"),
        _compress_parts(_chunk(b"{}")),
        _compress_parts(struct.pack(">i", 1000), b"{}"),
        _compress_parts(_chunk(b"[]"), struct.pack(">i", 0), _chunk(b"[]")),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", -1), _chunk(b"[]")),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", 2), _chunk(b"T 1 1 6 SINGLE_TAG")),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", 1), _chunk(b"T 1 1 SINGLE_TAG")),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", 1), _chunk(b"T x 1 6 SINGLE_TAG")),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", 1), _chunk(b"T 1 1 6 NO_TAG")),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", 1), _chunk(b"\xff 1 1 6 SINGLE_TAG")),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", 0), _chunk(b"{")),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", 0), _chunk(b'["a",{}]')),
        _compress_parts(_chunk(b'{"counter":1}'), struct.pack(">i", 0)),
    ],
)
def test_malformed_compressed_register_body(data: bytes) -> None:
    with pytest.raises(BodyDecodeError, match=r"RegisterBrokerBody \(compressed\)"):
        RegisterBrokerBody.decode_compressed(data)


def test_compressed_register_body_refuses_zlib_bombs(monkeypatch: pytest.MonkeyPatch) -> None:
    import rocketflow.protocol.bodies.route as bodies_module

    monkeypatch.setattr(bodies_module, "MAX_DECOMPRESSED_REGISTER_BODY", 1000)
    with pytest.raises(BodyDecodeError, match="more than 1000 bytes"):
        RegisterBrokerBody.decode_compressed(zlib.compress(b"\x00" * 5000))


# --------------------------------------------------------------------------- malformed JSON bodies


@pytest.mark.parametrize(
    ("cls", "data", "where"),
    [
        (HeartbeatData, b"", "empty body"),
        (HeartbeatData, b"   ", "HeartbeatData: malformed JSON"),
        (HeartbeatData, b"not json", "HeartbeatData: malformed JSON"),
        (HeartbeatData, b"\xff\xfe", "HeartbeatData: JSON is not valid UTF-8"),
        (HeartbeatData, b"[]", "HeartbeatData: expected an object, got an array"),
        (HeartbeatData, b'{"clientID":{}}', "HeartbeatData.clientID: expected a string"),
        (HeartbeatData, b'{"consumerDataSet":{}}', "HeartbeatData.consumerDataSet: expected an array"),
        (HeartbeatData, b'{"consumerDataSet":[1]}', r"HeartbeatData.consumerDataSet\[0\]: expected an object"),
        (
            HeartbeatData,
            b'{"consumerDataSet":[{"subscriptionDataSet":[{"subVersion":"abc"}]}]}',
            r"consumerDataSet\[0\]\.subscriptionDataSet\[0\]\.subVersion: expected an integer",
        ),
        (
            HeartbeatData,
            b'{"consumerDataSet":[{"subscriptionDataSet":[{"codeSet":["x"]}]}]}',
            r"subscriptionDataSet\[0\]\.codeSet: expected an integer",
        ),
        (HeartbeatData, b'{"consumerDataSet":[{"unitMode":"maybe"}]}', "unitMode: expected a boolean"),
        (TopicRouteData, b'{"brokerDatas":[{"brokerAddrs":{"x":"a"}}]}', "expected an integer map key"),
        (TopicRouteData, b'{"brokerDatas":[{"brokerAddrs":[]}]}', "brokerAddrs: expected an object"),
        (TopicRouteData, b'{"queueDatas":[{"perm":true}]}', r"queueDatas\[0\]\.perm: expected an integer"),
        (TopicRouteData, b'{"filterServerTable":{"a":"b"}}', "expected an array"),
        (ConsumeStats, b'{"offsetTable":{"x":{}}}', "is not a MessageQueue"),
        (ConsumeStats, b'{"offsetTable":{5:{}}}', "expected a MessageQueue map key"),
        (ConsumeStats, b'{"offsetTable":{{"queueId":"q"}:{}}}', "queueId: expected an integer"),
        (ConsumeStats, b'{"consumeTps":"fast"}', "consumeTps: expected a number"),
        (LockBatchRequestBody, b'{"mqSet":[{"queueId":[]}]}', r"mqSet\[0\]\.queueId: expected an integer"),
        (LockBatchRequestBody, b'{"mqSet":["q"]}', r"mqSet\[0\]: expected an object"),
        (ConsumerOffsetTable, b'{"offsetTable":{"t@g":{"a":1}}}', "expected an integer map key"),
        (ConsumerOffsetTable, b'{"offsetTable":{"t@g":[1]}}', "expected an object"),
        (ConsumerOffsetTable, b'{"offsetTable":{"t@g":{0:"x"}}}', "expected an integer"),
        (DelayOffsetTable, b'{"offsetTable":{1:1.5}}', "expected an integer"),
        (ClusterInfo, b'{"clusterAddrTable":{"c":"b"}}', "expected an array"),
        (TopicConfig, b'{"topicFilterType":"ALL"}', "topicFilterType: not a TopicFilterType"),
        (Connection, b'{"language":[]}', "language: expected a language name"),
        (KVTable, b'{"table":{"a":{}}}', "expected a string"),
        (ConsumerRunningInfo, b'{"statusTable":{"T":{"pullRT":"x"}}}', "pullRT: expected a number"),
        (ConsumerRunningInfo, b'{"mqTable":{{"topic":"t"}:{"locked":2}}}', "locked: expected a boolean"),
        (TopicConfigSerializeWrapper, b'{"dataVersion":[]}', "dataVersion: expected an object"),
    ],
)
def test_malformed_bodies(cls: type[WireBody], data: bytes, where: str) -> None:
    with pytest.raises(BodyDecodeError, match=where):
        cls.decode(data)


# --------------------------------------------------------------------------- property tests

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=12,
)


def _mutate(value: Any, data: st.DataObject) -> Any:
    """Replace one randomly chosen node of a decoded example with random JSON."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(list(value)))
        return {**value, key: _mutate(value[key], data)}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        index = data.draw(st.integers(0, len(value) - 1))
        return [*value[:index], _mutate(value[index], data), *value[index + 1 :]]
    return data.draw(_json_values)


@settings(max_examples=400)
@given(st.sampled_from(EXAMPLES), st.data())
def test_fuzz_mutated_examples_only_raise_body_decode_error(example: tuple[WireBody, str], data: st.DataObject) -> None:
    body, text = example
    mutated = _mutate(fastjson.loads(text), data)
    with contextlib.suppress(BodyDecodeError):
        type(body).decode(fastjson.dumps(mutated))


@settings(max_examples=200)
@given(st.sampled_from([type(body) for body, _ in EXAMPLES]), _json_values)
def test_fuzz_random_json_only_raises_body_decode_error(cls: type[WireBody], value: Any) -> None:
    with contextlib.suppress(BodyDecodeError):
        cls.decode(fastjson.dumps(value))


_names = st.text(min_size=1, max_size=8)
_queues = st.builds(MessageQueue, _names, _names, st.integers(0, 64))
_longs = st.integers(-(2**63), 2**63 - 1)
_subscriptions = st.builds(
    SubscriptionData,
    topic=_names,
    sub_string=st.text(max_size=10),
    tags_set=st.sets(_names, max_size=3),
    code_set=st.sets(st.integers(-(2**31), 2**31 - 1), max_size=3),
    sub_version=_longs,
    expression_type=st.sampled_from(["TAG", "SQL92"]),
    class_filter_mode=st.booleans(),
)
_heartbeats = st.builds(
    HeartbeatData,
    client_id=st.text(),
    producer_data_set=st.lists(st.builds(ProducerData, _names), max_size=2),
    consumer_data_set=st.lists(
        st.builds(
            ConsumerData,
            group_name=_names,
            consume_type=st.sampled_from(ConsumeType),
            message_model=st.sampled_from(MessageModel),
            consume_from_where=st.sampled_from(ConsumeFromWhere),
            subscription_data_set=st.lists(_subscriptions, max_size=3),
            unit_mode=st.booleans(),
        ),
        max_size=2,
    ),
)
_routes = st.builds(
    TopicRouteData,
    queue_datas=st.lists(
        st.builds(QueueData, _names, st.integers(0, 64), st.integers(0, 64), st.integers(0, 7)), max_size=3
    ),
    broker_datas=st.lists(
        st.builds(BrokerData, _names, _names, st.dictionaries(st.integers(0, 5), _names, max_size=3)), max_size=3
    ),
    filter_server_table=st.dictionaries(_names, st.lists(_names, max_size=2), max_size=2),
    order_topic_conf=st.none() | _names,
)
_stats = st.builds(
    ConsumeStats,
    offset_table=st.dictionaries(_queues, st.builds(OffsetWrapper, _longs, _longs, _longs), max_size=4),
    consume_tps=st.floats(allow_nan=False, allow_infinity=False),
)
_offsets = st.builds(
    ConsumerOffsetTable, st.dictionaries(_names, st.dictionaries(st.integers(0, 100), _longs, max_size=3), max_size=3)
)
_running = st.builds(
    ConsumerRunningInfo,
    properties=st.dictionaries(_names, st.text(max_size=5), max_size=3),
    subscription_set=st.lists(_subscriptions, max_size=2),
    mq_table=st.dictionaries(
        _queues,
        st.builds(ProcessQueueInfo, commit_offset=_longs, locked=st.booleans(), droped=st.booleans()),
        max_size=2,
    ),
    status_table=st.dictionaries(
        _names,
        st.builds(ConsumeStatus, pull_rt=st.floats(allow_nan=False, allow_infinity=False), consume_failed_msgs=_longs),
        max_size=2,
    ),
    jstack=st.none() | st.text(max_size=10),
)


@settings(max_examples=150)
@given(st.one_of(_heartbeats, _routes, _stats, _offsets, _running))
def test_round_trip_generated_bodies(body: WireBody) -> None:
    assert type(body).decode(body.encode()) == body
    assert type(body).decode(body.encode(pretty=True)) == body
