"""END_TRANSACTION (37): a producer commits or rolls back a half message (see `rocketflow.broker.transaction`).

With ACL on, committing or rolling back needs PUB on the half message's real topic (its ``REAL_TOPIC``):
the request names the message by commit-log offset only, and a commit publishes it.
"""

from __future__ import annotations

import logging
from typing import Final

from rocketflow.acl import AccessGrant, Permission, request_grant
from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import check_names, error
from rocketflow.broker.transaction import TransactionalMessageService
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.protocol.names import TRANS_HALF_TOPIC
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import EndTransactionRequestHeader
from rocketflow.store import BrokerRole

logger = logging.getLogger(__name__)

_NOT_TYPE: Final = int(MessageSysFlag.TRANSACTION_NOT_TYPE)
_COMMIT: Final = int(MessageSysFlag.TRANSACTION_COMMIT)
_ROLLBACK: Final = int(MessageSysFlag.TRANSACTION_ROLLBACK)


class EndTransactionProcessor:
    """Validates END_TRANSACTION and hands it to the `TransactionalMessageService`.

    Producers send it oneway, so the response is mostly for tools and tests; an UNKNOW outcome
    (transaction value 0) gets no response at all, as in RocketMQ: the check-back will ask again.
    """

    def __init__(self, ctx: BrokerContext, transactions: TransactionalMessageService) -> None:
        self.ctx = ctx
        self.transactions = transactions

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.END_TRANSACTION, self.process)

    def process(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        header = EndTransactionRequestHeader.from_command(request)
        check_names(group=header.producer_group, group_field="producerGroup")
        if self.ctx.store.config.broker_role is BrokerRole.SLAVE:
            return error(request, ResponseCode.SLAVE_NOT_AVAILABLE,
                         "the message store is a slave: end transaction is forbidden")
        outcome = header.commit_or_rollback
        origin = "check-back answer" if header.from_transaction_check else "end of transaction"
        if outcome == _NOT_TYPE:
            logger.info("%s from %s leaves transaction %s pending (%s)", origin, request_ctx.remote_address,
                        header.transaction_id or header.msg_id, request.remark or "no remark")
            return None
        if outcome not in (_COMMIT, _ROLLBACK):
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"commitOrRollback must be 0 (unknown), 8 (commit) or 12 (rollback), got {outcome}")
        grant = request_grant(self.ctx.acl_hook, request, request_ctx.remote_address)
        if grant.checked:
            refusal = self._refusal(grant, header.commit_log_offset)
            if refusal is not None:
                return error(request, ResponseCode.NO_PERMISSION, refusal)
        if outcome == _ROLLBACK or header.from_transaction_check:
            logger.info("%s from %s: %s transaction %s (%s)", origin, request_ctx.remote_address,
                        "commit" if outcome == _COMMIT else "roll back", header.transaction_id or header.msg_id,
                        request.remark or "no remark")
        return self.transactions.end_transaction(request, header)

    def _refusal(self, grant: AccessGrant, commit_log_offset: int) -> str | None:
        """Why ``grant`` may not end the half message at ``commit_log_offset`` (None if it may, or if there is
        no half message there: the transaction service answers that)."""
        store = self.ctx.store
        record = store.select_one_message_by_offset(commit_log_offset) if commit_log_offset >= 0 else None
        if record is None:
            return None
        try:
            half, _ = decode_record(record, decompress=False, with_body=False)
        except RecordDecodeError:
            return None
        if half.topic != TRANS_HALF_TOPIC:
            return None
        return grant.message_refusal(half.topic, half.properties, Permission.PUB)


__all__ = ["EndTransactionProcessor"]
