"""The root of rocketflow's errors: ``except RocketflowError`` catches any error rocketflow raises on purpose.

Each package keeps its own hierarchy (`rocketflow.remoting.errors.ProtocolError`,
`rocketflow.net.errors.RemotingError`, `rocketflow.store.errors.StoreError`,
`rocketflow.client.errors.MQError`, ...) under this root, and the standard bases it had
(``ValueError`` for bad settings and values), so code catching either keeps working.
"""

from __future__ import annotations


class RocketflowError(Exception):
    """Base of every error hierarchy of rocketflow."""


__all__ = ["RocketflowError"]
