"""The client instance: what every producer and consumer of one client id shares (see `client_instance`)."""

from rocketflow.client.instance.client_instance import (
    CLIENT_INNER_PRODUCER_GROUP,
    LIFECYCLE_TIMEOUT,
    ClientInstance,
    shutdown_all,
)

__all__ = ["CLIENT_INNER_PRODUCER_GROUP", "LIFECYCLE_TIMEOUT", "ClientInstance", "shutdown_all"]
