"""One big request must not freeze a `rocketflow broker` for its other clients.

A heartbeat listing 1,000 consumer groups held the broker's loop 10-14 s (each new group rewrote two
config files), and a pull whose subscription named 64,000 tags held it 15 s (tag lists deduplicated by
list membership). Here, over raw TCP, while a probe client keeps sending a cheap request:

* a heartbeat of 2,000 new groups (under a raised ``maxGroupsPerHeartbeat``) is answered well under a
  second and the probe's requests are answered meanwhile; one past the bound is refused, naming it,
  and registers nothing;
* pulls naming 4,000 to 64,000 tags (under a raised ``maxTagsPerSubscription``) cost time linear in
  the tags; past the default bound the pull is refused with SUBSCRIPTION_PARSE_FAILED naming it;
* the other bounds (queues of a lock request, lines of a config update, subscriptions of a group,
  the name server's KV keys and values) refuse what is past them, naming the setting.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from reliability_helpers import LoopProbe, RawConnection, ServerProcess, broker_args, pull_request, send_request

from rocketflow.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    ProducerData,
    SubscriptionData,
    SubscriptionGroupWrapper,
)
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

pytestmark = pytest.mark.reliability

#: the probe's answers may take this long while a big request is served (a shared, busy CI machine)
PROBE_BOUND_S = 0.25


def cheap_request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})


def heartbeat(groups: int, prefix: str) -> RemotingCommand:
    consumers = [ConsumerData(f"{prefix}_{index:05d}", subscription_data_set=[
        SubscriptionData(f"{prefix}_T{index}", "*", set(), set(), 1)]) for index in range(groups)]
    body = HeartbeatData(f"{prefix}-client", [ProducerData(f"{prefix}_pg")], consumers).encode()
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=body)


def timed(connection: RawConnection, request: RemotingCommand) -> tuple[RemotingCommand, float]:
    started = time.perf_counter()
    response = connection.request(request, 30)
    elapsed = time.perf_counter() - started
    assert response is not None, "the broker closed the connection"
    return response, elapsed


def group_names(address: str) -> set[str]:
    connection = RawConnection(address)
    try:
        response = connection.request(RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 10)
        assert response is not None and response.code == ResponseCode.SUCCESS
        return set(SubscriptionGroupWrapper.decode(response.body).subscription_group_table)
    finally:
        connection.close()


def test_a_heartbeat_of_thousands_of_groups_does_not_freeze_the_broker(tmp_path: Path) -> None:
    broker = ServerProcess(broker_args(tmp_path / "store", "max_groups_per_heartbeat=2048"), tmp_path / "broker.log")
    try:
        with LoopProbe(broker.address, cheap_request) as probe:
            connection = RawConnection(broker.address)
            try:
                probe.reset()
                response, elapsed = timed(connection, heartbeat(2000, "Big"))
                worst = probe.worst()
                print(f"\nheartbeat of 2000 groups answered in {elapsed * 1000:.0f} ms; "
                      f"probe's worst answer meanwhile {worst * 1000:.1f} ms")
                assert response.code == ResponseCode.SUCCESS, response.remark
                assert elapsed < 1.0 and worst < PROBE_BOUND_S
                over, elapsed = timed(connection, heartbeat(2049, "Over"))
                assert over.code == ResponseCode.SYSTEM_ERROR and elapsed < 1.0
                assert over.remark == ("the heartbeat lists 2049 consumer groups, more than maxGroupsPerHeartbeat "
                                       "(2048)")
            finally:
                connection.close()
        names = group_names(broker.address)
        assert {f"Big_{index:05d}" for index in range(2000)} <= names
        assert not any(name.startswith("Over_") for name in names)
    finally:
        broker.stop()


def tags_expression(count: int) -> str:
    return " || ".join(f"tag{index}" for index in range(count))


def test_a_pull_naming_many_tags_costs_linear_time_and_past_the_bound_is_refused(tmp_path: Path) -> None:
    topic = "ManyTagsT"
    broker = ServerProcess(broker_args(tmp_path / "store", "max_tags_per_subscription=100000",
                                       "max_subscription_length=2000000"), tmp_path / "broker.log")
    try:
        connection = RawConnection(broker.address)
        try:
            stored = connection.request(send_request(topic, b"m", {"TAGS": "tag7"}, queue_id=0), 10)
            assert stored is not None and stored.code == ResponseCode.SUCCESS, stored and stored.remark
            with LoopProbe(broker.address, cheap_request) as probe:
                costs: dict[int, float] = {}
                for count in (4000, 16_000, 64_000):
                    request = pull_request("tags_cg", topic, 0, 0, subscription=tags_expression(count))
                    probe.reset()
                    response, costs[count] = min((timed(connection, request) for _ in range(3)),
                                                 key=lambda answer: answer[1])
                    worst = probe.worst()
                    print(f"\npull with {count} tags: {costs[count] * 1000:.1f} ms, "
                          f"probe's worst {worst * 1000:.1f} ms")
                    assert response.code == ResponseCode.SUCCESS, response.remark
                    assert costs[count] < 1.0 and worst < 1.0
            # 16x the tags may cost 16x the time, with room for noise; the old quadratic parse took 300x
            assert costs[64_000] < 16 * 3 * costs[4000] + 0.05, costs
        finally:
            connection.close()
    finally:
        broker.stop()
    broker = ServerProcess(broker_args(tmp_path / "store"), tmp_path / "broker2.log")
    try:
        connection = RawConnection(broker.address)
        try:
            response, elapsed = timed(connection, pull_request("tags_cg", topic, 0, 0,
                                                               subscription=tags_expression(1025)))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and elapsed < 1.0
            assert "names 1025 tags, more than 1024 (maxTagsPerSubscription)" in (response.remark or "")
            long_one = "t" * 70_000
            response, _ = timed(connection, pull_request("tags_cg", topic, 0, 0, subscription=long_one))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "more than maxSubscriptionLength (65536)" in (response.remark or "")
        finally:
            connection.close()
    finally:
        broker.stop()


def test_requests_past_their_bounds_are_refused_naming_the_setting(tmp_path: Path) -> None:
    """Bounds where RocketMQ has none: each refusal is quick, clear, and changes nothing."""
    namesrv = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    broker = ServerProcess(broker_args(tmp_path / "store", "max_queues_per_request=64", "max_config_lines=8"),
                           tmp_path / "broker.log")
    try:
        connection = RawConnection(broker.address)
        try:
            queues = {MessageQueue("BoundT", "broker-a", index) for index in range(65)}
            lock = LockBatchRequestBody(consumer_group="bound_cg", client_id="bound-client", mq_set=queues)
            response, _ = timed(connection, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=lock.encode()))
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert "65 queues, more than maxQueuesPerRequest (64)" in (response.remark or "")
            lock.mq_set = set(list(queues)[:64])
            response, _ = timed(connection, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=lock.encode()))
            assert response.code == ResponseCode.SUCCESS
            lines = b"brokerPermission=6\n" * 9
            response, _ = timed(connection, RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=lines))
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert "more than 8 (maxConfigLines)" in (response.remark or "")
            consumers = [ConsumerData("bound_cg", subscription_data_set=[
                SubscriptionData(f"BoundT{index}", "*", set(), set(), 1) for index in range(1025)])]
            body = HeartbeatData("bound-client", [], consumers).encode()
            response, _ = timed(connection, RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert "subscribes to 1025 topics, more than maxSubscriptionsPerGroup (1024)" in (response.remark or "")
        finally:
            connection.close()
        connection = RawConnection(namesrv.address)
        try:
            for fields, setting in (({"namespace": "BoundNs", "key": "k", "value": "v" * 65537},
                                     "value is 65537 characters long, more than maxKvValueLength (65536)"),
                                    ({"namespace": "BoundNs", "key": "k" * 1025, "value": "v"},
                                     "key is 1025 characters long, more than maxKvKeyLength (1024)")):
                response, _ = timed(connection, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, fields))
                assert response.code == ResponseCode.SYSTEM_ERROR and setting in (response.remark or "")
            response, _ = timed(connection, RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE,
                                                                    {"namespace": "BoundNs"}))
            assert response.code == ResponseCode.QUERY_NOT_FOUND  # nothing was stored
        finally:
            connection.close()
    finally:
        broker.stop()
        namesrv.stop()
