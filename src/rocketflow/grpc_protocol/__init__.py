"""RocketMQ 5.x's gRPC protocol, ``apache.rocketmq.v2``: ``definition.proto`` and ``service.proto``, and the
modules generated from them at build time (``definition_pb2``, ``service_pb2``, ``service_pb2_grpc``).

Only generated code lives here (it imports nothing else of rocketflow), so both sides use it: the broker's
endpoint (`rocketflow.proxy`) and the client's `SimpleConsumer`."""
