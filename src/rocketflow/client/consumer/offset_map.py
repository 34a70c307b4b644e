"""`OffsetMap`: the messages a process queue holds, by queue offset, with the smallest and largest at hand."""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, KeysView
from heapq import heapify, heappop, heappush

from sortedcontainers import SortedDict

from rocketflow.protocol.message import MessageExt


class OffsetMap:
    """Held messages by queue offset, with the smallest and largest offsets at hand.

    A dict plus two heaps of its offsets (one negated for the largest), cleaned lazily: a removed
    offset stays in a heap until it comes to the top, and a heap grown past twice the dict is
    rebuilt. Pulls add offsets in rising order and consumption removes them in about the same order,
    so every step is a C-level dict or `heapq` call, where a `SortedDict` balances itself in Python
    code on the consumer's hottest path; ordered walks, which only rare paths need, sort the offsets
    instead.
    """

    __slots__ = ("_high", "_items", "_low")

    def __init__(self) -> None:
        self._items: dict[int, MessageExt] = {}
        self._low: list[int] = []
        self._high: list[int] = []

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __contains__(self, offset: object) -> bool:
        return offset in self._items

    def __iter__(self) -> Iterator[int]:
        """The offsets, smallest first."""
        return iter(sorted(self._items))

    def offsets(self) -> KeysView[int]:
        """The offsets held, as a live view (unordered; a C-level membership test)."""
        return self._items.keys()

    def add(self, offset: int, msg: MessageExt) -> None:
        """Hold ``msg`` at ``offset`` (replacing what was held there)."""
        items = self._items
        if offset not in items:
            heappush(self._low, offset)
            heappush(self._high, -offset)
        items[offset] = msg

    def add_absent(self, msgs: list[MessageExt], also_absent_from: Container[int]) -> tuple[int, int, int]:
        """Hold each message whose offset is in neither map; returns (added, their body bytes, largest offset
        added or -1)."""
        items = self._items
        low, high = self._low, self._high
        added = size = 0
        largest = -1
        for msg in msgs:
            offset = msg.queue_offset
            if offset in items or offset in also_absent_from:
                continue
            items[offset] = msg
            heappush(low, offset)
            heappush(high, -offset)
            added += 1
            size += len(msg.body)
            if offset > largest:
                largest = offset
        return added, size, largest

    def pop(self, offset: int) -> MessageExt | None:
        return self._items.pop(offset, None)

    def remove(self, msgs: Iterable[MessageExt]) -> tuple[int, int]:
        """Stop holding these messages' offsets; returns (removed, their body bytes)."""
        pop = self._items.pop
        removed = size = 0
        for msg in msgs:
            held = pop(msg.queue_offset, None)
            if held is not None:
                removed += 1
                size += len(held.body)
        return removed, size

    def first_offset(self) -> int:
        """The smallest offset held; raises `KeyError` when empty."""
        low, items = self._low, self._items
        while low and low[0] not in items:
            heappop(low)
        if len(low) > 2 * len(items) + 64:
            low[:] = items
            heapify(low)
        if not low:
            raise KeyError("no messages held")
        return low[0]

    def last_offset(self) -> int:
        """The largest offset held; raises `KeyError` when empty."""
        high, items = self._high, self._items
        while high and -high[0] not in items:
            heappop(high)
        if len(high) > 2 * len(items) + 64:
            high[:] = [-offset for offset in items]
            heapify(high)
        if not high:
            raise KeyError("no messages held")
        return -high[0]

    def pop_first(self) -> tuple[int, MessageExt]:
        """Remove and return the smallest (offset, message); raises `KeyError` when empty."""
        offset = self.first_offset()
        heappop(self._low)
        return offset, self._items.pop(offset)

    def items(self) -> Iterable[tuple[int, MessageExt]]:
        """(offset, message) pairs, in no particular order."""
        return self._items.items()

    def body_bytes(self) -> int:
        """The body bytes of the messages held."""
        return sum([len(msg.body) for msg in self._items.values()])

    def values_in_order(self) -> Iterator[MessageExt]:
        items = self._items
        return (items[offset] for offset in sorted(items))

    def snapshot(self) -> SortedDict[int, MessageExt]:
        return SortedDict(self._items)

    def clear(self) -> None:
        self._items.clear()
        self._low.clear()
        self._high.clear()


__all__ = ["OffsetMap"]
