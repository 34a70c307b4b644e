"""Real clients signing with RocketMQ's plain ACL against our broker with ACL on.

Apache's C++ client (``set_session_credentials``) and ali-ons (``accessKeyId`` / ``accessKeySecret``)
both sign every request: the values of the sorted ext fields (their own ``AccessKey`` and
``OnsChannel`` included) followed by the body, HMAC-SHA1, base64. Our broker takes their sends with
the right keys and answers NO_PERMISSION to the same producer with a wrong secret.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rocketflow.client import ClientConfig, ClientInstance
from rocketflow.client.instance import shutdown_all
from rocketflow.dev import DevCluster
from rocketflow.protocol.bodies import TopicConfig

if TYPE_CHECKING:  # fixtures come from this folder's conftest.py, which is not importable as a module
    from conftest import ClientProcess, ClientRunner

ADMIN_KEY, ADMIN_SECRET = "interopAdmin", "interopAdminSecret"
USER_KEY, USER_SECRET = "interopUser1", "interopUserSecret"
MESSAGES = 5
TIMEOUT = 60.0


def acl_yaml(topic_perms: list[str]) -> str:
    return json.dumps({
        "globalWhiteRemoteAddresses": [],
        "accounts": [
            {"accessKey": ADMIN_KEY, "secretKey": ADMIN_SECRET, "admin": True},
            {"accessKey": USER_KEY, "secretKey": USER_SECRET, "admin": False, "defaultTopicPerm": "DENY",
             "defaultGroupPerm": "SUB", "topicPerms": topic_perms},
        ],
    })  # JSON is YAML


@pytest.fixture
def acl_cluster(tmp_path: Path) -> Iterator[DevCluster]:
    path = tmp_path / "plain_acl.yml"
    path.write_text(acl_yaml(["AclCppT=PUB", "AclNodeT=PUB"]))
    cluster = DevCluster.start_in_thread(broker_settings={"acl_enable": True, "acl_file": path})
    try:
        config = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name="acl-interop-admin",
                              access_key=ADMIN_KEY, secret_key=ADMIN_SECRET)
        instance = ClientInstance.get_or_create(config)
        instance.start()
        try:
            for topic in ("AclCppT", "AclNodeT"):
                instance.run(instance.api.create_topic(cluster.broker_addr, TopicConfig(topic, 2, 2)))
            deadline = time.monotonic() + TIMEOUT
            while not all(instance.run(instance.api.get_topic_route(topic)) for topic in ("AclCppT", "AclNodeT")):
                assert time.monotonic() < deadline, "topics not routed"
                time.sleep(0.1)
        finally:
            instance.shutdown()
        yield cluster
    finally:
        shutdown_all()
        cluster.close()


def stored(cluster: DevCluster, topic: str) -> int:
    broker = cluster.broker
    assert broker is not None
    return sum(broker.store.get_max_offset_in_queue(topic, queue_id) for queue_id in range(2))


def run_producer(clients: ClientRunner, kind: str, cluster: DevCluster, topic: str, messages: Path,
                 secret: str) -> ClientProcess:
    args = ["--namesrv", cluster.namesrv_addr, "--topic", topic, "--group", f"P_{topic}", "--messages",
            str(messages), "--access-key", USER_KEY, "--secret-key", secret]
    name = f"{kind}-{'good' if secret == USER_SECRET else 'bad'}"
    if kind == "cpp":
        process = clients._cpp(name, "cpp_producer.py", [*args, "--timeout-ms", "3000"])
    else:
        process = clients._node(name, "alions_producer.js", args)
    clients.wait_until(lambda: bool(process.of("done")) or process.process.poll() is not None, TIMEOUT,
                       f"{name} to finish")
    clients.stop(process, expect_clean=False)
    return process


@pytest.mark.parametrize(("kind", "topic"), [("cpp", "AclCppT"), ("alions", "AclNodeT")])
def test_signed_sends_are_accepted_with_right_keys_and_refused_with_wrong_ones(
        acl_cluster: DevCluster, clients: ClientRunner, tmp_path: Path, kind: str, topic: str) -> None:
    messages = tmp_path / "messages.jsonl"
    messages.write_text("".join(json.dumps({"body": f"acl {index}", "tags": "T", "keys": [f"k{index}"]}) + "\n"
                                for index in range(MESSAGES)))
    assert acl_cluster.broker is not None
    hook = acl_cluster.broker.acl_hook
    assert hook is not None
    good = run_producer(clients, kind, acl_cluster, topic, messages, USER_SECRET)
    assert len(good.of("sent")) == MESSAGES, clients.describe()
    assert all(event["status"] in ("OK", "SEND_OK") for event in good.of("sent")), good.of("sent")
    assert stored(acl_cluster, topic) == MESSAGES
    # every request of the client (heartbeats, sends, unregistering) passed the signature check
    assert hook.refused == 0, hook.last_refusal

    bad = run_producer(clients, kind, acl_cluster, topic, messages, "wrong-secret-key")
    assert not bad.of("sent") and bad.of("error"), clients.describe()
    assert stored(acl_cluster, topic) == MESSAGES
    assert hook.refused > 0
    assert hook.last_refusal is not None and f"signature check failed for accessKey {USER_KEY}" in hook.last_refusal
