"""The broker: a RocketMQ 4.x wire-compatible message broker on one asyncio loop.

A name server and a broker together, for demos and tests: `rocketflow.dev.DevCluster`.
"""

from rocketflow.broker.config import BrokerConfig, BrokerConfigError, build_broker_config
from rocketflow.broker.controller import BrokerController

__all__ = ["BrokerConfig", "BrokerConfigError", "BrokerController", "build_broker_config"]
