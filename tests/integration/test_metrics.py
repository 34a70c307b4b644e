"""Prometheus metrics of a real broker and real clients, scraped over HTTP and parsed."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from rocketflow import Message, Producer, PushConsumer, __version__
from rocketflow.broker.config import (
    BrokerConfig,
    BrokerConfigError,
    build_broker_config,
    config_overrides_from_properties,
)
from rocketflow.cli.main import cli
from rocketflow.client import (
    ClientConfig,
    ClientInstance,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MQClientError,
)
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageExt
from testkit import wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

FAST_CLIENT: dict[str, Any] = {"persist_first_delay": 0.2, "persist_consumer_offset_interval": 0.2,
                               "poll_name_server_interval": 1.0}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def series(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of ``name`` whose labels include ``labels``."""
    return {key: sample for (sample_name, key), sample in samples.items()
            if sample_name == name and set(labels.items()) <= set(key)}




def port_is_closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except OSError:
        return True


def metrics_server_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.endswith("(serve_forever)")]


def start_cluster(**broker_settings: object) -> DevCluster:
    return DevCluster.start_in_thread(broker_settings=broker_settings)


@pytest.fixture
def metrics_cluster() -> Iterator[tuple[DevCluster, int]]:
    for attempt in range(3):
        port = free_port()
        try:
            # flush every dirty byte at each async flush round (0.5 s), so a flush is timed soon
            cluster = start_cluster(metrics_port=port, **{"store.flush_commit_log_least_pages": 0})
        except OSError:
            if attempt == 2:
                raise
            continue
        break
    try:
        yield cluster, port
    finally:
        cluster.close()
    assert port_is_closed(port), "the broker's metrics endpoint outlived the broker"


@pytest.fixture(autouse=True)
def _leave_no_client_behind(no_client_left_behind: None) -> None:
    """Every test here stops the clients it started (see the root conftest)."""


def test_broker_and_client_metrics_follow_traffic(metrics_cluster: tuple[DevCluster, int]) -> None:
    cluster, broker_port = metrics_cluster
    topic, producer_group, consumer_group, total = "metrics_topic", "metrics_producer", "metrics_consumer", 40
    before = scrape(broker_port)
    assert value(before, "rocketflow_broker_info", broker_name=cluster.broker_config.broker_name,
                 cluster=cluster.broker_config.cluster, version=__version__) == 1

    producer_port = free_port()
    producer = Producer(producer_group, namesrv=cluster.namesrv_addr, metrics_port=producer_port)
    producer.start()
    try:
        per_queue: Counter[int] = Counter()
        for index in range(total):
            result = producer.send(Message(topic, f"body-{index}".encode(), keys=f"k{index}"))
            per_queue[result.message_queue.queue_id] += 1
        produced = scrape(producer_port)
        assert value(produced, "rocketflow_client_send_rt_seconds_count", group=producer_group, topic=topic) == total
        assert value(produced, "rocketflow_client_send_rt_seconds_bucket", group=producer_group, topic=topic,
                     le="+Inf") == total
        assert (value(produced, "rocketflow_client_send_rt_seconds_sum", group=producer_group, topic=topic) or 0) > 0
    finally:
        producer.shutdown()
    assert port_is_closed(producer_port), "the producer's metrics endpoint outlived its client instance"

    after_put = scrape(broker_port)
    grown = value(after_put, "rocketflow_broker_put_messages_total")
    assert grown is not None and grown - (value(before, "rocketflow_broker_put_messages_total") or 0) == total
    assert (value(after_put, "rocketflow_broker_put_bytes_total") or 0) > \
        (value(before, "rocketflow_broker_put_bytes_total") or 0)
    max_offsets = series(after_put, "rocketflow_broker_queue_max_offset", topic=topic)
    assert {dict(key)["queue_id"]: int(offset) for key, offset in max_offsets.items()} == \
        {str(queue_id): count for queue_id, count in per_queue.items()}
    wait_until(lambda: (value(scrape(broker_port), "rocketflow_broker_store_flush_seconds_count") or 0) >= 1,
               what="a timed commit-log flush")

    consumed: list[MessageExt] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        with lock:
            consumed.extend(msgs)
        return ConsumeOrderlyStatus.SUCCESS

    consumer_port = free_port()
    consumer = PushConsumer(consumer_group, namesrv=cluster.namesrv_addr, instance_name="metrics-consumer",
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, metrics_port=consumer_port,
                            **FAST_CLIENT)
    consumer.subscribe(topic, "*")
    consumer.register_orderly_listener(listener)
    consumer.start()
    try:
        wait_until(lambda: len(consumed) >= total, what="consumption of every message")

        def lag_is_zero() -> bool:
            lags = series(scrape(broker_port), "rocketflow_broker_consumer_lag", group=consumer_group, topic=topic)
            return len(lags) == len(per_queue) and all(lag == 0 for lag in lags.values())

        wait_until(lag_is_zero, what="zero lag at the broker")
        broker_samples = scrape(broker_port)
        committed = series(broker_samples, "rocketflow_broker_consumer_offset", group=consumer_group, topic=topic)
        assert {dict(key)["queue_id"]: int(offset) for key, offset in committed.items()} == \
            {str(queue_id): count for queue_id, count in per_queue.items()}
        assert (value(broker_samples, "rocketflow_broker_get_messages_total") or 0) >= total
        assert (value(broker_samples, "rocketflow_broker_group_get_messages_total", group=consumer_group) or 0) \
            >= total
        # orderly consumption locks the queues it holds at the broker
        assert (value(broker_samples, "rocketflow_broker_lock_table_entries", group=consumer_group) or 0) \
            >= len(per_queue)
        # an idle push consumer's pulls are held by long polling
        wait_until(lambda: (value(scrape(broker_port), "rocketflow_broker_long_poll_waiters") or 0) >= 1,
                   what="a suspended pull")

        def consumer_caught_up() -> bool:
            samples = scrape(consumer_port)
            cached = series(samples, "rocketflow_client_cached_messages", group=consumer_group, topic=topic)
            return (value(samples, "rocketflow_client_consume_ok_messages_total", group=consumer_group,
                          topic=topic) or 0) >= total and len(cached) == len(per_queue) and not any(cached.values())

        wait_until(consumer_caught_up, what="client consume counters")
        client_samples = scrape(consumer_port)
        assert (value(client_samples, "rocketflow_client_pulled_messages_total", group=consumer_group,
                      topic=topic) or 0) >= total
        assert value(client_samples, "rocketflow_client_consume_failed_messages_total", group=consumer_group,
                     topic=topic) == 0
        assert (value(client_samples, "rocketflow_client_rebalances_total", group=consumer_group) or 0) >= 1
        assert (value(client_samples, "rocketflow_client_consume_ok_tps", group=consumer_group, topic=topic)
                or 0) > 0
        assert value(client_samples, "rocketflow_client_pull_rt_avg_seconds", group=consumer_group,
                     topic=topic) is not None
        assert value(client_samples, "rocketflow_client_info", client_id=consumer.client_id, version=__version__) == 1
    finally:
        consumer.shutdown()
    assert port_is_closed(consumer_port), "the consumer's metrics endpoint outlived its client instance"


def test_metrics_are_off_by_default() -> None:
    assert BrokerConfig().metrics_port == 0
    assert ClientConfig(namesrv_addr="127.0.0.1:9876").metrics_port == 0
    cluster = start_cluster()
    try:
        assert cluster.broker is not None and cluster.broker.metrics is None
        producer = Producer("metrics_off_producer", namesrv=cluster.namesrv_addr)
        producer.start()
        try:
            producer.send(Message("metrics_off_topic", b"x"))
            assert producer.instance.metrics is None
            assert metrics_server_threads() == [], "a metrics HTTP server runs although metrics are off"
        finally:
            producer.shutdown()
    finally:
        cluster.close()


def test_enable_metrics_on_a_running_instance() -> None:
    cluster = start_cluster()
    try:
        producer = Producer("metrics_late_producer", namesrv=cluster.namesrv_addr)
        with pytest.raises(MQClientError, match="not started"):
            ClientInstance(ClientConfig(namesrv_addr=cluster.namesrv_addr)).enable_metrics(0)
        producer.start()
        try:
            metrics = producer.instance.enable_metrics(0)
            assert metrics.port > 0
            with pytest.raises(MQClientError, match="already served"):
                producer.instance.enable_metrics(0)
            producer.send(Message("metrics_late_topic", b"x"))
            samples = scrape(metrics.port)
            assert value(samples, "rocketflow_client_send_rt_seconds_count", group="metrics_late_producer",
                         topic="metrics_late_topic") == 1
            port = metrics.port
        finally:
            producer.shutdown()
        assert port_is_closed(port)
        assert metrics_server_threads() == []
    finally:
        cluster.close()


def test_broker_metrics_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot serve broker metrics on 127.0.0.1:{port}"):
            start_cluster(metrics_port=port)
    assert metrics_server_threads() == []


def test_metrics_settings_are_validated_and_configurable() -> None:
    assert config_overrides_from_properties("metricsPort=9100\nmetricsHost=0.0.0.0") == \
        {"metrics_port": 9100, "metrics_host": "0.0.0.0"}
    assert build_broker_config({"metrics_port": 9200}).metrics_port == 9200
    with pytest.raises(BrokerConfigError, match="metrics_port"):
        build_broker_config({"metrics_port": 70000})
    with pytest.raises(MQClientError, match="metrics_port"):
        ClientConfig(namesrv_addr="127.0.0.1:9876", metrics_port=-1)
    with pytest.raises(MQClientError, match="metrics_port"):
        Producer("metrics_bad_producer", namesrv="127.0.0.1:9876", metrics_port="9100")
    runner = CliRunner()
    for command in ("broker", "dev"):
        result = runner.invoke(cli, [command, "--help"])
        assert result.exit_code == 0 and "--metrics-port" in result.output
    result = runner.invoke(cli, ["broker", "--metrics-port", "99999"])
    assert result.exit_code != 0 and "--metrics-port" in result.output


def test_scrape_during_broker_shutdown_does_not_hang(metrics_cluster: tuple[DevCluster, int]) -> None:
    cluster, port = metrics_cluster
    errors: list[BaseException] = []
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            try:
                scrape(port)
            except (urllib.error.URLError, ConnectionError, OSError):
                return
            except BaseException as exc:  # anything else is a bug
                errors.append(exc)
                return

    thread = threading.Thread(target=scraper, daemon=True)
    thread.start()
    time.sleep(0.2)  # let a few scrapes run; not a proof of anything
    started = time.monotonic()
    cluster.close()
    stop.set()
    thread.join(15)
    assert not thread.is_alive() and not errors
    assert time.monotonic() - started < 15
