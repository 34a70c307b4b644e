"""END_TRANSACTION (37): a producer commits or rolls back a half message (see `rocketflow.broker.transaction`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from rocketflow.broker.processors.common import check_names, error
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import EndTransactionRequestHeader
from rocketflow.store.config import BrokerRole

if TYPE_CHECKING:
    from rocketflow.broker.controller import BrokerController

logger = logging.getLogger("rocketflow.broker.transaction")

_NOT_TYPE: Final = int(MessageSysFlag.TRANSACTION_NOT_TYPE)
_COMMIT: Final = int(MessageSysFlag.TRANSACTION_COMMIT)
_ROLLBACK: Final = int(MessageSysFlag.TRANSACTION_ROLLBACK)


class EndTransactionProcessor:
    """Validates END_TRANSACTION and hands it to the broker's `TransactionalMessageService`.

    Producers send it oneway, so the response is mostly for tools and tests; an UNKNOW outcome
    (transaction value 0) gets no response at all, as in RocketMQ: the check-back will ask again.
    """

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.END_TRANSACTION, self.process)

    def process(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        header = EndTransactionRequestHeader.from_command(request)
        check_names(group=header.producer_group, group_field="producerGroup")
        broker = self.broker
        if broker.store.config.broker_role is BrokerRole.SLAVE:
            return error(request, ResponseCode.SLAVE_NOT_AVAILABLE,
                         "the message store is a slave: end transaction is forbidden")
        outcome = header.commit_or_rollback
        origin = "check-back answer" if header.from_transaction_check else "end of transaction"
        if outcome == _NOT_TYPE:
            logger.info("%s from %s leaves transaction %s pending (%s)", origin, ctx.remote_address,
                        header.transaction_id or header.msg_id, request.remark or "no remark")
            return None
        if outcome not in (_COMMIT, _ROLLBACK):
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"commitOrRollback must be 0 (unknown), 8 (commit) or 12 (rollback), got {outcome}")
        if outcome == _ROLLBACK or header.from_transaction_check:
            logger.info("%s from %s: %s transaction %s (%s)", origin, ctx.remote_address,
                        "commit" if outcome == _COMMIT else "roll back", header.transaction_id or header.msg_id,
                        request.remark or "no remark")
        return broker.transactions.end_transaction(request, header)


__all__ = ["EndTransactionProcessor"]
