"""Forced retention deletes messages consumer groups have not consumed (as RocketMQ does), and says so:
a WARNING naming groups and counts, GET_BROKER_RUNTIME_INFO's counters (`rocketflow admin broker status`)
and the Prometheus counter by group and topic."""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.request

import pytest
from click.testing import CliRunner

from rocketflow import Message, Producer
from rocketflow.cli.main import cli
from rocketflow.client.admin import Admin
from rocketflow.dev import DevCluster
from rocketflow.protocol.message import MessageQueue

TOPIC = "ForcedCleanT"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_forced_deletion_of_unconsumed_messages_is_logged_counted_and_shown(caplog: pytest.LogCaptureFixture) -> None:
    metrics_port = _free_port()
    # segments of 32 KiB, none expired (72 h), and every ratio but the refusal one at 1%: any disk is "full"
    # enough to force deletion, never full enough to refuse puts
    cluster = DevCluster.start_in_thread(broker_settings={
        "store.commit_log_segment_size": 32 * 1024, "store.disk_max_used_space_ratio": 1,
        "store.disk_space_clean_forcibly_ratio": 1, "store.disk_space_warning_level_ratio": 99,
        "store.clean_resource_interval_ms": 600_000, "metrics_port": metrics_port})
    try:
        broker = cluster.broker
        assert broker is not None
        mq = MessageQueue(TOPIC, "broker-a", 0)
        with Admin(cluster.namesrv_addr) as admin, \
                Producer("forced_pg", namesrv=cluster.namesrv_addr, instance_name="forced-producer") as producer:
            admin.create_topic(TOPIC, broker_addr=cluster.broker_addr, read_queue_nums=1, write_queue_nums=1)
            admin.ensure_topic(TOPIC, queues=1)
            for index in range(300):
                producer.send(Message(TOPIC, b"x" * 1000 + str(index).encode()))
            api = admin.instance.api
            for group, offset in (("lagging_cg", 10), ("fresh_cg", 0), ("caught_up_cg", 299)):
                admin.instance.run(api.update_consumer_offset(cluster.broker_addr, group, mq, offset))
            with caplog.at_level(logging.WARNING, "rocketflow.broker.unconsumed_deletions"):
                assert broker.store.clean_expired(int(time.time() * 1000)) > 0
            low = broker.store.get_min_offset_in_queue(TOPIC, 0)
            assert 10 < low < 299
            expected = {"lagging_cg": low - 10, "fresh_cg": low}
            assert broker.unconsumed_deletions.counts() == {(group, TOPIC): count for group, count in expected.items()}
            warnings = [record.getMessage() for record in caplog.records]
            assert len(warnings) == 1, warnings
            assert "forced" in warnings[0] and f"{sum(expected.values())} messages" in warnings[0]
            assert f"group lagging_cg on {TOPIC}: {low - 10}" in warnings[0] and "caught_up_cg" not in warnings[0]
        status = CliRunner().invoke(cli, ["admin", "broker", "status", cluster.broker_addr, "-n", cluster.namesrv_addr,
                                          "--json"])
        assert status.exit_code == 0, status.output
        info = json.loads(status.stdout)
        assert info["unconsumedMessagesDeleted"] == str(sum(expected.values()))
        last = info["unconsumedMessagesDeletedLast"]
        assert "forced" in last and "lagging_cg" in last
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert (f'rocketflow_broker_unconsumed_messages_deleted_total{{group="lagging_cg",topic="{TOPIC}"}} '
                f"{float(low - 10)}") in scraped
    finally:
        cluster.close()
