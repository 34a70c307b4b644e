"""`rocketflow codec-demo` (the foundation-stage demo): real client frames through rocketflow's sans-IO codecs.

The frames are the ones Apache's C++ client and the `ali-ons` JavaScript client sent (captured in
``shared/interop`` beside the repo); without that folder the demo builds an equivalent session with
rocketflow's own encoders. Every frame is fed to the incremental decoder in odd-sized chunks, its
ext fields are decoded into the typed header of its request code, its body into the wire body it
carries, and it is re-encoded in both header formats to check the round trip. A pull response made
of real message records closes the demo.
"""

from __future__ import annotations

import json
import random
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from rocketflow.protocol.bodies import HeartbeatData, LockBatchRequestBody, UnlockBatchRequestBody
from rocketflow.protocol.codec import compress_body, decode_records, encode_record
from rocketflow.protocol.ids import UniqueIdGenerator
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.properties import decode_properties, encode_properties
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import RequestCode, SerializeType
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.frame import FrameDecoder, decode_frame, encode_frame
from rocketflow.remoting.headers import REQUEST_HEADERS, SendMessageRequestHeaderV2

_BODY_DECODERS: dict[int, type[HeartbeatData | LockBatchRequestBody | UnlockBatchRequestBody]] = {
    RequestCode.HEART_BEAT: HeartbeatData,
    RequestCode.LOCK_BATCH_MQ: LockBatchRequestBody,
    RequestCode.UNLOCK_BATCH_MQ: UnlockBatchRequestBody,
}


@dataclass(slots=True)
class Session:
    """The raw bytes one client sent, as one stream."""

    name: str
    stream: bytes


def _captured_sessions(interop_dir: Path) -> list[Session]:
    sessions = []
    for path in sorted(interop_dir.glob("*/frames_*.jsonl")):
        frames = [_rebuild(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
        sessions.append(Session(f"{path.parent.name}/{path.stem}", b"".join(frames)))
    return sessions


def _rebuild(record: dict[str, Any]) -> bytes:
    """A captured request as the client wrote it (JSON header; the C++ client ends it with a newline)."""
    header: dict[str, Any] = {
        "code": record["code"], "extFields": record["extFields"], "flag": record["flag"],
        "language": record["lang"], "opaque": record["opaque"], "version": record["version"],
    }
    suffix = b"\n" if record["lang"] == "CPP" else b""
    header_bytes = json.dumps(header, separators=(",", ":")).encode() + suffix
    body = record["body"].encode() if record["body"] is not None else b""
    return struct.pack(">iI", 4 + len(header_bytes) + len(body), len(header_bytes)) + header_bytes + body


def _synthetic_session() -> Session:
    """A producer and consumer session built with rocketflow's own encoders."""
    ids = UniqueIdGenerator()
    heartbeat = HeartbeatData.decode(
        b'{"clientID":"127.0.0.1@demo","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
        b'"consumeType":"CONSUME_PASSIVELY","groupName":"demo-group","messageModel":"CLUSTERING",'
        b'"subscriptionDataSet":[{"subString":"pay || ship","topic":"Orders"}],"unitMode":false}],'
        b'"producerDataSet":[{"groupName":"demo-producer"}]}'
    )
    commands = [
        RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}),
        RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat.encode()),
    ]
    for index in range(20):
        properties = {MessageConst.TAGS: "pay", MessageConst.KEYS: f"order-{index}",
                      MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: ids.next_id()}
        header = SendMessageRequestHeaderV2(
            a="demo-producer", b="Orders", c="TBW102", d=4, e=index % 4, f=0,
            g=int(time.time() * 1000), h=0, i=encode_properties(properties), j=0, k=False, m=False,
        )
        commands.append(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_ext_fields(),
                                                f"order {index} paid".encode()))
    return Session("rocketflow/synthetic", b"".join(encode_frame(c) for c in commands))


def _chunks(stream: bytes, rng: random.Random) -> Iterator[bytes]:
    position = 0
    while position < len(stream):
        size = rng.randint(1, 700)
        yield stream[position : position + size]
        position += size


def _describe(command: RemotingCommand) -> str:
    header_type = REQUEST_HEADERS.get(command.code)
    parts = []
    if header_type is not None:
        header = header_type.from_ext_fields(command.ext_fields)
        shown = {
            spec.attr: getattr(header, spec.attr)
            for spec in header.header_fields()
            if getattr(header, spec.attr) is not None
        }
        if "i" in shown:
            shown["i"] = decode_properties(str(shown["i"]))
        if "properties" in shown:
            shown["properties"] = decode_properties(str(shown["properties"]))
        parts.append(", ".join(f"{k}={v}" for k, v in list(shown.items())[:6]))
    body_type = _BODY_DECODERS.get(command.code)
    if body_type is not None and command.body:
        body = body_type.decode(command.body)
        if isinstance(body, HeartbeatData):
            groups = [f"{c.group_name}:{c.message_model.name}" for c in body.consumer_data_set]
            parts.append(f"heartbeat from {body.client_id} consumers={groups}")
        else:
            parts.append(f"{len(body.mq_set)} queues for {body.consumer_group}")
    elif command.body:
        parts.append(f"body {len(command.body)} B")
    text = "; ".join(parts)
    return text if len(text) <= 110 else text[:107] + "..."


def _pull_response_demo(console: Console) -> None:
    ids = UniqueIdGenerator()
    records = []
    for offset in range(5):
        body = (f"payment {offset} ".encode()) * (500 if offset == 4 else 1)
        sys_flag = 0
        if len(body) >= 4096:
            body, sys_flag = compress_body(body), int(MessageSysFlag.COMPRESSED)
        message = MessageExt(
            "Orders", body, queue_id=1, queue_offset=offset, commit_log_offset=offset * 200, sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000), born_host=("10.0.0.7", 51234),
            store_timestamp=int(time.time() * 1000), store_host=("10.0.0.1", 10911),
            properties={MessageConst.TAGS: "pay", MessageConst.KEYS: f"order-{offset}",
                        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: ids.next_id()},
        )
        records.append(encode_record(message))
    pull_body = b"".join(records)
    table = Table(title=f"A pull response body: {len(records)} records, {len(pull_body)} bytes, decoded")
    for column in ("queue", "offset", "msg id (UNIQ_KEY)", "offset msg id", "tags", "keys", "body"):
        table.add_column(column)
    for message in decode_records(pull_body):
        preview = message.body[:24].decode(errors="replace") + (f"... ({len(message.body)} B)" if len(
            message.body) > 24 else "")
        table.add_row(str(message.queue_id),
                      str(message.queue_offset), message.client_msg_id, message.offset_msg_id,
                      message.tags or "", message.keys or "", preview)
    console.print(table)


def run_codec_demo(interop_dir: Path | None = None, seed: int = 7) -> None:
    """Decode real client sessions and print what came out."""
    console = Console()
    if interop_dir is None:
        interop_dir = Path(__file__).resolve().parents[3].parent / "shared" / "interop"
    sessions = _captured_sessions(interop_dir) if interop_dir.is_dir() else []
    source = f"captured from real clients in {interop_dir}" if sessions else "built by rocketflow (no captures found)"
    sessions.append(_synthetic_session())
    console.rule(f"[bold]codec-demo[/bold]: remoting frames {source}")

    rng = random.Random(seed)
    per_code: Counter[str] = Counter()
    languages: Counter[str] = Counter()
    samples: dict[str, tuple[str, RemotingCommand]] = {}
    total_bytes = sum(len(s.stream) for s in sessions)
    round_trips = 0
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("bytes"),
                  console=console, transient=True) as progress:
        task = progress.add_task("decoding", total=total_bytes)
        for session in sessions:
            decoder = FrameDecoder()
            for chunk in _chunks(session.stream, rng):
                for command in decoder.feed(chunk):
                    per_code[command.code_name] += 1
                    languages[command.language.name] += 1
                    samples.setdefault(command.code_name, (session.name, command))
                    for serialize_type in SerializeType:
                        if decode_frame(encode_frame(command, serialize_type)) != command:
                            raise AssertionError(f"round trip changed {command.describe()}")
                    round_trips += 2
                progress.advance(task, len(chunk))
            if decoder.buffered:
                raise AssertionError(f"{session.name}: {decoder.buffered} bytes left over")

    table = Table(title="One decoded request per code (typed header fields, decoded body)")
    table.add_column("code")
    table.add_column("n", justify="right")
    table.add_column("from")
    table.add_column("lang")
    table.add_column("decoded")
    for name, count in per_code.most_common():
        session_name, command = samples[name]
        table.add_row(f"{name} ({command.code})", str(count), session_name, command.language.name, _describe(command))
    console.print(table)
    console.print(
        f"[green]{sum(per_code.values())} frames[/green] from {len(sessions)} sessions "
        f"({total_bytes} bytes, fed in random chunks) decoded; languages "
        f"{dict(languages)}; {round_trips} re-encodings (JSON and binary headers) decoded back identical."
    )
    _pull_response_demo(console)


__all__ = ["run_codec_demo"]
