"""The broker's gRPC endpoint for RocketMQ 5.x clients: ``apache.rocketmq.v2.MessagingService``
(what RocketMQ 5's proxy serves), on the broker's own store. Needs the ``grpc`` extra. See docs/grpc.md."""

from rocketflow.proxy.access import BrokerAccess
from rocketflow.proxy.server import DEFAULT_GRPC_PORT, GrpcServer, grpc_endpoint

__all__ = ["DEFAULT_GRPC_PORT", "BrokerAccess", "GrpcServer", "grpc_endpoint"]
