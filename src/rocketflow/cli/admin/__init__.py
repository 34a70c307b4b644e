"""``rocketflow admin``: an operator CLI (like RocketMQ's mqadmin) for any RocketMQ 4.x name server.

Every command takes ``-n/--namesrv`` (default: ``$ROCKETFLOW_NAMESRV`` or 127.0.0.1:9876), ``--json``
for machine output (one JSON document; one per line for ``--watch`` and ``message tail``),
``--timeout``, the ACL keys ``--access-key`` / ``--secret-key`` and TLS (``--tls``, ``--tls-ca``), each
with an environment variable. A refused request exits 1 with the server's code and remark on stderr,
as does an unreachable server; bad arguments exit 2.

The modules: `.options` (the shared options, the session, the output helpers), `.root` (the group),
and one per command family, each adding its commands to the group when imported here: `.cluster`
(``cluster``, ``broker``), `.topics`, `.groups`, `.consumers` (``consumer-progress``,
``consumer-connections``, ``reset-offset``) and `.messages` (``message``, ``send``).
"""

from __future__ import annotations

# the command modules add their commands to the group as they are imported
from rocketflow.cli.admin import cluster, consumers, groups, messages, topics  # noqa: F401
from rocketflow.cli.admin.consumers import _progress_table as _progress_table  # tests/unit/test_cli_tables.py
from rocketflow.cli.admin.options import DEFAULT_NAMESRV, NAMESRV_ENV, default_namesrv
from rocketflow.cli.admin.root import admin

__all__ = ["DEFAULT_NAMESRV", "NAMESRV_ENV", "admin", "default_namesrv"]
