"""`RemotingCommand`: the one message type of RocketMQ's remoting protocol (requests and responses)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Final

from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode, code_name

#: The remoting version every 4.9.3 JVM puts on its commands (ordinal of MQVersion.V4_9_3).
ROCKETMQ_VERSION: Final = 399

RESPONSE_FLAG: Final = 1 << 0
ONEWAY_FLAG: Final = 1 << 1

_opaque_counter = itertools.count()


def next_opaque() -> int:
    """A process-wide request id, wrapped into Java's int range."""
    value = next(_opaque_counter) & 0x7FFFFFFF
    return value


@dataclass(slots=True)
class RemotingCommand:
    """A request or response: the logical header fields plus an opaque body.

    ``ext_fields`` is the flattened "custom header" (string keys to string values); typed views
    of it live in :mod:`rocketflow.remoting.headers`.
    """

    code: int
    language: LanguageCode = LanguageCode.PYTHON
    version: int = ROCKETMQ_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
        opaque: int | None = None,
        language: LanguageCode = LanguageCode.PYTHON,
    ) -> RemotingCommand:
        """A new request with a fresh opaque (request id)."""
        return cls(
            code=int(code),
            language=language,
            opaque=next_opaque() if opaque is None else opaque,
            flag=ONEWAY_FLAG if oneway else 0,
            ext_fields=dict(ext_fields) if ext_fields else {},
            body=body,
        )

    def make_response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque, response bit set."""
        return RemotingCommand(
            code=int(code),
            language=LanguageCode.JAVA,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=dict(ext_fields) if ext_fields else {},
            body=body,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @property
    def code_name(self) -> str:
        """The code's enum name (request or response, by the flag), or the number if unknown."""
        return code_name(self.code, response=self.is_response)

    def describe(self) -> str:
        """A short human description for logs and the demo."""
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        return (
            f"{kind} {self.code_name}({self.code}) opaque={self.opaque} lang={self.language.name} "
            f"v={self.version} fields={len(self.ext_fields)} body={len(self.body)}B"
            + (f" remark={self.remark!r}" if self.remark else "")
        )


__all__ = [
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "ROCKETMQ_VERSION",
    "LanguageCode",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "next_opaque",
]
