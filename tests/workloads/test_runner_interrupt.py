"""Ctrl-C: a run cut short proves only what its recorded part shows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from logquake import runner
from logquake.crew import Stats
from logquake.workloads import MAIN

from .memlog import MemClient, MemLog
from .test_runner_memlog import _cfg, run_test


def _ctrl_c_in_main_phase(stats: Stats) -> threading.Thread:
    """SIGINT to this process one second into the main phase, as a user's Ctrl-C."""

    def press() -> None:
        while stats.phase != MAIN:
            time.sleep(0.05)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=press, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_on_a_correct_log_is_unknown_with_the_reason_and_check_agrees(tmp_path):
    log = MemLog()
    stats = Stats()
    _ctrl_c_in_main_phase(stats)
    out = run_test(_cfg(tmp_path, time_limit=30), stats=stats, make=lambda cfg: MemClient(log))
    assert out.interrupted is True
    assert out.valid == "unknown" and out.exit_code == runner.EXIT_UNKNOWN
    assert "interrupted before the drain read everything" in out.results["error"]
    assert out.results["proven"] == []
    stored = json.loads((out.run_dir / "results.json").read_text())
    assert stored["valid"] == "unknown" and stored["interrupted"] is True
    again = subprocess.run([sys.executable, "-m", "logquake", "check", str(out.run_dir)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2, again.stdout + again.stderr
    assert "interrupted" in again.stdout


def test_an_anomaly_that_needs_no_complete_history_stays_proof():
    results = runner.with_interruption({"valid": False, "bad_error_types": ["G1a", "unseen"]}, interrupted=True)
    assert results["valid"] is False and results["proven"] == ["G1a"]


def test_unseen_alone_after_ctrl_c_is_unknown():
    results = runner.with_interruption({"valid": False, "bad_error_types": ["unseen"]}, interrupted=True)
    assert results["valid"] == "unknown" and "proves no anomaly" in results["error"]


def test_an_interruption_after_a_complete_drain_changes_nothing():
    done = {"valid": False, "bad_error_types": ["unseen"], "drain": {"complete": True, "workers_short": []}}
    assert runner.with_interruption(done, interrupted=True)["valid"] is False
    assert runner.with_interruption({"valid": True}, interrupted=False) == {"valid": True}


def test_lost_write_after_ctrl_c_is_unknown_not_proof():
    # Values a failed txn polled are skipped by its consumer (and its group's offsets): only
    # the drain's final read, from the beginning, reads them again.
    results = runner.with_interruption({"valid": False, "bad_error_types": ["lost-write", "unseen"]},
                                       interrupted=True)
    assert results["valid"] == "unknown" and results["proven"] == []


def test_lost_write_with_no_drain_worker_through_is_unknown_and_with_one_stays_invalid():
    short = {"complete": False, "workers_short": [0, 1]}
    through = {"complete": True, "workers_short": [1]}
    assert runner.with_drain({"valid": False, "bad_error_types": ["lost-write"]}, through)["valid"] is False
    assert runner.with_drain({"valid": False, "bad_error_types": ["lost-write", "G1a"]}, short)["valid"] is False
