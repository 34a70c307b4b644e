"""Pull, offsets, locks and admin processors on a `BrokerContext` of real parts, without TCP."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_units import UnitBroker, properties, pull_request, run_unit, send_request

from rocketflow.protocol.bodies import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    TopicConfigSerializeWrapper,
    UnlockBatchRequestBody,
)
from rocketflow.protocol.codec import decode_records
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import (
    CreateTopicRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)


def test_a_pull_reads_what_was_sent_and_a_held_pull_is_woken_by_the_next_send(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        await unit.answer(unit.send.process_send, send_request("PullTopic", b"first", properties()))
        found = await unit.answer(unit.pull.process_request, pull_request("unit_cg", "PullTopic", 0, 0))
        assert found.code == ResponseCode.SUCCESS and found.ext_fields["nextBeginOffset"] == "1"
        assert [message.body for message in decode_records(found.body)] == [b"first"]
        assert unit.parts.stats.get_total == 1 and unit.parts.groups.get("unit_cg") is not None
        held = await unit.call(unit.pull.process_request, pull_request("unit_cg", "PullTopic", 0, 1, suspend=True))
        holds = unit.pull.hold_service
        assert held is None and holds.held_count == 1
        await unit.answer(unit.send.process_send, send_request("PullTopic", b"second", properties()))
        await asyncio.sleep(0)  # woken pulls are answered once the put's turn of the loop is over
        assert holds.held_count == 0 and holds.woken_by_message == 1
        assert unit.parts.stats.get_total == 2

    run_unit(tmp_path, scenario)


def test_a_pull_of_an_unknown_group_is_refused_without_creating_it(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        await unit.answer(unit.send.process_send, send_request("PullTopic", b"x", properties()))
        refused = await unit.answer(unit.pull.process_request, pull_request("nobody_cg", "PullTopic", 0, 0))
        assert refused.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert unit.parts.groups.get("nobody_cg") is None

    run_unit(tmp_path, scenario, auto_create_subscription_group=False)


def test_committed_offsets_are_kept_and_an_unknown_one_changes_nothing(tmp_path: Path) -> None:
    def update(offset: int) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader(consumer_group="unit_cg", topic="T", queue_id=1,
                                                   commit_offset=offset)
        return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())

    query = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, QueryConsumerOffsetRequestHeader(
        consumer_group="unit_cg", topic="T", queue_id=1).to_ext_fields())

    async def scenario(unit: UnitBroker) -> None:
        for offset in (7, -1):
            answer = await unit.answer(unit.consumers.update_consumer_offset, update(offset))
            assert answer.code == ResponseCode.SUCCESS
        answer = await unit.answer(unit.consumers.query_consumer_offset, query)
        assert answer.ext_fields["offset"] == "7"
        assert unit.parts.offsets.query_offset("unit_cg", "T", 1) == 7

    run_unit(tmp_path, scenario)


def test_a_queue_lock_belongs_to_one_client_until_it_unlocks(tmp_path: Path) -> None:
    queues = {MessageQueue("T", "broker-a", queue_id) for queue_id in range(2)}

    def lock(client_id: str) -> RemotingCommand:
        return RemotingCommand.request(RequestCode.LOCK_BATCH_MQ,
                                       body=LockBatchRequestBody("unit_cg", client_id, queues).encode())

    async def scenario(unit: UnitBroker) -> None:
        first = await unit.answer(unit.admin.process, lock("client-1"))
        assert LockBatchResponseBody.decode(first.body).lock_ok_mq_set == queues
        second = await unit.answer(unit.admin.process, lock("client-2"))
        assert LockBatchResponseBody.decode(second.body).lock_ok_mq_set == set()
        unlock = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ,
                                         body=UnlockBatchRequestBody("unit_cg", "client-1", queues).encode())
        assert (await unit.answer(unit.admin.process, unlock)).code == ResponseCode.SUCCESS
        third = await unit.answer(unit.admin.process, lock("client-2"))
        assert LockBatchResponseBody.decode(third.body).lock_ok_mq_set == queues
        assert unit.parts.locks.entry_counts() == {"unit_cg": 2}

    run_unit(tmp_path, scenario)


def test_an_admin_topic_create_is_answered_once_written_and_listed(tmp_path: Path) -> None:
    header = CreateTopicRequestHeader(topic="AdminTopic", default_topic="TBW102", read_queue_nums=2,
                                      write_queue_nums=2, perm=6, topic_filter_type="SINGLE_TAG")

    async def scenario(unit: UnitBroker) -> None:
        create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())
        assert (await unit.answer(unit.admin.process, create)).code == ResponseCode.SUCCESS
        assert unit.parts.topics.table.when_written().done()
        listed = await unit.answer(unit.admin.process, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        table = TopicConfigSerializeWrapper.decode(listed.body).topic_config_table
        assert table["AdminTopic"].write_queue_nums == 2
        unknown = await unit.answer(unit.admin.process, RemotingCommand.request(9999))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    run_unit(tmp_path, scenario)


def test_a_broker_permission_change_applies_at_once_and_is_announced(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        version = unit.parts.topics.data_version.counter
        update = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
        assert (await unit.answer(unit.admin.process, update)).code == ResponseCode.SUCCESS
        assert unit.parts.config.broker_permission == 4 and unit.permission_changes == [1]
        assert unit.parts.topics.data_version.counter == version + 1
        refused = await unit.answer(unit.send.process_send, send_request("ReadOnly", b"x", properties()))
        assert refused.code == ResponseCode.NO_PERMISSION
        fixed = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerName=other\n")
        assert (await unit.answer(unit.admin.process, fixed)).code == ResponseCode.SYSTEM_ERROR
        shown = await unit.answer(unit.admin.process, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
        assert "brokerPermission=4" in shown.body.decode().splitlines()

    run_unit(tmp_path, scenario)
