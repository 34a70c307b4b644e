"""`SlaveSynchronize`: a slave copies its master's topics, consumer offsets, delay offsets and
subscription groups (GET_ALL_* requests), so consumers switched to it carry on where they were."""

from __future__ import annotations

import logging
from typing import TypeVar

from rocketflow.broker.context import BrokerIdentity, ConfigTables
from rocketflow.net import RemotingClient, RemotingError
from rocketflow.protocol.bodies import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    WireBody,
)
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand

logger = logging.getLogger(__name__)

BodyT = TypeVar("BodyT", bound=WireBody)

_TIMEOUT_S = 3.0


class SlaveSynchronize:
    """Copies the master's tables into a slave broker's (call `sync_all` periodically)."""

    def __init__(self, tables: ConfigTables, identity: BrokerIdentity, client: RemotingClient) -> None:
        self.tables = tables
        self.identity = identity
        self.client = client
        #: the master's broker address (from the name server's answer to a registration)
        self.master_address: str | None = None

    async def sync_all(self) -> None:
        """One round; a failed step is logged and the others still run."""
        master = self.master_address
        if master is None or master == self.identity.address:
            return
        for what, step in (("topics", self._sync_topics), ("consumer offsets", self._sync_consumer_offsets),
                           ("delay offsets", self._sync_delay_offsets),
                           ("subscription groups", self._sync_subscription_groups)):
            try:
                await step(master)
            except (RemotingError, ValueError) as exc:
                logger.warning("slave: copying %s from master %s failed: %s", what, master, exc)

    async def _fetch(self, master: str, code: RequestCode, body_type: type[BodyT]) -> BodyT:
        request = RemotingCommand.request(code, language=LanguageCode.JAVA)
        response = await self.client.invoke(master, request, _TIMEOUT_S)
        if response.code != ResponseCode.SUCCESS:
            raise ValueError(f"{code.name} answered {response.code_name} {response.remark}")
        return body_type.decode(response.body or b"{}")

    async def _sync_topics(self, master: str) -> None:
        wrapper = await self._fetch(master, RequestCode.GET_ALL_TOPIC_CONFIG, TopicConfigSerializeWrapper)
        table = self.tables.topics.table
        if wrapper.data_version != table.data_version:
            table.replace(wrapper)
            logger.info("slave: topics copied from master %s (%d topics)", master, len(wrapper.topic_config_table))

    async def _sync_consumer_offsets(self, master: str) -> None:
        offsets = await self._fetch(master, RequestCode.GET_ALL_CONSUMER_OFFSET, ConsumerOffsetTable)
        self.tables.offsets.take_over(offsets.offset_table)
        self.tables.offsets.persist()

    async def _sync_delay_offsets(self, master: str) -> None:
        offsets = await self._fetch(master, RequestCode.GET_ALL_DELAY_OFFSET, DelayOffsetTable)
        self.tables.delay_offsets.take_over(offsets.offset_table)
        self.tables.delay_offsets.persist()

    async def _sync_subscription_groups(self, master: str) -> None:
        wrapper = await self._fetch(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, SubscriptionGroupWrapper)
        table = self.tables.groups.table
        if wrapper.data_version != table.wrapper.data_version:
            table.replace(wrapper)
            logger.info("slave: subscription groups copied from master %s", master)


__all__ = ["SlaveSynchronize"]
