"""The gRPC endpoint's speed: receive+ack of a raw grpc.aio load generator (batches of 32), the official
Python 5.x client's send and receive+ack, beside rocketflow's own 4.x pull drain and push consume of the
same messages, all against one ``rocketflow dev`` (its CPU time measured per phase).

    .venv/bin/python bench/grpc_bench.py            # 50,000 messages
    .venv/bin/python bench/grpc_bench.py --quick    # 10,000
    .venv/bin/python bench/grpc_bench.py --py5-python .interop/venv-py5/bin/python   # + the official client

Target: the endpoint's receive+ack >= 0.5x the 4.x pull drain of the same messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from rocketflow import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, Producer, PullConsumer, PushConsumer
from rocketflow.client.admin import Admin
from rocketflow.proxy.v2 import definition_pb2 as pb
from rocketflow.proxy.v2 import service_pb2 as spb
from rocketflow.proxy.v2 import service_pb2_grpc as sgrpc

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32
EXTRA: list[str] = os.environ.get("GRPC_BENCH_DEV_ARGS", "").split()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Dev:
    def __init__(self, store: Path) -> None:
        argv = [str(Path(sys.executable).with_name("rocketflow")), "dev", "--namesrv-port", "0", "--broker-port",
                "0", "--grpc-port", "0", "--store-dir", str(store), "--set", "grpc_max_receive_batch=1024", *EXTRA]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        found: dict[str, str] = {}
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if match := re.search(r"namesrv listening on (\S+)", line):
                found["namesrv"] = match.group(1)
            if match := re.search(r"clients listening on (\S+)", line):
                found["grpc"] = match.group(1)
                break
        self.namesrv, self.grpc = found["namesrv"], found["grpc"]
        threading.Thread(target=lambda: [None for _ in self.process.stdout or ()], daemon=True).start()

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def timed(dev: Dev, action: Any) -> tuple[float, float, Any]:
    cpu, start = dev.cpu(), time.perf_counter()
    result = action()
    return time.perf_counter() - start, dev.cpu() - cpu, result


def preload(namesrv: str, topic: str, count: int, size: int) -> None:
    producer = Producer("bench-preload", namesrv)
    producer.start()
    try:
        body = b"x" * size
        for start in range(0, count, BATCH):
            producer.send_batch([Message(topic, body, tags="T", keys=f"k{i}")
                                 for i in range(start, min(count, start + BATCH))])
    finally:
        producer.shutdown()


async def raw_receive_ack(address: str, topic: str, group: str, count: int, receivers: int) -> int:
    done = 0
    metadata = (("x-mq-client-id", "bench-raw"),)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = sgrpc.MessagingServiceStub(channel)

        async def worker() -> None:
            nonlocal done
            request = spb.ReceiveMessageRequest(
                group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=BATCH)
            request.invisible_duration.seconds = 60
            request.long_polling_timeout.seconds = 1
            empty = 0
            while done < count and empty < 3:
                handles = [response.message.system_properties.receipt_handle
                           async for response in stub.ReceiveMessage(request, metadata=metadata, timeout=30)
                           if response.HasField("message")]
                if not handles:
                    empty += 1
                    continue
                entries = [spb.AckMessageEntry(message_id="m", receipt_handle=handle) for handle in handles]
                await stub.AckMessage(spb.AckMessageRequest(group=request.group, topic=request.message_queue.topic,
                                                            entries=entries), metadata=metadata, timeout=30)
                done += len(handles)

        await asyncio.gather(*(worker() for _ in range(receivers)))
    return done


def pull_drain(namesrv: str, topic: str, count: int) -> int:
    consumer = PullConsumer("bench-pull", namesrv)
    consumer.start()
    try:
        queues = consumer.fetch_message_queues(topic)
        consumer.assign(queues)
        for queue in queues:
            consumer.seek_to_begin(queue)
        got = 0
        while got < count:
            got += len(consumer.poll(1.0))
        return got
    finally:
        consumer.shutdown()


def push_consume(namesrv: str, topic: str, count: int) -> int:
    got = 0
    done = threading.Event()
    lock = threading.Lock()

    def listener(messages: list[Any], context: Any) -> ConsumeConcurrentlyStatus:
        nonlocal got
        with lock:
            got += len(messages)
            if got >= count:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("bench-push", namesrv, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            consume_message_batch_max_size=32)
    consumer.subscribe(topic, "*")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    try:
        done.wait(600)
        return got
    finally:
        consumer.shutdown()


PY5_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer
    endpoint, topic, group, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (topic,))
    producer.startup()
    start = time.perf_counter()
    for i in range(count):
        message = Message(); message.topic = topic; message.body = b"x" * 100; message.tag = "T"
        producer.send(message)
    send_s = time.perf_counter() - start
    producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    got, start = 0, time.perf_counter()
    while got < count:
        messages = consumer.receive(32, 60)
        for message in messages:
            consumer.ack(message)
        got += len(messages)
    receive_s = time.perf_counter() - start
    consumer.shutdown()
    print(json.dumps({"send_s": send_s, "receive_ack_s": receive_s}))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--receivers", type=int, default=4, help="concurrent raw receive loops")
    parser.add_argument("--py5-python", default=str(ROOT / ".interop" / "venv-py5" / "bin" / "python"),
                        help="a python with rocketmq-python-client (skipped when missing)")
    parser.add_argument("--py5-messages", type=int, default=2000)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "grpc_bench.json"))
    args = parser.parse_args()
    count = 10_000 if args.quick else args.messages
    rows: list[tuple[str, int, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as tmp:
        dev = Dev(Path(tmp) / "store")
        try:
            with Admin(dev.namesrv) as admin:
                admin.ensure_topic("bench-grpc", queues=8)
                admin.ensure_topic("bench-py5", queues=8)
            preload(dev.namesrv, "bench-grpc", count, args.size)
            wall, cpu, got = timed(dev, lambda: pull_drain(dev.namesrv, "bench-grpc", count))
            rows.append(("4.x PullConsumer drain (poll)", got, wall, cpu))
            wall, cpu, got = timed(dev, lambda: push_consume(dev.namesrv, "bench-grpc", count))
            rows.append(("4.x PushConsumer consume", got, wall, cpu))
            wall, cpu, got = timed(dev, lambda: asyncio.run(raw_receive_ack(
                dev.grpc, "bench-grpc", "bench-raw", count, args.receivers)))
            rows.append((f"gRPC receive+ack, raw grpc.aio x{args.receivers} (batch {BATCH})", got, wall, cpu))
            if Path(args.py5_python).exists():
                cpu0 = dev.cpu()
                completed = subprocess.run([args.py5_python, "-c", PY5_SCRIPT, dev.grpc, "bench-py5", "bench-py5-g",
                                            str(args.py5_messages)], capture_output=True, text=True, timeout=900,
                                           cwd=tmp, env={**os.environ, "HOME": tmp})
                cpu_total = dev.cpu() - cpu0
                if completed.returncode == 0:
                    times = json.loads(completed.stdout.strip().splitlines()[-1])
                    share = times["send_s"] / (times["send_s"] + times["receive_ack_s"])
                    rows.append(("official Python client: send (one at a time)", args.py5_messages,
                                 times["send_s"], cpu_total * share))
                    rows.append(("official Python client: receive+ack (batch 32)", args.py5_messages,
                                 times["receive_ack_s"], cpu_total * (1 - share)))
                else:
                    print("official Python client failed:", completed.stderr[-2000:])
            else:
                print(f"(no official Python client at {args.py5_python}: run the interop tests once to install it)")
        finally:
            dev.stop()
    print(f"\n{'phase':58} {'msgs':>7} {'msg/s':>9} {'broker CPU us/msg':>18}")
    for name, got, wall, cpu in rows:
        print(f"{name:58} {got:7d} {got / wall:9.0f} {cpu / max(got, 1) * 1e6:18.1f}")
    pull = rows[0][1] / rows[0][2]
    raw = next(row for row in rows if row[0].startswith("gRPC"))
    ratio = (raw[1] / raw[2]) / pull
    print(f"\nreceive+ack / 4.x pull drain: {ratio:.2f}x (target >= 0.5x)")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"messages": count, "size": args.size, "ratio": ratio, "rows": [
        {"phase": name, "messages": got, "seconds": wall, "broker_cpu_seconds": cpu} for name, got, wall, cpu in rows
    ]}, indent=2))


if __name__ == "__main__":
    main()
