"""Client channel expiry, and NOTIFY_CONSUMER_IDS_CHANGED when members leave (unregister, close, expiry)."""

from __future__ import annotations

import asyncio
import contextlib

from broker_helpers import heartbeat_request, run, wait_for

from rocketflow.dev import DevCluster
from rocketflow.net import RemotingClient, RequestContext
from rocketflow.protocol.bodies import (
    ConsumerListBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    SubscriptionGroupConfig,
)
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

TOPIC = "Expiring"


class Member:
    """A consumer connection of its own that records the NOTIFY_CONSUMER_IDS_CHANGED it receives."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.client = RemotingClient()
        self.notified: list[str] = []
        self.client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_notify)

    def _on_notify(self, ctx: RequestContext, request: RemotingCommand) -> None:
        self.notified.append(request.ext_fields["consumerGroup"])

    async def heartbeat(self, addr: str, group: str) -> None:
        response = await self.client.invoke(addr, heartbeat_request(self.client_id, group, {TOPIC: "*"}), 5)
        assert response.code == ResponseCode.SUCCESS

    async def lock(self, addr: str, group: str, queues: set[MessageQueue]) -> set[MessageQueue]:
        body = LockBatchRequestBody(group, self.client_id, queues).encode()
        response = await self.client.invoke(addr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body), 5)
        assert response.code == ResponseCode.SUCCESS
        return LockBatchResponseBody.decode(response.body).lock_ok_mq_set


async def members_of(client: RemotingClient, addr: str, group: str) -> list[str]:
    response = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                                 {"consumerGroup": group}), 5)
    return sorted(ConsumerListBody.decode(response.body).consumer_id_list) if response.body else []


async def create_group(client: RemotingClient, addr: str, config: SubscriptionGroupConfig) -> None:
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
    assert (await client.invoke(addr, request, 5)).code == ResponseCode.SUCCESS


def test_silent_client_expires_and_the_live_member_is_notified() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        assert cluster.broker is not None
        queues = [MessageQueue(TOPIC, "broker-a", queue_id) for queue_id in range(4)]
        silent, live = Member("10.0.0.1@silent"), Member("10.0.0.2@live")
        beating = None
        try:
            await silent.heartbeat(addr, "xg")
            await live.heartbeat(addr, "xg")
            assert await silent.lock(addr, "xg", set(queues[:2])) == set(queues[:2])
            assert await live.lock(addr, "xg", set(queues[2:])) == set(queues[2:])
            assert await members_of(client, addr, "xg") == ["10.0.0.1@silent", "10.0.0.2@live"]

            async def keep_beating() -> None:
                while True:
                    await asyncio.sleep(0.15)
                    await live.heartbeat(addr, "xg")

            beating = asyncio.ensure_future(keep_beating())
            await asyncio.sleep(0.1)
            live.notified.clear()

            async def silent_closed() -> bool:
                return not silent.client.connected_addresses()

            await wait_for(silent_closed, 5)
            assert await members_of(client, addr, "xg") == ["10.0.0.2@live"]

            async def live_notified() -> bool:
                return live.notified == ["xg"]

            await wait_for(live_notified, 3)
            assert live.client.connected_addresses() == [addr]
            # the live member's locks are untouched; the silent one's stay until they expire (60 s)
            owners = cluster.broker.locks.owners("xg")
            assert {mq: owners[mq] for mq in queues[2:]} == {mq: "10.0.0.2@live" for mq in queues[2:]}
            assert await live.lock(addr, "xg", set(queues)) == set(queues[2:])
        finally:
            if beating is not None:
                beating.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beating
            await silent.client.close()
            await live.client.close()

    run(scenario, channel_expired_timeout_ms=1500, client_scan_interval_ms=100)


def test_channel_close_respects_the_groups_notify_flag() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        await create_group(client, addr, SubscriptionGroupConfig("quiet_g", notify_consumer_ids_changed_enable=False))
        for group, expected in (("quiet_g", []), ("loud_g", ["loud_g"])):
            staying, leaving = Member(f"10.0.0.1@{group}"), Member(f"10.0.0.2@{group}")
            try:
                await staying.heartbeat(addr, group)
                await leaving.heartbeat(addr, group)
                await asyncio.sleep(0.1)
                staying.notified.clear()
                await leaving.client.close()

                async def left() -> bool:
                    return await members_of(client, addr, group) == [staying.client_id]  # noqa: B023

                await wait_for(left, 5)
                await asyncio.sleep(0.3)
                assert staying.notified == expected, group
            finally:
                await staying.client.close()
                await leaving.client.close()

    run(scenario)


def test_unregister_client_notifies_the_remaining_members() -> None:
    async def scenario(cluster: DevCluster, client: RemotingClient) -> None:
        addr = cluster.broker_addr
        staying, leaving = Member("10.0.0.1@stay"), Member("10.0.0.2@leave")
        try:
            await staying.heartbeat(addr, "ug")
            await leaving.heartbeat(addr, "ug")
            await asyncio.sleep(0.1)
            staying.notified.clear()
            leaving.notified.clear()
            unregister = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT,
                                                 {"clientID": leaving.client_id, "consumerGroup": "ug"})
            assert (await leaving.client.invoke(addr, unregister, 5)).code == ResponseCode.SUCCESS

            async def notified() -> bool:
                return staying.notified == ["ug"]

            await wait_for(notified, 3)
            assert await members_of(client, addr, "ug") == [staying.client_id]
            await asyncio.sleep(0.1)
            assert leaving.notified == []
        finally:
            await staying.client.close()
            await leaving.client.close()

    run(scenario)
