"""Request handlers of the name server (RocketMQ's DefaultRequestProcessor).

A registration may not move a live broker's address, nor an unregistration remove it, from another
connection than its own unless an admin asks (see `RouteInfoManager.address_conflict`); KV entries
whose key names a secret are read back redacted (`rocketflow.acl.redact`).
"""

from __future__ import annotations

import logging
import zlib

from rocketflow.acl import AclRequestHook, redact_settings, redact_value, request_grant
from rocketflow.namesrv.config import NamesrvConfig
from rocketflow.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from rocketflow.namesrv.route_info_manager import RouteInfoManager
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.bodies import DataVersion, KVTable, RegisterBrokerBody, TopicConfigSerializeWrapper
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)

logger = logging.getLogger(__name__)

#: RequestCode >= V3_0_11 brokers send a RegisterBrokerBody; older ones the bare topic wrapper.
_REGISTER_BODY_MIN_VERSION = 37
_UNIT_FLAG = 1
_UNIT_SUB_FLAG = 2
APPLY_TOPIC_URL = "http://rocketmq.apache.org/docs/faq/"


def _topic_not_exist_remark(topic: str) -> str:
    return f"No topic route info in name server for the topic: {topic}\nSee {APPLY_TOPIC_URL} for further details."


class NamesrvProcessor:
    """Answers the name server's request codes from the route tables and the KV config."""

    def __init__(self, config: NamesrvConfig, routes: RouteInfoManager, kv_config: KVConfigManager, *,
                 acl_hook: AclRequestHook | None = None) -> None:
        self.config = config
        self.routes = routes
        self.kv_config = kv_config
        #: the server's ACL hook (None: ACL off), to tell an admin's requests apart
        self.acl_hook = acl_hook

    @property
    def _expired_ms(self) -> int:
        return int(self.config.broker_channel_expired_seconds * 1000)

    def _refused(self, ctx: RequestContext, request: RemotingCommand, conflict: str | None) -> RemotingCommand | None:
        """NO_PERMISSION for a request that would take over or remove a live broker, unless an admin sends it."""
        if conflict is None or not self.config.protect_live_brokers:
            return None
        if request_grant(self.acl_hook, request, ctx.remote_address).is_admin:
            logger.info("%s from admin at %s overrides: %s", request.describe(), ctx.remote_address, conflict)
            return None
        logger.warning("refused %s from %s: %s", request.describe(), ctx.remote_address, conflict)
        return request.make_response(ResponseCode.NO_PERMISSION, remark=conflict)

    def register_to(self, server: RemotingServer) -> None:
        handlers = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topics,
            RequestCode.GET_UNIT_TOPIC_LIST: self.get_unit_topics,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_has_unit_sub_topics,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_has_unit_sub_ununit_topics,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
        }
        for code, handler in handlers.items():
            server.register(code, handler)

    # ------------------------------------------------------------------ brokers

    def register_broker(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_command(request)
        refusal = self._refused(ctx, request, self.routes.address_conflict(
            broker_name=header.broker_name, broker_id=header.broker_id, broker_addr=header.broker_addr,
            channel_id=ctx.channel.id, expired_ms=self._expired_ms))
        if refusal is not None:
            return refusal
        body = request.body
        if header.body_crc32 and body and (zlib.crc32(body) & 0x7FFFFFFF) != header.body_crc32:
            logger.warning("register from %s: body CRC mismatch", ctx.remote_address)
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark="crc32 not match")
        wrapper: TopicConfigSerializeWrapper
        filter_servers: list[str] = []
        if not body:
            wrapper = TopicConfigSerializeWrapper(data_version=DataVersion(timestamp=0, counter=0))
        elif request.version >= _REGISTER_BODY_MIN_VERSION:
            register_body = (
                RegisterBrokerBody.decode_compressed(body) if header.compressed else RegisterBrokerBody.decode(body)
            )
            wrapper = register_body.topic_config_serialize_wrapper
            filter_servers = register_body.filter_server_list
        else:
            wrapper = TopicConfigSerializeWrapper.decode(body)
        result = self.routes.register_broker(
            cluster_name=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            ha_server_addr=header.ha_server_addr,
            topic_config_wrapper=wrapper,
            filter_server_list=filter_servers,
            channel_id=ctx.channel.id,
            expired_ms=self._expired_ms if self.config.protect_live_brokers else None,
        )
        response_header = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )
        order_conf = self.kv_config.namespace_table(NAMESPACE_ORDER_TOPIC_CONFIG)
        return request.make_response(
            ext_fields=response_header.to_ext_fields(), body=order_conf.encode() if order_conf else b""
        )

    def unregister_broker(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = UnRegisterBrokerRequestHeader.from_command(request)
        refusal = self._refused(ctx, request, self.routes.unregister_conflict(
            broker_addr=header.broker_addr, channel_id=ctx.channel.id, expired_ms=self._expired_ms))
        if refusal is not None:
            return refusal
        self.routes.unregister_broker(
            cluster_name=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
        )
        return request.make_response()

    def query_data_version(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = QueryDataVersionRequestHeader.from_command(request)
        data_version = DataVersion.decode(request.body)
        # only the broker's own connections keep it alive; another is told to register (which binds it)
        changed = self.routes.is_broker_topic_config_changed(header.broker_addr, data_version) or (
            self.config.protect_live_brokers and not self.routes.registered_over(header.broker_addr, ctx.channel.id))
        if not changed:
            self.routes.update_broker_info_update_timestamp(header.broker_addr)
        stored = self.routes.query_broker_topic_config(header.broker_addr)
        return request.make_response(
            ext_fields=QueryDataVersionResponseHeader(changed=changed).to_ext_fields(),
            body=stored.encode() if stored else b"",
        )

    def wipe_write_perm(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = WipeWritePermOfBrokerRequestHeader.from_command(request)
        count = self.routes.change_write_perm_of_broker(header.broker_name, writable=False)
        logger.info("wiped write perm of broker %s on %d topics", header.broker_name, count)
        return request.make_response(
            ext_fields=WipeWritePermOfBrokerResponseHeader(wipe_topic_count=count).to_ext_fields()
        )

    def add_write_perm(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = AddWritePermOfBrokerRequestHeader.from_command(request)
        count = self.routes.change_write_perm_of_broker(header.broker_name, writable=True)
        return request.make_response(
            ext_fields=AddWritePermOfBrokerResponseHeader(add_topic_count=count).to_ext_fields()
        )

    # ------------------------------------------------------------------ routes and topics

    def get_route_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_command(request)
        route = self.routes.pickup_topic_route_data(header.topic)
        if route is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, remark=_topic_not_exist_remark(header.topic))
        if self.config.order_message_enable:
            route.order_topic_conf = self.kv_config.get(NAMESPACE_ORDER_TOPIC_CONFIG, header.topic)
        return request.make_response(body=route.encode())

    def get_cluster_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(body=self.routes.cluster_info().encode())

    def get_all_topics(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(body=self.routes.all_topics().encode())

    def delete_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_command(request)
        self.routes.delete_topic(header.topic, header.cluster_name)
        return request.make_response()

    def get_topics_by_cluster(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.from_command(request)
        return request.make_response(body=self.routes.topics_by_cluster(header.cluster).encode())

    def get_system_topics(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(body=self.routes.system_topics().encode())

    def get_unit_topics(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        topics = self.routes.topics_with_sys_flag(lambda flag: bool(flag & _UNIT_FLAG))
        return request.make_response(body=topics.encode())

    def get_has_unit_sub_topics(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        topics = self.routes.topics_with_sys_flag(lambda flag: bool(flag & _UNIT_SUB_FLAG))
        return request.make_response(body=topics.encode())

    def get_has_unit_sub_ununit_topics(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        topics = self.routes.topics_with_sys_flag(
            lambda flag: not flag & _UNIT_FLAG and bool(flag & _UNIT_SUB_FLAG)
        )
        return request.make_response(body=topics.encode())

    # ------------------------------------------------------------------ KV config

    def put_kv_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = PutKVConfigRequestHeader.from_command(request)
        refusal = self.kv_config.check(header.namespace, header.key, header.value)
        if refusal is not None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=refusal)
        self.kv_config.put(header.namespace, header.key, header.value)
        return request.make_response()

    def get_kv_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetKVConfigRequestHeader.from_command(request)
        value = self.kv_config.get(header.namespace, header.key)
        if value is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {header.namespace} Key: {header.key}"
            )
        if header.namespace != NAMESPACE_ORDER_TOPIC_CONFIG:
            value = redact_value(header.key, value)
        return request.make_response(ext_fields=GetKVConfigResponseHeader(value=value).to_ext_fields())

    def delete_kv_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = DeleteKVConfigRequestHeader.from_command(request)
        self.kv_config.delete(header.namespace, header.key)
        return request.make_response()

    def get_kv_list_by_namespace(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetKVListByNamespaceRequestHeader.from_command(request)
        table = self.kv_config.namespace_table(header.namespace)
        if table is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {header.namespace}"
            )
        if header.namespace != NAMESPACE_ORDER_TOPIC_CONFIG:  # its keys are topic names, its values no secrets
            table = KVTable(table=redact_settings(table.table))
        return request.make_response(body=table.encode())


__all__ = ["NamesrvProcessor"]
