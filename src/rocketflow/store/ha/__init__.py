"""Master/slave replication of the commit log, wire-compatible with RocketMQ 4.x's HA service."""

from rocketflow.store.ha.master import HAConnection, HAService
from rocketflow.store.ha.protocol import HAProtocolError, OffsetReportReader, Transfer, TransferReader
from rocketflow.store.ha.slave import HAClient

__all__ = ["HAClient", "HAConnection", "HAProtocolError", "HAService", "OffsetReportReader", "Transfer",
           "TransferReader"]
