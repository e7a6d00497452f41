"""One record per delivery guarantee: the checkers, test.json and the command line agree with it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from logquake.checker.pipeline import check_pipeline
from tests.checker.test_pipeline import _input, _ops, _read

TXN_REFUSAL = "txn: transactions make the producer idempotent; at-most-once cannot use them"


def test_idempotent_pipeline_allows_a_value_processed_twice():
    """idempotent commits offsets after processing, as at-least-once does: a consumer may
    process a value again after a failure; only its producer's duplicates are excluded."""
    ops = _ops(_input(0, 1, 2), _read(100, (0, [0, 1]), (1, [0, 2]), (2, [0, 1])))
    res = check_pipeline(ops, guarantee="idempotent")
    assert res["error_types"] == ["double-processing"]
    assert res["valid"] is True and res["bad_error_types"] == []
    assert check_pipeline(ops, guarantee="exactly-once")["bad_error_types"] == ["double-processing"]


def test_idempotent_pipeline_still_owes_every_value():
    ops = _ops(_input(0, 1, 2), _read(100, (0, [0, 1])))
    res = check_pipeline(ops, guarantee="idempotent")
    assert res["valid"] is False and res["bad_error_types"] == ["lost-processing"]


def test_idempotent_pipeline_tolerates_a_zombie_writing_late():
    """No transaction fences a worker whose partitions moved on: output-reorder is reported only."""
    ops = _ops(_input(0, 1, 2), _read(100, (0, [0, 2]), (1, [0, 1])))
    res = check_pipeline(ops, guarantee="idempotent")
    assert res["valid"] is True and res["error_types"] == ["output-reorder"]


def _logquake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logquake", *args], capture_output=True, text=True, timeout=60)


def test_check_refuses_at_most_once_with_txn_as_run_does(tmp_path):
    history = tmp_path / "history.jsonl"
    history.write_text("")
    run = _logquake("run", "--guarantee", "at-most-once", "--txn", "--results-dir", str(tmp_path / "r"))
    check = _logquake("check", str(history), "--guarantee", "at-most-once", "--txn")
    for out in (run, check):
        assert out.returncode == 3, out.stderr
        assert TXN_REFUSAL in " ".join(out.stderr.split()) and "Traceback" not in out.stderr
    assert not (tmp_path / "r").exists()  # refused before anything ran


@pytest.mark.parametrize("guarantee", ["at-least-once", "idempotent", "exactly-once"])
def test_check_accepts_txn_with_every_other_guarantee(tmp_path, guarantee):
    history = tmp_path / "history.jsonl"
    history.write_text("")
    out = _logquake("check", str(history), "--guarantee", guarantee, "--txn")
    assert out.returncode in (0, 1, 2), out.stderr
