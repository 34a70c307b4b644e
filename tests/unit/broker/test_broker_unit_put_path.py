"""The put path on a `BrokerContext` of real parts, without TCP: sends, batches, delayed delivery,
transactions and send-backs all store through `MessagePut`, and its answers say what the store did."""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_units import UnitBroker, properties, run_unit, send_request

from rocketflow.broker.message_put import put_failure
from rocketflow.protocol.codec import encode_batch_body
from rocketflow.protocol.message import Message, MessageConst
from rocketflow.protocol.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, dlq_topic, retry_topic
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import ConsumerSendMsgBackRequestHeader, EndTransactionRequestHeader
from rocketflow.store import BrokerRole, PutMessageStatus

LATER_MS = 10 ** 13  # a "now" past every delay level


def test_a_send_is_stored_answered_and_counted_and_creates_its_topic(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        response = await unit.answer(unit.send.process_send, send_request("UnitTopic", b"hello", properties("TagA")))
        assert response.code == ResponseCode.SUCCESS, response.remark
        fields = response.ext_fields
        assert fields["queueId"] == "0" and fields["queueOffset"] == "0" and len(fields["msgId"]) == 32
        assert fields["MSG_REGION"] == "DefaultRegion" and fields["TRACE_ON"] == "true"
        [stored] = unit.stored("UnitTopic", 0)
        assert stored.body == b"hello" and stored.tags == "TagA" and stored.born_host == ("10.0.0.7", 40000)
        assert stored.properties[MessageConst.CLUSTER] == "DefaultCluster"
        assert MessageConst.WAIT_STORE_MSG_OK not in stored.properties
        assert unit.parts.topics.select("UnitTopic") is not None
        assert unit.parts.stats.put_total == 1 and unit.parts.stats.put_failures == 0

    run_unit(tmp_path, scenario)


def test_a_refused_send_creates_nothing(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        response = await unit.answer(unit.send.process_send, send_request("BigTopic", b"x" * 2048))
        assert response.code == ResponseCode.MESSAGE_ILLEGAL and "exceeds the maximum 1024" in (response.remark or "")
        bad_delay = send_request("DelayTopic", b"x", properties(extra={MessageConst.DELAY_TIME_LEVEL: "soon"}))
        response = await unit.answer(unit.send.process_send, bad_delay)
        assert response.code == ResponseCode.MESSAGE_ILLEGAL and "delay level" in (response.remark or "")
        assert unit.parts.topics.select("BigTopic") is None and unit.parts.topics.select("DelayTopic") is None
        assert unit.parts.stats.put_total == 0

    run_unit(tmp_path, scenario, max_message_size=1024)


def test_a_batch_is_stored_in_one_put_with_one_msg_id_a_message(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        messages = [Message("BatchTopic", f"m{n}".encode(), properties=properties()) for n in range(3)]
        request = send_request("BatchTopic", encode_batch_body(messages), code=RequestCode.SEND_BATCH_MESSAGE)
        response = await unit.answer(unit.send.process_send, request)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert len(response.ext_fields["msgId"].split(",")) == 3
        assert [message.body for message in unit.stored("BatchTopic", 0)] == [b"m0", b"m1", b"m2"]
        assert unit.parts.stats.put_total == 3

    run_unit(tmp_path, scenario)


def test_a_delayed_send_waits_in_its_schedule_queue_until_delivered(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        request = send_request("LaterTopic", b"later", properties(extra={MessageConst.DELAY_TIME_LEVEL: "3"}))
        response = await unit.answer(unit.send.process_send, request)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert unit.stored("LaterTopic", 0) == []
        [waiting] = unit.stored(SCHEDULE_TOPIC, 2)
        assert waiting.properties[MessageConst.REAL_TOPIC] == "LaterTopic"
        assert unit.schedule.deliver_due(now_ms=LATER_MS) == 1
        [delivered] = unit.stored("LaterTopic", 0)
        assert delivered.body == b"later" and MessageConst.DELAY_TIME_LEVEL not in delivered.properties
        assert unit.parts.stats.put_total == 2  # the send and the delivery

    run_unit(tmp_path, scenario)


def test_a_committed_half_message_reaches_its_topic_once(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        props = properties(extra={MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "unit_pg"})
        request = send_request("TxTopic", b"tx", props, sys_flag=int(MessageSysFlag.TRANSACTION_PREPARED))
        response = await unit.answer(unit.send.process_send, request)
        assert response.code == ResponseCode.SUCCESS, response.remark
        [half] = unit.stored(TRANS_HALF_TOPIC, 0)
        assert unit.stored("TxTopic", 0) == []

        def end(outcome: MessageSysFlag) -> RemotingCommand:
            header = EndTransactionRequestHeader(
                producer_group="unit_pg", tran_state_table_offset=half.queue_offset,
                commit_log_offset=half.commit_log_offset, commit_or_rollback=int(outcome), msg_id=half.msg_id,
                transaction_id=half.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
            return RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())

        for _ in range(2):  # a repeated commit stores nothing more
            response = await unit.answer(unit.end_transaction.process, end(MessageSysFlag.TRANSACTION_COMMIT))
            assert response.code == ResponseCode.SUCCESS, response.remark
        [committed] = unit.stored("TxTopic", 0)
        assert committed.body == b"tx" and committed.prepared_transaction_offset == half.commit_log_offset
        assert len(unit.stored(TRANS_OP_HALF_TOPIC, 0)) == 2
        assert unit.parts.stats.put_total == 2  # the half message and the commit, not the op messages

    run_unit(tmp_path, scenario)


def test_a_message_sent_back_is_delayed_into_the_retry_topic_then_dead_lettered(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        response = await unit.answer(unit.send.process_send, send_request("BackTopic", b"again", properties()))
        assert response.code == ResponseCode.SUCCESS
        [original] = unit.stored("BackTopic", 0)

        def back(offset: int, max_times: int | None = None) -> RemotingCommand:
            header = ConsumerSendMsgBackRequestHeader(offset=offset, group="unit_cg", delay_level=0,
                                                      max_reconsume_times=max_times)
            return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields())

        response = await unit.answer(unit.send_back.process, back(original.commit_log_offset))
        assert response.code == ResponseCode.SUCCESS, response.remark
        [waiting] = unit.stored(SCHEDULE_TOPIC, 2)  # level 3 + 0 reconsumes
        assert waiting.properties[MessageConst.REAL_TOPIC] == retry_topic("unit_cg")
        assert waiting.properties[MessageConst.RETRY_TOPIC] == "BackTopic"
        unit.schedule.deliver_due(now_ms=LATER_MS)
        [retry] = unit.stored(retry_topic("unit_cg"), 0)
        assert retry.reconsume_times == 1 and retry.body == b"again"
        response = await unit.answer(unit.send_back.process, back(retry.commit_log_offset, max_times=1))
        assert response.code == ResponseCode.SUCCESS, response.remark
        dead = [message for queue_id in range(1) for message in unit.stored(dlq_topic("unit_cg"), queue_id)]
        assert [message.body for message in dead] == [b"again"]

    run_unit(tmp_path, scenario)


def test_a_put_the_store_refuses_is_answered_with_its_status_and_counted_as_failed(tmp_path: Path) -> None:
    async def scenario(unit: UnitBroker) -> None:
        response = await unit.answer(unit.send.process_send, send_request("SlaveTopic", b"x", properties()))
        assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE, response.remark
        assert unit.parts.stats.put_failures == 1 and unit.parts.stats.put_total == 0

    run_unit(tmp_path, scenario, **{"store.broker_role": BrokerRole.SLAVE, "broker_id": 1})


@pytest.mark.parametrize(("status", "code"), [
    (PutMessageStatus.MESSAGE_ILLEGAL, ResponseCode.MESSAGE_ILLEGAL),
    (PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, ResponseCode.MESSAGE_ILLEGAL),
    (PutMessageStatus.SERVICE_NOT_AVAILABLE, ResponseCode.SERVICE_NOT_AVAILABLE),
    (PutMessageStatus.CREATE_MAPPED_FILE_FAILED, ResponseCode.SYSTEM_ERROR),
    (PutMessageStatus.OS_PAGE_CACHE_BUSY, ResponseCode.SYSTEM_ERROR),
    (PutMessageStatus.UNKNOWN_ERROR, ResponseCode.SYSTEM_ERROR),
])
def test_each_refusal_maps_to_one_response_code(status: PutMessageStatus, code: int) -> None:
    assert put_failure(status, "why")[0] == code
