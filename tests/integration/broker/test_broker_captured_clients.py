"""Replays the broker-bound frames real clients sent (ali-ons 3.12.0, the C++ client) against our broker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from broker_helpers import run

from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import LockBatchResponseBody
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import CreateTopicRequestHeader

PULL_CODES = {ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
              ResponseCode.PULL_OFFSET_MOVED}
EXPECTED = {
    RequestCode.HEART_BEAT: {ResponseCode.SUCCESS},
    RequestCode.SEND_MESSAGE: {ResponseCode.SUCCESS},
    RequestCode.SEND_MESSAGE_V2: {ResponseCode.SUCCESS},
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: {ResponseCode.SUCCESS},
    RequestCode.QUERY_CONSUMER_OFFSET: {ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND},
    RequestCode.UPDATE_CONSUMER_OFFSET: {ResponseCode.SUCCESS},
    RequestCode.LOCK_BATCH_MQ: {ResponseCode.SUCCESS},
    RequestCode.UNLOCK_BATCH_MQ: {ResponseCode.SUCCESS},
    RequestCode.UNREGISTER_CLIENT: {ResponseCode.SUCCESS},
    RequestCode.GET_MAX_OFFSET: {ResponseCode.SUCCESS},
    RequestCode.PULL_MESSAGE: PULL_CODES,
}
FILES = [
    "ali-ons/frames_producer.jsonl",
    "ali-ons/frames_consumer.jsonl",
    "cpp-client/frames_producer.jsonl",
    "cpp-client/frames_consumer.jsonl",
    "cpp-client/frames_consumer_orderly.jsonl",
    "cpp-client/frames_misc.jsonl",
]


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def broker_frames(path: Path) -> list[RemotingCommand]:
    commands = []
    for line in path.read_text().splitlines():
        frame = json.loads(line)
        if frame.get("port") != 10911:
            continue
        fields = {key: _text(value) for key, value in (frame.get("extFields") or {}).items()}
        if frame["code"] == RequestCode.PULL_MESSAGE:
            fields["suspendTimeoutMillis"] = "1"  # keep the replay fast
        body = (frame.get("body") or "").encode()
        command = RemotingCommand.request(frame["code"], fields, body, language=LanguageCode.parse(frame["lang"]))
        command.version = frame["version"]
        commands.append(command)
    return commands


@pytest.mark.parametrize("name", FILES)
def test_captured_client_frames_are_served(captured_dir: Path, name: str) -> None:
    frames = broker_frames(captured_dir / name)
    assert frames

    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        # the capture server's canned routes had 8 queues for both topics
        for topic in ("TopicTest", "%RETRY%g1"):
            header = CreateTopicRequestHeader(topic=topic, default_topic="TBW102", read_queue_nums=8,
                                              write_queue_nums=8, perm=6, topic_filter_type="SINGLE_TAG")
            created = await client.invoke(cluster.broker_addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields()), 5)
            assert created.code == ResponseCode.SUCCESS
        for frame in frames:
            response = await asyncio.wait_for(client.invoke(cluster.broker_addr, frame, 5), 6)
            expected = EXPECTED.get(frame.code)
            assert expected is not None, f"unexpected request code {frame.code} in {name}"
            if frame.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP and response.code == ResponseCode.SYSTEM_ERROR:
                # the capture replays an UNREGISTER_CLIENT before some of these lookups
                assert response.remark == "no consumer for this group, g1"
                continue
            assert response.code in expected, (frame.describe(), response.describe())
            if frame.code == RequestCode.LOCK_BATCH_MQ:
                assert LockBatchResponseBody.decode(response.body).lock_ok_mq_set

    run(scenario)
