"""A name server without ACL keeps a live broker's address: raw REGISTER_BROKER / UNREGISTER_BROKER frames
from other connections (each `RemotingClient` here is one connection: one actor) cannot move or remove it,
while restarts, moves after the old broker is gone, and admins (ACL on) still can."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from rocketflow.acl import AclClientHook, SessionCredentials
from rocketflow.namesrv import NameServer, NamesrvConfig
from rocketflow.net import RemotingClient
from rocketflow.protocol.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import RegisterBrokerRequestHeader

REAL = "10.0.0.1:10911"
ROGUE = "10.6.6.6:10911"
TOPIC = "Orders"
Scenario = Callable[[NameServer, Callable[..., RemotingClient]], Awaitable[None]]
ADMIN = SessionCredentials("guardAdmin1", "guardAdminSecret")
USER = SessionCredentials("guardUser01", "guardUserSecret1")


def run(scenario: Scenario, **config: object) -> None:
    """``scenario(namesrv, connect)``: ``connect()`` opens a new client connection (closed at the end)."""

    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(port=0, **config))  # type: ignore[arg-type]
        await namesrv.start()
        clients: list[RemotingClient] = []

        def connect(credentials: SessionCredentials | None = None) -> RemotingClient:
            client = RemotingClient(rpc_hook=AclClientHook(credentials) if credentials is not None else None)
            clients.append(client)
            return client

        try:
            await asyncio.wait_for(scenario(namesrv, connect), 30)
        finally:
            for client in clients:
                await client.close()
            await namesrv.stop()

    asyncio.run(main())


def register(addr: str, *, name: str = "broker-a", broker_id: int = 0, counter: int = 1,
             queues: int = 4) -> RemotingCommand:
    wrapper = TopicConfigSerializeWrapper({TOPIC: TopicConfig(TOPIC, queues, queues)},
                                          DataVersion(1_700_000_000_000, counter))
    body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper).encode()
    header = RegisterBrokerRequestHeader(broker_name=name, broker_addr=addr, cluster_name="DefaultCluster",
                                         ha_server_addr=addr.replace("10911", "10912"), broker_id=broker_id,
                                         body_crc32=zlib.crc32(body) & 0x7FFFFFFF)
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)


def unregister(addr: str, *, name: str = "broker-a", broker_id: int = 0) -> RemotingCommand:
    fields = {"brokerName": name, "brokerAddr": addr, "clusterName": "DefaultCluster", "brokerId": str(broker_id)}
    return RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields)


async def routed_addrs(namesrv: NameServer, client: RemotingClient) -> dict[int, str] | None:
    """broker-a's addresses in TOPIC's route (None: no route)."""
    reply = await client.invoke(namesrv.address,
                                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 3)
    if reply.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    data = TopicRouteData.decode(reply.body)
    return {broker_id: addr for broker in data.broker_datas if broker.broker_name == "broker-a"
            for broker_id, addr in broker.broker_addrs.items()}


async def queue_nums(namesrv: NameServer, client: RemotingClient) -> list[int]:
    reply = await client.invoke(namesrv.address,
                                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 3)
    return [queue.write_queue_nums for queue in TopicRouteData.decode(reply.body).queue_datas]


async def settle() -> None:
    """Time for the name server to see a closed connection."""
    await asyncio.sleep(0.2)


def test_rogue_registration_cannot_move_a_live_broker() -> None:
    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        broker, rogue, reader = connect(), connect(), connect()
        assert (await broker.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        refused = await rogue.invoke(namesrv.address, register(ROGUE), 3)
        assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
        assert f"registered at {REAL}" in (refused.remark or "") and ROGUE in (refused.remark or "")
        assert await routed_addrs(namesrv, reader) == {0: REAL}
        # the rogue disconnecting changes nothing either
        await rogue.close()
        await settle()
        assert await routed_addrs(namesrv, reader) == {0: REAL}
        # the broker's own connection may move it (its address changed)
        assert (await broker.invoke(namesrv.address, register("10.0.0.2:10911"), 3)).code == ResponseCode.SUCCESS
        assert await routed_addrs(namesrv, reader) == {0: "10.0.0.2:10911"}

    run(scenario)


def test_rogue_registering_the_same_address_and_leaving_does_not_remove_the_route() -> None:
    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        broker, rogue, reader = connect(), connect(), connect()
        assert (await broker.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        # the same address is no move: answered, but its topics stay the broker's
        assert (await rogue.invoke(namesrv.address, register(REAL, counter=9, queues=1), 3)).code \
            == ResponseCode.SUCCESS
        assert await queue_nums(namesrv, reader) == [4]
        await rogue.close()
        await settle()
        assert await routed_addrs(namesrv, reader) == {0: REAL}
        # and a stand-by registrant cannot unregister it or move it
        other = connect()
        assert (await other.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        assert (await other.invoke(namesrv.address, unregister(REAL), 3)).code == ResponseCode.NO_PERMISSION
        assert (await other.invoke(namesrv.address, register(ROGUE), 3)).code == ResponseCode.NO_PERMISSION
        assert await routed_addrs(namesrv, reader) == {0: REAL}

    run(scenario)


def test_rogue_unregister_is_refused_and_the_broker_own_unregister_works() -> None:
    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        broker, rogue, reader = connect(), connect(), connect()
        assert (await broker.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        refused = await rogue.invoke(namesrv.address, unregister(REAL), 3)
        assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
        assert await routed_addrs(namesrv, reader) == {0: REAL}
        assert (await broker.invoke(namesrv.address, unregister(REAL), 3)).code == ResponseCode.SUCCESS
        assert await routed_addrs(namesrv, reader) is None

    run(scenario)


def test_restarted_broker_registers_again_while_its_old_connection_lingers() -> None:
    """A restart opens a new connection before the name server sees the old one close: the same address
    registers fine, and the route stays when the old connection closes at last."""

    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        old, new, reader = connect(), connect(), connect()
        assert (await old.invoke(namesrv.address, register(REAL, counter=1), 3)).code == ResponseCode.SUCCESS
        assert (await new.invoke(namesrv.address, register(REAL, counter=2, queues=8), 3)).code \
            == ResponseCode.SUCCESS
        await old.close()
        await settle()
        assert await routed_addrs(namesrv, reader) == {0: REAL}
        # its next periodic registration (same data version) is taken: it owns the address now
        assert await queue_nums(namesrv, reader) == [4]
        assert (await new.invoke(namesrv.address, register(REAL, counter=2, queues=8), 3)).code \
            == ResponseCode.SUCCESS
        assert await queue_nums(namesrv, reader) == [8]
        # the new connection now owns the address: its unregister (a clean stop) removes it
        assert (await new.invoke(namesrv.address, unregister(REAL), 3)).code == ResponseCode.SUCCESS
        assert await routed_addrs(namesrv, reader) is None

    run(scenario)


def test_broker_moves_address_once_its_old_connection_closed() -> None:
    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        old, moved, reader = connect(), connect(), connect()
        assert (await old.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        await old.close()
        await settle()
        assert (await moved.invoke(namesrv.address, register(ROGUE), 3)).code == ResponseCode.SUCCESS
        assert await routed_addrs(namesrv, reader) == {0: ROGUE}

    run(scenario)


def test_broker_moves_address_once_its_old_entry_expired() -> None:
    """Silent past the expiry window (before the scan removes it): no longer live, so another address may
    take its place even though its connection is still open."""

    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        old, moved, reader = connect(), connect(), connect()
        assert (await old.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        assert (await moved.invoke(namesrv.address, register(ROGUE), 3)).code == ResponseCode.NO_PERMISSION
        await asyncio.sleep(0.5)
        assert (await moved.invoke(namesrv.address, register(ROGUE), 3)).code == ResponseCode.SUCCESS
        assert await routed_addrs(namesrv, reader) == {0: ROGUE}

    run(scenario, broker_channel_expired_seconds=0.3, scan_initial_delay_seconds=60.0)


def test_query_data_version_from_another_connection_does_not_keep_a_broker_alive() -> None:
    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        broker, rogue = connect(), connect()
        assert (await broker.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        fields = {"brokerName": "broker-a", "brokerAddr": REAL, "clusterName": "DefaultCluster", "brokerId": "0"}
        body = DataVersion(1_700_000_000_000, 1).encode()
        own = await broker.invoke(namesrv.address, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, fields,
                                                                           body), 3)
        assert own.ext_fields["changed"] == "false"
        other = await rogue.invoke(namesrv.address, RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, fields,
                                                                            body), 3)
        assert other.ext_fields["changed"] == "true"  # "register again": only a registration binds a connection

    run(scenario)


def test_protection_can_be_turned_off() -> None:
    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        broker, rogue, reader = connect(), connect(), connect()
        assert (await broker.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        assert (await rogue.invoke(namesrv.address, register(ROGUE), 3)).code == ResponseCode.SUCCESS
        assert await routed_addrs(namesrv, reader) == {0: ROGUE}

    run(scenario, protect_live_brokers=False)


def test_admin_may_move_a_live_broker_on_a_name_server_with_acl(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(f"""
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    defaultTopicPerm: SUB
""")

    async def scenario(namesrv: NameServer, connect: Callable[..., RemotingClient]) -> None:
        broker, user, admin, reader = connect(ADMIN), connect(USER), connect(ADMIN), connect(USER)
        assert (await broker.invoke(namesrv.address, register(REAL), 3)).code == ResponseCode.SUCCESS
        assert (await user.invoke(namesrv.address, register(ROGUE), 3)).code == ResponseCode.NO_PERMISSION
        assert (await admin.invoke(namesrv.address, register(ROGUE), 3)).code == ResponseCode.SUCCESS
        assert await routed_addrs(namesrv, reader) == {0: ROGUE}

    run(scenario, acl_enable=True, acl_file=acl)
