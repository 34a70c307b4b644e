"""What a put hands the store and gets back: the requests, the outcome and the error of a put that cannot be stored."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from rocketflow.errors import RocketflowError
from rocketflow.protocol.ids import offset_msg_id_from_packed


class PutMessageStatus(enum.Enum):
    """Outcome of a put (RocketMQ's `PutMessageStatus`)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def is_ok(self) -> bool:
        return self is PutMessageStatus.PUT_OK


@dataclass(slots=True)
class PutMessageRequest:
    """One message to store, as the broker hands it over (already routed to topic and queue).

    ``properties_bytes`` is the encoded properties string (UTF-8); when None it is encoded from
    ``properties``. ``tags_code``, ``keys`` and ``uniq_key`` default to what ``properties`` holds
    (TAGS, KEYS, UNIQ_KEY); pass them explicitly together with ``properties_bytes`` to skip that work.
    ``body`` is stored as is (already compressed if ``sys_flag`` says so).
    """

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    properties_bytes: bytes | None = None
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] | bytes = ("127.0.0.1", 0)
    store_host: tuple[str, int] | bytes | None = None
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    tags_code: int | None = None
    keys: str | None = None
    uniq_key: str | None = None
    wait_store_msg_ok: bool = True


@dataclass(slots=True)
class EncodedBatchRequest:
    """A SEND_BATCH_MESSAGE body as the producer encoded it, stored in one pass (RocketMQ's MessageExtBatch).

    ``encoded`` holds the messages in RocketMQ's batch encoding (each: total size, magic, body CRC,
    flag, body length, body, properties length, properties). The commit log walks it once: it checks
    every message, reads TAGS, KEYS and UNIQ_KEY in place, and stores each message's properties
    followed by ``properties_suffix`` (the batch-wide properties, e.g. CLUSTER), as RocketMQ's
    batch encoder does. A malformed message raises `IllegalMessageError` before anything is written.
    """

    topic: str
    queue_id: int
    encoded: bytes
    #: encoded properties added to every message's own (a separator goes between when needed)
    properties_suffix: bytes = b""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] | bytes = ("127.0.0.1", 0)
    store_host: tuple[str, int] | bytes | None = None
    wait_store_msg_ok: bool = True


#: what one put stores: messages one by one, or a batch of one topic and queue
PutRequests = Sequence[PutMessageRequest] | EncodedBatchRequest


def waits_for_store(requests: PutRequests) -> bool:
    """Whether a put's sender waits for it to be durable (the WAIT property, RocketMQ's waitStoreMsgOK)."""
    if isinstance(requests, EncodedBatchRequest):
        return requests.wait_store_msg_ok
    return any(request.wait_store_msg_ok for request in requests)


@dataclass(slots=True)
class AppendResult:
    """Where a put (one message or a batch) landed.

    ``wrote_offset`` is the commit-log offset of the first record, ``queue_offset`` the first
    message's consume-queue offset; per-message values are in the lists.
    """

    status: PutMessageStatus
    wrote_offset: int = -1
    wrote_bytes: int = 0
    queue_offset: int = -1
    store_timestamp: int = 0
    message_count: int = 0
    commit_log_offsets: list[int] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    store_host: bytes = b""
    error: str = ""
    #: commit-log offset just past the last record (what a sync flush must cover)
    end_offset: int = 0

    @property
    def msg_id(self) -> str:
        """The offset msg id of the first message ('' when nothing was stored)."""
        if not self.commit_log_offsets:
            return ""
        return offset_msg_id_from_packed(self.store_host, self.commit_log_offsets[0])

    @property
    def msg_ids(self) -> list[str]:
        """Offset msg ids of every stored message (computed on demand: the put path skips it)."""
        return [offset_msg_id_from_packed(self.store_host, off) for off in self.commit_log_offsets]

    @classmethod
    def failed(cls, status: PutMessageStatus, error: str) -> AppendResult:
        return cls(status=status, error=error)


class IllegalMessageError(RocketflowError, ValueError):
    """A put request that cannot be stored; `status` says why."""

    def __init__(self, status: PutMessageStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


__all__ = [
    "AppendResult",
    "EncodedBatchRequest",
    "IllegalMessageError",
    "PutMessageRequest",
    "PutMessageStatus",
    "PutRequests",
    "waits_for_store",
]
