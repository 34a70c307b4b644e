"""`ClientManager`: the broker's view of connected producers and consumers (by group and channel).

Consumers announce themselves with HEART_BEAT; when a group's members come or go, or its
subscribed topic set changes, every member gets NOTIFY_CONSUMER_IDS_CHANGED (oneway) so it
rebalances at once. Channels silent for longer than the expiry are closed; a closed channel is
removed from every group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketflow.net import Channel
from rocketflow.protocol.bodies import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from rocketflow.remoting.codes import LanguageCode, RequestCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import NotifyConsumerIdsChangedRequestHeader

logger = logging.getLogger(__name__)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class ClientChannelInfo:
    """One client connection as a group member."""

    channel: Channel
    client_id: str
    language: LanguageCode
    version: int
    last_update_timestamp: int = field(default_factory=_now_ms)

    @property
    def client_addr(self) -> str:
        return self.channel.remote_address


@dataclass(slots=True)
class ConsumerGroupInfo:
    """A consumer group's live members and what they subscribe to."""

    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    channels: dict[int, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_timestamp: int = field(default_factory=_now_ms)
    #: the group config's ``notifyConsumerIdsChangedEnable`` as of the latest heartbeat
    notify_ids_changed: bool = True

    def all_client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        for info in self.channels.values():
            if info.client_id == client_id:
                return info
        return None

    def update_channel(self, info: ClientChannelInfo, consume_type: ConsumeType, message_model: MessageModel,
                       consume_from_where: ConsumeFromWhere) -> bool:
        """Add or refresh a member; True if it is new on this group."""
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        existing = self.channels.get(info.channel.id)
        updated = False
        if existing is None:
            self.channels[info.channel.id] = info
            updated = True
            logger.info("new consumer connected, group %s %s from %s", self.group_name, info.client_id,
                        info.client_addr)
        else:
            if existing.client_id != info.client_id:
                logger.warning("consumer channel of group %s changed client id %s -> %s", self.group_name,
                               existing.client_id, info.client_id)
                self.channels[info.channel.id] = info
            else:
                existing.last_update_timestamp = info.last_update_timestamp
        self.last_update_timestamp = _now_ms()
        return updated

    def update_subscriptions(self, subscriptions: list[SubscriptionData]) -> bool:
        """Merge a heartbeat's subscriptions; True if the topic set changed."""
        updated = False
        seen: set[str] = set()
        for sub in subscriptions:
            seen.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                updated = True
            elif sub.sub_version > old.sub_version:
                self.subscriptions[sub.topic] = sub
        for topic in [topic for topic in self.subscriptions if topic not in seen]:
            del self.subscriptions[topic]
            updated = True
        self.last_update_timestamp = _now_ms()
        return updated


class ClientManager:
    """Consumer groups and producer groups of this broker, keyed by group then channel id."""

    def __init__(self, *, notify_enabled: Callable[[], bool], channel_expired_ms: int) -> None:
        self.consumer_groups: dict[str, ConsumerGroupInfo] = {}
        self.producer_groups: dict[str, dict[int, ClientChannelInfo]] = {}
        self._notify_enabled = notify_enabled
        self.channel_expired_ms = channel_expired_ms

    # ------------------------------------------------------------------ consumers

    def register_consumer(self, group: str, info: ClientChannelInfo, consume_type: ConsumeType,
                          message_model: MessageModel, consume_from_where: ConsumeFromWhere,
                          subscriptions: list[SubscriptionData], notify: bool) -> bool:
        """Record a member's heartbeat; notifies the group when members or topics changed."""
        group_info = self.consumer_groups.get(group)
        if group_info is None:
            group_info = ConsumerGroupInfo(group, consume_type, message_model, consume_from_where)
            self.consumer_groups[group] = group_info
        group_info.notify_ids_changed = notify
        channel_changed = group_info.update_channel(info, consume_type, message_model, consume_from_where)
        topics_changed = group_info.update_subscriptions(subscriptions)
        changed = channel_changed or topics_changed
        if changed and notify:
            self.notify_consumer_ids_changed(group)
        return changed

    def unregister_consumer(self, group: str, channel: Channel, notify: bool) -> None:
        group_info = self.consumer_groups.get(group)
        if group_info is None:
            return
        removed = group_info.channels.pop(channel.id, None)
        if removed is None:
            return
        logger.info("consumer %s of group %s unregistered", removed.client_id, group)
        if not group_info.channels:
            del self.consumer_groups[group]
        elif notify:
            self.notify_consumer_ids_changed(group)

    def get_consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumer_groups.get(group)

    def groups_subscribing(self, topic: str) -> set[str]:
        return {name for name, info in self.consumer_groups.items() if topic in info.subscriptions}

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Send NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every member of ``group``."""
        if not self._notify_enabled():
            return
        group_info = self.consumer_groups.get(group)
        if group_info is None:
            return
        header = NotifyConsumerIdsChangedRequestHeader(consumer_group=group).to_ext_fields()
        for info in list(group_info.channels.values()):
            channel = info.channel
            if channel.closed:
                continue
            request = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header, oneway=True,
                                              language=LanguageCode.JAVA)
            try:
                channel.send(request)
            except Exception:
                logger.exception("cannot notify %s of group %s", info.client_id, group)

    # ------------------------------------------------------------------ producers

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        members = self.producer_groups.setdefault(group, {})
        existing = members.get(info.channel.id)
        if existing is None:
            members[info.channel.id] = info
            logger.info("new producer connected, group %s %s from %s", group, info.client_id, info.client_addr)
        else:
            existing.last_update_timestamp = info.last_update_timestamp

    def find_producer_channel(self, client_id: str) -> Channel | None:
        """An open channel of the producer client ``client_id`` (any group), e.g. to push it a reply."""
        for members in self.producer_groups.values():
            for info in members.values():
                if info.client_id == client_id and not info.channel.closed:
                    return info.channel
        return None

    def unregister_producer(self, group: str, channel: Channel) -> None:
        members = self.producer_groups.get(group)
        if members is not None and members.pop(channel.id, None) is not None and not members:
            del self.producer_groups[group]

    # ------------------------------------------------------------------ channels

    def channel_closed(self, channel: Channel) -> None:
        """Forget ``channel`` everywhere; remaining members of its consumer groups are notified (unless the
        group's ``notifyConsumerIdsChangedEnable`` is off)."""
        for group, group_info in list(self.consumer_groups.items()):
            removed = group_info.channels.pop(channel.id, None)
            if removed is None:
                continue
            logger.info("consumer %s of group %s went away (%s)", removed.client_id, group, channel.remote_address)
            if not group_info.channels:
                del self.consumer_groups[group]
            elif group_info.notify_ids_changed:
                self.notify_consumer_ids_changed(group)
        for group, members in list(self.producer_groups.items()):
            if members.pop(channel.id, None) is not None and not members:
                del self.producer_groups[group]

    def scan_not_active_channels(self, now_ms: int | None = None) -> list[Channel]:
        """Close and forget channels whose last heartbeat is older than the expiry; returns them."""
        now = _now_ms() if now_ms is None else now_ms
        expired: dict[int, Channel] = {}
        for group_info in self.consumer_groups.values():
            for info in group_info.channels.values():
                if now - info.last_update_timestamp > self.channel_expired_ms:
                    expired[info.channel.id] = info.channel
        for members in self.producer_groups.values():
            for info in members.values():
                if now - info.last_update_timestamp > self.channel_expired_ms:
                    expired[info.channel.id] = info.channel
        for channel in expired.values():
            logger.warning("closing client channel %s: no heartbeat for %d ms", channel.remote_address,
                           self.channel_expired_ms)
            self.channel_closed(channel)
            channel.close()
        return list(expired.values())


__all__ = ["ClientChannelInfo", "ClientManager", "ConsumerGroupInfo"]
