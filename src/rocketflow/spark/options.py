"""The ``rocketmq`` format's options and its offsets JSON.

Offsets are ``{"<topic>": {"<brokerName>:<queueId>": <offset>, ...}, ...}``: topics sorted, queues
sorted by broker name then queue id (numerically), so the same positions always serialize to the
same JSON. An offset is the next offset to read (exclusive end of what was read). In
``startingOffsets`` / ``endingOffsets`` JSON, ``-2`` means earliest and ``-1`` latest for a queue.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import InvalidNameError, validate_group, validate_topic
from rocketflow.protocol.tags import SubscriptionParseError, parse_subscription
from rocketflow.spark.connection import SourceError

EARLIEST: Final = -2
LATEST: Final = -1
#: The consumer group named in pulls when the ``group`` option is not set (pulls never commit with it).
DEFAULT_READER_GROUP: Final = "rocketflow_spark_reader"
DEFAULT_PRODUCER_GROUP: Final = "rocketflow_spark_writer"
DEFAULT_PULL_BATCH_SIZE: Final = 1024
DEFAULT_MAX_RECORDS_PER_PARTITION: Final = 1_000_000

#: Every option the source reads (lower case, as Spark passes them).
READER_OPTIONS: Final = frozenset({
    "namesrv", "topic", "subexpression", "startingoffsets", "startingtimestamp", "endingoffsets",
    "maxmessagespertrigger", "failondataloss", "group", "pullbatchsize", "maxrecordsperpartition",
    "accesskey", "secretkey", "failonbadrecords", "includeproperties",
})
WRITER_OPTIONS: Final = frozenset({"namesrv", "topic", "producergroup", "accesskey", "secretkey"})
#: Options Spark itself passes along to every data source.
_SPARK_OPTIONS: Final = frozenset({"path", "paths", "checkpointlocation", "queryname"})

Offsets = dict[MessageQueue, int]


def queue_key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}:{mq.queue_id}"


def offsets_to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, int]]:
    """The offsets dict Spark stores (stable key order)."""
    result: dict[str, dict[str, int]] = {}
    for mq in sorted(offsets):
        result.setdefault(mq.topic, {})[queue_key(mq)] = int(offsets[mq])
    return result


def offsets_from_json(data: Any, what: str = "offsets") -> Offsets:
    """Parse ``{"topic": {"broker:queueId": offset}}`` (a dict, or its JSON text)."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise SourceError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SourceError(f'{what} must be a JSON object like {{"Topic": {{"broker-a:0": 42}}}}, got {data!r}')
    offsets: Offsets = {}
    for topic, queues in data.items():
        if not isinstance(queues, dict):
            raise SourceError(f"{what}: the value of topic {topic!r} must be an object of \"broker:queueId\" -> offset")
        for key, offset in queues.items():
            broker, sep, queue_id = str(key).rpartition(":")
            if not sep or not broker or not queue_id.isdigit():
                raise SourceError(f"{what}: queue key {key!r} of topic {topic!r} is not \"brokerName:queueId\"")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise SourceError(f"{what}: offset of {topic}/{key} must be an integer >= -2, got {offset!r}")
            offsets[MessageQueue(str(topic), broker, int(queue_id))] = offset
    return offsets


def _int_option(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SourceError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SourceError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise SourceError(f"option {name} must be true or false, got {raw!r}")


def include_properties_option(options: Mapping[str, str]) -> bool:
    """The ``includeProperties`` option of Spark's options (any case); `SourceError` if it is not a boolean."""
    return _bool_option({str(key).lower(): value for key, value in options.items()}, "includeProperties", False)


def _namesrv(options: Mapping[str, str]) -> str:
    namesrv = str(options.get("namesrv") or "").strip()
    if not namesrv:
        raise SourceError('option namesrv is required: .option("namesrv", "host:port")')
    for addr in namesrv.split(";"):
        host, sep, port = addr.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SourceError(f"option namesrv: {addr!r} is not host:port")
    return namesrv


def _credentials(options: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The ``accessKey`` / ``secretKey`` options (ACL): both or neither."""
    access_key = str(options.get("accesskey") or "").strip() or None
    secret_key = str(options.get("secretkey") or "").strip() or None
    if (access_key is None) != (secret_key is None):
        raise SourceError("options accessKey and secretKey must be set together (or neither)")
    return access_key, secret_key


def _topics(raw: str | None) -> tuple[str, ...]:
    topics = tuple(dict.fromkeys(item.strip() for item in str(raw or "").split(",") if item.strip()))
    for topic in topics:
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            raise SourceError(f"option topic: {exc}") from None
    return topics


def _check_unknown(options: Mapping[str, str], known: frozenset[str], kind: str) -> None:
    unknown = sorted(key for key in set(key.lower() for key in options) - known - _SPARK_OPTIONS
                     if not key.startswith("spark."))
    if unknown:
        raise SourceError(f"unknown {kind} option(s) {unknown}; known: {sorted(known)}")


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    """The source's options, validated. ``starting`` is earliest | latest | group | timestamp | json."""

    namesrv: str
    topics: tuple[str, ...]
    sub_expression: str = "*"
    starting: str = "latest"
    starting_offsets: tuple[tuple[MessageQueue, int], ...] = ()
    starting_timestamp: int | None = None
    ending: str = "latest"
    ending_offsets: tuple[tuple[MessageQueue, int], ...] = ()
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    #: fail on a record that cannot be decoded, rather than read it as a row with ``decode_error`` set
    fail_on_bad_records: bool = False
    #: add the ``properties`` map column (option ``includeProperties``; off, as Kafka's ``includeHeaders``)
    include_properties: bool = False
    group: str | None = None
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    #: ACL credentials every request is signed with (options ``accessKey`` / ``secretKey``)
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)

    @property
    def pull_group(self) -> str:
        return self.group or DEFAULT_READER_GROUP

    @property
    def tags(self) -> frozenset[str]:
        """The subscribed tags (empty = every message)."""
        return frozenset(parse_subscription(self.sub_expression).tags_set)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> ReaderOptions:
        """Validate Spark's (lower-cased) options; `SourceError` names the first bad one."""
        options = {str(key).lower(): value for key, value in options.items()}
        _check_unknown(options, READER_OPTIONS, "rocketmq source")
        topics = _topics(options.get("topic"))
        if not topics:
            raise SourceError('option topic is required: one topic or a comma-separated list')
        sub_expression = str(options.get("subexpression") or "*").strip() or "*"
        try:
            parse_subscription(sub_expression)
        except SubscriptionParseError as exc:
            raise SourceError(f"option subExpression: {exc}") from None
        group = str(options.get("group") or "").strip() or None
        if group is not None:
            try:
                validate_group(group)
            except InvalidNameError as exc:
                raise SourceError(f"option group: {exc}") from None
        starting_raw = str(options.get("startingoffsets") or "").strip()
        timestamp = _int_option(options, "startingTimestamp", None, 0)
        if timestamp is not None and starting_raw:
            raise SourceError("set either startingOffsets or startingTimestamp, not both")
        starting_offsets: Offsets = {}
        if timestamp is not None:
            starting = "timestamp"
        elif not starting_raw:
            starting = "latest" if streaming else "earliest"
        elif starting_raw.lower() in ("earliest", "latest", "group"):
            starting = starting_raw.lower()
        elif starting_raw.startswith("{"):
            starting = "json"
            starting_offsets = offsets_from_json(starting_raw, "startingOffsets")
        else:
            raise SourceError(f"option startingOffsets must be earliest, latest, group or a JSON object, "
                              f"got {starting_raw!r}")
        if starting == "group" and group is None:
            raise SourceError('startingOffsets "group" needs the group option')
        ending_raw = str(options.get("endingoffsets") or "").strip()
        ending_offsets: Offsets = {}
        if ending_raw and streaming:
            raise SourceError("endingOffsets applies to batch queries only (spark.read)")
        if not ending_raw or ending_raw.lower() == "latest":
            ending = "latest"
        elif ending_raw.startswith("{"):
            ending = "json"
            ending_offsets = offsets_from_json(ending_raw, "endingOffsets")
            if any(offset == EARLIEST for offset in ending_offsets.values()):
                raise SourceError("endingOffsets cannot use -2 (earliest)")
        else:
            raise SourceError(f"option endingOffsets must be latest or a JSON object, got {ending_raw!r}")
        for name, table in (("startingOffsets", starting_offsets), ("endingOffsets", ending_offsets)):
            strays = sorted({mq.topic for mq in table} - set(topics))
            if strays:
                raise SourceError(f"{name} names topics {strays} that are not in option topic {list(topics)}")
        access_key, secret_key = _credentials(options)
        return cls(
            namesrv=_namesrv(options),
            topics=topics,
            sub_expression=sub_expression,
            starting=starting,
            starting_offsets=tuple(sorted(starting_offsets.items())),
            starting_timestamp=timestamp,
            ending=ending,
            ending_offsets=tuple(sorted(ending_offsets.items())),
            max_messages_per_trigger=_int_option(options, "maxMessagesPerTrigger", None, 1),
            fail_on_data_loss=_bool_option(options, "failOnDataLoss", True),
            fail_on_bad_records=_bool_option(options, "failOnBadRecords", False),
            include_properties=_bool_option(options, "includeProperties", False),
            group=group,
            pull_batch_size=_int_option(options, "pullBatchSize", DEFAULT_PULL_BATCH_SIZE, 1)
            or DEFAULT_PULL_BATCH_SIZE,
            max_records_per_partition=_int_option(options, "maxRecordsPerPartition",
                                                  DEFAULT_MAX_RECORDS_PER_PARTITION, 1)
            or DEFAULT_MAX_RECORDS_PER_PARTITION,
            access_key=access_key,
            secret_key=secret_key,
        )


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """The sink's options: the name server, a default topic (rows may name their own) and the producer group."""

    namesrv: str
    topic: str | None
    producer_group: str = DEFAULT_PRODUCER_GROUP
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriterOptions:
        options = {str(key).lower(): value for key, value in options.items()}
        _check_unknown(options, WRITER_OPTIONS, "rocketmq sink")
        topics = _topics(options.get("topic"))
        if len(topics) > 1:
            raise SourceError(f"the sink's option topic names one topic, got {list(topics)}")
        group = str(options.get("producergroup") or DEFAULT_PRODUCER_GROUP).strip()
        try:
            validate_group(group)
        except InvalidNameError as exc:
            raise SourceError(f"option producerGroup: {exc}") from None
        access_key, secret_key = _credentials(options)
        return cls(namesrv=_namesrv(options), topic=topics[0] if topics else None, producer_group=group,
                   access_key=access_key, secret_key=secret_key)


__all__ = [
    "DEFAULT_MAX_RECORDS_PER_PARTITION",
    "DEFAULT_PRODUCER_GROUP",
    "DEFAULT_PULL_BATCH_SIZE",
    "DEFAULT_READER_GROUP",
    "EARLIEST",
    "LATEST",
    "READER_OPTIONS",
    "WRITER_OPTIONS",
    "Offsets",
    "ReaderOptions",
    "WriterOptions",
    "include_properties_option",
    "offsets_from_json",
    "offsets_to_json",
    "queue_key",
]
