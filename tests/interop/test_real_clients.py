"""Real RocketMQ 4.x clients against `rocketflow dev`: npm ``ali-ons`` 3.12.0 and Apache's C++ client
(PyPI ``rocketmq`` 0.4.4), each as subprocesses running the scripts in ``clients/``.

The messages are generated here (unicode bodies of varied length, some over 4 KiB so the clients
compress them, one or two keys, tags, two user properties) and handed to the producer script as a
JSON-lines file; every received message is compared with what was generated and with what the
producer reported (queue id, queue offset, msg id).

Consumers start before the real messages flow: the producer first sends probe rounds (one message
per queue per round) until every consumer group has its queues, which matters for consumers that
start at the end of a queue (broadcasting, whose offsets are local).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rocketflow.net import RemotingClient
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import (
    CreateTopicRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)

if TYPE_CHECKING:  # fixtures come from this folder's conftest.py, which is not importable as a module
    from conftest import ClientProcess, ClientRunner, DevCluster

Event = dict[str, Any]

pytestmark = pytest.mark.slow

#: Messages per producer in the fan-out and orderly tests (the issue's number).
MESSAGE_COUNT = 10_000
USER_PROPS = ("rf_seq", "rf_note")
#: Extra properties the C++ consumer is asked for (it can only read properties by name).
CPP_CONSUMER_PROPS = (*USER_PROPS, "UNIQ_KEY")
BODY_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.;:-_/!?'\"{}[]éüßçø漢字かな✓€"
#: Every this many messages one body is 6,000 bytes: over both clients' 4 KiB compression threshold.
LARGE_BODY_EVERY = 1000

READY_TIMEOUT = 60.0
SEND_TIMEOUT = 150.0
RECEIVE_TIMEOUT = 90.0


# ============================================================================ messages


def make_messages(prefix: str, count: int, *, shards: int = 0) -> list[dict[str, Any]]:
    """``count`` distinct message specs; ``shards`` > 0 adds ``shard`` (orderly key index) and
    makes the key ``<prefix>-order-<shard>``."""
    rng = random.Random(prefix)
    specs = []
    for index in range(count):
        if index % LARGE_BODY_EVERY == LARGE_BODY_EVERY - 1:
            filler = "large " + "x" * 6000
        else:
            filler = "".join(rng.choices(BODY_ALPHABET, k=rng.randint(0, 160)))
        spec: dict[str, Any] = {
            "body": f"{prefix}#{index} {filler}",
            "tags": f"Tag{'ABC'[index % 3]}",
            "props": {"rf_seq": str(index), "rf_note": f"note-{index % 11}-ü"},
        }
        if shards:
            spec["shard"] = index % shards
            spec["keys"] = [f"{prefix}-order-{index % shards}"]
        else:
            spec["keys"] = [f"{prefix}-key-{index}"] + ([f"{prefix}-extra-{index}"] if index % 7 == 0 else [])
        specs.append(spec)
    return specs


def write_messages(path: Path, specs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(spec, ensure_ascii=False) + "\n" for spec in specs), encoding="utf-8")
    return path


def spec_index(prefix: str, event: Event) -> int | None:
    """The generated index a received message's body names, or None if it is not one of ours."""
    head = str(event.get("body", "")).split(" ", 1)[0]
    name, _, number = head.partition("#")
    return int(number) if name == prefix and number.isdigit() else None


# ============================================================================ checks


@dataclass
class Group:
    """A consumer group under test: its processes and message model."""

    name: str
    broadcast: bool
    processes: list[ClientProcess]

    def real_receipts(self) -> list[list[Event]]:
        """Per process for broadcasting; one merged list for clustering."""
        lists = [process.received() for process in self.processes]
        return lists if self.broadcast else [[event for events in lists for event in events]]


def complete_probe_rounds(producer: ClientProcess) -> dict[int, set[int]]:
    """Probe rounds the producer finished: round -> the queue ids it covered."""
    rounds: dict[int, set[int]] = defaultdict(set)
    counts: dict[int, int] = {}
    for event in producer.of("probe"):
        rounds[event["round"]].add(event["queue_id"])
        counts[event["round"]] = event.get("queue_count") or 0
    return {r: queues for r, queues in rounds.items() if counts[r] and len(queues) == counts[r]}


def probe_origin(event: Event) -> tuple[int, int]:
    """(producer pid, round) of a received probe."""
    _, pid, round_number, _ = str(event["body"]).split()
    return int(pid), int(round_number)


def group_has_queues(group: Group, producer: ClientProcess) -> bool:
    """True once one complete probe round of ``producer`` reached the group the way its model says
    it should: every broadcasting process got every queue; a clustering group's processes got
    disjoint, non-empty shares that add up to every queue."""
    rounds = complete_probe_rounds(producer)
    probes = [process.received(probes=True) for process in group.processes]
    for round_number in sorted(rounds, reverse=True)[:5]:
        queues = rounds[round_number]
        origin = (producer.pid, round_number)
        shares = [[e["queue_id"] for e in events if probe_origin(e) == origin] for events in probes]
        if group.broadcast:
            if all(set(share) == queues for share in shares):
                return True
        elif all(shares) and sorted(q for share in shares for q in share) == sorted(queues):
            return True
    return False


def same_msg_id(received: str, sent: str, *, cpp_consumer: bool) -> bool:
    """Equal ids; for the C++ consumer also an offset msg id whose IPv4 bytes are reversed: that
    client builds offset msg ids from the address as a little-endian int (127.0.0.1 -> 0100007F),
    whatever the broker sent."""
    if received == sent:
        return True
    if not cpp_consumer or len(received) != 32 or len(sent) != 32 or received[8:] != sent[8:]:
        return False
    try:
        return bytes.fromhex(received[:8])[::-1] == bytes.fromhex(sent[:8])
    except ValueError:
        return False


def check_receipts(
    label: str,
    prefix: str,
    specs: list[dict[str, Any]],
    sent: dict[int, Event],
    receipts: Iterable[Event],
    *,
    exactly_once: bool = True,
    expected: Iterable[int] | None = None,
    cpp_consumer: bool = False,
) -> list[str]:
    """Compare received messages with the generated specs and the producer's send results.

    Returns a list of problems (empty if all is well): unknown or duplicated or missing messages, and
    any difference in body, keys, tags, user properties, queue id, queue offset, msg id, reconsume times.
    """
    problems: list[str] = []
    seen: dict[int, int] = defaultdict(int)
    for event in receipts:
        index = spec_index(prefix, event)
        if index is None or index >= len(specs):
            problems.append(f"{label}: unexpected message {json.dumps(event, ensure_ascii=False)[:300]}")
            continue
        seen[index] += 1
        spec, result = specs[index], sent.get(index, {})
        differences = []
        if event.get("body") != spec["body"]:
            differences.append(f"body {event.get('body')!r:.80} != {spec['body']!r:.80}")
        if event.get("keys") != " ".join(spec["keys"]):
            differences.append(f"keys {event.get('keys')!r} != {' '.join(spec['keys'])!r}")
        if event.get("tags") != spec["tags"]:
            differences.append(f"tags {event.get('tags')!r} != {spec['tags']!r}")
        props = event.get("props") or {}
        for name in USER_PROPS:
            if props.get(name) != spec["props"][name]:
                differences.append(f"property {name} {props.get(name)!r} != {spec['props'][name]!r}")
        if result.get("queue_id") is not None and event.get("queue_id") != result["queue_id"]:
            differences.append(f"queue id {event.get('queue_id')} != {result['queue_id']} (send result)")
        if result and event.get("offset") != result.get("offset"):
            differences.append(f"queue offset {event.get('offset')} != {result.get('offset')} (send result)")
        # A client-made unique id travels as the UNIQ_KEY property; otherwise both sides use the
        # broker's offset msg id (store host + commit-log offset).
        received_id = props.get("UNIQ_KEY") or event.get("msg_id")
        if result and not same_msg_id(str(received_id), str(result.get("msg_id")), cpp_consumer=cpp_consumer):
            differences.append(f"msg id {received_id!r} != {result.get('msg_id')!r} (send result)")
        if event.get("reconsume_times") != 0:
            differences.append(f"reconsume times {event.get('reconsume_times')}")
        if differences:
            problems.append(f"{label}: message #{index}: " + "; ".join(differences))
    wanted = range(len(specs)) if expected is None else expected
    missing = [index for index in wanted if not seen.get(index)]
    if missing:
        problems.append(f"{label}: {len(missing)} messages never arrived, e.g. #{missing[:10]}")
    if exactly_once:
        duplicated = sorted(index for index, count in seen.items() if count > 1)
        if duplicated:
            problems.append(f"{label}: {len(duplicated)} messages arrived more than once, e.g. #{duplicated[:10]}")
    return problems


#: How far back (in one key's messages) a process taking over a queue may start again.
TAKEOVER_REWIND_LIMIT = 32


def key_order_problems(label: str, receipts: list[tuple[int, int, str]], wanted: list[int]) -> tuple[list[str], int]:
    """Check one key's receipts ``(start time, index, process)``, in time order, against its send
    order ``wanted``: each process consumes consecutive messages; a process taking over may repeat
    up to `TAKEOVER_REWIND_LIMIT` messages already consumed, never skip one. Returns the problems
    and the number of repeated messages."""
    position = {index: n for n, index in enumerate(wanted)}
    furthest = -1
    previous: tuple[str, int] | None = None
    repeats = 0
    for _, index, name in receipts:
        at = position[index]
        if previous is not None and previous[0] == name:
            if at != previous[1] + 1:
                return [f"{label}: {name} consumed #{index} right after #{wanted[previous[1]]}"], repeats
        elif at > furthest + 1:
            return [f"{label}: {name} started at #{index}, skipping #{wanted[furthest + 1]}"], repeats
        elif at < furthest + 1 - TAKEOVER_REWIND_LIMIT:
            return [f"{label}: {name} took over at #{index}, far behind #{wanted[furthest]}"], repeats
        repeats += at <= furthest
        furthest = max(furthest, at)
        previous = (name, at)
    if furthest != len(wanted) - 1:
        return [f"{label}: consumed up to position {furthest} of {len(wanted)}"], repeats
    return [], repeats


def assert_no_problems(problems: list[str]) -> None:
    if problems:
        shown = problems[:25]
        more = f"\n... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        pytest.fail("\n".join(shown) + more, pytrace=False)


def sent_results(producer: ClientProcess) -> dict[int, Event]:
    return {event["index"]: event for event in producer.of("sent")}


def check_send_results(producer: ClientProcess, specs: list[dict[str, Any]]) -> dict[int, Event]:
    """The producer's send results by index, after checking it sent each spec once, successfully."""
    sent = sent_results(producer)
    problems = [f"send #{i} status {e.get('status')}" for i, e in sent.items()
                if e.get("status") not in ("SEND_OK", "OK")]
    problems += [f"send #{i} reports body {e.get('body')!r:.60}" for i, e in sent.items()
                 if i >= len(specs) or e.get("body") != specs[i]["body"]]
    if len(sent) != len(specs):
        problems.append(f"{producer.name} reported {len(sent)} sends, expected {len(specs)}; "
                        f"errors: {producer.of('error')}")
    positions = [(e.get("queue_id"), e.get("offset")) for e in sent.values() if e.get("queue_id") is not None]
    if len(set(positions)) != len(positions):
        problems.append(f"{producer.name}: two sends got the same queue id and offset")
    assert_no_problems(problems)
    return sent


# ============================================================================ broker queries


def query_committed_offsets(broker_addr: str, group: str, topic: str, queue_ids: Iterable[int]) -> dict[int, int]:
    """QUERY_CONSUMER_OFFSET for each queue; -1 where the broker has none (QUERY_NOT_FOUND)."""

    async def query() -> dict[int, int]:
        offsets = {}
        async with RemotingClient(name="interop-check") as client:
            for queue_id in queue_ids:
                header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id)
                request = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext_fields())
                response = await client.invoke(broker_addr, request, timeout=5.0)
                if response.code == ResponseCode.QUERY_NOT_FOUND:
                    offsets[queue_id] = -1
                elif response.code == ResponseCode.SUCCESS:
                    offsets[queue_id] = QueryConsumerOffsetResponseHeader.from_command(response).offset
                else:
                    pytest.fail(f"QUERY_CONSUMER_OFFSET {group}/{topic}/{queue_id}: {response.describe()}",
                                pytrace=False)
        return offsets

    return asyncio.run(query())


def max_offsets(broker_addr: str, topic: str, queue_ids: Iterable[int]) -> dict[int, int]:
    """GET_MAX_OFFSET for each queue (the offset the next message will get)."""

    async def query() -> dict[int, int]:
        offsets = {}
        async with RemotingClient(name="interop-check") as client:
            for queue_id in queue_ids:
                header = GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
                request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header.to_ext_fields())
                response = await client.invoke(broker_addr, request, timeout=5.0)
                if response.code != ResponseCode.SUCCESS:
                    pytest.fail(f"GET_MAX_OFFSET {topic}/{queue_id}: {response.describe()}", pytrace=False)
                offsets[queue_id] = GetMaxOffsetResponseHeader.from_command(response).offset
        return offsets

    return asyncio.run(query())


def commit_offsets(broker_addr: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """UPDATE_CONSUMER_OFFSET for each queue (a new group then starts there, whatever its client's default)."""

    async def update() -> None:
        async with RemotingClient(name="interop-admin") as client:
            for queue_id, offset in offsets.items():
                header = UpdateConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id,
                                                           commit_offset=offset)
                request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())
                response = await client.invoke(broker_addr, request, timeout=5.0)
                if response.code != ResponseCode.SUCCESS:
                    pytest.fail(f"UPDATE_CONSUMER_OFFSET {group}/{topic}/{queue_id}: {response.describe()}",
                                pytrace=False)

    asyncio.run(update())


def create_topic(cluster: DevCluster, topic: str, queues: int = 4, timeout: float = 15.0) -> None:
    """UPDATE_AND_CREATE_TOPIC on the broker, then wait until the name server routes the topic.

    ali-ons cannot send to a topic the name server does not know (it has no auto-create), so its
    topics are made this way first."""

    async def create() -> None:
        async with RemotingClient(name="interop-admin") as client:
            header = CreateTopicRequestHeader(topic=topic, default_topic="TBW102", read_queue_nums=queues,
                                              write_queue_nums=queues, perm=6, topic_filter_type="SINGLE_TAG")
            request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())
            response = await client.invoke(cluster.broker_addr, request, timeout=5.0)
            if response.code != ResponseCode.SUCCESS:
                pytest.fail(f"UPDATE_AND_CREATE_TOPIC {topic}: {response.describe()}", pytrace=False)
            deadline = time.monotonic() + timeout
            while True:
                route_request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                        GetRouteInfoRequestHeader(topic=topic).to_ext_fields())
                route = await client.invoke(cluster.namesrv_addr, route_request, timeout=5.0)
                if route.code == ResponseCode.SUCCESS:
                    return
                if time.monotonic() > deadline:
                    pytest.fail(f"the name server has no route for {topic} {timeout:.0f}s after the broker created "
                                f"it: {route.describe()}", pytrace=False)
                await asyncio.sleep(0.1)

    asyncio.run(create())


# ============================================================================ flows


def start_producer(clients: ClientRunner, kind: str, cluster: DevCluster, topic: str, messages: Path, *,
                   probe: bool, orderly: bool = False) -> ClientProcess:
    if kind == "alions":
        assert not orderly, "ali-ons has no send_orderly here"
        create_topic(cluster, topic)  # idempotent: an update when the topic exists
        return clients.alions_producer(f"{kind}-producer-{topic}", cluster.namesrv_addr, topic, f"P_{topic}",
                                       messages, probe=probe)
    return clients.cpp_producer(f"{kind}-producer-{topic}", cluster.namesrv_addr, topic, f"P_{topic}", messages,
                                probe=probe, orderly=orderly)


def start_consumer(clients: ClientRunner, kind: str, cluster: DevCluster, name: str, topic: str, group: str, *,
                   broadcast: bool = False, orderly: bool = False, delay_ms: float = 0) -> ClientProcess:
    if kind == "alions":
        assert not orderly, "ali-ons has no orderly push consumer"
        return clients.alions_consumer(name, cluster.namesrv_addr, topic, group, broadcast=broadcast,
                                       delay_ms=delay_ms)
    return clients.cpp_consumer(name, cluster.namesrv_addr, topic, group, broadcast=broadcast, orderly=orderly,
                                props=CPP_CONSUMER_PROPS, delay_ms=delay_ms)


def wait_for_queues(clients: ClientRunner, producer: ClientProcess, groups: list[Group]) -> float:
    """Wait (probe rounds flowing) until every group has its queues; returns the seconds waited."""
    everyone = tuple(process for group in groups for process in group.processes)
    clients.wait_until(lambda: bool(producer.of("probe")), READY_TIMEOUT, f"{producer.name}'s first probe",
                       must_keep_running=(producer,))
    for process in everyone:
        clients.wait_until(lambda process=process: bool(process.of("started")), READY_TIMEOUT,
                           f"{process.name} to start", must_keep_running=(process,))
    return clients.wait_until(
        lambda: all(group_has_queues(group, producer) for group in groups), READY_TIMEOUT,
        "every consumer group to get its queues (probe messages): " + ", ".join(group.name for group in groups),
        must_keep_running=(producer, *everyone))


def release_messages(clients: ClientRunner, producer: ClientProcess, *, wait: bool = True) -> None:
    """End the producer's probing: its real messages go out (and, with ``wait``, are all sent)."""
    producer.send_line("go")
    if wait:
        wait_for_producer(clients, producer)


def wait_for_producer(clients: ClientRunner, producer: ClientProcess) -> None:
    clients.wait_until(lambda: bool(producer.of("done")), SEND_TIMEOUT, f"{producer.name} to send its messages",
                       must_keep_running=(producer,))
    assert not producer.of("error"), f"{producer.name} failed: {producer.of('error')}"


def wait_for_receipts(clients: ClientRunner, groups: list[Group], count: int) -> None:
    """Until every group got ``count`` distinct real messages (every process, for broadcasting)."""

    def everyone_has_all() -> bool:
        return all(len({event["body"] for event in events}) >= count
                   for group in groups for events in group.real_receipts())

    everyone = tuple(process for group in groups for process in group.processes)
    clients.wait_until(everyone_has_all, RECEIVE_TIMEOUT, f"every consumer to receive all {count} messages",
                       must_keep_running=everyone)


def report(title: str, timings: dict[str, float]) -> None:
    print(f"\n{title}: " + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items()))


# ============================================================================ tests


@pytest.mark.parametrize("producer_kind", ["alions", "cpp"])
def test_each_consumer_gets_every_message_exactly_as_sent(
    producer_kind: str, dev_cluster: DevCluster, clients: ClientRunner, tmp_path: Path
) -> None:
    """One producer's 10,000 messages reach four groups at once: ali-ons and C++ push consumers,
    clustering (one process) and broadcasting (two processes, each getting everything)."""
    topic = f"InteropFanout_{producer_kind}"
    prefix = f"fan-{producer_kind}"
    specs = make_messages(prefix, MESSAGE_COUNT)
    producer = start_producer(clients, producer_kind, dev_cluster, topic, write_messages(tmp_path / "m.jsonl", specs),
                              probe=True)
    clients.wait_until(lambda: bool(producer.of("probe")), READY_TIMEOUT, "the producer's first probe",
                       must_keep_running=(producer,))
    groups = []
    for kind in ("alions", "cpp"):
        groups.append(Group(f"{kind}-clustering", False, [
            start_consumer(clients, kind, dev_cluster, f"{kind}-cl", topic, f"G_{kind}_cl")]))
        groups.append(Group(f"{kind}-broadcasting", True, [
            start_consumer(clients, kind, dev_cluster, f"{kind}-bc-{n}", topic, f"G_{kind}_bc", broadcast=True)
            for n in (1, 2)]))
    timings = {"queues assigned": wait_for_queues(clients, producer, groups)}
    started = time.monotonic()
    release_messages(clients, producer)
    timings["produce"] = time.monotonic() - started
    wait_for_receipts(clients, groups, MESSAGE_COUNT)
    timings["produce + consume"] = time.monotonic() - started
    clients.stop(*(process for group in groups for process in group.processes))
    report(f"{producer_kind} producer, {MESSAGE_COUNT} messages", timings)

    sent = check_send_results(producer, specs)
    problems = []
    for group in groups:
        for number, receipts in enumerate(group.real_receipts(), 1):
            label = f"{group.name}#{number}" if group.broadcast else group.name
            problems += check_receipts(label, prefix, specs, sent, receipts, cpp_consumer=group.name.startswith("cpp"))
    assert_no_problems(problems)


def test_cpp_orderly_consumers_split_queues_and_keep_key_order(
    dev_cluster: DevCluster, clients: ClientRunner, tmp_path: Path
) -> None:
    """C++ orderly push consumers, messages sent with send_orderly by key (16 keys over the queues).

    One consumer starts alone and locks every queue; a second joins the group while the first half
    of the messages flows, so queues move over through the broker's locks (released by the first,
    then locked by the second); the second half goes out once the queues are split. Every key's
    messages are consumed in send order across both processes, each message once, each process
    owns some queues, and no queue is ever consumed by both processes at the same time.
    """
    topic = "InteropOrderly"
    prefix = "ord"
    key_count = 16
    half = MESSAGE_COUNT // 2
    specs = make_messages(prefix, MESSAGE_COUNT, shards=key_count)
    timings: dict[str, float] = {}

    first = start_producer(clients, "cpp", dev_cluster, topic, write_messages(tmp_path / "m1.jsonl", specs[:half]),
                           probe=True, orderly=True)
    clients.wait_until(lambda: bool(first.of("probe")), READY_TIMEOUT, "the producer's first probe",
                       must_keep_running=(first,))
    lone = start_consumer(clients, "cpp", dev_cluster, "orderly-1", topic, "G_orderly", orderly=True)
    timings["first consumer locks all queues"] = wait_for_queues(clients, first, [Group("orderly-1", False, [lone])])
    started = time.monotonic()
    release_messages(clients, first, wait=False)
    clients.wait_until(lambda: len(lone.received()) >= half // 4, RECEIVE_TIMEOUT,
                       "orderly-1 to consume a quarter of the first half", must_keep_running=(lone,))
    joiner = start_consumer(clients, "cpp", dev_cluster, "orderly-2", topic, "G_orderly", orderly=True)
    wait_for_producer(clients, first)

    second = start_producer(clients, "cpp", dev_cluster, topic,
                            write_messages(tmp_path / "m2.jsonl", specs[half:]), probe=True, orderly=True)
    consumers = [lone, joiner]
    group = Group("orderly", False, consumers)
    timings["queues split between both"] = wait_for_queues(clients, second, [group])
    release_messages(clients, second)
    wait_for_receipts(clients, [group], MESSAGE_COUNT)
    timings["whole run"] = time.monotonic() - started
    clients.stop(*consumers)
    report(f"orderly, {MESSAGE_COUNT} messages", timings)

    sent = check_send_results(first, specs[:half])
    sent.update({half + index: event for index, event in check_send_results(second, specs[half:]).items()})
    queue_count = first.of("probe")[0]["queue_count"]
    problems = [f"send #{i} went to queue {e['queue_id']}, not shard {specs[i]['shard']} % {queue_count}"
                for i, e in sent.items() if e["queue_id"] != specs[i]["shard"] % queue_count]
    everything = [(process.name, event) for process in consumers for event in process.of("recv")]
    real = [(process.name, event) for process in consumers for event in process.received()]
    problems += check_receipts("orderly group", prefix, specs, sent, (event for _, event in real), cpp_consumer=True,
                               exactly_once=False)

    # Per key, in the order the callbacks ran: the send order. A process taking a queue over may
    # start a little before where the previous owner stopped (the C++ client reads the committed
    # offset before it holds the lock, so it can race the previous owner's last commit); any other
    # repeat, skip or reordering is an error.
    by_key: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for name, event in real:
        index = spec_index(prefix, event)
        if index is not None:
            by_key[specs[index]["shard"]].append((int(event["started_ns"]), index, name))
    redelivered = 0
    for shard, receipts in sorted(by_key.items()):
        wanted = list(range(shard, MESSAGE_COUNT, key_count))
        key_problems, repeats = key_order_problems(f"key {shard}", sorted(receipts), wanted)
        problems += key_problems
        redelivered += repeats
    print(f"orderly: {redelivered} messages consumed again by the process that took their queue over")

    # Once split, each queue's messages went to one process, and each process owns some queues.
    owners: dict[int, set[str]] = defaultdict(set)
    for name, event in real:
        if (spec_index(prefix, event) or 0) >= half:
            owners[event["queue_id"]].add(name)
    for process in consumers:
        if not any(owner == {process.name} for owner in owners.values()):
            problems.append(f"{process.name} owned no queue after the split: {dict(owners)}")
    problems += [f"queue {q}: second-half messages consumed by both {sorted(names)}"
                 for q, names in owners.items() if len(names) > 1]
    taken_over = {event["queue_id"] for name, event in real if name == joiner.name}
    if not taken_over & {event["queue_id"] for name, event in everything if name == lone.name}:
        problems.append("no queue moved from orderly-1 to orderly-2")

    # Never two processes on one queue at once (probes included): sweep the callbacks by start time.
    by_queue: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for name, event in everything:
        by_queue[event["queue_id"]].append((int(event["started_ns"]), int(event["ended_ns"]), name))
    for queue_id, calls in sorted(by_queue.items()):
        latest_end: dict[str, int] = {}
        for start, end, name in sorted(calls):
            clash = [other for other, other_end in latest_end.items() if other != name and other_end > start]
            if clash:
                problems.append(f"queue {queue_id}: {name} consumed while {clash} was still consuming")
                break
            latest_end[name] = max(end, latest_end.get(name, end))
    assert_no_problems(problems)


@pytest.mark.parametrize("kind", ["alions", "cpp"])
def test_restarted_consumer_resumes_from_committed_offset(
    kind: str, dev_cluster: DevCluster, clients: ClientRunner, tmp_path: Path
) -> None:
    """A clustering consumer stopped halfway commits its offsets; a new process in the same group
    starts exactly there: nothing below the committed offset again, nothing lost above it."""
    topic = f"InteropRestart_{kind}"
    group = f"G_restart_{kind}"
    first_count, second_count = 2000, 500
    first = make_messages("r1", first_count)
    second = make_messages("r2", second_count)
    # The C++ binding's send_sync does not say which queue it used; send_orderly spreads the
    # messages over the queues by index instead, so every send result names its queue.
    for index, spec in enumerate(first + second):
        spec["shard"] = index
    orderly = kind == "cpp"

    producer = start_producer(clients, kind, dev_cluster, topic, write_messages(tmp_path / "m1.jsonl", first),
                              probe=False, orderly=orderly)
    clients.wait_until(lambda: bool(producer.of("done")), SEND_TIMEOUT, "the first batch to be sent",
                       must_keep_running=(producer,))
    first_sent = check_send_results(producer, first)

    # Slow callbacks, so the consumer is stopped with part of the batch still unconsumed.
    consumer = start_consumer(clients, kind, dev_cluster, f"{kind}-before", topic, group, delay_ms=3)
    clients.wait_until(lambda: len(consumer.received()) >= first_count // 4, RECEIVE_TIMEOUT,
                       "the first consumer to get a quarter of the batch", must_keep_running=(consumer,))
    clients.stop(consumer)
    before = consumer.received()

    queue_ids = sorted({event["queue_id"] for event in producer.of("sent")} | {e["queue_id"] for e in before})
    committed = query_committed_offsets(dev_cluster.broker_addr, group, topic, queue_ids)
    problems = check_receipts("before restart", "r1", first, first_sent, before, cpp_consumer=kind == "cpp",
                              expected=[i for i, e in first_sent.items() if e["offset"] < committed[e["queue_id"]]])
    if sum(max(offset, 0) for offset in committed.values()) < len({e["body"] for e in before}) // 2:
        problems.append(f"committed offsets {committed} lag far behind the {len(before)} messages consumed")
    if all(offset >= 0 and offset >= max(e["offset"] for e in first_sent.values() if e["queue_id"] == q) + 1
           for q, offset in committed.items()):
        problems.append(f"the consumer was stopped too late to test a restart: committed {committed}")
    assert_no_problems(problems)

    producer2 = start_producer(clients, kind, dev_cluster, topic, write_messages(tmp_path / "m2.jsonl", second),
                               probe=False, orderly=orderly)
    clients.wait_until(lambda: bool(producer2.of("done")), SEND_TIMEOUT, "the second batch to be sent",
                       must_keep_running=(producer2,))
    second_sent = check_send_results(producer2, second)

    remaining = [i for i, e in first_sent.items() if e["offset"] >= committed[e["queue_id"]]]
    consumer2 = start_consumer(clients, kind, dev_cluster, f"{kind}-after", topic, group)

    def caught_up() -> bool:
        bodies = {event["body"] for event in consumer2.received()}
        return all(first[i]["body"] in bodies for i in remaining) and all(s["body"] in bodies for s in second)

    clients.wait_until(caught_up, RECEIVE_TIMEOUT, "the restarted consumer to catch up",
                       must_keep_running=(consumer2,))
    clients.stop(consumer2)
    after = consumer2.received()
    print(f"\n{kind}: {len(before)} consumed before the restart, committed {committed}, {len(after)} after")
    problems = check_receipts("after restart (first batch)", "r1", first, first_sent,
                              [e for e in after if spec_index("r1", e) is not None], expected=remaining,
                              cpp_consumer=kind == "cpp")
    problems += check_receipts("after restart (second batch)", "r2", second, second_sent,
                               [e for e in after if spec_index("r1", e) is None], cpp_consumer=kind == "cpp")
    redelivered = [e["offset"] for e in after if spec_index("r1", e) is not None
                   and e["offset"] < committed[e["queue_id"]]]
    if redelivered:
        problems.append(f"{len(redelivered)} committed messages delivered again after the restart")
    assert_no_problems(problems)


def test_cpp_send_sync_from_threads_then_both_push_consumers_drain_every_queue(
    dev_cluster: DevCluster, clients: ClientRunner, tmp_path: Path
) -> None:
    """bench/client_bench.py's C++ phases, small: ``send_sync`` from 8 threads into 8 queues, then a
    concurrent and an orderly C++ push consumer group whose offsets were committed at 0 first.

    The bench once saw both groups "stall" at the same count: its sending threads had died on this
    client's lock bug (see `send_with_retries` in clients/cpp_producer.py), so the topic held fewer
    messages than it expected, and each group had consumed every one of them. Here every send must
    be stored, and each group must get every message and commit each queue's max offset."""
    topic = "InteropThreadedSend"
    prefix = "thr"
    count, queues = 4000, 8
    create_topic(dev_cluster, topic, queues=queues)
    groups = {"concurrent": "G_thr_concurrent", "orderly": "G_thr_orderly"}
    for group in groups.values():
        commit_offsets(dev_cluster.broker_addr, group, topic, dict.fromkeys(range(queues), 0))
    specs = make_messages(prefix, count)
    producer = clients.cpp_producer("cpp-threaded-producer", dev_cluster.namesrv_addr, topic, "P_threaded",
                                    write_messages(tmp_path / "m.jsonl", specs), threads=8)
    wait_for_producer(clients, producer)
    sent = check_send_results(producer, specs)
    stored = max_offsets(dev_cluster.broker_addr, topic, range(queues))
    assert sum(stored.values()) == count, f"the topic holds {stored}, not {count} messages"

    consumers = {mode: clients.cpp_consumer(f"cpp-{mode}", dev_cluster.namesrv_addr, topic, group,
                                            orderly=mode == "orderly", props=CPP_CONSUMER_PROPS)
                 for mode, group in groups.items()}
    wait_for_receipts(clients, [Group(mode, False, [process]) for mode, process in consumers.items()], count)
    clients.stop(*consumers.values())
    print(f"\nthreaded send_sync: {len(producer.of('send_retry'))} sends retried by the application")
    problems = []
    for mode, process in consumers.items():
        problems += check_receipts(mode, prefix, specs, sent, process.received(), cpp_consumer=True)
        committed = query_committed_offsets(dev_cluster.broker_addr, groups[mode], topic, range(queues))
        if committed != stored:
            problems.append(f"{mode}: committed offsets {committed} != max offsets {stored}")
    assert_no_problems(problems)
