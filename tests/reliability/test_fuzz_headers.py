"""Hypothesis drives well-framed but ill-meant requests at a running broker and name server.

Where `test_fuzz_servers.py` mutates bytes, this fuzzer builds requests the frame decoder accepts, for
every request code we know and some we do not, with each code's own header fields (and stray ones)
set to hostile values: missing, empty, negative, past 32/64 bits, not numbers, illegal names, retry
and DLQ names, huge strings; bodies are random bytes or broken JSON. Every request that is not
oneway must get an answer with a response code (never a hang or a closed connection: the frame is
valid; END_TRANSACTION that leaves a transaction pending is answered with nothing, as in RocketMQ),
the servers stay up and keep serving a well-formed client, and their memory stays bounded.
Soak runs (`make soak`) try 100x more examples.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from reliability_helpers import RawConnection, ServerProcess, broker_args, pull_request, scaled, send_request
from test_fuzz_servers import create_topic

from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import REQUEST_HEADERS, EndTransactionRequestHeader

pytestmark = pytest.mark.reliability

EXAMPLES = scaled(1_500, 150_000)
TOPIC = "HypoT"
#: the well-formed client's topic: no hostile value names it
WELL_FORMED_TOPIC = "WellFormedHypothesisT"
TIMEOUT = 10.0
#: codes whose answer may legitimately be held (long polling) or never come (the server asks nothing back)
HELD = {RequestCode.PULL_MESSAGE}

HOSTILE_VALUES = st.one_of(
    st.sampled_from(["", "-1", "0", "1", "-2147483649", "2147483648", "9223372036854775808", "1e3", "0x10",
                     " 7", "true", "null", "{}", "[]", TOPIC, "TBW102", "%RETRY%hypo_cg", "%DLQ%hypo_cg",
                     "SCHEDULE_TOPIC_XXXX", "a@b", "a b", "../../etc", "hypo_cg", "broker-a", "DefaultCluster",
                     "127.0.0.1:1", "*", "a || b", "\x00", "é" * 3, "T" * 300]),
    st.integers(min_value=-(2**63), max_value=2**63).map(str),
    st.text(max_size=24),
)
KNOWN_CODES = sorted(REQUEST_HEADERS) + [int(code) for code in RequestCode if int(code) not in REQUEST_HEADERS]
BODIES = st.one_of(
    st.just(b""),
    st.binary(max_size=96),
    st.sampled_from([b"{", b"[]", b"null", b'{"mqSet":[{"topic":1}]}', b'{"mqSet":[{}],"consumerGroup":"g"}',
                     b'{"clientID":"c","consumerDataSet":[{"groupName":5}]}', b'{"topicConfigTable":"x"}',
                     b"brokerClusterName=\nbrokerName=", b'{0:"a",1:}', b"\xff" * 40]),
)


@st.composite
def requests(draw: st.DrawFn) -> RemotingCommand:
    unknown = draw(st.integers(min_value=0, max_value=9)) == 0  # mostly codes with handlers
    code = draw(st.integers(min_value=-5, max_value=2000) if unknown else st.sampled_from(KNOWN_CODES))
    header = REQUEST_HEADERS.get(code)
    names = [spec.wire for spec in header.header_fields()] if header is not None else []
    wanted = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    fields: dict[str, Any] = {name: draw(HOSTILE_VALUES) for name in wanted}
    fields.update(draw(st.dictionaries(st.sampled_from(["topic", "consumerGroup", "queueId", "offset", "x"]),
                                       HOSTILE_VALUES, max_size=2)))
    return RemotingCommand.request(code, fields, body=draw(BODIES))


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    tmp_path: Path = tmp_path_factory.mktemp("hypo")
    namesrv = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    try:
        broker = ServerProcess(broker_args(tmp_path / "store", flush="async", namesrv=namesrv.address),
                               tmp_path / "broker.log")
    except BaseException:
        namesrv.stop()
        raise
    try:
        yield namesrv, broker
    finally:
        broker.stop()
        namesrv.stop()


class Target:
    """One connection per server, reopened when a request closed it."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.connection = RawConnection(server.address)
        self.answers: dict[int, int] = {}
        self.examples = 0

    def exchange(self, command: RemotingCommand) -> None:
        self.examples += 1
        if self.connection.closed_by_peer:
            self.connection.close()
            self.connection = RawConnection(self.server.address)
        self.connection.send(command)
        if command.is_oneway or command.code in HELD or leaves_transaction_pending(command):
            return
        try:
            answer = self.connection.wait_response(command.opaque, TIMEOUT)
        except TimeoutError as exc:
            raise AssertionError(f"{self.server.args[0]} never answered {command!r}") from exc
        assert answer is not None, f"{self.server.args[0]} closed the connection on a valid frame: {command!r}"
        assert answer.is_response
        self.answers[answer.code] = self.answers.get(answer.code, 0) + 1
        self.connection.responses.clear()


def leaves_transaction_pending(command: RemotingCommand) -> bool:
    """END_TRANSACTION with transaction value 0 (TRANSACTION_NOT_TYPE) is answered with nothing, as in
    RocketMQ's EndTransactionProcessor: the broker's check-back asks again later."""
    if command.code != RequestCode.END_TRANSACTION:
        return False
    try:
        header = EndTransactionRequestHeader.from_command(command)
    except ProtocolError:
        return False
    return header.commit_or_rollback == 0


def well_formed_round_trip(broker: ServerProcess, index: int) -> None:
    client = RawConnection(broker.address)
    try:
        body = f"hypo-well-formed-{index}".encode()
        sent = client.request(send_request(WELL_FORMED_TOPIC, body, {"UNIQ_KEY": f"H{index}"}, queue_id=0))
        assert sent is not None and sent.code == ResponseCode.SUCCESS, sent
        offset = int(sent.ext_fields["queueOffset"])
        pulled = client.request(pull_request("hypo_reader", WELL_FORMED_TOPIC, 0, offset, max_nums=1))
        assert pulled is not None and pulled.code == ResponseCode.SUCCESS and body in pulled.body, pulled
    finally:
        client.close()


def test_hostile_headers_get_answers_and_servers_keep_serving(servers: tuple[ServerProcess, ServerProcess],
                                                              tmp_path: Path) -> None:
    namesrv, broker = servers
    create_topic(broker.address, WELL_FORMED_TOPIC)
    targets = [Target(broker), Target(namesrv)]
    rss_start = {target.server.args[0]: target.server.rss_kb() for target in targets}
    round_trips = [0]

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(command=requests(), to_namesrv=st.booleans())
    # found by this fuzzer: a transaction left pending is answered with nothing, as in RocketMQ
    @example(command=RemotingCommand(RequestCode.END_TRANSACTION, opaque=1, ext_fields={
        "msgId": "", "producerGroup": "-1", "fromTransactionCheck": "", "commitOrRollback": "0",
        "tranStateTableOffset": "-1", "commitLogOffset": "-1"}), to_namesrv=False)
    def run(command: RemotingCommand, to_namesrv: bool) -> None:
        target = targets[1 if to_namesrv else 0]
        target.exchange(command)
        if sum(t.examples for t in targets) % 250 == 0:
            assert broker.alive() and namesrv.alive()
            round_trips[0] += 1
            well_formed_round_trip(broker, round_trips[0])

    run()
    assert broker.alive() and namesrv.alive()
    well_formed_round_trip(broker, -1)
    report = {}
    for target in targets:
        name = target.server.args[0]
        rss_end = target.server.rss_kb()
        report[name] = {"examples": target.examples, "response_codes": dict(sorted(target.answers.items())),
                        "rss_start_kb": rss_start[name], "rss_end_kb": rss_end}
        assert target.examples > 0 and target.answers
        assert rss_end - rss_start[name] < 128 * 1024, f"{name} RSS grew from {rss_start[name]} to {rss_end} KiB"
        target.connection.close()
    (tmp_path / "hypothesis_fuzz_report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
