"""``rocketflow admin`` end to end against a dev cluster: every command once (tables and --json),
reset-offset under a running PushConsumer, tail of a message sent after it started (a subprocess),
the refused / unreachable / bad-usage exits, and ACL keys + TLS against a broker with both on."""

from __future__ import annotations

import datetime
import ipaddress
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rocketflow import Message, Producer, PushConsumer
from rocketflow.cli.main import cli
from rocketflow.client import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, ConsumeFromWhere
from rocketflow.dev import DevCluster
from rocketflow.net.tls import TlsMode
from rocketflow.protocol.message import MessageExt
from testkit import wait_until


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def _leave_no_client_behind(no_client_left_behind: None) -> None:
    """Every test here stops the clients it started (see the root conftest)."""




def run(cluster: DevCluster, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, ["admin", *args, "-n", cluster.namesrv_addr])
    assert result.exit_code == code, (result.output, result.exception)
    return result


def run_json(cluster: DevCluster, *args: str) -> Any:
    return json.loads(run(cluster, *args, "--json").stdout)


def make_topic(cluster: DevCluster, topic: str, queues: int = 2) -> None:
    created = run_json(cluster, "topic", "create", topic, "--read-queues", str(queues), "--write-queues", str(queues))
    assert created["brokers"] == [cluster.broker_addr]

    def routed() -> bool:
        result = CliRunner().invoke(cli, ["admin", "topic", "route", topic, "-n", cluster.namesrv_addr, "--json"])
        return result.exit_code == 0 and any(
            data["writeQueueNums"] == queues for data in json.loads(result.stdout)["queueDatas"])

    wait_until(routed)


def test_help_everywhere() -> None:
    runner = CliRunner()
    for args in (["admin"], ["admin", "topic"], ["admin", "group"], ["admin", "message"], ["admin", "cluster"],
                 ["admin", "topic", "create"], ["admin", "consumer-progress"], ["admin", "reset-offset"],
                 ["admin", "message", "tail"], ["admin", "send"]):
        result = runner.invoke(cli, [*args, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output, args


def test_cluster(cluster: DevCluster) -> None:
    brokers = run_json(cluster, "cluster")
    assert [(broker["brokerName"], broker["addr"], broker["version"]) for broker in brokers] == [
        ("broker-a", cluster.broker_addr, "V4_9_3")]
    assert cluster.broker_addr in run(cluster, "cluster").stdout
    from_env = CliRunner(env={"ROCKETFLOW_NAMESRV": cluster.namesrv_addr}).invoke(cli, ["admin", "cluster", "--json"])
    assert from_env.exit_code == 0 and json.loads(from_env.stdout)[0]["addr"] == cluster.broker_addr


def test_topic_commands(cluster: DevCluster) -> None:
    make_topic(cluster, "CliTopic", 2)
    topics = run_json(cluster, "topic", "list")
    assert {"topic": "CliTopic", "kind": "normal"} in topics
    assert {"topic": "broker-a", "kind": "system"} in topics
    assert "CliTopic" in run(cluster, "topic", "list").stdout
    assert "RW-" in run(cluster, "topic", "route", "CliTopic").stdout
    assert run_json(cluster, "topic", "update", "CliTopic", "--perm", "4")["brokers"] == [cluster.broker_addr]
    wait_until(lambda: run_json(cluster, "topic", "route", "CliTopic")["queueDatas"][0]["perm"] == 4)
    run(cluster, "topic", "update", "CliTopic", "--perm", "6")
    wait_until(lambda: run_json(cluster, "topic", "route", "CliTopic")["queueDatas"][0]["perm"] == 6)
    sent = run_json(cluster, "send", "CliTopic", "hello", "--keys", "k-1", "--tags", "tag-a",
                    "--property", "origin=cli")
    assert sent["sendStatus"] == "SEND_OK" and sent["topic"] == "CliTopic"
    stats = run_json(cluster, "topic", "stats", "CliTopic")
    assert sorted(row["queueId"] for row in stats) == [0, 1]
    assert sum(row["maxOffset"] for row in stats) == 1
    assert "Last store time" in run(cluster, "topic", "stats", "CliTopic").stdout
    run(cluster, "topic", "delete", "CliTopic")
    assert "CliTopic" not in [row["topic"] for row in run_json(cluster, "topic", "list")]
    refused = run(cluster, "topic", "route", "CliTopic", code=1)
    assert "does not exist" in refused.output


def test_group_commands(cluster: DevCluster) -> None:
    created = run_json(cluster, "group", "create", "cli_group", "--retry-max-times", "5",
                       "--no-consume-broadcast-enable")
    assert created["config"]["retryMaxTimes"] == 5
    groups = {group["groupName"]: group for group in run_json(cluster, "group", "list")}
    assert groups["cli_group"]["retryMaxTimes"] == 5 and groups["cli_group"]["consumeBroadcastEnable"] is False
    assert "cli_group" in run(cluster, "group", "list").stdout
    run(cluster, "group", "delete", "cli_group", "--remove-offset")
    assert "cli_group" not in {group["groupName"] for group in run_json(cluster, "group", "list")}


def test_message_commands(cluster: DevCluster) -> None:
    make_topic(cluster, "CliMessages", 2)
    sent = run_json(cluster, "send", "CliMessages", "body-1", "--keys", "order-1", "--tags", "paid",
                    "--sharding-key", "order-1", "--property", "a=b")
    for msg_id in (sent["offsetMsgId"], sent["msgId"]):
        shown = run_json(cluster, "message", "show", msg_id)
        assert (shown["body"], shown["tags"], shown["keys"], shown["properties"]["a"]) == (
            "body-1", "paid", "order-1", "b")
        assert shown["msgId"] == sent["msgId"] and shown["queueId"] == sent["queueId"]
    assert "body-1" in run(cluster, "message", "show", sent["msgId"], "-t", "CliMessages").stdout
    found = run_json(cluster, "message", "query", "CliMessages", "order-1")
    assert [msg["msgId"] for msg in found] == [sent["msgId"]]
    assert "order-1" in run(cluster, "message", "query", "CliMessages", "order-1", "--begin", "0",
                            "--end", "now").stdout
    assert run_json(cluster, "message", "query", "CliMessages", "order-2") == []
    tailed = run(cluster, "message", "tail", "CliMessages", "--count", "1", "--json")
    assert json.loads(tailed.stdout.splitlines()[0])["msgId"] == sent["msgId"]
    bad = run(cluster, "send", "CliMessages", "x", "--property", "novalue", code=2)
    assert "KEY=VALUE" in bad.output


def test_tail_picks_up_a_message_sent_after_it_started(cluster: DevCluster) -> None:
    make_topic(cluster, "CliTail", 2)
    run(cluster, "send", "CliTail", "before")
    command = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli()", "admin", "message", "tail",
               "CliTail", "--from-now", "--count", "1", "--json", "-n", cluster.namesrv_addr]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        assert banner.startswith("tailing CliTail (2 queues, from now)"), banner
        sent = run_json(cluster, "send", "CliTail", "after")
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert [(line["msgId"], line["body"]) for line in lines] == [(sent["msgId"], "after")]


def test_consumer_commands_and_reset_while_a_push_consumer_runs(cluster: DevCluster, tmp_path: Path) -> None:
    make_topic(cluster, "CliReset", 2)
    bodies: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            bodies.extend(msg.body for msg in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def consumed() -> int:
        with lock:
            return len(bodies)

    consumer = PushConsumer("cli_reset_cg", namesrv=cluster.namesrv_addr, instance_name="cli-reset-consumer",
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, persist_first_delay=0.2,
                            persist_consumer_offset_interval=0.2)
    consumer.subscribe("CliReset", "*")
    consumer.register_concurrent_listener(listener)
    with consumer, Producer("cli_reset_pg", namesrv=cluster.namesrv_addr, instance_name="cli-reset-producer") as pg:
        for index in range(4):
            pg.send(Message("CliReset", f"r{index}".encode()))
        wait_until(lambda: consumed() >= 4)
        client_id = consumer.instance.client_id

        def caught_up() -> bool:
            progress = run_json(cluster, "consumer-progress", "cli_reset_cg", "--topic", "CliReset")
            return progress["totalLag"] == 0 and [row["clientId"] for row in progress["queues"]] == [client_id] * 2

        wait_until(caught_up)
        table = run(cluster, "consumer-progress", "cli_reset_cg").stdout
        assert client_id in table and "total:" in table

        connections = run_json(cluster, "consumer-connections", "cli_reset_cg")
        assert [member["clientId"] for member in connections["connectionSet"]] == [client_id]
        assert "CliReset" in connections["subscriptionTable"]
        assert client_id in run(cluster, "consumer-connections", "cli_reset_cg").stdout

        reset = run_json(cluster, "reset-offset", "cli_reset_cg", "CliReset", "--to-earliest")
        assert [row["offset"] for row in reset["offsets"]] == [0, 0]
        wait_until(lambda: consumed() >= 8, timeout=20)
        with lock:
            assert sorted(bodies[4:8]) == [b"r0", b"r1", b"r2", b"r3"]

        later = run_json(cluster, "reset-offset", "cli_reset_cg", "CliReset", "--to-latest", "--force")
        assert sum(row["offset"] for row in later["offsets"]) == 4
        assert "Offset" in run(cluster, "reset-offset", "cli_reset_cg", "CliReset", "--timestamp",
                               "2020-01-01T00:00:00").stdout

        watched = run(cluster, "consumer-progress", "cli_reset_cg", "--watch", "--count", "2", "--interval", "0.1",
                      "--json")
        assert [json.loads(line)["group"] for line in watched.stdout.splitlines()] == ["cli_reset_cg"] * 2
        plot = tmp_path / "lag.png"
        run(cluster, "consumer-progress", "cli_reset_cg", "--count", "2", "--interval", "0.1", "--plot", str(plot))
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_refused_unreachable_and_bad_usage(cluster: DevCluster) -> None:
    refused = run(cluster, "consumer-connections", "cli_nobody_home", code=1)
    assert "CONSUMER_NOT_ONLINE" in refused.output and "not online" in refused.output
    unreachable = CliRunner().invoke(cli, ["admin", "topic", "list", "-n", "127.0.0.1:1", "--timeout", "2"])
    assert unreachable.exit_code == 1 and "127.0.0.1:1" in unreachable.output
    usage = run(cluster, "reset-offset", "g", "t", code=2)
    assert "exactly one of" in usage.output
    bad_time = run(cluster, "reset-offset", "g", "t", "--timestamp", "soon", code=2)
    assert "invalid timestamp" in bad_time.output
    # bad arguments exit 2, checked before anything connects, naming the option or argument
    bad_name = run(cluster, "topic", "create", "bad topic!", code=2)
    assert "bad topic!" in bad_name.output and "TOPIC" in bad_name.output
    blank = run(cluster, "topic", "create", " ", code=2)
    assert "blank" in blank.output
    bad_group = run(cluster, "consumer-progress", "no group", code=2)
    assert "GROUP" in bad_group.output
    for value, says in (("localhost", "'localhost' is not host:port"), ("", "is blank")):
        bad_address = CliRunner().invoke(cli, ["admin", "topic", "list", "-n", value])
        assert bad_address.exit_code == 2 and "'-n' / '--namesrv'" in bad_address.output, bad_address.output
        assert says in bad_address.output and "namesrv=" not in bad_address.output
    bad_demo = CliRunner().invoke(cli, ["demo", "--namesrv", "localhost"])
    assert bad_demo.exit_code == 2 and "is not host:port" in bad_demo.output, bad_demo.output


def test_namesrv_option_before_the_command(cluster: DevCluster) -> None:
    """``admin -n X topic list`` and ``admin topic -n X list`` as well as ``admin topic list -n X``."""
    make_topic(cluster, "CliNamesrvFirst")
    for argv in (["admin", "-n", cluster.namesrv_addr, "topic", "list", "--json"],
                 ["admin", "topic", "-n", cluster.namesrv_addr, "list", "--json"],
                 # the command's own -n wins over one given before it
                 ["admin", "-n", "127.0.0.1:1", "topic", "list", "-n", cluster.namesrv_addr, "--json"]):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 0, (argv, result.output)
        assert "CliNamesrvFirst" in {row["topic"] for row in json.loads(result.stdout)}
    unreachable = CliRunner().invoke(cli, ["admin", "-n", "127.0.0.1:1", "topic", "list", "--timeout", "2"])
    assert unreachable.exit_code == 1 and "127.0.0.1:1" in unreachable.output


def test_more_write_than_read_queues_is_warned(cluster: DevCluster) -> None:
    make_topic(cluster, "CliStranded", 8)
    grown = CliRunner().invoke(cli, ["admin", "topic", "update", "CliStranded", "--write-queues", "16",
                                     "-n", cluster.namesrv_addr])
    assert grown.exit_code == 0, grown.output
    assert "warning: topic CliStranded has 16 write queues but 8 read queues" in grown.stderr
    assert "queues 8-15 are not consumed" in grown.stderr and "--read-queues 16" in grown.stderr
    followed = CliRunner().invoke(cli, ["admin", "topic", "update", "CliStranded", "--read-queues", "16",
                                        "-n", cluster.namesrv_addr])
    assert followed.exit_code == 0 and "warning" not in followed.stderr


def test_send_to_an_unreachable_name_server_says_so_once() -> None:
    """Not the route lookups' internal log lines, nor a hint to create the topic: what `topic list` says."""
    argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "admin",
            "send", "-n", "127.0.0.1:1", "--timeout", "2", "Orders", "hello"]
    sent = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    listed = subprocess.run([*argv[:4], "topic", "list", "-n", "127.0.0.1:1", "--timeout", "2"], capture_output=True,
                            text=True, timeout=60)
    for result in (sent, listed):
        assert result.returncode == 1, result
        lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        assert len(lines) == 1, lines
        assert "cannot connect to 127.0.0.1:1" in lines[0] and "is the server running?" in lines[0], lines
    assert "topic created" not in sent.stderr


def test_consumer_progress_of_an_unknown_group_is_an_error(cluster: DevCluster) -> None:
    result = CliRunner().invoke(cli, ["admin", "consumer-progress", "no_such_group_xyz", "-n", cluster.namesrv_addr])
    assert result.exit_code == 1, result.output
    assert "no_such_group_xyz" in result.output and "no consume offsets" in result.output


# --------------------------------------------------------------------------- ACL keys and TLS

ADMIN_KEY, ADMIN_SECRET = "cliAdmin01", "cliAdminSecret1"
USER_KEY, USER_SECRET = "cliUser001", "cliUserSecret1"


def _write_pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _throwaway_pki(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for 127.0.0.1, server key), all PEM files in ``directory``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rocketflow cli test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(hours=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=2))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (_write_pem(directory / "ca.pem", ca.public_bytes(pem)),
            _write_pem(directory / "server.pem", server.public_bytes(pem)),
            _write_pem(directory / "server.key", key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                                   serialization.NoEncryption())))


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, Path]]:
    """A dev cluster with the plain ACL on the broker and TLS enforced on both servers; and the CA file."""
    directory = tmp_path_factory.mktemp("cli-secure")
    ca, cert, key = _throwaway_pki(directory)
    acl = directory / "plain_acl.yml"
    acl.write_text(f"""
accounts:
  - accessKey: {ADMIN_KEY}
    secretKey: {ADMIN_SECRET}
    admin: true
  - accessKey: {USER_KEY}
    secretKey: {USER_SECRET}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
""")
    cluster = DevCluster.start_in_thread(broker_settings={
        "acl_enable": True, "acl_file": acl, "tls_mode": TlsMode.ENFORCING, "tls_server_cert_path": cert,
        "tls_server_key_path": key, "tls_client_trust_cert_path": ca})
    try:
        yield cluster, ca
    finally:
        cluster.close()


def test_acl_keys_and_tls_options(secure_cluster: tuple[DevCluster, Path]) -> None:
    cluster, ca = secure_cluster

    def secure(*args: str, env: dict[str, str] | None = None, keys: tuple[str, str] | None = None) -> Result:
        key_args = ["--access-key", keys[0], "--secret-key", keys[1]] if keys is not None else []
        return CliRunner(env=env).invoke(cli, ["admin", *args, "-n", cluster.namesrv_addr, "--timeout", "5",
                                               *key_args])

    tls = ["--tls-ca", str(ca)]
    created = secure("topic", "create", "CliAclT", "--json", *tls, keys=(ADMIN_KEY, ADMIN_SECRET))
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["brokers"] == [cluster.broker_addr]
    # the same through the environment variables
    env = {"ROCKETFLOW_ACCESS_KEY": ADMIN_KEY, "ROCKETFLOW_SECRET_KEY": ADMIN_SECRET, "ROCKETFLOW_TLS": "1",
           "ROCKETFLOW_TLS_CA": str(ca)}
    stats = secure("topic", "stats", "CliAclT", "--json", env=env)
    assert stats.exit_code == 0, stats.output
    assert sorted(row["queueId"] for row in json.loads(stats.stdout)) == list(range(8))
    # the broker's refusals: NO_PERMISSION with its remark, exit 1
    for keys, remark in ((None, "has no AccessKey"),
                         ((ADMIN_KEY, "not-the-secret"), f"signature check failed for accessKey {ADMIN_KEY}"),
                         (("nobody0001", "whatever01"), "accessKey nobody0001 is not configured")):
        refused = secure("topic", "stats", "CliAclT", *tls, keys=keys)
        assert refused.exit_code == 1, (keys, refused.output)
        assert "NO_PERMISSION" in refused.output and remark in refused.output, refused.output
    not_admin = secure("topic", "create", "CliAclT2", *tls, keys=(USER_KEY, USER_SECRET))
    assert not_admin.exit_code == 1
    assert "NO_PERMISSION" in not_admin.output and f"but accessKey {USER_KEY} is not admin" in not_admin.output
    assert secure("topic", "stats", "CliAclT", *tls, keys=(USER_KEY, USER_SECRET)).exit_code == 0
    # no TLS against servers that enforce it: a clean exit 1
    plain = secure("topic", "stats", "CliAclT", "--timeout", "2", keys=(ADMIN_KEY, ADMIN_SECRET))
    assert plain.exit_code == 1 and "Traceback" not in plain.output, plain.output
    half = secure("topic", "stats", "CliAclT", *tls, "--access-key", ADMIN_KEY)
    assert half.exit_code == 2 and "--access-key and --secret-key" in half.output


def test_broker_config_and_set_show_no_secret() -> None:
    secret = "cliBrokerSecret-77e1"
    cluster = DevCluster.start_in_thread(broker_settings={"access_key": "cliBroker01", "secret_key": secret})
    try:
        def admin(*args: str) -> Result:
            return CliRunner().invoke(cli, ["admin", *args, "-n", cluster.namesrv_addr])

        table = admin("broker", "config", cluster.broker_addr)
        as_json = admin("broker", "config", cluster.broker_addr, "--json")
        assert table.exit_code == 0 and as_json.exit_code == 0, (table.output, as_json.output)
        settings = json.loads(as_json.stdout)
        assert settings["secretKey"] == "******" and settings["accessKey"] == "cliBroker01"
        assert secret not in table.output and secret not in as_json.output
        refused = admin("broker", "set", cluster.broker_addr, "secretKey=cliNewSecret-0001")
        assert refused.exit_code == 1 and "cliNewSecret-0001" not in refused.output, refused.output
    finally:
        cluster.close()
