"""Queue allocation strategies for clustering rebalance (RocketMQ's ``AllocateMessageQueueStrategy``).

Every strategy returns, for the same inputs, the same share as RocketMQ 4.9.3's strategy of the
same name. The rebalance code sorts ``mq_all`` and ``cid_all`` before calling; the strategies
use the order they are given and never sort themselves (as in Java), so every member of a group
computes the same, disjoint shares.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from sortedcontainers import SortedDict

from rocketflow.protocol.message import MessageQueue

#: Signature of a consistent-hash function: text key -> ring position.
HashFunction = Callable[[str], int]


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash: the first 4 bytes of MD5(UTF-8 key), unsigned big-endian."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class AllocateMessageQueueStrategy(ABC):
    """Decides which queues of a topic one consumer of a group takes."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The Java ``getName()`` value, e.g. ``"AVG"``."""

    @abstractmethod
    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        """Return the share of ``current_cid`` among ``cid_all`` of the queues ``mq_all``.

        Raises `ValueError` when ``current_cid``, ``mq_all`` or ``cid_all`` is empty; returns an
        empty list when ``current_cid`` is not one of ``cid_all``.
        """

    @staticmethod
    def _check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
        """The argument checks shared by RocketMQ's strategies; False means "not a member: no share"."""
        if not current_cid:
            raise ValueError("currentCID is empty")
        if not mq_all:
            raise ValueError("mqAll is null or mqAll empty")
        if not cid_all:
            raise ValueError("cidAll is null or cidAll empty")
        return current_cid in cid_all

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _CheckedStrategy(AllocateMessageQueueStrategy):
    """A strategy that runs RocketMQ's argument checks, then computes the share of a member."""

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not self._check(current_cid, mq_all, cid_all):
            return []
        return self._share(consumer_group, current_cid, mq_all, cid_all)

    @abstractmethod
    def _share(self, group: str, cid: str, mq_all: Sequence[MessageQueue],
               cid_all: Sequence[str]) -> list[MessageQueue]:
        """The share of ``cid``, one of ``cid_all``, of the queues ``mq_all`` (the arguments are checked)."""


class AllocateMessageQueueAveragely(_CheckedStrategy):
    """Contiguous blocks; the first ``len(mq_all) % len(cid_all)`` consumers get one queue more (default)."""

    name = "AVG"

    def _share(self, group: str, cid: str, mq_all: Sequence[MessageQueue],
               cid_all: Sequence[str]) -> list[MessageQueue]:
        queue_count = len(mq_all)
        consumer_count = len(cid_all)
        index = cid_all.index(cid)
        mod = queue_count % consumer_count
        gets_extra = mod > 0 and index < mod
        size = 1 if queue_count <= consumer_count else queue_count // consumer_count + int(gets_extra)
        start = index * size if gets_extra else index * size + mod
        # With fewer queues than consumers, start runs past the end for the surplus consumers.
        count = min(size, queue_count - start)
        return [mq_all[(start + k) % queue_count] for k in range(count)]


class AllocateMessageQueueAveragelyByCircle(_CheckedStrategy):
    """Round robin: consumer ``i`` takes queues ``i, i + c, i + 2c, ...``."""

    name = "AVG_BY_CIRCLE"

    def _share(self, group: str, cid: str, mq_all: Sequence[MessageQueue],
               cid_all: Sequence[str]) -> list[MessageQueue]:
        index = cid_all.index(cid)
        return list(mq_all[index :: len(cid_all)])


class AllocateMessageQueueByConfig(AllocateMessageQueueStrategy):
    """Always the configured queues, whatever the inputs (every consumer gets the same list; no checks)."""

    name = "CONFIG"

    def __init__(self, queues: Sequence[MessageQueue]) -> None:
        self.queues: list[MessageQueue] = list(queues)

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        return list(self.queues)

    def __repr__(self) -> str:
        return f"AllocateMessageQueueByConfig(queues={self.queues!r})"


def _java_split(text: str, separator: str) -> list[str]:
    """``String.split`` of Java for a literal separator: trailing empty strings are dropped."""
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class AllocateMessageQueueByMachineRoom(_CheckedStrategy):
    """Only queues of brokers named ``<room>@<name>`` whose room is one of ``consumer_idcs``, spread evenly.

    Consumer ``i`` takes a block of ``len(P) // c`` queues, plus ``P[i + (len(P) // c) * c]`` when
    ``i < len(P) % c`` (P = the kept queues in input order).
    """

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Collection[str]) -> None:
        self.consumer_idcs: frozenset[str] = frozenset(consumer_idcs)

    @staticmethod
    def _check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
        """4.9.3 tests this one's id with commons-lang isBlank: a whitespace-only id is "empty" too."""
        if not current_cid.strip():
            raise ValueError("currentCID is empty")
        return AllocateMessageQueueStrategy._check(current_cid, mq_all, cid_all)

    def _share(self, group: str, cid: str, mq_all: Sequence[MessageQueue],
               cid_all: Sequence[str]) -> list[MessageQueue]:
        index = cid_all.index(cid)
        kept = [mq for mq in mq_all if self._in_my_rooms(mq.broker_name)]
        consumer_count = len(cid_all)
        block, remainder = divmod(len(kept), consumer_count)
        result = kept[index * block : index * block + block]
        if index < remainder:
            result.append(kept[index + block * consumer_count])
        return result

    def _in_my_rooms(self, broker_name: str) -> bool:
        parts = _java_split(broker_name, "@")
        return len(parts) == 2 and parts[0] in self.consumer_idcs

    def __repr__(self) -> str:
        return f"AllocateMessageQueueByMachineRoom(consumer_idcs={sorted(self.consumer_idcs)!r})"


class AllocateMessageQueueConsistentHash(_CheckedStrategy):
    """A hash ring of ``virtual_node_count`` points per consumer (keys ``"<cid>-<k>"``).

    A queue goes to the owner of the first ring point at or after the hash of ``str(mq)`` (Java's
    ``MessageQueue.toString()``), wrapping around to the smallest point. When two points collide,
    the one added later (later consumer, higher ``k``) wins, as in Java's TreeMap.
    """

    def __init__(self, virtual_node_count: int = 10, hash_function: HashFunction | None = None) -> None:
        if isinstance(virtual_node_count, bool) or not isinstance(virtual_node_count, int):
            raise TypeError(f"virtual_node_count must be an int, got {type(virtual_node_count).__name__}")
        if virtual_node_count < 0:
            raise ValueError(f"illegal virtual_node_count: {virtual_node_count} (must be >= 0)")
        self.virtual_node_count = virtual_node_count
        self.hash_function: HashFunction = hash_function if hash_function is not None else md5_hash

    name = "CONSISTENT_HASH"

    def _share(self, group: str, cid: str, mq_all: Sequence[MessageQueue],
               cid_all: Sequence[str]) -> list[MessageQueue]:
        ring: SortedDict[int, str] = SortedDict()
        for member in cid_all:
            for k in range(self.virtual_node_count):
                ring[self.hash_function(f"{member}-{k}")] = member
        if not ring:  # zero virtual nodes: nobody owns anything (as in Java)
            return []
        return [mq for mq in mq_all if self._owner(ring, str(mq)) == cid]

    def _owner(self, ring: SortedDict[int, str], key: str) -> str:
        position = ring.bisect_left(self.hash_function(key))
        if position == len(ring):
            position = 0
        return ring.peekitem(position)[1]

    def __repr__(self) -> str:
        return f"AllocateMessageQueueConsistentHash(virtual_node_count={self.virtual_node_count})"


class MachineRoomResolver(Protocol):
    """Tells which machine room a broker's queue and a consumer are deployed in."""

    def broker_deploy_in(self, message_queue: MessageQueue) -> str | None:
        """The room of the broker holding ``message_queue``."""
        ...

    def consumer_deploy_in(self, client_id: str) -> str | None:
        """The room of the consumer ``client_id``."""
        ...


class AllocateMachineRoomNearby(_CheckedStrategy):
    """Prefer queues in the consumer's own room; queues of rooms without consumers are shared by all.

    The queues of my room are split by ``inner`` among the consumers of my room; then, for every
    room (in sorted room order) that has queues but no consumer, its queues are split by ``inner``
    among all consumers.
    """

    def __init__(self, inner: AllocateMessageQueueStrategy, resolver: MachineRoomResolver) -> None:
        if not isinstance(inner, AllocateMessageQueueStrategy):
            raise TypeError(f"inner must be an AllocateMessageQueueStrategy, got {type(inner).__name__}")
        if resolver is None:
            raise TypeError("resolver must be a MachineRoomResolver, got None")
        self.inner = inner
        self.resolver = resolver

    @property
    def name(self) -> str:
        return f"MACHINE_ROOM_NEARBY-{self.inner.name}"

    def _share(self, group: str, cid: str, mq_all: Sequence[MessageQueue],
               cid_all: Sequence[str]) -> list[MessageQueue]:
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"Machine room is null for mq {mq}")
            queues_by_room.setdefault(room, []).append(mq)
        consumers_by_room: dict[str, list[str]] = {}
        my_room = ""
        for member in cid_all:
            room = self.resolver.consumer_deploy_in(member)
            if not room:
                raise ValueError(f"Machine room is null for consumer id {member}")
            consumers_by_room.setdefault(room, []).append(member)
            if member == cid:
                my_room = room

        result: list[MessageQueue] = []
        my_room_queues = queues_by_room.pop(my_room, [])
        if my_room_queues:
            result.extend(self.inner.allocate(group, cid, my_room_queues, consumers_by_room[my_room]))
        for room in sorted(queues_by_room):
            if room not in consumers_by_room:
                result.extend(self.inner.allocate(group, cid, queues_by_room[room], cid_all))
        return result

    def __repr__(self) -> str:
        return f"AllocateMachineRoomNearby(inner={self.inner!r}, resolver={self.resolver!r})"


__all__ = [
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "HashFunction",
    "MachineRoomResolver",
    "md5_hash",
]
