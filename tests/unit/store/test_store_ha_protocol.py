"""The replication stream's framing (sans-IO): any split of the bytes reads the same."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketflow.store.ha.protocol import (
    HAProtocolError,
    OffsetReportReader,
    Transfer,
    TransferReader,
    encode_offset_report,
    encode_transfer_header,
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(transfers=st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=300)), max_size=12),
       cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_transfers_survive_any_split(transfers: list[tuple[int, bytes]], cuts: list[int]) -> None:
    stream = b"".join(encode_transfer_header(offset, len(data)) + data for offset, data in transfers)
    reader = TransferReader(max_size=300)
    got: list[Transfer] = []
    for piece in split(stream, cuts):
        got.extend(reader.feed(piece))
    assert got == [Transfer(offset, data) for offset, data in transfers]
    assert reader.buffered == 0


@given(offsets=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=10),
       cuts=st.lists(st.integers(0, 200), max_size=10))
def test_the_newest_whole_offset_report_counts(offsets: list[int], cuts: list[int]) -> None:
    stream = b"".join(encode_offset_report(offset) for offset in offsets)
    reader = OffsetReportReader()
    seen = [offset for piece in split(stream, cuts) if (offset := reader.feed(piece)) is not None]
    assert seen[-1] == offsets[-1]
    assert set(seen) <= set(offsets)
    assert reader.feed(b"\x00\x00\x00") is None  # part of a report is not one


def test_bad_streams_are_errors() -> None:
    with pytest.raises(HAProtocolError, match="negative"):
        OffsetReportReader().feed(encode_offset_report(-5))
    with pytest.raises(HAProtocolError, match="at most 100"):
        TransferReader(max_size=100).feed(encode_transfer_header(0, 101))
    with pytest.raises(HAProtocolError, match="-1 bytes"):
        TransferReader(max_size=100).feed(encode_transfer_header(0, -1))
    with pytest.raises(HAProtocolError, match="negative offset"):
        TransferReader(max_size=100).feed(encode_transfer_header(-1, 0))
    heartbeat = TransferReader(max_size=100).feed(encode_transfer_header(4096, 0))
    assert heartbeat == [Transfer(4096, b"")]
