"""Topics created one by one over UPDATE_AND_CREATE_TOPIC at a `rocketflow broker` subprocess.

The broker persists its config tables periodically in a thread while its loop changes them; a lock-order
inversion between the two once hung the broker for good (one create never answered, SIGTERM ignored).
Here the periodic persist runs every 10 ms, so the two meet all the time, and:

* every create is answered (a request that hangs fails the test instead of hanging it);
* the cost of a create does not grow with the table: the last creates of a big table cost about what
  the first ones did (rewriting the whole file per create made it grow linearly);
* an acknowledged create survives kill -9, and SIGTERM stops the broker cleanly with every topic in
  ``topics.json``; so do creates from concurrent clients.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from reliability_helpers import RawConnection, ServerProcess, broker_args, scaled

from rocketflow.protocol.bodies import TopicConfigSerializeWrapper
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.store.config_file import TopicConfigTable

pytestmark = pytest.mark.reliability

CREATES = scaled(1500, 6000)
SAMPLE = 150
#: the last creates may cost this many times the first ones (noise of a shared machine), plus `SLACK_S`
GROWTH_BOUND = 3.0
SLACK_S = 0.0015


def create_request(topic: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})


def create(connection: RawConnection, topic: str) -> float:
    """Seconds the create took; fails on an answer other than SUCCESS or none within 10 s."""
    started = time.perf_counter()
    response = connection.request(create_request(topic), 10)
    elapsed = time.perf_counter() - started
    assert response is not None, f"the broker closed the connection on create {topic}"
    assert response.code == ResponseCode.SUCCESS, (topic, response.code, response.remark)
    return elapsed


def all_topics(address: str) -> set[str]:
    connection = RawConnection(address)
    try:
        response = connection.request(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 10)
        assert response is not None and response.code == ResponseCode.SUCCESS
        return set(TopicConfigSerializeWrapper.decode(response.body).topic_config_table)
    finally:
        connection.close()


def test_creating_topics_one_by_one_costs_the_same_at_any_size_and_survives_a_crash(tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = broker_args(store, "flush_config_interval_ms=10")
    broker = ServerProcess(args, tmp_path / "broker.log")
    names = [f"Churn_{index:05d}" for index in range(CREATES)]
    try:
        connection = RawConnection(broker.address)
        try:
            timings = [create(connection, name) for name in names]
        finally:
            connection.close()
        first = sorted(timings[:SAMPLE])[SAMPLE // 2]
        last = sorted(timings[-SAMPLE:])[SAMPLE // 2]
        print(f"\ncreate median: first {SAMPLE} {first * 1000:.2f} ms, last {SAMPLE} (of {CREATES}) "
              f"{last * 1000:.2f} ms, all {sum(timings):.2f} s")
        assert last <= GROWTH_BOUND * first + SLACK_S, (first, last)
        broker.kill()  # every create was answered: each must survive kill -9
        broker = ServerProcess(args, tmp_path / "broker.log")
        assert set(names) <= all_topics(broker.address)
        assert broker.stop(timeout=30) == 0, "SIGTERM did not stop the broker cleanly"
        snapshot = json.loads((store / "config" / "topics.json").read_text())["topicConfigTable"]
        assert set(names) <= set(snapshot)
        journal = store / "config" / "topics.json.journal"
        assert not journal.exists() or journal.stat().st_size == 0
    finally:
        broker.kill()


def test_concurrent_creates_are_all_answered_and_survive_a_crash(tmp_path: Path) -> None:
    store = tmp_path / "store"
    broker = ServerProcess(broker_args(store), tmp_path / "broker.log")
    names = [f"Concurrent_{index:04d}" for index in range(scaled(400, 4000))]
    try:
        def worker(part: list[str]) -> None:
            connection = RawConnection(broker.address)
            try:
                for name in part:
                    create(connection, name)
            finally:
                connection.close()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(worker, [names[index::8] for index in range(8)]))
        assert set(names) <= all_topics(broker.address)
        broker.kill()
        broker = ServerProcess(broker_args(store), tmp_path / "broker.log")
        table = TopicConfigTable(store / "config")
        table.load()
        assert set(names) <= set(table.topics)
        assert set(names) <= all_topics(broker.address)
    finally:
        broker.kill()


def test_name_server_kv_puts_cost_the_same_at_any_size(tmp_path: Path) -> None:
    """Each PUT_KV_CONFIG rewrote the whole KV file on the name server's loop: N puts cost O(N^2)."""
    namesrv = ServerProcess(["namesrv", "--port", "0", "--set", f"kvConfigPath={tmp_path / 'kv.json'}"],
                            tmp_path / "namesrv.log")
    puts = scaled(1500, 6000)
    try:
        connection = RawConnection(namesrv.address)
        try:
            timings = []
            for index in range(puts):
                request = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {
                    "namespace": "ChurnNs", "key": f"key{index:05d}", "value": "v" * 512})
                started = time.perf_counter()
                response = connection.request(request, 10)
                timings.append(time.perf_counter() - started)
                assert response is not None and response.code == ResponseCode.SUCCESS
        finally:
            connection.close()
        first = sorted(timings[:SAMPLE])[SAMPLE // 2]
        last = sorted(timings[-SAMPLE:])[SAMPLE // 2]
        print(f"\nKV put median: first {SAMPLE} {first * 1000:.2f} ms, last {SAMPLE} (of {puts}) {last * 1000:.2f} ms")
        assert last <= GROWTH_BOUND * first + SLACK_S, (first, last)
        assert namesrv.stop(timeout=30) == 0
        table = json.loads((tmp_path / "kv.json").read_text())["configTable"]["ChurnNs"]
        assert len(table) == puts
    finally:
        namesrv.kill()
