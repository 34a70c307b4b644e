"""Transactional messages: a message is delivered if and only if its local transaction committed.

Run a name server and a broker first. The broker checks pending transactions back every
``transactionCheckInterval`` (60 s by default); for a short run, make it check every second:

    rocketflow dev --set transactionCheckInterval=1000 --set transactionTimeOut=1000
    python examples/transactions.py [--namesrv 127.0.0.1:9876] [--count 12]

Each order is sent with ``TransactionProducer.send_message_in_transaction``: the broker stores it
as a half message no consumer sees, then ``execute_local_transaction`` writes the order to a SQLite
database and returns how it went:

* most orders commit at once (COMMIT_MESSAGE): the broker makes the message visible;
* every fourth order's payment is declined: nothing is written and the message is rolled back;
* every fourth order (another one) is written, but the listener answers UNKNOW, as if the
  database's acknowledgement timed out. The broker later asks with a check-back, and
  ``check_local_transaction`` finds the row and answers COMMIT_MESSAGE.

A push consumer then receives exactly the orders that are in the database, each once.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import threading
import time
import uuid
from typing import Any

from rocketflow import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageExt,
    PushConsumer,
    TransactionProducer,
)
from rocketflow.client import ConsumeConcurrentlyContext
from rocketflow.client.admin import Admin
from rocketflow.client.errors import MQError

DEFAULT_NAMESRV = os.environ.get("ROCKETFLOW_NAMESRV", "127.0.0.1:9876")


class OrderBook:
    """The local transaction: orders in a SQLite database, written and looked up under a lock."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER)")
        self.lock = threading.Lock()
        self.answered_unknown: set[str] = set()
        self.checks = 0

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        order = arg
        if order["declined"]:
            return LocalTransactionState.ROLLBACK_MESSAGE
        with self.lock, self.db:
            self.db.execute("INSERT INTO orders VALUES (?, ?)", (order["id"], order["amount"]))
        if order["slow_ack"]:
            self.answered_unknown.add(order["id"])
            return LocalTransactionState.UNKNOW
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checks += 1
            found = self.db.execute("SELECT 1 FROM orders WHERE id = ?", (msg.keys,)).fetchone()
        return LocalTransactionState.COMMIT_MESSAGE if found else LocalTransactionState.ROLLBACK_MESSAGE

    def order_ids(self) -> set[str]:
        with self.lock:
            return {row[0] for row in self.db.execute("SELECT id FROM orders")}


def main() -> int:
    parser = argparse.ArgumentParser(description="Transactional messages with a local SQLite transaction.")
    parser.add_argument("--namesrv", default=DEFAULT_NAMESRV, help="name server(s), host:port[;host:port]")
    parser.add_argument("--topic", default="ExampleTransactions")
    parser.add_argument("--group", default="example-transactions")
    parser.add_argument("--count", type=int, default=12, help="orders to send")
    parser.add_argument("--timeout", type=float, default=150.0,
                        help="seconds to wait for the check-backs (the broker's transactionCheckInterval)")
    args = parser.parse_args()
    with Admin(args.namesrv) as admin:
        admin.ensure_topic(args.topic, queues=4)
    run = uuid.uuid4().hex[:8]
    book = OrderBook()
    received: dict[str, int] = {}
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            for msg in msgs:
                if msg.keys and msg.keys.startswith(run):
                    received[msg.keys] = received.get(msg.keys, 0) + 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"{args.group}-consumer", namesrv=args.namesrv,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(args.topic, "*")
    consumer.register_concurrent_listener(listener)
    states: dict[str, int] = {}
    try:
        with consumer, TransactionProducer(f"{args.group}-producer", namesrv=args.namesrv,
                                           listener=book) as producer:
            for number in range(args.count):
                order = {"id": f"{run}-{number}", "amount": 10 * (number + 1),
                         "declined": number % 4 == 3, "slow_ack": number % 4 == 2}
                msg = Message(args.topic, json.dumps(order).encode(), tags="order", keys=order["id"])
                result = producer.send_message_in_transaction(msg, arg=order)
                state = result.local_transaction_state.value
                states[state] = states.get(state, 0) + 1
            expected = book.order_ids()
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                with lock:
                    if set(received) >= expected:
                        break
                time.sleep(0.2)
            time.sleep(0.5)  # anything that should not come would come now
    except MQError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with lock:
        got = dict(received)
    missing = expected - set(got)
    unexpected = set(got) - expected
    twice = [key for key, times in got.items() if times > 1]
    print(f"{args.count} orders: {states.get('COMMIT_MESSAGE', 0)} committed at once, "
          f"{len(book.answered_unknown)} committed after a check-back ({book.checks} checks), "
          f"{states.get('ROLLBACK_MESSAGE', 0)} rolled back; the consumer received {len(got)} orders")
    if missing or unexpected or twice:
        print(f"error: missing {sorted(missing)}, not in the database {sorted(unexpected)}, twice {twice}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
