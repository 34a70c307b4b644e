"""Allocation strategies: worked examples and pinned cases, plus properties."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketflow.client.consumer.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    md5_hash,
)
from rocketflow.protocol.message import MessageQueue

GROUP = "please_rename_unique_group_name"
CIDS = ["CID-0", "CID-1", "CID-2"]


def queues(count: int, broker: str = "broker-a", topic: str = "TopicTest") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, queue_id) for queue_id in range(count)]


def queue_ids(share: Sequence[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in share]


def shares(
    strategy: AllocateMessageQueueStrategy, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate(GROUP, cid, mq_all, cid_all) for cid in cid_all}


class PrefixRooms:
    """Room of a broker = text before '@' in its name; room of a consumer = text before '-'."""

    def broker_deploy_in(self, message_queue: MessageQueue) -> str | None:
        return message_queue.broker_name.split("@")[0] if "@" in message_queue.broker_name else None

    def consumer_deploy_in(self, client_id: str) -> str | None:
        return client_id.split("-")[0] if "-" in client_id else None


# -- names and argument checks ---------------------------------------------------------------------


def test_names_are_javas() -> None:
    assert AllocateMessageQueueAveragely().name == "AVG"
    assert AllocateMessageQueueAveragelyByCircle().name == "AVG_BY_CIRCLE"
    assert AllocateMessageQueueByConfig([]).name == "CONFIG"
    assert AllocateMessageQueueByMachineRoom({"room1"}).name == "MACHINE_ROOM"
    assert AllocateMessageQueueConsistentHash().name == "CONSISTENT_HASH"
    nearby = AllocateMachineRoomNearby(AllocateMessageQueueAveragelyByCircle(), PrefixRooms())
    assert nearby.name == "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"


CHECKED_STRATEGIES: list[AllocateMessageQueueStrategy] = [
    AllocateMessageQueueAveragely(),
    AllocateMessageQueueAveragelyByCircle(),
    AllocateMessageQueueByMachineRoom({"room1"}),
    AllocateMessageQueueConsistentHash(),
    AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), PrefixRooms()),
]


@pytest.mark.parametrize("strategy", CHECKED_STRATEGIES, ids=lambda s: s.name)
def test_argument_checks_use_rocketmq_messages(strategy: AllocateMessageQueueStrategy) -> None:
    mq_all = queues(4, broker="room1@broker-a")
    with pytest.raises(ValueError, match=r"^currentCID is empty$"):
        strategy.allocate(GROUP, "", mq_all, CIDS)
    with pytest.raises(ValueError, match=r"^mqAll is null or mqAll empty$"):
        strategy.allocate(GROUP, "CID-0", [], CIDS)
    with pytest.raises(ValueError, match=r"^cidAll is null or cidAll empty$"):
        strategy.allocate(GROUP, "CID-0", mq_all, [])
    # The checks come in Java's order: an empty current id wins over empty lists.
    with pytest.raises(ValueError, match=r"^currentCID is empty$"):
        strategy.allocate(GROUP, "", [], [])


@pytest.mark.parametrize("strategy", CHECKED_STRATEGIES, ids=lambda s: s.name)
def test_not_a_member_gets_nothing(strategy: AllocateMessageQueueStrategy) -> None:
    assert strategy.allocate(GROUP, "CID-9", queues(8, broker="room1@broker-a"), CIDS) == []


def test_machine_room_treats_a_blank_cid_as_empty() -> None:
    with pytest.raises(ValueError, match=r"^currentCID is empty$"):
        AllocateMessageQueueByMachineRoom({"room1"}).allocate(GROUP, "  ", queues(2), ["  "])


def test_by_config_ignores_its_inputs_and_checks_nothing() -> None:
    configured = [MessageQueue("T", "b", 3), MessageQueue("T", "a", 1)]
    strategy = AllocateMessageQueueByConfig(configured)
    assert strategy.allocate(GROUP, "", [], []) == configured
    result = strategy.allocate(GROUP, "CID-9", queues(8), CIDS)
    assert result == configured
    result.clear()  # callers get their own list
    assert strategy.allocate(GROUP, "CID-0", queues(8), CIDS) == configured


# -- worked example: 8 queues, 3 consumers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (AllocateMessageQueueAveragely(), [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (AllocateMessageQueueAveragelyByCircle(), [[0, 3, 6], [1, 4, 7], [2, 5]]),
        (AllocateMessageQueueConsistentHash(), [[3, 5, 6], [2, 4, 7], [0, 1]]),
        (AllocateMessageQueueConsistentHash(10), [[3, 5, 6], [2, 4, 7], [0, 1]]),
        (AllocateMessageQueueByConfig(queues(8)), [list(range(8))] * 3),
    ],
    ids=["averagely", "by-circle", "consistent-hash", "consistent-hash-10", "by-config"],
)
def test_worked_example(strategy: AllocateMessageQueueStrategy, expected: list[list[int]]) -> None:
    result = shares(strategy, queues(8), CIDS)
    assert [queue_ids(result[cid]) for cid in CIDS] == expected


def _room_queues() -> list[MessageQueue]:
    return queues(4, broker="room1@broker-a") + queues(4, broker="room2@broker-b")


def _labels(share: Sequence[MessageQueue]) -> list[str]:
    return [f"{mq.broker_name[-1]}{mq.queue_id}" for mq in share]


def test_machine_room_worked_example_one_room() -> None:
    result = shares(AllocateMessageQueueByMachineRoom({"room1"}), _room_queues(), CIDS)
    assert [_labels(result[cid]) for cid in CIDS] == [["a0", "a3"], ["a1"], ["a2"]]


def test_machine_room_worked_example_two_rooms() -> None:
    result = shares(AllocateMessageQueueByMachineRoom({"room1", "room2"}), _room_queues(), CIDS)
    assert [_labels(result[cid]) for cid in CIDS] == [["a0", "a1", "b2"], ["a2", "a3", "b3"], ["b0", "b1"]]


def test_machine_room_keeps_only_two_part_broker_names_of_my_rooms() -> None:
    mq_all = [
        MessageQueue("T", "room1@a", 0),
        MessageQueue("T", "room3@c", 0),  # other room
        MessageQueue("T", "plain", 0),  # no room
        MessageQueue("T", "room1@x@y", 0),  # three parts
        MessageQueue("T", "room1@b@", 0),  # Java's split drops the trailing empty part: two parts
        MessageQueue("T", "room1@", 0),  # ... and here leaves a single part
    ]
    result = AllocateMessageQueueByMachineRoom({"room1"}).allocate(GROUP, "c", mq_all, ["c"])
    assert [mq.broker_name for mq in result] == ["room1@a", "room1@b@"]


def test_machine_room_with_no_matching_queue_gives_nothing() -> None:
    assert AllocateMessageQueueByMachineRoom({"nowhere"}).allocate(GROUP, "CID-0", _room_queues(), CIDS) == []


# -- pinned cases ---------------------------------------------------------------------------------------


def test_averagely_ten_queues_four_consumers() -> None:
    cids = ["c0", "c1", "c2", "c3"]
    result = shares(AllocateMessageQueueAveragely(), queues(10), cids)
    assert [queue_ids(result[cid]) for cid in cids] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert [len(result[cid]) for cid in cids] == [3, 3, 2, 2]


def test_by_circle_ten_queues_four_consumers() -> None:
    cids = ["c0", "c1", "c2", "c3"]
    result = shares(AllocateMessageQueueAveragelyByCircle(), queues(10), cids)
    assert [queue_ids(result[cid]) for cid in cids] == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]


def test_averagely_two_brokers_three_consumers() -> None:
    mq_all = sorted(queues(4, broker="broker-b") + queues(4, broker="broker-a"))
    result = shares(AllocateMessageQueueAveragely(), mq_all, CIDS)
    assert [_labels(result[cid]) for cid in CIDS] == [["a0", "a1", "a2"], ["a3", "b0", "b1"], ["b2", "b3"]]


@pytest.mark.parametrize(
    "strategy", [AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle()], ids=lambda s: s.name
)
def test_fewer_queues_than_consumers(strategy: AllocateMessageQueueStrategy) -> None:
    cids = [f"c{i}" for i in range(5)]
    result = shares(strategy, queues(3), cids)
    assert [queue_ids(result[cid]) for cid in cids] == [[0], [1], [2], [], []]


# -- consistent hash details ----------------------------------------------------------------------------


def test_md5_hash_is_first_four_bytes_unsigned_big_endian() -> None:
    # MD5("abc") = 900150983cd24fb0d6963f7d28e17f72 (RFC 1321 test suite); high bit set -> unsigned.
    assert md5_hash("abc") == 0x90015098
    # MD5("") = d41d8cd98f00b204e9800998ecf8427e
    assert md5_hash("") == 0xD41D8CD9
    # Non-ASCII keys hash their UTF-8 bytes (c3 a9), not Latin-1 (e9).
    assert md5_hash("\u00e9") == int.from_bytes(hashlib.md5(b"\xc3\xa9").digest()[:4], "big")
    assert md5_hash("\u00e9") != int.from_bytes(hashlib.md5(b"\xe9").digest()[:4], "big")


def test_consistent_hash_collisions_go_to_the_point_added_last() -> None:
    strategy = AllocateMessageQueueConsistentHash(3, hash_function=lambda key: 0)
    result = shares(strategy, queues(4), CIDS)
    assert result == {"CID-0": [], "CID-1": [], "CID-2": queues(4)}


def test_consistent_hash_wraps_around_to_the_smallest_point() -> None:
    points = {"A-0": 100, "B-0": 200}

    def hash_function(key: str) -> int:
        if key in points:
            return points[key]
        queue_id = int(key.rsplit("=", 1)[1].rstrip("]"))
        return [50, 100, 150, 200, 250][queue_id]

    result = shares(AllocateMessageQueueConsistentHash(1, hash_function), queues(5), ["A", "B"])
    # 50 -> A(100), 100 -> A (ties belong to the point), 150 -> B, 200 -> B, 250 wraps to A.
    assert {cid: queue_ids(share) for cid, share in result.items()} == {"A": [0, 1, 4], "B": [2, 3]}


def test_consistent_hash_uses_java_to_string_of_the_queue() -> None:
    seen: list[str] = []

    def hash_function(key: str) -> int:
        seen.append(key)
        return 7

    AllocateMessageQueueConsistentHash(2, hash_function).allocate(GROUP, "me", [MessageQueue("T", "b", 3)], ["me"])
    assert seen == ["me-0", "me-1", "MessageQueue [topic=T, brokerName=b, queueId=3]"]


def test_consistent_hash_without_virtual_nodes_gives_nothing() -> None:
    assert AllocateMessageQueueConsistentHash(0).allocate(GROUP, "CID-0", queues(4), CIDS) == []


def test_consistent_hash_rejects_bad_virtual_node_counts() -> None:
    with pytest.raises(ValueError, match="virtual_node_count"):
        AllocateMessageQueueConsistentHash(-1)
    with pytest.raises(TypeError, match="virtual_node_count"):
        AllocateMessageQueueConsistentHash(True)
    with pytest.raises(TypeError, match="virtual_node_count"):
        AllocateMessageQueueConsistentHash("10")  # type: ignore[arg-type]


# -- machine room nearby ------------------------------------------------------------------------------


def test_nearby_prefers_own_room_and_shares_rooms_without_consumers() -> None:
    mq_all = queues(4, broker="hz@broker-a") + queues(4, broker="sh@broker-b") + queues(2, broker="bj@broker-c")
    cid_all = ["hz-1", "hz-2", "sh-1"]
    result = shares(AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), PrefixRooms()), mq_all, cid_all)
    assert {cid: _labels(share) for cid, share in result.items()} == {
        "hz-1": ["a0", "a1", "c0"],
        "hz-2": ["a2", "a3", "c1"],
        "sh-1": ["b0", "b1", "b2", "b3"],
    }


def test_nearby_visits_consumerless_rooms_in_sorted_order() -> None:
    mq_all = queues(1, broker="zz@broker-z") + queues(1, broker="aa@broker-a") + queues(1, broker="me@broker-m")
    result = AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), PrefixRooms()).allocate(
        GROUP, "me-1", mq_all, ["me-1"]
    )
    assert [mq.broker_name for mq in result] == ["me@broker-m", "aa@broker-a", "zz@broker-z"]


def test_nearby_rejects_unknown_rooms_and_bad_arguments() -> None:
    strategy = AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), PrefixRooms())
    with pytest.raises(ValueError, match="Machine room is null for mq"):
        strategy.allocate(GROUP, "hz-1", [MessageQueue("T", "no-room", 0)], ["hz-1"])
    with pytest.raises(ValueError, match="Machine room is null for consumer id nobody"):
        strategy.allocate(GROUP, "hz-1", queues(1, broker="hz@a"), ["hz-1", "nobody"])
    with pytest.raises(TypeError, match="inner"):
        AllocateMachineRoomNearby("AVG", PrefixRooms())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="resolver"):
        AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), None)  # type: ignore[arg-type]


# -- properties -----------------------------------------------------------------------------------------

ROOMS = ["room1", "room2", "room3"]


@st.composite
def topology(draw: st.DrawFn) -> tuple[list[MessageQueue], list[str]]:
    """Queues on 1..3 brokers in rooms, 1..20 consumers; inputs shuffled or sorted, as RebalanceImpl may pass."""
    brokers = draw(st.lists(st.sampled_from(ROOMS), min_size=1, max_size=3))
    mq_all = [
        MessageQueue("TopicTest", f"{room}@broker-{index}", queue_id)
        for index, room in enumerate(brokers)
        for queue_id in range(draw(st.integers(1, 24)))
    ]
    consumer_count = draw(st.integers(1, 20))
    cid_all = [f"{draw(st.sampled_from(ROOMS))}-10.0.0.{i}@{i}" for i in range(consumer_count)]
    if draw(st.booleans()):
        return sorted(mq_all), sorted(cid_all)
    return draw(st.permutations(mq_all)), draw(st.permutations(cid_all))


COVERING_STRATEGIES: list[AllocateMessageQueueStrategy] = [
    AllocateMessageQueueAveragely(),
    AllocateMessageQueueAveragelyByCircle(),
    AllocateMessageQueueByMachineRoom(set(ROOMS)),
    AllocateMessageQueueConsistentHash(),
    AllocateMessageQueueConsistentHash(virtual_node_count=1),
    AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), PrefixRooms()),
    AllocateMachineRoomNearby(AllocateMessageQueueConsistentHash(), PrefixRooms()),
]


@pytest.mark.parametrize("strategy", COVERING_STRATEGIES, ids=lambda s: repr(s))
@settings(max_examples=60, deadline=None)
@given(data=topology())
def test_shares_are_disjoint_and_cover_every_queue(
    strategy: AllocateMessageQueueStrategy, data: tuple[list[MessageQueue], list[str]]
) -> None:
    mq_all, cid_all = data
    all_shares = shares(strategy, mq_all, cid_all)
    flat = [mq for share in all_shares.values() for mq in share]
    assert len(flat) == len(set(flat)), "a queue was given to two consumers"
    assert set(flat) == set(mq_all)


@pytest.mark.parametrize(
    "strategy", [AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle()], ids=lambda s: s.name
)
@settings(max_examples=100, deadline=None)
@given(queue_count=st.integers(1, 100), consumer_count=st.integers(1, 40))
def test_average_shares_differ_by_at_most_one(
    strategy: AllocateMessageQueueStrategy, queue_count: int, consumer_count: int
) -> None:
    mq_all = queues(queue_count)
    cid_all = [f"c{i:02d}" for i in range(consumer_count)]
    sizes = [len(share) for share in shares(strategy, mq_all, cid_all).values()]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == queue_count


@settings(max_examples=100, deadline=None)
@given(queue_count=st.integers(1, 100), consumer_count=st.integers(1, 40))
def test_averagely_gives_contiguous_blocks_in_consumer_order(queue_count: int, consumer_count: int) -> None:
    mq_all = queues(queue_count)
    cid_all = [f"c{i:02d}" for i in range(consumer_count)]
    result = shares(AllocateMessageQueueAveragely(), mq_all, cid_all)
    concatenated = [mq for cid in cid_all for mq in result[cid]]
    assert concatenated == mq_all


@settings(max_examples=60, deadline=None)
@given(data=topology(), rooms=st.sets(st.sampled_from(ROOMS)))
def test_machine_room_covers_exactly_the_queues_of_its_rooms(
    data: tuple[list[MessageQueue], list[str]], rooms: set[str]
) -> None:
    mq_all, cid_all = data
    flat = [mq for share in shares(AllocateMessageQueueByMachineRoom(rooms), mq_all, cid_all).values() for mq in share]
    assert len(flat) == len(set(flat))
    assert set(flat) == {mq for mq in mq_all if mq.broker_name.split("@")[0] in rooms}
