"""The typed operator API behind ``rocketflow admin`` (see `rocketflow.client.admin.admin`)."""

from rocketflow.client.admin.admin import *  # noqa: F403
from rocketflow.client.admin.admin import __all__  # noqa: F401
