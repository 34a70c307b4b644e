"""A fuzzer of sizes: every request code of the broker and the name server, grown 1x, 4x and 16x.

Where `test_fuzz_servers.py` and `test_fuzz_headers.py` vary the shape of requests, this one varies
their size. For each request code a `rocketflow broker` or `rocketflow namesrv` subprocess serves, it
sends the code's largest plausible header and body at 1x, 4x and 16x of a size unit: a header with
every field long and many stray fields, a body of junk, and for each code whose body or header has a
list or a long value (tags, groups, subscriptions, queues, topics, messages, properties, keys, KV
values...) that list grown. Meanwhile a probe client keeps sending a cheap request, so how long the
server's event loop is held shows as the probe's latency.

Asserted for every shape: the cost of a request grows at most linearly with its size (the 16x request
may cost 16x the 1x one, times a slack for noise), and at the largest size the loop is never held
longer than `HOLD_BOUND_S`. Every violation is collected, so one run lists every sibling. The
measurements go to ``size_fuzz_report.json`` in the test's tmp directory. ``make soak`` (ROCKETFLOW_SOAK=1)
adds a 64x size and more repetitions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from reliability_helpers import (
    SOAK,
    LoopProbe,
    RawConnection,
    ServerProcess,
    broker_args,
    scaled,
    send_request,
)

from rocketflow.protocol.bodies import (
    CheckClientRequestBody,
    ConsumerData,
    DataVersion,
    HeartbeatData,
    LockBatchRequestBody,
    ProducerData,
    RegisterBrokerBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigSerializeWrapper,
    UnlockBatchRequestBody,
    register_body_crc32,
)
from rocketflow.protocol.codec import encode_batch_body
from rocketflow.protocol.message import Message, MessageQueue
from rocketflow.protocol.tags import java_string_hash
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.frame import DEFAULT_MAX_FRAME_SIZE
from rocketflow.remoting.headers import REQUEST_HEADERS, FieldKind

pytestmark = pytest.mark.reliability

SCALES = (1, 4, 16, 64) if SOAK else (1, 4, 16)
REPEATS = scaled(3, 7)
#: the largest request may cost this many times its size ratio times the smallest one's, plus `ABSOLUTE_S`
SLACK = 3.0
ABSOLUTE_S = 0.03
#: the probe's answers may take this long while any request is served (a shared, busy CI machine)
HOLD_BOUND_S = 0.35 if not SOAK else 1.5
#: a request not answered within this long is a failure (codes that may stay silent: `SILENT`)
ANSWER_TIMEOUT_S = 20.0
#: the largest body a frame carries with room for its header
MAX_BODY = DEFAULT_MAX_FRAME_SIZE - 64 * 1024
SILENT = {RequestCode.END_TRANSACTION, RequestCode.UNREGISTER_CLIENT}

TOPIC = "SizeT"
#: thousands of messages in the fuzzed queue before the fuzz begins
SEED_BATCHES = scaled(30, 100)
GROUP = "size_cg"
CLIENT = "size-client"


@dataclass(frozen=True)
class Shape:
    """One way of growing a request of ``code``: ``build(n)`` is the request at n times the unit.

    ``sizeless``: what grows is a number in the request, not its size, so its cost must not grow."""

    code: int
    grows: str
    build: Callable[[int], RemotingCommand]
    sizeless: bool = False

    @property
    def label(self) -> str:
        return f"{RequestCode(self.code).name}({self.code}) {self.grows}"


GOOD_VALUES = {FieldKind.INT: "0", FieldKind.LONG: "0", FieldKind.BOOL: "false", FieldKind.STRING: TOPIC}
#: values a field needs to get an answer (END_TRANSACTION's 0 means "no answer", as in RocketMQ)
GOOD_OVERRIDES = {"commitOrRollback": "8"}


def good_value(wire: str, kind: FieldKind) -> str:
    return GOOD_OVERRIDES.get(wire, GOOD_VALUES[kind])


def long_header(code: int, n: int) -> RemotingCommand:
    """Every header field of the code well-formed, its text fields n KiB long, and 64n stray fields."""
    header = REQUEST_HEADERS.get(code)
    fields = {f"stray{index}": "v" * 16 for index in range(64 * n)}
    if header is not None:
        for spec in header.header_fields():
            fields[spec.wire] = ("S" * 1024 * n) if spec.kind is FieldKind.STRING else good_value(spec.wire, spec.kind)
    return RemotingCommand.request(code, fields)


def junk_body(code: int, n: int) -> RemotingCommand:
    """The code's header well-formed and a body of 64n KiB of JSON that is no valid body of any code."""
    header = REQUEST_HEADERS.get(code)
    fields = {spec.wire: good_value(spec.wire, spec.kind) for spec in header.header_fields()} if header else {}
    body = b'{"junk":[' + b",".join([b'{"k":"0123456789"}'] * (3450 * n)) + b"]}"
    return RemotingCommand.request(code, fields, body)


def generic_shapes(code: int) -> list[Shape]:
    return [Shape(code, "header fields", lambda n: long_header(code, n)),
            Shape(code, "junk body", lambda n: junk_body(code, n))]


def tags(count: int) -> str:
    return " || ".join(f"tag{index}" for index in range(count))


def heartbeat(groups: int, subscriptions: int, tag_count: int, prefix: str) -> RemotingCommand:
    tag_set = {f"tag{index}" for index in range(tag_count)}
    consumers = [ConsumerData(f"{prefix}{index}", subscription_data_set=[
        SubscriptionData(f"{prefix}T{topic}", tags(tag_count) if tag_count else "*", tag_set,
                         {java_string_hash(tag) for tag in tag_set}, 1)
        for topic in range(subscriptions)]) for index in range(groups)]
    body = HeartbeatData(f"{prefix}-client", [ProducerData(f"{prefix}pg")], consumers).encode()
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=body)


def pull(subscription: str, expression_type: str = "TAG", max_nums: int = 32) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "queueOffset": "0", "maxMsgNums": str(max_nums),
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
        "subscription": subscription, "expressionType": expression_type})


def sql(n: int) -> str:
    """An SQL92 expression of about 256n characters (4096, SQL92's own bound, at 16x)."""
    terms = " OR ".join(f"a{index} = {index}" for index in range(19 * n))
    return terms[: 256 * n - 10].rsplit(" OR ", 1)[0]


def send_variants(code: int) -> list[Shape]:
    v1 = code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE)
    reply = code in (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)

    def build(body: bytes, properties: dict[str, str]) -> RemotingCommand:
        if reply:  # a reply to a requester that is gone: stored, then answered SYSTEM_ERROR
            properties = {**properties, "REPLY_TO_CLIENT": CLIENT, "CORRELATION_ID": "size-correlation",
                          "MSG_TYPE": "reply"}
        shaped = send_request(TOPIC, body, properties, queue_id=0,
                              code=RequestCode.SEND_MESSAGE if v1 else RequestCode.SEND_MESSAGE_V2)
        return RemotingCommand.request(code, shaped.ext_fields, shaped.body)

    return [
        # 4080 KiB at 16x, under maxMessageSize; at 64x (soak) as big as a frame may be
        Shape(code, "body bytes", lambda n: build(b"b" * min(255 * 1024 * n, MAX_BODY), {"WAIT": "true"})),
        Shape(code, "properties", lambda n: build(b"p", {f"k{i:04d}": f"v{i:04d}" for i in range(96 * n)})),
        Shape(code, "index keys", lambda n: build(b"k", {"KEYS": " ".join(f"key{i:04d}" for i in range(200 * n))})),
    ]


def lock_body(cls: type[LockBatchRequestBody] | type[UnlockBatchRequestBody], n: int) -> bytes:
    queues = {MessageQueue(f"{TOPIC}{index // 8}", "broker-a", index % 8) for index in range(256 * n)}
    return cls(consumer_group=GROUP, client_id=CLIENT, mq_set=queues).encode()


def register_body(n: int, *, compressed: bool) -> bytes:
    topics = {f"Reg{index:05d}": TopicConfig(f"Reg{index:05d}", 8, 8) for index in range(512 * n)}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(topics, DataVersion(counter=n)),
                              [f"127.0.0.1:{index}" for index in range(n)])
    return body.encode_compressed() if compressed else body.encode()


def register(n: int, *, compressed: bool) -> RemotingCommand:
    body = register_body(n, compressed=compressed)
    fields = {"brokerName": "size-broker", "brokerAddr": "127.0.0.1:1", "clusterName": "SizeCluster",
              "haServerAddr": "127.0.0.1:2", "brokerId": "0", "compressed": str(compressed).lower(),
              "bodyCrc32": str(register_body_crc32(body))}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)


def broker_shapes() -> list[Shape]:
    code = RequestCode
    shapes = [
        *send_variants(code.SEND_MESSAGE), *send_variants(code.SEND_MESSAGE_V2),
        *send_variants(code.SEND_REPLY_MESSAGE), *send_variants(code.SEND_REPLY_MESSAGE_V2),
        Shape(code.SEND_BATCH_MESSAGE, "messages", lambda n: send_request(
            TOPIC, encode_batch_body([Message(TOPIC, b"m", {"KEYS": f"b{index}"}) for index in range(256 * n)]),
            None, code=code.SEND_BATCH_MESSAGE)),
        Shape(code.PULL_MESSAGE, "tags", lambda n: pull(tags(64 * n))),
        Shape(code.PULL_MESSAGE, "sql92", lambda n: pull(sql(n), "SQL92")),
        # maxMsgNums 32 (a client's usual) at 1x, 131072 at 16x, over a queue of SEED_BATCHES thousand messages
        Shape(code.PULL_MESSAGE, "maxMsgNums, no tag matches", lambda n: pull("NoSuchTag", max_nums=32 * n**3),
              sizeless=True),
        Shape(code.PULL_MESSAGE, "maxMsgNums, no SQL92 match", lambda n: pull("nosuch = 1", "SQL92", 32 * n**3),
              sizeless=True),
        Shape(code.QUERY_MESSAGE, "key", lambda n: RemotingCommand.request(code.QUERY_MESSAGE, {
            "topic": TOPIC, "key": "k" * (2048 * n), "maxNum": str(64 * n), "beginTimestamp": "0",
            "endTimestamp": str(2**62)})),
        Shape(code.HEART_BEAT, "groups", lambda n: heartbeat(64 * n, 1, 0, f"HbG{n}x")),
        Shape(code.HEART_BEAT, "subscriptions", lambda n: heartbeat(1, 64 * n, 0, f"HbS{n}x")),
        Shape(code.HEART_BEAT, "tags", lambda n: heartbeat(1, 1, 64 * n, f"HbT{n}x")),
        Shape(code.CHECK_CLIENT_CONFIG, "tags", lambda n: RemotingCommand.request(
            code.CHECK_CLIENT_CONFIG, body=CheckClientRequestBody(
                CLIENT, GROUP, SubscriptionData(TOPIC, tags(64 * n), set(), set(), 1)).encode())),
        Shape(code.CHECK_CLIENT_CONFIG, "sql92", lambda n: RemotingCommand.request(
            code.CHECK_CLIENT_CONFIG, body=CheckClientRequestBody(
                CLIENT, GROUP, SubscriptionData(TOPIC, sql(n), set(), set(), 1, "SQL92")).encode())),
        Shape(code.LOCK_BATCH_MQ, "queues", lambda n: RemotingCommand.request(
            code.LOCK_BATCH_MQ, body=lock_body(LockBatchRequestBody, n))),
        Shape(code.UNLOCK_BATCH_MQ, "queues", lambda n: RemotingCommand.request(
            code.UNLOCK_BATCH_MQ, body=lock_body(UnlockBatchRequestBody, n))),
        Shape(code.UPDATE_BROKER_CONFIG, "lines", lambda n: RemotingCommand.request(
            code.UPDATE_BROKER_CONFIG, body=b"brokerPermission=6\n" * (64 * n))),
        Shape(code.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, "group config", lambda n: RemotingCommand.request(
            code.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=SubscriptionGroupConfig(f"SizeGroup{n}").encode()[:-1] + b"," + b",".join(
                b'"stray%d":"%s"' % (index, b"v" * 16) for index in range(256 * n)) + b"}")),
    ]
    return shapes


def namesrv_shapes() -> list[Shape]:
    code = RequestCode
    return [
        Shape(code.REGISTER_BROKER, "topics", lambda n: register(n, compressed=False)),
        Shape(code.REGISTER_BROKER, "topics, compressed", lambda n: register(n, compressed=True)),
        Shape(code.PUT_KV_CONFIG, "value", lambda n: RemotingCommand.request(code.PUT_KV_CONFIG, {
            "namespace": "SizeNs", "key": "k", "value": "v" * (4096 * n)})),
        Shape(code.QUERY_DATA_VERSION, "body", lambda n: RemotingCommand.request(code.QUERY_DATA_VERSION, {
            "brokerName": "size-broker", "brokerAddr": "127.0.0.1:1", "clusterName": "SizeCluster",
            "brokerId": "0"}, DataVersion(counter=n).encode() + b" " * (16 * 1024 * n))),
    ]


@dataclass
class Measured:
    label: str
    costs: dict[int, float]
    holds: dict[int, float]
    answers: dict[int, str]
    failure: str | None = None


def code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


def measure(connection: RawConnection, probe: LoopProbe, shape: Shape) -> Measured:
    """Costs (the fastest of `REPEATS`) and loop holds at each scale; stops at the first unanswered request."""
    result = Measured(shape.label, {}, {}, {})
    for n in SCALES:
        requests = [shape.build(n) for _ in range(REPEATS)]
        costs = []
        probe.reset()
        for request in requests:
            started = time.perf_counter()
            try:
                response = connection.request(request, ANSWER_TIMEOUT_S if shape.code not in SILENT else 0.5)
            except TimeoutError:
                if shape.code not in SILENT:
                    result.failure = f"{shape.label}: no answer at {n}x within {ANSWER_TIMEOUT_S:.0f} s"
                    return result
                response = None
            costs.append(time.perf_counter() - started)
            if connection.closed_by_peer:
                result.failure = f"{shape.label}: the server closed the connection at {n}x"
                return result
            answer = "no answer" if response is None else f"{code_name(response.code)} {response.remark or ''}"
            result.answers[n] = answer[:300]
        result.costs[n] = min(costs)
        result.holds[n] = probe.worst()
    return result


def violations(measured: Measured, sizeless: bool) -> list[str]:
    if measured.failure is not None:
        return [measured.failure]
    problems = []
    small, large = SCALES[0], SCALES[-1]
    bound = (1 if sizeless else large / small) * SLACK * measured.costs[small] + ABSOLUTE_S
    if measured.costs[large] > bound:
        problems.append(f"{measured.label}: {large}x costs {measured.costs[large] * 1000:.1f} ms, "
                        f"{small}x {measured.costs[small] * 1000:.1f} ms (more than linear; bound {bound * 1000:.1f})")
    worst = max(measured.holds.values())
    if worst > HOLD_BOUND_S:
        problems.append(f"{measured.label}: held the loop {worst * 1000:.0f} ms (bound {HOLD_BOUND_S * 1000:.0f})")
    return problems


def served_codes(server: str) -> set[int]:
    """The request codes the server registers (from a throwaway in-process instance)."""
    if server == "broker":
        from rocketflow.dev import DevCluster

        cluster = DevCluster.start_in_thread()
        try:
            assert cluster.broker is not None
            return set(cluster.broker.server._dispatcher._processors) | set(cluster.broker.admin_processor.handlers)
        finally:
            cluster.close()
    from rocketflow.namesrv import NameServer, NamesrvConfig

    return set(NameServer(NamesrvConfig(port=0)).server._dispatcher._processors)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess, Path]]:
    tmp_path = tmp_path_factory.mktemp("size-fuzz")
    namesrv = ServerProcess(["namesrv", "--port", "0", "--set", f"kvConfigPath={tmp_path / 'kv.json'}"],
                            tmp_path / "namesrv.log")
    try:
        broker = ServerProcess(broker_args(tmp_path / "store", "enablePropertyFilter=true",
                                           "mappedFileSizeCommitLog=67108864", "consume_queue_segment_units=300000",
                                           namesrv=namesrv.address),
                               tmp_path / "broker.log")
        try:
            yield namesrv, broker, tmp_path
        finally:
            broker.stop()
    finally:
        namesrv.stop()


def prepare_broker(address: str) -> None:
    """A topic with messages, and a consumer group online, so requests reach their work."""
    connection = RawConnection(address)
    try:
        create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
        answer = connection.request(create, 10)
        assert answer is not None and answer.code == ResponseCode.SUCCESS
        for index in range(16):
            sent = connection.request(send_request(TOPIC, b"seed", {"KEYS": f"seed{index}", "TAGS": "tag1"},
                                                   queue_id=0), 10)
            assert sent is not None and sent.code == ResponseCode.SUCCESS
        for batch in range(SEED_BATCHES):  # a long queue: a pull's scan must not depend on its length
            messages = [Message(TOPIC, b"s", {"TAGS": "tag2", "a": "1"}) for _ in range(1000)]
            sent = connection.request(send_request(TOPIC, encode_batch_body(messages), None, queue_id=0,
                                                   code=RequestCode.SEND_BATCH_MESSAGE), 10)
            assert sent is not None and sent.code == ResponseCode.SUCCESS, (batch, sent and sent.remark)
        online = HeartbeatData(CLIENT, [], [ConsumerData(GROUP, subscription_data_set=[
            SubscriptionData(TOPIC, "*", set(), set(), 1)])])
        answer = connection.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=online.encode()), 10)
        assert answer is not None and answer.code == ResponseCode.SUCCESS
    finally:
        connection.close()


def cheap(server: str) -> Callable[[], RemotingCommand]:
    if server == "broker":
        return lambda: RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
    return lambda: RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ProbeNs", "key": "k"})


@pytest.mark.parametrize("server", ["broker", "namesrv"])
def test_every_code_costs_linear_time_in_its_size_and_never_holds_the_loop(
        servers: tuple[ServerProcess, ServerProcess, Path], server: str) -> None:
    namesrv, broker, tmp_path = servers
    process = broker if server == "broker" else namesrv
    specific = broker_shapes() if server == "broker" else namesrv_shapes()
    codes = served_codes(server)
    unknown = {shape.code for shape in specific} - codes
    assert not unknown, f"shapes for codes the {server} does not serve: {unknown}"
    shapes = specific + [shape for code in sorted(codes) for shape in generic_shapes(code)]
    if server == "broker":
        prepare_broker(broker.address)
    results: list[Measured] = []
    problems: list[str] = []
    with LoopProbe(process.address, cheap(server)) as probe:
        connection = RawConnection(process.address, timeout=60)
        try:
            for shape in shapes:
                measured = measure(connection, probe, shape)
                results.append(measured)
                problems += violations(measured, shape.sizeless)
                if measured.failure is not None:  # an answer may still be on its way: a new connection
                    connection.close()
                    connection = RawConnection(process.address, timeout=60)
        finally:
            connection.close()
    report = tmp_path / f"size_fuzz_report_{server}.json"
    report.write_text(json.dumps([{"shape": m.label, "costs_ms": {n: round(c * 1000, 2) for n, c in m.costs.items()},
                                   "holds_ms": {n: round(h * 1000, 2) for n, h in m.holds.items()},
                                   "answers": m.answers, "failure": m.failure} for m in results], indent=1))
    print(f"\n{server}: {len(shapes)} shapes of {len(codes)} codes at {SCALES}; report {report}")
    for m in sorted(results, key=lambda m: -max(m.holds.values(), default=float("inf")))[:8]:
        print(f"  {m.label}: costs {[round(c * 1000, 1) for c in m.costs.values()]} ms, "
              f"holds {[round(h * 1000, 1) for h in m.holds.values()]} ms; {m.failure or m.answers[SCALES[-1]]}")
    assert process.alive()
    assert not problems, "\n".join(problems)
