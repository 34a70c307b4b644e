"""Message trace records in RocketMQ's text format, without a network."""

from __future__ import annotations

import pytest

from rocketflow.client.trace import (
    TraceMessageType,
    TraceRecord,
    TraceType,
    decode_trace_data,
    encode_trace_record,
    trace_keys,
)

C, F = "\x01", "\x02"


@pytest.mark.parametrize("record", [
    TraceRecord(TraceType.PUB, timestamp=1700000000123, region_id="DefaultRegion", group="pg", topic="Orders",
                msg_id="7F00000100002A9F0000000000000001", tags="pay", keys="o-1", store_host="127.0.0.1:10911",
                body_length=42, cost_ms=3, msg_type=TraceMessageType.DELAY, offset_msg_id="0A0000010000ABCD",
                success=True),
    TraceRecord(TraceType.SUB_BEFORE, timestamp=1700000000200, region_id="DefaultRegion", group="cg",
                request_id="r1", msg_id="M1", retry_times=2, keys="o-1"),
    TraceRecord(TraceType.SUB_AFTER, timestamp=1700000000250, request_id="r1", msg_id="M1", cost_ms=50,
                success=False, keys="o-1", context_code=4),
    TraceRecord(TraceType.END_TRANSACTION, timestamp=5, region_id="r", group="tg", topic="T", msg_id="M2", tags="t",
                keys="k", store_host="h:1", msg_type=TraceMessageType.TRANS_COMMIT, transaction_id="M2",
                transaction_state="COMMIT_MESSAGE", from_transaction_check=True),
])
def test_each_record_type_round_trips(record: TraceRecord) -> None:
    text = encode_trace_record(record)
    assert text.endswith(F) and text.count(F) == 1
    assert decode_trace_data(text) == [record]


def test_field_order_is_rocketmqs() -> None:
    pub = encode_trace_record(TraceRecord(TraceType.PUB, timestamp=1, region_id="R", group="G", topic="T",
                                          msg_id="M", tags="", keys="", store_host="H", body_length=9, cost_ms=2,
                                          offset_msg_id="O", success=True))
    assert pub == C.join(["Pub", "1", "R", "G", "T", "M", "", "", "H", "9", "2", "0", "O", "true"]) + F
    after = encode_trace_record(TraceRecord(TraceType.SUB_AFTER, timestamp=7, request_id="Q", msg_id="M", cost_ms=5,
                                            success=True, keys="K", context_code=0))
    assert after == C.join(["SubAfter", "Q", "M", "5", "true", "K", "0", "7"]) + F


def test_older_field_counts_and_garbage_are_read_leniently() -> None:
    old_pub = C.join(["Pub", "1", "R", "G", "T", "M", "tg", "k", "H", "9", "2", "0", "true"])  # no offset msg id
    old_after = C.join(["SubAfter", "Q", "M", "5", "false", "K"])  # no context code, no time
    data = F.join([old_pub, "nonsense", C.join(["Pub", "x"]), old_after, ""])
    records = decode_trace_data(data)
    assert [(r.type, r.msg_id, r.success) for r in records] == [(TraceType.PUB, "M", True),
                                                                (TraceType.SUB_AFTER, "M", False)]
    assert records[0].offset_msg_id == "" and records[1].context_code == 0


def test_separators_inside_values_cannot_break_the_record_apart() -> None:
    record = TraceRecord(TraceType.SUB_BEFORE, timestamp=1, group="g", request_id="r", msg_id="M",
                         keys=f"a{C}b{F}c")
    decoded = decode_trace_data(encode_trace_record(record))
    assert len(decoded) == 1 and decoded[0].keys == "a b c"
    assert trace_keys(decoded[0]) == ["M", "a b c"]
