"""Remote address patterns of RocketMQ's plain ACL (``globalWhiteRemoteAddresses``, ``whiteRemoteAddress``).

Accepted forms (RocketMQ's ``RemoteAddressStrategyFactory``):

- blank: matches nothing;
- ``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*``: matches every address;
- one address, IPv4 or IPv6: ``192.168.0.1``, ``::1``;
- a list in braces for the last part: ``192.168.0.{1,2}``, ``2001:db8::{1,2}``;
- a comma-separated list of addresses: ``10.0.0.1,10.0.0.2``;
- IPv4 octets that are ``*`` or a range ``a-b``: ``192.168.*.*``, ``192.168.1.1-5``, ``192.168.1-5.*``;
  (rocketflow also takes a short form with the trailing ``*`` octets left out: ``192.168.*``);
- IPv6 groups that are ``*`` or a hex range ``a-b`` with all 8 groups spelled out.

A pattern that fits none of these raises `AclConfigError`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

from rocketflow.acl.errors import AclConfigError

_MATCH_ALL: Final = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


def normalize_ip(text: str) -> str | None:
    """The canonical form of an IP address (IPv4-mapped IPv6 becomes IPv4), or None if not an address."""
    text = text.strip().strip("[]")
    if "%" in text:  # IPv6 zone id
        text = text.split("%", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def host_of(remote_address: str) -> str:
    """The host part of ``host:port`` (RocketMQ cuts at the last ``:``), canonicalized when it is an IP."""
    host = remote_address.rpartition(":")[0] if ":" in remote_address else remote_address
    return normalize_ip(host) or host


@dataclass(frozen=True, slots=True)
class _PartRange:
    low: int
    high: int

    def contains(self, value: int) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """One parsed pattern; `matches` takes a host (not ``host:port``)."""

    text: str
    match_all: bool = False
    addresses: frozenset[str] = frozenset()
    ipv4_parts: tuple[_PartRange, ...] = ()
    ipv6_parts: tuple[_PartRange, ...] = ()

    @property
    def is_blank(self) -> bool:
        return not (self.match_all or self.addresses or self.ipv4_parts or self.ipv6_parts)

    def matches(self, host: str) -> bool:
        if self.match_all:
            return True
        canonical = normalize_ip(host)
        if canonical is None:
            return False
        if self.addresses:
            return canonical in self.addresses
        address = ipaddress.ip_address(canonical)
        if self.ipv4_parts and isinstance(address, ipaddress.IPv4Address):
            values: tuple[int, ...] = tuple(address.packed)
            return all(part.contains(value) for part, value in zip(self.ipv4_parts, values, strict=True))
        if self.ipv6_parts and isinstance(address, ipaddress.IPv6Address):
            packed = address.packed
            groups = tuple(int.from_bytes(packed[index:index + 2], "big") for index in range(0, 16, 2))
            return all(part.contains(value) for part, value in zip(self.ipv6_parts, groups, strict=True))
        return False


def _address(text: str, pattern: str) -> str:
    canonical = normalize_ip(text)
    if canonical is None:
        raise AclConfigError(f"remote address pattern {pattern!r}: {text.strip()!r} is not an IP address")
    return canonical


def _part(text: str, maximum: int, base: int, pattern: str) -> _PartRange:
    text = text.strip()
    if text == "*":
        return _PartRange(0, maximum)
    low_text, dash, high_text = text.partition("-")
    try:
        low = int(low_text, base)
        high = int(high_text, base) if dash else low
    except ValueError:
        raise AclConfigError(f"remote address pattern {pattern!r}: {text!r} is not a number, '*' or a range "
                             f"like '1-5'") from None
    if not 0 <= low <= high <= maximum:
        raise AclConfigError(f"remote address pattern {pattern!r}: range {text!r} must satisfy "
                             f"0 <= start <= end <= {maximum}")
    return _PartRange(low, high)


def parse_address_pattern(text: str | None) -> AddressPattern:
    """Parse one pattern (see the module docstring); raise `AclConfigError` if it is malformed."""
    pattern = (text or "").strip()
    if not pattern:
        return AddressPattern(text="")
    if pattern in _MATCH_ALL:
        return AddressPattern(text=pattern, match_all=True)
    if pattern.endswith("}"):
        head, brace, inner = pattern[:-1].partition("{")
        if not brace or not inner.strip() or "{" in inner:
            raise AclConfigError(f"remote address pattern {pattern!r}: expected a list in braces for the last part, "
                                 "like 192.168.0.{1,2}")
        addresses = frozenset(_address(head + item.strip(), pattern) for item in inner.split(","))
        return AddressPattern(text=pattern, addresses=addresses)
    if "," in pattern:
        return AddressPattern(text=pattern, addresses=frozenset(_address(item, pattern) for item in pattern.split(",")))
    if "*" in pattern or "-" in pattern:
        if ":" in pattern:
            groups = pattern.split(":")
            if len(groups) != 8 or "" in groups:
                raise AclConfigError(f"remote address pattern {pattern!r}: IPv6 ranges must spell out all 8 groups "
                                     "(no '::')")
            return AddressPattern(text=pattern, ipv6_parts=tuple(_part(group, 0xFFFF, 16, pattern) for group in groups))
        octets = pattern.split(".")
        if octets and octets[-1].strip() == "*":
            octets += ["*"] * (4 - len(octets))
        if len(octets) != 4:
            raise AclConfigError(f"remote address pattern {pattern!r}: an IPv4 pattern has 4 parts, like 192.168.1.*")
        return AddressPattern(text=pattern, ipv4_parts=tuple(_part(octet, 255, 10, pattern) for octet in octets))
    return AddressPattern(text=pattern, addresses=frozenset({_address(pattern, pattern)}))


__all__ = ["AddressPattern", "host_of", "normalize_ip", "parse_address_pattern"]
