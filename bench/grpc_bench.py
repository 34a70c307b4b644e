"""The gRPC endpoint's speed: receive+ack by a raw load generator (batches of 32), the official Python
5.x client's send and receive+ack, beside rocketflow's own 4.x pull drain and push consume of the same
messages, all against one ``rocketflow dev`` (its CPU time measured per phase); and the ceiling of any
grpc.aio server here: a minimal grpc.aio server that answers the same receives and acks with
pre-built responses of the same sizes, driven by the same generator in the same run.

    .venv/bin/python bench/grpc_bench.py            # 50,000 messages
    .venv/bin/python bench/grpc_bench.py --quick    # 10,000
    .venv/bin/python bench/grpc_bench.py --py5-python .interop/venv-py5/bin/python   # + the official client
    .venv/bin/python bench/grpc_bench.py --quick --src /tmp/old/src   # the broker from another tree

The generator is `--generators` processes (2), each with `--channels` channels (2) and `--streams`
receive loops (8) over them: a loop receives 32 (one streamed response per message, read as bytes
and parsed with upb), then acks them in one AckMessage. Its CPU is measured in its processes, apart
from the broker's.

Target: the endpoint's receive+ack >= 0.5x the 4.x pull drain of the same messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
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
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32
EXTRA: list[str] = os.environ.get("GRPC_BENCH_DEV_ARGS", "").split()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Dev:
    def __init__(self, store: Path, src: Path | None = None) -> None:
        argv = [sys.executable, "-c", "import sys; from rocketflow.cli.main import cli; sys.exit(cli())", "dev",
                "--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0", "--store-dir", str(store),
                "--set", "grpc_max_receive_batch=1024", *EXTRA]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(src or ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
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


RECEIVE_PATH = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
ACK_PATH = "/apache.rocketmq.v2.MessagingService/AckMessage"


def _identity(data: bytes) -> bytes:
    return data


async def generate(address: str, topic: str, group: str, quota: int, channels: int, streams: int,
                   start: threading.Event | None = None) -> dict[str, float]:
    """Receive+ack loops until ``quota`` messages are acked or a receive finds none; what it did."""
    receive_request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=BATCH)
    receive_request.invisible_duration.seconds = 60
    receive_request.long_polling_timeout.seconds = 0  # an empty receive means drained: stop at once
    request = receive_request.SerializeToString()
    metadata = (("x-mq-client-id", f"bench-raw-{os.getpid()}"),)
    parse = spb.ReceiveMessageResponse.FromString
    done = 0
    last = 0.0
    opened = [grpc.aio.insecure_channel(address) for _ in range(channels)]
    try:
        for channel in opened:
            await channel.channel_ready()
        calls = [(channel.unary_stream(RECEIVE_PATH, request_serializer=_identity, response_deserializer=_identity),
                  channel.unary_unary(ACK_PATH, request_serializer=_identity, response_deserializer=_identity))
                 for channel in opened]
        if start is not None:
            await asyncio.to_thread(start.wait)
        cpu, begin = time.process_time(), time.time()

        async def loop(receive: Any, ack: Any) -> None:
            nonlocal done, last
            while done < quota:
                handles = []
                async for raw in receive(request, metadata=metadata, timeout=30):
                    response = parse(raw)
                    if response.HasField("message"):
                        handles.append(response.message.system_properties.receipt_handle)
                if not handles:
                    return
                entries = [spb.AckMessageEntry(message_id="m", receipt_handle=handle) for handle in handles]
                answer = spb.AckMessageResponse.FromString(await ack(spb.AckMessageRequest(
                    group=receive_request.group, topic=receive_request.message_queue.topic,
                    entries=entries).SerializeToString(), metadata=metadata, timeout=30))
                if answer.status.code != pb.OK:
                    raise RuntimeError(f"ack failed: {answer.status}")
                done += len(handles)
                last = time.time()

        await asyncio.gather(*(loop(*calls[i % channels]) for i in range(streams)))
        return {"messages": done, "begin": begin, "end": last or time.time(), "cpu": time.process_time() - cpu}
    finally:
        for channel in opened:
            await channel.close()


def generator_main(args: argparse.Namespace) -> None:
    """One generator process: waits for a line on stdin, then runs; prints what it did as JSON."""
    start = threading.Event()

    def wait_for_go() -> None:
        sys.stdin.readline()
        start.set()

    print("ready", flush=True)
    threading.Thread(target=wait_for_go, daemon=True).start()
    result = asyncio.run(generate(args.generate, args.topic, args.group, args.quota, args.channels, args.streams,
                                  start))
    print(json.dumps(result), flush=True)


def run_generators(address: str, topic: str, group: str, count: int, args: argparse.Namespace, *,
                   split: bool) -> tuple[int, float, float]:
    """`args.generators` generator processes on ``address``; (messages, wall seconds, their CPU seconds).
    ``split``: each takes its share of ``count`` (a source that never runs dry), else all drain together."""
    quota = -(-count // args.generators) if split else count
    argv = [sys.executable, __file__, "--generate", address, "--topic", topic, "--group", group, "--quota",
            str(quota), "--channels", str(args.channels), "--streams", str(args.streams)]
    processes = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(args.generators)]
    try:
        for process in processes:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("a generator did not start")
        begin = time.time()
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.close()
        results = []
        for process in processes:
            assert process.stdout is not None
            out = process.stdout.read()
            if process.wait(900) != 0:
                raise RuntimeError(f"a generator failed ({process.returncode})")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    messages = sum(int(result["messages"]) for result in results)
    return messages, max(result["end"] for result in results) - begin, sum(result["cpu"] for result in results)


def echo_responses(size: int) -> tuple[list[bytes], bytes]:
    """The ceiling server's answers: a receive's responses (status, 32 messages, delivery timestamp) and
    an ack's, each the size the broker's are for messages of ``size`` bytes."""
    from rocketflow.protocol.message import MessageExt
    from rocketflow.proxy import convert

    now = int(time.time() * 1000)
    responses = [spb.ReceiveMessageResponse(status=pb.Status(code=pb.OK, message="OK")).SerializeToString()]
    handles = []
    for i in range(BATCH):
        handle = f"{i % 8}.{100_000 + i}.{1_000_000 + i}.0123456789abcdef"
        handles.append(handle)
        message = MessageExt("bench-grpc", b"x" * size, properties={
            "TAGS": "T", "KEYS": f"k{i}", "UNIQ_KEY": f"7F00000100012A9F0000000000{i:06X}", "WAIT": "true"},
            queue_id=i % 8, queue_offset=100_000 + i, born_timestamp=now, store_timestamp=now,
            born_host=("127.0.0.1", 50_000))
        responses.append(spb.ReceiveMessageResponse(message=convert.incoming(
            message, topic="bench-grpc", receipt_handle=handle, attempt=1, invisible_ms=60_000,
            store_host="127.0.0.1:10911")).SerializeToString())
    responses.append(spb.ReceiveMessageResponse(delivery_timestamp=convert.to_timestamp(now)).SerializeToString())
    ack = spb.AckMessageResponse(status=pb.Status(code=pb.OK, message="OK"), entries=[
        spb.AckMessageResultEntry(message_id="m", receipt_handle=handle, status=pb.Status(code=pb.OK, message="OK"))
        for handle in handles]).SerializeToString()
    return responses, ack


def echo_main(args: argparse.Namespace) -> None:
    """The ceiling: a grpc.aio server with the endpoint's options and event loop whose ReceiveMessage and
    AckMessage answer pre-built responses (requests still parsed, as any server must); prints its port."""
    from rocketflow.net.event_loop import run

    responses, ack = echo_responses(args.size)

    async def receive(request: bytes, context: Any) -> Any:
        spb.ReceiveMessageRequest.FromString(request)
        for response in responses:
            yield response

    async def acknowledge(request: bytes, context: Any) -> bytes:
        spb.AckMessageRequest.FromString(request)
        return ack

    async def serve() -> None:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0), ("grpc.max_send_message_length", -1)])
        handlers = {"ReceiveMessage": grpc.unary_stream_rpc_method_handler(receive, _identity, _identity),
                    "AckMessage": grpc.unary_unary_rpc_method_handler(acknowledge, _identity, _identity)}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "apache.rocketmq.v2.MessagingService", handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"echo listening on 127.0.0.1:{port}", flush=True)
        await server.wait_for_termination()

    run(serve())


class Echo:
    def __init__(self, size: int) -> None:
        self.process = subprocess.Popen([sys.executable, __file__, "--echo-server", "--size", str(size)],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = re.search(r"echo listening on (\S+)", line)
        if match is None:
            raise RuntimeError(f"the echo server did not start: {line!r}")
        self.address = match.group(1)

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


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
    parser.add_argument("--generators", type=int, default=2, help="load generator processes")
    parser.add_argument("--channels", type=int, default=2, help="channels per generator process")
    parser.add_argument("--streams", type=int, default=8, help="receive+ack loops per generator process")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of pull drain, ceiling and receive+ack, interleaved (medians are reported)")
    parser.add_argument("--no-echo", action="store_true", help="skip the ceiling (pre-built responses)")
    parser.add_argument("--src", type=Path, default=None, help="source tree the broker runs from (default: ./src)")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="also run receive+ack against a second broker from this tree, in the same rounds")
    parser.add_argument("--py5-python", default=str(ROOT / ".interop" / "venv-py5" / "bin" / "python"),
                        help="a python with rocketmq-python-client (skipped when missing)")
    parser.add_argument("--py5-messages", type=int, default=2000)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "grpc_bench.json"))
    parser.add_argument("--generate", help=argparse.SUPPRESS)  # one generator process (internal)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    parser.add_argument("--quota", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        generator_main(args)
        return
    if args.echo_server:
        echo_main(args)
        return
    count = 10_000 if args.quick else args.messages
    generator = f"x{args.generators} processes x{args.streams} loops"
    ceiling_name = f"ceiling: grpc.aio, pre-built responses, {generator}"
    pull_name = "4.x PullConsumer drain (poll)"
    raw_name = f"gRPC receive+ack, raw, {generator} (batch {BATCH})"
    baseline_name = f"gRPC receive+ack, baseline broker ({args.baseline_src})"
    #: phase -> one (messages, wall seconds, server CPU seconds, client CPU seconds) a round
    samples: dict[str, list[tuple[int, float, float, float]]] = {}

    def in_process(name: str, server_cpu: Any, action: Any) -> None:
        cpu, own, start = server_cpu(), time.process_time(), time.perf_counter()
        got = action()
        samples.setdefault(name, []).append((got, time.perf_counter() - start, server_cpu() - cpu,
                                             time.process_time() - own))

    def generated(name: str, server_cpu: Any, address: str, group: str, *, split: bool) -> None:
        cpu = server_cpu()
        got, wall, client_cpu = run_generators(address, "bench-grpc", group, count, args, split=split)
        samples.setdefault(name, []).append((got, wall, server_cpu() - cpu, client_cpu))

    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as tmp:
        echo = None if args.no_echo else Echo(args.size)
        dev = Dev(Path(tmp) / "store", args.src)
        baseline = None if args.baseline_src is None else Dev(Path(tmp) / "baseline", args.baseline_src)
        try:
            for broker in (dev, baseline):
                if broker is not None:
                    with Admin(broker.namesrv) as admin:
                        admin.ensure_topic("bench-grpc", queues=8)
                        admin.ensure_topic("bench-py5", queues=8)
                    preload(broker.namesrv, "bench-grpc", count, args.size)
            for round_number in range(args.rounds):  # the phases interleaved, each group new
                in_process(pull_name, dev.cpu, lambda: pull_drain(dev.namesrv, "bench-grpc", count))
                if echo is not None:
                    generated(ceiling_name, echo.cpu, echo.address, "bench-echo", split=True)
                generated(raw_name, dev.cpu, dev.grpc, f"bench-raw-{round_number}", split=False)
                if baseline is not None:
                    generated(baseline_name, baseline.cpu, baseline.grpc, f"bench-raw-{round_number}", split=False)
            in_process("4.x PushConsumer consume", dev.cpu, lambda: push_consume(dev.namesrv, "bench-grpc", count))
            if Path(args.py5_python).exists():
                cpu0 = dev.cpu()
                completed = subprocess.run([args.py5_python, "-c", PY5_SCRIPT, dev.grpc, "bench-py5", "bench-py5-g",
                                            str(args.py5_messages)], capture_output=True, text=True, timeout=900,
                                           cwd=tmp, env={**os.environ, "HOME": tmp})
                cpu_total = dev.cpu() - cpu0
                if completed.returncode == 0:
                    times = json.loads(completed.stdout.strip().splitlines()[-1])
                    share = times["send_s"] / (times["send_s"] + times["receive_ack_s"])
                    samples["official Python client: send (one at a time)"] = [
                        (args.py5_messages, times["send_s"], cpu_total * share, float("nan"))]
                    samples["official Python client: receive+ack (batch 32)"] = [
                        (args.py5_messages, times["receive_ack_s"], cpu_total * (1 - share), float("nan"))]
                else:
                    print("official Python client failed:", completed.stderr[-2000:])
            else:
                print(f"(no official Python client at {args.py5_python}: run the interop tests once to install it)")
        finally:
            dev.stop()
            for other in (baseline, echo):
                if other is not None:
                    other.stop()

    def rates(name: str) -> list[float]:
        return [got / wall for got, wall, _, _ in samples.get(name, [])]

    print(f"\nmedians of {args.rounds} rounds (the 4.x push and official client phases: one)")
    print(f"{'phase':62} {'msgs':>7} {'msg/s':>9} {'(min-max)':>15} {'server CPU us/msg':>18} "
          f"{'client CPU us/msg':>18}")
    for name, runs in samples.items():
        spread = f"{min(rates(name)):.0f}-{max(rates(name)):.0f}" if len(runs) > 1 else ""
        print(f"{name:62} {runs[0][0]:7d} {statistics.median(rates(name)):9.0f} {spread:>15} "
              f"{statistics.median(cpu / max(got, 1) * 1e6 for got, _, cpu, _ in runs):18.1f} "
              f"{statistics.median(client / max(got, 1) * 1e6 for got, _, _, client in runs):18.1f}")
    summary: dict[str, float] = {}
    pull, raw, ceiling = rates(pull_name), rates(raw_name), rates(ceiling_name)
    summary["receive_ack_vs_pull"] = statistics.median(r / p for r, p in zip(raw, pull, strict=True))
    print(f"\nreceive+ack / 4.x pull drain: {summary['receive_ack_vs_pull']:.2f}x (target >= 0.5x; median of "
          f"the rounds' ratios)")
    if ceiling:
        summary["ceiling_vs_pull"] = statistics.median(c / p for c, p in zip(ceiling, pull, strict=True))
        summary["receive_ack_vs_ceiling"] = statistics.median(r / c for r, c in zip(raw, ceiling, strict=True))
        broker_cpu = statistics.median(cpu / got * 1e6 for got, _, cpu, _ in samples[raw_name])
        ceiling_cpu = statistics.median(cpu / got * 1e6 for got, _, cpu, _ in samples[ceiling_name])
        print(f"ceiling / 4.x pull drain: {summary['ceiling_vs_pull']:.2f}x; receive+ack / ceiling: "
              f"{summary['receive_ack_vs_ceiling']:.2f}x; broker CPU / ceiling server CPU: "
              f"{broker_cpu / ceiling_cpu:.2f}x ({broker_cpu:.0f} / {ceiling_cpu:.0f} us/msg)")
    if baseline_name in samples:
        old = rates(baseline_name)
        baseline_cpu = statistics.median(cpu / got * 1e6 for got, _, cpu, _ in samples[baseline_name])
        summary["receive_ack_vs_baseline"] = statistics.median(r / b for r, b in zip(raw, old, strict=True))
        summary["baseline_vs_pull"] = statistics.median(b / p for b, p in zip(old, pull, strict=True))
        print(f"baseline receive+ack / 4.x pull drain: {summary['baseline_vs_pull']:.2f}x; receive+ack / baseline: "
              f"{summary['receive_ack_vs_baseline']:.2f}x; broker CPU {baseline_cpu:.0f} -> "
              f"{statistics.median(cpu / got * 1e6 for got, _, cpu, _ in samples[raw_name]):.0f} us/msg")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({
        "messages": count, "size": args.size, "rounds": args.rounds, "generators": args.generators,
        "channels": args.channels, "streams": args.streams, **summary,
        "phases": {name: [{"messages": got, "seconds": wall, "server_cpu_seconds": cpu, "client_cpu_seconds": client}
                          for got, wall, cpu, client in runs] for name, runs in samples.items()}}, indent=2))


if __name__ == "__main__":
    main()
