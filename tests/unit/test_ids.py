"""Offset msg ids, UNIQ_KEY ids and packed hosts."""

from __future__ import annotations

import datetime
import ipaddress
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketflow.protocol.ids import (
    InvalidMessageIdError,
    UniqueIdGenerator,
    create_offset_msg_id,
    decode_offset_msg_id,
    is_ipv6_host,
    offset_msg_id_from_packed,
    pack_host,
    parse_unique_id,
    unpack_host,
)

ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
ports = st.integers(0, 65535)
offsets = st.integers(0, (1 << 63) - 1)


def local_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime.datetime(year, month, day, hour, minute).timestamp() * 1000)


# --------------------------------------------------------------------------- hosts


def test_pack_host_layout() -> None:
    assert pack_host("127.0.0.1", 10911) == bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F])
    packed = pack_host("::1", 1)
    assert len(packed) == 20
    assert packed[:16] == bytes(15) + b"\x01"
    assert packed[16:] == b"\x00\x00\x00\x01"
    assert pack_host("[::1]", 1) == packed


@given(st.one_of(ipv4, ipv6), ports)
def test_host_round_trip(host: str, port: int) -> None:
    packed = pack_host(host, port)
    assert len(packed) == (20 if ":" in host else 8)
    assert unpack_host(packed) == (host, port)
    assert is_ipv6_host(host) == (":" in host)


@pytest.mark.parametrize(
    ("host", "port", "fragment"),
    [
        ("localhost", 1, "not an IPv4 or IPv6 address"),
        ("300.1.1.1", 1, "not an IPv4 or IPv6 address"),
        ("", 1, "not an IPv4 or IPv6 address"),
        ("127.0.0.1", -1, "port"),
        ("127.0.0.1", 65536, "port"),
    ],
)
def test_pack_host_errors(host: str, port: int, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        pack_host(host, port)


def test_unpack_host_wrong_length() -> None:
    with pytest.raises(ValueError, match="8 or 20 bytes"):
        unpack_host(b"\x00" * 7)


# --------------------------------------------------------------------------- offset msg id


def test_known_offset_msg_id() -> None:
    assert create_offset_msg_id("127.0.0.1", 10911, 0) == "7F00000100002A9F0000000000000000"
    assert decode_offset_msg_id("7F00000100002A9F0000000000000000") == ("127.0.0.1", 10911, 0)
    assert create_offset_msg_id("10.1.2.3", 10911, 0x1234) == "0A01020300002A9F0000000000001234"


def test_ipv6_offset_msg_id() -> None:
    msg_id = create_offset_msg_id("fe80::1", 10911, 5)
    assert len(msg_id) == 56
    assert msg_id == "FE800000000000000000000000000001" + "00002A9F" + "0000000000000005"
    assert decode_offset_msg_id(msg_id) == ("fe80::1", 10911, 5)


@given(st.one_of(ipv4, ipv6), ports, offsets)
def test_offset_msg_id_round_trip(host: str, port: int, offset: int) -> None:
    msg_id = create_offset_msg_id(host, port, offset)
    assert len(msg_id) == (56 if ":" in host else 32)
    assert msg_id == msg_id.upper()
    assert decode_offset_msg_id(msg_id) == (host, port, offset)
    assert decode_offset_msg_id(msg_id.lower()) == (host, port, offset)
    assert offset_msg_id_from_packed(pack_host(host, port), offset) == msg_id


@pytest.mark.parametrize(
    ("msg_id", "fragment"),
    [
        ("", "0 characters"),
        ("7F00000100002A9F000000000000000", "31 characters"),
        ("7F00000100002A9F0000000000000000" + "00", "34 characters"),
        ("ZZ00000100002A9F0000000000000000", "not hexadecimal"),
        (12, "must be a string"),
    ],
)
def test_decode_offset_msg_id_errors(msg_id: str, fragment: str) -> None:
    with pytest.raises(InvalidMessageIdError, match=fragment):
        decode_offset_msg_id(msg_id)


def test_create_offset_msg_id_rejects_negative_offsets() -> None:
    with pytest.raises(ValueError, match="commit log offset"):
        create_offset_msg_id("127.0.0.1", 10911, -1)


# --------------------------------------------------------------------------- UNIQ_KEY


class FakeClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_unique_id_layout() -> None:
    now = local_ms(2026, 3, 10, 12, 30)
    generator = UniqueIdGenerator("10.0.0.7", pid=0x12345, clock_ms=FakeClock(now), seed=7)
    first = generator.next_id()
    second = generator.next_id()
    assert len(first) == 32
    assert first == first.upper()
    assert first[:8] == "0A000007"  # IP
    assert first[8:12] == "2345"  # pid, low 16 bits
    assert first[:20] == generator.prefix
    span = now - local_ms(2026, 3, 1)
    assert first[20:28] == f"{span:08X}"
    assert first[28:] == "0000"
    assert second[28:] == "0001"
    assert parse_unique_id(first, now_ms=now + 5000) == ("10.0.0.7", 0x2345, now)


def test_unique_id_ipv6() -> None:
    generator = UniqueIdGenerator("2001:db8::5", pid=42)
    unique_id = generator.next_id()
    assert len(unique_id) == 56
    ip, pid, _ = parse_unique_id(unique_id)
    assert (ip, pid) == ("2001:db8::5", 42)


def test_generators_differ_in_their_instance_hash() -> None:
    prefixes = {UniqueIdGenerator(pid=1).prefix for _ in range(20)}
    assert len(prefixes) > 1


def test_unique_across_a_million_ids_in_one_millisecond() -> None:
    # A frozen clock is the worst case: the 16-bit counter wraps 15 times.
    clock = FakeClock(local_ms(2026, 5, 3))
    generator = UniqueIdGenerator(pid=1, clock_ms=clock, seed=1)
    ids = {generator.next_id() for _ in range(1_000_000)}
    assert len(ids) == 1_000_000


def test_clock_stepping_back_does_not_repeat_ids() -> None:
    clock = FakeClock(local_ms(2026, 5, 3, 10))
    generator = UniqueIdGenerator(pid=1, clock_ms=clock, seed=1)
    seen = set()
    for step in range(5):
        for _ in range(70_000):
            seen.add(generator.next_id())
        clock.now -= 1000 * step
    assert len(seen) == 5 * 70_000


def test_unique_across_threads() -> None:
    generator = UniqueIdGenerator(pid=1)
    results: list[list[str]] = [[] for _ in range(4)]

    def produce(bucket: list[str]) -> None:
        for _ in range(25_000):
            bucket.append(generator.next_id())

    threads = [threading.Thread(target=produce, args=(bucket,)) for bucket in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    all_ids = [unique_id for bucket in results for unique_id in bucket]
    assert len(set(all_ids)) == 100_000


def test_month_rollover_restarts_the_span() -> None:
    clock = FakeClock(local_ms(2026, 1, 31, 23, 59))
    generator = UniqueIdGenerator(pid=1, clock_ms=clock, seed=3)
    late_january = generator.next_id()
    clock.now = local_ms(2026, 2, 1, 0, 1)
    early_february = generator.next_id()
    assert int(early_february[20:28], 16) == 60_000
    assert parse_unique_id(late_january, now_ms=clock.now)[2] == local_ms(2026, 1, 31, 23, 59)
    assert parse_unique_id(early_february, now_ms=clock.now)[2] == local_ms(2026, 2, 1, 0, 1)


def test_late_in_a_long_month_the_span_exceeds_int32() -> None:
    # Java writes (int) of the span: past ~24.8 days it is "negative"; we read it as unsigned.
    moment = local_ms(2026, 3, 30, 12)
    generator = UniqueIdGenerator(pid=1, clock_ms=FakeClock(moment), seed=3)
    unique_id = generator.next_id()
    assert int(unique_id[20:28], 16) >= 1 << 31
    assert parse_unique_id(unique_id, now_ms=moment + 1)[2] == moment
    # Read a few days into the next month, it still belongs to the previous one.
    assert parse_unique_id(unique_id, now_ms=local_ms(2026, 4, 2))[2] == moment


@pytest.mark.parametrize("unique_id", ["", "ABC", "G" * 32, "0" * 40])
def test_parse_unique_id_errors(unique_id: str) -> None:
    with pytest.raises(InvalidMessageIdError):
        parse_unique_id(unique_id)


@given(st.one_of(ipv4, ipv6), st.integers(0, 1 << 22), st.integers(1, 27 * 86_400_000))
def test_unique_id_parse_round_trip(ip: str, pid: int, into_month: int) -> None:
    moment = local_ms(2026, 7, 1) + into_month
    generator = UniqueIdGenerator(ip, pid=pid, clock_ms=FakeClock(moment))
    parsed = parse_unique_id(generator.next_id(), now_ms=moment + 60_000)
    assert parsed == (str(ipaddress.ip_address(ip)), pid & 0xFFFF, moment)
