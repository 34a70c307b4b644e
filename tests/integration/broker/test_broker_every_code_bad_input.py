"""Every request code the broker serves, fed malformed headers and bodies: each gets a clear answer.

For each code: no ext fields at all; every field but one well-formed, that one garbage (a word where a
number belongs, an overflowing number, an empty or illegal name); a body of junk bytes. The broker
must answer every non-oneway request (or stay silent only where RocketMQ does), never log an
unexpected processor failure, and still serve a normal send afterwards.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient
from rocketflow.protocol.names import DEFAULT_TOPIC
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import REQUEST_HEADERS, FieldKind, HeaderField

#: Garbage for a field of each kind (besides leaving it out).
BAD_VALUES = {
    FieldKind.INT: ["x", "99999999999", "-"],
    FieldKind.LONG: ["1.5", "99999999999999999999999"],
    FieldKind.BOOL: ["maybe"],
    FieldKind.STRING: ["", "bad name!", "%" * 300],
}
GOOD_VALUES = {FieldKind.INT: "0", FieldKind.LONG: "0", FieldKind.BOOL: "false", FieldKind.STRING: "Fuzz_T"}
#: Well-formed values a field needs to get past its first check (END_TRANSACTION's 0 means "no answer").
GOOD_OVERRIDES = {"commitOrRollback": "8"}
#: Codes a client sends oneway, whose odd inputs RocketMQ answers with silence.
SILENT_OK = {RequestCode.END_TRANSACTION, RequestCode.UNREGISTER_CLIENT}
JUNK_BODY = b"\x00\x01junk{\"a\":" + bytes(range(256))


def cases(code: int) -> list[tuple[dict[str, str], bytes]]:
    header = REQUEST_HEADERS.get(code)
    fields: tuple[HeaderField, ...] = header.header_fields() if header is not None else ()
    good = {spec.wire: GOOD_OVERRIDES.get(spec.wire, GOOD_VALUES[spec.kind]) for spec in fields}
    out: list[tuple[dict[str, str], bytes]] = [({}, b""), ({}, JUNK_BODY)]
    if good:
        out.append((dict(good), JUNK_BODY))
    for spec in fields:
        for bad in BAD_VALUES[spec.kind]:
            out.append(({**good, spec.wire: bad}, b""))
    return out


async def sweep(addr: str, codes: list[int]) -> list[str]:
    """Send every case of every code to ``addr``; returns what went wrong."""
    problems: list[str] = []
    client = RemotingClient(name="fuzz")
    try:
        for code in codes:
            for fields, body in cases(code):
                request = RemotingCommand.request(code, fields, body)
                try:
                    response = await client.invoke(addr, request, 1 if code in SILENT_OK else 5)
                except Exception as exc:  # a timeout: no answer
                    if code not in SILENT_OK:
                        problems.append(f"code {code} {fields}: no answer ({exc!r})")
                    continue
                if not response.is_response:
                    problems.append(f"code {code} {fields}: answered with a request")
    finally:
        await client.close()
    return problems


def processor_failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if "processor failed" in record.getMessage()]


def test_every_broker_code_answers_malformed_requests_clearly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    cluster = DevCluster.start_in_thread()
    try:
        broker = cluster.broker
        assert broker is not None
        codes = sorted(set(broker.server._dispatcher._processors) | set(broker.admin_processor.handlers))
        assert RequestCode.END_TRANSACTION in codes and RequestCode.SEND_REPLY_MESSAGE_V2 in codes

        async def run() -> list[str]:
            problems = await sweep(cluster.broker_addr, codes)
            # still healthy: a well-formed send goes through
            client = RemotingClient(name="fuzz-after")
            try:
                ok = RemotingCommand.request(RequestCode.SEND_MESSAGE, {
                    "producerGroup": "fuzz_pg", "topic": "FuzzAfter", "defaultTopic": DEFAULT_TOPIC,
                    "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0",
                    "flag": "0"}, b"still alive")
                response = await client.invoke(cluster.broker_addr, ok, 5)
            finally:
                await client.close()
            if response.code != ResponseCode.SUCCESS:
                problems.append(f"a normal send after the sweep failed: {response.code} {response.remark}")
            return problems

        problems = asyncio.run(run())
    finally:
        cluster.close()
    assert not processor_failures(caplog), "\n".join(processor_failures(caplog)[:20])
    assert not problems, "\n".join(problems[:40])


def test_every_name_server_code_answers_malformed_requests_clearly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    cluster = DevCluster.start_in_thread()
    try:
        assert cluster.namesrv is not None
        codes = sorted(cluster.namesrv.server._dispatcher._processors)
        assert RequestCode.REGISTER_BROKER in codes
        problems = asyncio.run(sweep(cluster.namesrv_addr, codes))

        async def routed() -> int:
            client = RemotingClient(name="fuzz-after")
            try:
                request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": DEFAULT_TOPIC})
                return (await client.invoke(cluster.namesrv_addr, request, 5)).code
            finally:
                await client.close()

        assert asyncio.run(routed()) == ResponseCode.SUCCESS
    finally:
        cluster.close()
    assert not processor_failures(caplog), "\n".join(processor_failures(caplog)[:20])
    assert not problems, "\n".join(problems[:40])
