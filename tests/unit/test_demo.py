"""The foundation-stage demo decodes every captured client frame and the synthetic session."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketflow.cli.demo import run_demo


def test_demo_decodes_captured_sessions(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_demo(shared_dir / "interop")
    out = capsys.readouterr().out
    assert "from 7 sessions" in out
    assert "HEART_BEAT" in out and "LOCK_BATCH_MQ" in out and "SEND_MESSAGE_V2" in out
    assert "decoded back identical" in out


def test_demo_runs_without_captures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_demo(tmp_path / "nowhere")
    out = capsys.readouterr().out
    assert "no captures found" in out and "20 frames" not in out
    assert "22 frames from 1 sessions" in out
