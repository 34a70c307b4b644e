"""`GrpcServer`: the broker's gRPC endpoint for RocketMQ 5.x clients (``grpc.aio`` on the broker's loop).

TLS: with the broker's TLS certificate set (``tls_server_cert_path``) and its mode not ``disabled`` the
endpoint speaks TLS only (gRPC cannot offer both on one port, as the remoting port's permissive mode
does); client certificates as ``tls_server_need_client_auth`` says. ACL: when the broker's ACL is on,
each call is checked through its ``authorization`` header (see `rocketflow.proxy.rpc_base`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Final

import grpc

from rocketflow.broker.context import BrokerContext
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.net.tls import ClientAuth, TlsMode
from rocketflow.proxy.access import BrokerAccess
from rocketflow.proxy.local import ProcessorLookup
from rocketflow.proxy.pop_service import PopService
from rocketflow.proxy.service import RAW_RESPONSES, MessagingService
from rocketflow.proxy.timer import TimerService

logger = logging.getLogger(__name__)

#: RocketMQ 5's proxy port (``grpcServerPort``)
DEFAULT_GRPC_PORT: Final = 8081
#: seconds a stopping server lets calls finish
STOP_GRACE_SECONDS: Final = 1.0
SERVICE_NAME: Final = "apache.rocketmq.v2.MessagingService"
_HANDLER_KINDS: Final[dict[tuple[bool, bool], Any]] = {
    (False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler, (True, True): grpc.stream_stream_rpc_method_handler}


def _serialized(response: bytes) -> bytes:
    return response


def method_handlers(service: MessagingService) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """A handler for every RPC of the service's descriptor, bound to ``service``'s method of that name;
    the `RAW_RESPONSES` methods return serialized responses, which go out as they are."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in spb.DESCRIPTOR.services_by_name["MessagingService"].methods:
        make = _HANDLER_KINDS[(method.client_streaming, method.server_streaming)]
        request_type, response_type = getattr(spb, method.input_type.name), getattr(spb, method.output_type.name)
        handlers[method.name] = make(
            getattr(service, method.name), request_deserializer=request_type.FromString,
            response_serializer=_serialized if method.name in RAW_RESPONSES else response_type.SerializeToString)
    return handlers


def _decrypted_key(pem: bytes, password: str) -> bytes:
    """A password-protected PEM key as an unencrypted one, in memory only: grpcio takes no key password."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(pem, password.encode())
    except (ValueError, TypeError) as exc:
        raise ValueError(f"cannot decrypt the broker's TLS key for the gRPC endpoint: {exc}") from None
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class GrpcServer:
    """Serves ``apache.rocketmq.v2.MessagingService`` for one broker."""

    def __init__(self, access: BrokerAccess, host: str, port: int) -> None:
        self.access = access
        self.host = host
        self.requested_port = port
        config = access.config
        self.pop = PopService(access, config.store.store_root / "pop",
                              flush_interval_ms=config.pop_flush_interval_ms)
        self.timer = TimerService(access)
        self.service = MessagingService(access, self.pop, self.timer, endpoint=self.endpoint)
        self._server: grpc.aio.Server | None = None
        self._port: int | None = None
        self.tls = False

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the gRPC server is not started")
        return self._port

    def endpoint(self) -> tuple[str, int]:
        """The address clients reach the endpoint at."""
        return self.access.advertised_ip, self.port

    @property
    def address(self) -> str:
        return f"{self.access.advertised_ip}:{self.port}"

    def _credentials(self) -> grpc.ServerCredentials | None:
        settings = self.access.config.tls_server_settings()
        if settings.mode is TlsMode.DISABLED or settings.cert_path is None:
            return None
        chain = Path(settings.cert_path).read_bytes()
        key = Path(settings.key_path).read_bytes() if settings.key_path is not None else chain
        if settings.key_password:
            key = _decrypted_key(key, settings.key_password)
        roots = Path(settings.trust_cert_path).read_bytes() if settings.trust_cert_path is not None else None
        require = settings.need_client_auth is ClientAuth.REQUIRE
        return grpc.ssl_server_credentials([(key, chain)], root_certificates=roots,
                                           require_client_auth=require and roots is not None)

    async def start(self) -> None:
        config = self.access.config
        self.pop.start()
        if not self.access.is_slave:
            self.timer.start()
        body_limit = config.max_message_size
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", body_limit * 2 + (4 << 20)),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
        ])
        handlers = method_handlers(self.service)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        server.add_registered_method_handlers(SERVICE_NAME, handlers)
        credentials = self._credentials()
        target = f"{self.host}:{self.requested_port}"
        if credentials is None:
            port = server.add_insecure_port(target)
        else:
            port = server.add_secure_port(target, credentials)
            self.tls = True
        if port == 0:
            raise OSError(f"cannot listen for gRPC on {target}")
        await server.start()
        self._server = server
        self._port = port
        logger.info("gRPC endpoint for RocketMQ 5.x clients listening on %s:%d%s", self.host, port,
                    " (TLS)" if self.tls else "")

    async def stop(self) -> None:
        server = self._server
        self._server = None
        if server is not None:
            await server.stop(STOP_GRACE_SECONDS)
        await self.timer.stop()
        await self.pop.stop()
        for client_id in list(self.service.sessions):
            self.service.sessions.pop(client_id).channel.close()

    def stats(self) -> dict[str, str]:
        info = dict(self.pop.stats())
        info["grpcAddress"] = self.address if self._port is not None else ""
        info["grpcClients"] = str(len(self.service.sessions))
        info["timerMessagesPending"] = str(self.timer.pending)
        info["timerMessagesDelivered"] = str(self.timer.delivered)
        return info


def grpc_endpoint(broker: BrokerContext, processors: ProcessorLookup, host: str, port: int) -> GrpcServer:
    """The gRPC endpoint of a broker (its parts and its processors by request code) on ``host:port``: what
    `BrokerController` takes as ``grpc_endpoint`` (`rocketflow.broker.controller.GrpcEndpointFactory`)."""
    return GrpcServer(BrokerAccess(broker, processors), host, port)


__all__ = ["DEFAULT_GRPC_PORT", "SERVICE_NAME", "GrpcServer", "grpc_endpoint", "method_handlers"]
