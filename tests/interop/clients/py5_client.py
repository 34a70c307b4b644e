"""Drives Apache's official RocketMQ 5.x Python client (PyPI ``rocketmq-python-client``) for the interop tests.

Runs in the client's own venv. Prints one JSON object per line: ``started``, ``sent`` / ``send-error``,
``recv`` (body, tag, keys, properties, message group, delivery attempt, receive time), ``acked``,
``changed``, ``checked`` (a transaction check-back), ``error``, ``stopped``. Consumers run until stdin
closes; producers send the messages of ``--messages`` (JSON lines) and stop.

A message line: ``{"body": str, "tag": str?, "keys": [str]?, "props": {}?, "group": str?, "delay_ms": int?,
"tx": "commit" | "rollback" | "check-commit" | "check-rollback"?}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    with _lock:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def describe(message: Any) -> dict[str, Any]:
    return {"body": message.body.decode(), "tag": message.tag, "keys": sorted(message.keys or ()),
            "props": dict(message.properties or {}), "group": message.message_group, "id": message.message_id,
            "attempt": message.delivery_attempt, "at": time.time()}


class Checker(TransactionChecker):
    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def check(self, message: Any) -> Any:
        answer = self.answers.get(message.body.decode(), "commit")
        emit("checked", body=message.body.decode(), answer=answer)
        return TransactionResolution.COMMIT if answer == "commit" else TransactionResolution.ROLLBACK


def configuration(args: argparse.Namespace) -> ClientConfiguration:
    credentials = Credentials(args.access_key, args.secret_key) if args.access_key else Credentials()
    return ClientConfiguration(args.endpoint, credentials, request_timeout=5)


def produce(args: argparse.Namespace) -> None:
    with open(args.messages) as file:
        items = [json.loads(line) for line in file if line.strip()]
    answers = {item["body"]: item["tx"].split("-")[-1] for item in items if item.get("tx", "").startswith("check")}
    producer = Producer(configuration(args), (args.topic,), checker=Checker(answers), tls_enable=args.tls)
    producer.startup()
    emit("started")
    for item in items:
        message = Message()
        message.topic = args.topic
        message.body = item["body"].encode()
        if item.get("tag"):
            message.tag = item["tag"]
        for key in item.get("keys") or ():
            message.keys = key  # the setter adds one key
        for key, value in (item.get("props") or {}).items():
            message.add_property(key, value)
        if item.get("group"):
            message.message_group = item["group"]
        if item.get("delay_ms"):
            # the client puts this value (milliseconds) into the timestamp's seconds field
            message.delivery_timestamp = int(time.time() * 1000) + int(item["delay_ms"])
        try:
            tx = item.get("tx")
            if tx:
                transaction = producer.begin_transaction()
                receipt = producer.send(message, transaction)
                if tx == "commit":
                    transaction.commit()
                elif tx == "rollback":
                    transaction.rollback()
            else:
                receipt = producer.send(message)
            emit("sent", body=item["body"], id=receipt.message_id, at=time.time())
        except Exception as exc:  # reported, the test decides
            emit("send-error", body=item["body"], error=f"{type(exc).__name__}: {exc}")
    if answers:  # stay for the check-backs
        sys.stdin.read()
    producer.shutdown()
    emit("stopped")


def simple(args: argparse.Namespace) -> None:
    consumer = SimpleConsumer(configuration(args), args.group, {args.topic: FilterExpression(args.filter)},
                              await_duration=args.await_s, tls_enable=args.tls)
    consumer.startup()
    emit("started")
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    skipped: dict[str, int] = {}
    while not stop.is_set():
        try:
            messages = consumer.receive(args.batch, args.invisible_s)
        except Exception as exc:
            emit("error", error=f"{type(exc).__name__}: {exc}")
            time.sleep(0.5)
            continue
        for message in messages:
            emit("recv", **describe(message))
            body = message.body.decode()
            if skipped.get(body, 0) < args.skip_acks:
                skipped[body] = skipped.get(body, 0) + 1
                continue
            try:
                if args.change_s:
                    consumer.change_invisible_duration(message, args.change_s)
                    emit("changed", body=body)
                    time.sleep(args.ack_delay_s)
                consumer.ack(message)
                emit("acked", body=body, at=time.time())
            except Exception as exc:
                emit("error", body=body, error=f"{type(exc).__name__}: {exc}")
            if args.ack_delay_s and not args.change_s:
                time.sleep(args.ack_delay_s)
    consumer.shutdown()
    emit("stopped")


class Listener(MessageListener):
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.seen: dict[str, int] = {}

    def consume(self, message: Any) -> Any:
        emit("recv", **describe(message))
        body = message.body.decode()
        self.seen[body] = self.seen.get(body, 0) + 1
        return ConsumeResult.FAILURE if self.seen[body] <= self.failures else ConsumeResult.SUCCESS


def push(args: argparse.Namespace) -> None:
    consumer = PushConsumer(configuration(args), args.group, Listener(args.skip_acks),
                            {args.topic: FilterExpression(args.filter)}, consumption_thread_count=4,
                            tls_enable=args.tls)
    consumer.startup()
    emit("started")
    sys.stdin.read()
    consumer.shutdown()
    emit("stopped")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["produce", "simple", "push"])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="")
    parser.add_argument("--messages", default="")
    parser.add_argument("--filter", default="*")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--invisible-s", type=int, default=10)
    parser.add_argument("--await-s", type=int, default=2)
    parser.add_argument("--skip-acks", type=int, default=0, help="leave each message unacked (or failed) this often")
    parser.add_argument("--change-s", type=int, default=0, help="change the invisible time to this before acking")
    parser.add_argument("--ack-delay-s", type=float, default=0.0)
    parser.add_argument("--access-key", default="")
    parser.add_argument("--secret-key", default="")
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args()
    try:
        {"produce": produce, "simple": simple, "push": push}[args.role](args)
    except Exception as exc:
        emit("error", error=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    main()
