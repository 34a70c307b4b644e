"""The ``apache.rocketmq.v2`` protocol: ``definition.proto`` and ``service.proto``, and the modules
generated from them at build time (``definition_pb2``, ``service_pb2``, ``service_pb2_grpc``)."""
