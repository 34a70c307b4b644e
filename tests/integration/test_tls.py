"""TLS between real servers and clients on 127.0.0.1, with a throw-away CA made in the test.

Covers the three server modes (permissive serves TLS and plain on one port, enforcing refuses plain,
disabled refuses TLS), certificate verification, mutual TLS, and produce + consume over TLS through a
name server and a broker.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rocketflow import Message, Producer, PushConsumer
from rocketflow.broker.config import BrokerConfigError, build_broker_config, config_overrides_from_properties
from rocketflow.cli.main import cli
from rocketflow.cli.servers import tls_overrides
from rocketflow.client import (
    ClientConfig,
    ClientInstance,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    MQClientError,
    MQConnectionClosedError,
)
from rocketflow.client.instance import shutdown_all
from rocketflow.dev import DevCluster
from rocketflow.namesrv import NamesrvConfig
from rocketflow.net import RemotingClient, RemotingConnectionClosedError, RemotingServer, RequestContext
from rocketflow.net.tls import (
    ClientAuth,
    TlsClientSettings,
    TlsConfigError,
    TlsHandshakeError,
    TlsMode,
    TlsServerSettings,
)
from rocketflow.protocol.message import MessageExt
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import RemotingCommand
from testkit import wait_until
from testpki import KEY_PASSWORD, Pki, make_pki

PING = 1001


# --------------------------------------------------------------------------- throw-away PKI


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# --------------------------------------------------------------------------- helpers


def run(scenario: Callable[[], Coroutine[Any, Any, None]], timeout: float = 20.0) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(scenario(), timeout)

    asyncio.run(bounded())


def ping_server(pki: Pki, mode: TlsMode, **settings: Any) -> RemotingServer:
    tls = TlsServerSettings(mode=mode, cert_path=pki.server_cert, key_path=pki.server_key, **settings)
    server = RemotingServer("127.0.0.1", 0, name=f"tls-{mode.value}", tls=tls)

    def ping(context: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, remark=f"pong from {context.local_address}")

    server.register(PING, ping)
    return server


async def ping(client: RemotingClient, server: RemotingServer) -> str:
    response = await client.invoke(server.address, RemotingCommand.request(PING), timeout=5.0)
    assert response.code == ResponseCode.SUCCESS
    return response.remark or ""


def tls_client(pki: Pki, **settings: Any) -> RemotingClient:
    return RemotingClient(name="tls-test-client", tls=TlsClientSettings(**{"trust_cert_path": pki.ca, **settings}))




# --------------------------------------------------------------------------- server modes


def test_permissive_server_serves_tls_and_plain_clients_on_one_port(pki: Pki) -> None:
    async def scenario() -> None:
        async with ping_server(pki, TlsMode.PERMISSIVE) as server, tls_client(pki) as secure, \
                RemotingClient(name="plain") as plain:
            results = await asyncio.gather(*(ping(client, server) for client in (secure, plain, secure, plain)))
            assert all(result.startswith("pong") for result in results)
            assert len(server.channels) == 2
        # the TLS client really speaks TLS: a plain-only server cannot serve it
        async with RemotingServer("127.0.0.1", 0) as plain_only, tls_client(pki) as secure:
            plain_only.register(PING, lambda context, request: request.make_response())
            with pytest.raises(TlsHandshakeError, match=r"TLS handshake with 127\.0\.0\.1:"):
                await ping(secure, plain_only)

    run(scenario)


def test_enforcing_server_refuses_plain_clients_and_keeps_serving(pki: Pki,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with ping_server(pki, TlsMode.ENFORCING) as server, tls_client(pki) as secure:
            assert (await ping(secure, server)).startswith("pong")
            for _ in range(2):
                async with RemotingClient(name="plain") as plain:
                    with pytest.raises(RemotingConnectionClosedError, match="only accepts TLS"):
                        await ping(plain, server)
            assert (await ping(secure, server)).startswith("pong")
            async with tls_client(pki) as another:
                assert (await ping(another, server)).startswith("pong")

    with caplog.at_level(logging.WARNING, logger="rocketflow.net"):
        run(scenario)
    assert any("TLS is enforced" in record.getMessage() for record in caplog.records)


def test_disabled_mode_and_no_certificate_mean_plain_only(pki: Pki) -> None:
    assert not TlsServerSettings(mode=TlsMode.DISABLED, cert_path=pki.server_cert, key_path=pki.server_key).enabled
    assert not TlsServerSettings().enabled  # RocketMQ's default mode (permissive) without a certificate

    async def scenario() -> None:
        async with ping_server(pki, TlsMode.DISABLED) as server, RemotingClient(name="plain") as plain, \
                tls_client(pki) as secure:
            assert (await ping(plain, server)).startswith("pong")
            with pytest.raises(TlsHandshakeError):
                await ping(secure, server)
            assert (await ping(plain, server)).startswith("pong")

    run(scenario)


def test_bad_handshakes_and_silent_clients_only_lose_their_own_connection(
        pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        server = ping_server(pki, TlsMode.PERMISSIVE)
        await server.start()
        silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            # looks like a TLS record, then garbage
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"\x16\x03\x01\x00\x05garbage-that-is-no-client-hello")
            await writer.drain()
            async with asyncio.timeout(5):
                assert await reader.read() == b""
            writer.close()
            # a client that connects and leaves without a byte
            _, quitter = await asyncio.open_connection("127.0.0.1", server.port)
            quitter.close()
            async with tls_client(pki) as secure, RemotingClient(name="plain") as plain:
                assert (await ping(secure, server)).startswith("pong")
                assert (await ping(plain, server)).startswith("pong")
        finally:
            async with asyncio.timeout(5):  # a connection still waiting for its first byte does not block stop
                await server.stop()
            async with asyncio.timeout(5):
                assert await silent_reader.read() == b""
            silent_writer.close()

    with caplog.at_level(logging.WARNING, logger="rocketflow.net"):
        run(scenario)
    assert any("TLS handshake with 127.0.0.1" in record.getMessage() for record in caplog.records)


# --------------------------------------------------------------------------- verification


def test_client_with_the_wrong_ca_gets_a_verification_error(pki: Pki) -> None:
    async def scenario() -> None:
        async with ping_server(pki, TlsMode.ENFORCING) as server:
            async with tls_client(pki, trust_cert_path=pki.other_ca) as wrong:
                with pytest.raises(TlsHandshakeError, match="certificate verification failed"):
                    await ping(wrong, server)
            # no verification at all (RocketMQ's test mode) connects
            async with RemotingClient(tls=TlsClientSettings(verify=False)) as unverified:
                assert (await ping(unverified, server)).startswith("pong")
            async with tls_client(pki) as right:
                assert (await ping(right, server)).startswith("pong")

    run(scenario)


def test_mutual_tls_required_refuses_clients_without_a_trusted_certificate(pki: Pki) -> None:
    async def scenario() -> None:
        async with ping_server(pki, TlsMode.ENFORCING, trust_cert_path=pki.ca,
                               need_client_auth=ClientAuth.REQUIRE) as server:
            async with tls_client(pki) as anonymous:
                with pytest.raises((TlsHandshakeError, RemotingConnectionClosedError),
                                   match="require a client certificate"):
                    await ping(anonymous, server)
            async with tls_client(pki, cert_path=pki.client_cert, key_path=pki.client_key) as authenticated:
                assert (await ping(authenticated, server)).startswith("pong")
            assert not any(channel.closed for channel in server.channels)

    run(scenario)


def test_encrypted_server_key_needs_its_password(pki: Pki) -> None:
    async def scenario() -> None:
        tls = TlsServerSettings(mode=TlsMode.ENFORCING, cert_path=pki.server_cert,
                                key_path=pki.server_key_encrypted, key_password=KEY_PASSWORD)
        async with RemotingServer("127.0.0.1", 0, tls=tls) as server, tls_client(pki) as secure:
            server.register(PING, lambda context, request: request.make_response(remark="pong"))
            assert await ping(secure, server) == "pong"

    run(scenario)
    with pytest.raises(TlsConfigError, match="cannot use server certificate"):
        TlsServerSettings(cert_path=pki.server_cert, key_path=pki.server_key_encrypted,
                          key_password="wrong").build_context()


# --------------------------------------------------------------------------- settings


def test_bad_tls_settings_are_clear_errors(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match="unknown TLS mode 'strict'"):
        TlsServerSettings(mode="strict")  # type: ignore[arg-type]
    with pytest.raises(TlsConfigError, match="enforcing needs a server certificate"):
        TlsServerSettings(mode=TlsMode.ENFORCING)
    with pytest.raises(TlsConfigError, match="not found"):
        RemotingServer(tls=TlsServerSettings(cert_path=tmp_path / "missing.pem"))
    with pytest.raises(TlsConfigError, match="trust certificate file not found"):
        RemotingClient(tls=TlsClientSettings(trust_cert_path=tmp_path / "missing-ca.pem"))
    with pytest.raises(TlsConfigError, match="cannot use server certificate"):
        TlsServerSettings(cert_path=pki.server_cert, key_path=pki.client_key).build_context()
    with pytest.raises(MQClientError, match="unusable TLS settings: client trust certificate file not found"):
        ClientConfig(namesrv_addr="127.0.0.1:9876", use_tls=True, tls_ca=str(tmp_path / "nope.pem"))
    with pytest.raises(MQClientError, match="use_tls must be True or False"):
        ClientConfig(namesrv_addr="127.0.0.1:9876", use_tls="yes")  # type: ignore[arg-type]
    assert ClientConfig(namesrv_addr="127.0.0.1:9876").tls_settings() is None
    with pytest.raises(BrokerConfigError, match="enforcing needs a server certificate"):
        build_broker_config({"tls_mode": "enforcing"})
    with pytest.raises(TlsConfigError, match="unknown client auth"):
        NamesrvConfig(tls_server_need_client_auth="maybe")  # type: ignore[arg-type]


def test_broker_conf_takes_rocketmq_tls_property_names(pki: Pki) -> None:
    text = "\n".join([
        "tls.server.mode=enforcing",
        f"tls.server.certPath={pki.server_cert}",
        f"tls.server.keyPath={pki.server_key}",
        f"tls.server.trustCertPath={pki.ca}",
        "tls.server.need.client.auth=optional",
        f"tls.client.trustCertPath={pki.ca}",
        "tls.test.mode.enable=false",
    ])
    config = build_broker_config(config_overrides_from_properties(text))
    server = config.tls_server_settings()
    assert (server.mode, server.need_client_auth, server.cert_path) == \
        (TlsMode.ENFORCING, ClientAuth.OPTIONAL, pki.server_cert)
    client = config.tls_client_settings()  # tls.enable unset: TLS to name servers because the broker enforces it
    assert client is not None and client.verify and client.trust_cert_path == pki.ca
    relaxed = build_broker_config(config_overrides_from_properties(text + "\ntls.enable=false"))
    assert relaxed.tls_client_settings() is None
    assert build_broker_config().tls_client_settings() is None
    assert tls_overrides({"tls_mode": "permissive", "tls_cert": str(pki.server_cert), "tls_ca": str(pki.ca),
                          "tls_key": None, "tls_client_auth": None}) == {
        "tls_mode": "permissive", "tls_server_cert_path": pki.server_cert,
        "tls_server_trust_cert_path": pki.ca, "tls_client_trust_cert_path": pki.ca}


# --------------------------------------------------------------------------- end to end


@pytest.fixture
def tls_cluster(pki: Pki) -> Iterator[DevCluster]:
    cluster = DevCluster.start_in_thread(broker_settings={
        "tls_mode": TlsMode.ENFORCING,
        "tls_server_cert_path": pki.server_cert,
        "tls_server_key_path": pki.server_key,
        "tls_client_trust_cert_path": pki.ca,
    })
    try:
        yield cluster
    finally:
        leftovers = ClientInstance.live_instances()
        shutdown_all()
        cluster.close()
        assert not leftovers, f"client instances left running: {leftovers}"


def test_produce_and_consume_over_tls_through_name_server_and_broker(tls_cluster: DevCluster, pki: Pki) -> None:
    broker = tls_cluster.broker
    assert broker is not None and broker.registrar is not None
    assert sum(broker.registrar.registrations.values()) >= 1, "the broker did not register over TLS"
    topic, total = "tls_topic", 20
    tls = {"use_tls": True, "tls_ca": str(pki.ca)}

    producer = Producer("tls_producer", namesrv=tls_cluster.namesrv_addr, **tls)
    producer.start()
    try:
        for index in range(total):
            producer.send(Message(topic, f"secret-{index}".encode()))
    finally:
        producer.shutdown()

    received: set[bytes] = set()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            received.update(msg.body for msg in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("tls_consumer", namesrv=tls_cluster.namesrv_addr, instance_name="tls-consumer",
                            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **tls)
    consumer.subscribe(topic, "*")
    consumer.register_concurrent_listener(listener)
    consumer.start()
    try:
        wait_until(lambda: len(received) >= total, what="consumption of every message over TLS")
    finally:
        consumer.shutdown()
    assert received == {f"secret-{index}".encode() for index in range(total)}

    # a plain client cannot even get a route from the enforcing name server, and is told why (not to
    # create the topic)
    plain = Producer("tls_plain_producer", namesrv=tls_cluster.namesrv_addr, mq_client_api_timeout=1.0)
    plain.start()
    try:
        with pytest.raises(MQConnectionClosedError, match=r"only accepts TLS.*enable TLS on this client") as caught:
            plain.send(Message(topic, b"in the clear"), timeout=2.0)
        assert "no route info" not in str(caught.value)
    finally:
        plain.shutdown()


def test_dev_command_serves_both_servers_over_tls_only(pki: Pki) -> None:
    argv = [sys.executable, "-c", "from rocketflow.cli.main import cli; cli(prog_name='rocketflow')", "dev",
            "--namesrv-port", "0", "--broker-port", "0", "--tls-mode", "enforcing", "--tls-cert",
            str(pki.server_cert), "--tls-key", str(pki.server_key), "--tls-ca", str(pki.ca)]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        assert process.stdout is not None
        addresses: dict[str, str] = {}
        output: list[str] = []
        deadline = time.monotonic() + 60
        while len(addresses) < 2 and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output.append(line)
            match = re.match(r"(namesrv|broker) .*listening on (\S+)", line)
            if match:
                addresses[match.group(1)] = match.group(2)
        assert len(addresses) == 2, f"rocketflow dev did not start; output:\n{''.join(output)[-3000:]}"

        async def scenario() -> None:
            unknown_code = 65000
            async with tls_client(pki) as secure, RemotingClient(name="plain") as plain:
                for address in addresses.values():
                    response = await secure.invoke(address, RemotingCommand.request(unknown_code), timeout=5.0)
                    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                    with pytest.raises(RemotingConnectionClosedError, match="only accepts TLS"):
                        await plain.invoke(address, RemotingCommand.request(unknown_code), timeout=5.0)

        run(scenario)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_server_commands_reject_enforcing_without_a_certificate() -> None:
    result = CliRunner().invoke(cli, ["namesrv", "--port", "0", "--tls-mode", "enforcing"])
    assert result.exit_code != 0
    assert "enforcing needs a server certificate" in result.output
