"""CLONE_GROUP_OFFSET through the admin API and CLI: a new group starts where an old one is."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rocketflow.cli.main import cli
from rocketflow.client import MQClientError
from rocketflow.client.admin import Admin
from rocketflow.dev import DevCluster


def test_offsets_are_cloned_per_topic_or_for_every_topic() -> None:
    cluster = DevCluster.start_in_thread()
    try:
        broker = cluster.broker
        assert broker is not None
        offsets = broker.offsets
        with Admin(cluster.namesrv_addr) as admin:
            admin.ensure_topic("CloneA", queues=2)
            admin.ensure_topic("CloneB", queues=1)
            offsets.commit_offset("old_group", "CloneA", 0, 40)
            offsets.commit_offset("old_group", "CloneA", 1, 7)
            offsets.commit_offset("old_group", "CloneB", 0, 3)
            offsets.commit_offset("other_group", "CloneA", 0, 99)

            admin.clone_group_offsets("old_group", "new_group", topic="CloneA")
            assert offsets.offsets_of("new_group", "CloneA") == {0: 40, 1: 7}
            assert offsets.offsets_of("new_group", "CloneB") == {}

            result = CliRunner().invoke(cli, ["admin", "group", "clone-offsets", "old_group", "all_group", "-n",
                                              cluster.namesrv_addr])
            assert result.exit_code == 0, result.output
            assert "cloned the offsets of old_group to all_group" in result.output
            assert offsets.offsets_of("all_group", "CloneA") == {0: 40, 1: 7}
            assert offsets.offsets_of("all_group", "CloneB") == {0: 3}
            assert offsets.offsets_of("other_group", "CloneA") == {0: 99}  # untouched
            with pytest.raises(MQClientError):
                admin.clone_group_offsets("old_group", "bad group!")
    finally:
        cluster.close()
