"""The name server: broker registration and topic routes."""

from rocketflow.namesrv.config import (
    DEFAULT_NAMESRV_PORT,
    NamesrvConfig,
    NamesrvConfigError,
    build_namesrv_config,
    namesrv_overrides_from_properties,
)
from rocketflow.namesrv.route_info_manager import RouteInfoManager
from rocketflow.namesrv.server import NameServer

__all__ = [
    "DEFAULT_NAMESRV_PORT",
    "NameServer",
    "NamesrvConfig",
    "NamesrvConfigError",
    "RouteInfoManager",
    "build_namesrv_config",
    "namesrv_overrides_from_properties",
]
