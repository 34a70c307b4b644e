"""The broker: a RocketMQ 4.x wire-compatible message broker on one asyncio loop."""

from rocketflow.broker.config import BrokerConfig, BrokerConfigError, build_broker_config
from rocketflow.broker.controller import BrokerController
from rocketflow.broker.dev import DevCluster

__all__ = ["BrokerConfig", "BrokerConfigError", "BrokerController", "DevCluster", "build_broker_config"]
