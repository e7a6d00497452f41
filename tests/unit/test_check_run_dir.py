"""`logquake check RUN_DIR` checks a run as it was run: the analysis and options from its test.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from logquake.config import TestConfig, save_config
from logquake.history import Op, write_history
from tests.checker.histories import H, shared_consumer_polls


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logquake", "check", *args],
                          capture_output=True, text=True, timeout=120)


def run_dir(tmp_path: Path, cfg: TestConfig, ops: list[Op]) -> Path:
    d = tmp_path / "run"
    d.mkdir(parents=True)
    save_config(cfg, d / "test.json", start="2026-11-29T00:00:00Z")  # a run fact beside the keys
    write_history(d / "history.jsonl", ops)
    return d


def register_ops(last_read: int) -> list[Op]:
    """write 1, write 2, then a read of `last_read` on offsets key 0, one process after another."""
    steps = [("write", 1, 1), ("write", 2, 2), ("read", None, last_read)]
    ops = []
    for i, (f, v, seen) in enumerate(steps):
        ops.append(Op(index=2 * i, time=20 * i, process=0, type="invoke", f=f, value=[0, v]))
        ops.append(Op(index=2 * i + 1, time=20 * i + 10, process=0, type="ok", f=f, value=[0, seen]))
    return ops


def test_an_offsets_run_is_checked_as_registers(tmp_path):
    cfg = TestConfig(workload="offsets", nodes=3)
    stale = check(str(run_dir(tmp_path / "a", cfg, register_ops(last_read=1))))
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "nonlinearizable" in stale.stdout and "cannot be placed" in stale.stdout
    fresh = check(str(run_dir(tmp_path / "b", cfg, register_ops(last_read=2))))
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr


def duplicated() -> H:
    h = H()
    h.send(0, 1, 10, 0)
    h.send(1, 1, 10, 1)  # the same value written twice: a retried send
    h.poll(2, {1: [(0, 10), (1, 10)]})
    return h


def test_a_queue_run_keeps_its_guarantee_and_flags_override_it(tmp_path):
    d = run_dir(tmp_path, TestConfig(guarantee="at-least-once", nodes=3), duplicated().ops)
    assert check(str(d)).returncode == 0  # duplicates are allowed at least once
    strict = check(str(d), "--guarantee", "exactly-once")
    assert strict.returncode == 1 and "duplicate" in strict.stdout
    assert check(str(d / "history.jsonl")).returncode == 1  # a bare file: default options, nothing from test.json


def test_a_broken_test_json_is_a_clear_error(tmp_path):
    d = run_dir(tmp_path, TestConfig(nodes=3), duplicated().ops)
    (d / "test.json").write_text('{"nodes": "many"}')
    out = check(str(d))
    assert out.returncode == 3 and "nodes" in out.stderr and "Traceback" not in out.stderr


def test_a_rerun_check_keeps_what_the_runs_drain_knew(tmp_path):
    import json

    h = H()
    h.send(0, 1, 10, 0)  # acknowledged, never read: unseen
    d = run_dir(tmp_path, TestConfig(nodes=3), h.ops)
    assert check(str(d)).returncode == 1  # no results.json: the history alone says invalid
    (d / "results.json").write_text(json.dumps({"valid": "unknown", "drain": {"complete": False}}))
    out = check(str(d))
    assert out.returncode == 2, out.stdout + out.stderr  # the drain never got through: unseen proves nothing
    assert "to the end of its log" in " ".join(out.stdout.split())
    (d / "results.json").write_text("{not json")
    assert check(str(d)).returncode == 1  # an unreadable results.json is ignored, not a traceback


def test_a_jetstream_subscribe_run_is_checked_as_a_shared_consumer(tmp_path):
    # Its test.json says the system, and the system that its subscribers share a consumer:
    # a gap inside a poll is not bad, nor a step back to a message the poll marks redelivered.
    cfg = TestConfig(system="jetstream", client="nats-py", sub_via="subscribe")
    marked = check(str(run_dir(tmp_path / "a", cfg, shared_consumer_polls(redelivered={"1": [0]}).ops)))
    assert marked.returncode == 0, marked.stdout + marked.stderr
    unmarked = check(str(run_dir(tmp_path / "b", cfg, shared_consumer_polls().ops)))
    assert unmarked.returncode == 1 and "int-nonmonotonic-poll" in unmarked.stdout
    # The flag is for a bare history: a run directory already says.
    flagged = check(str(tmp_path / "a" / "run"), "--shared-consumer")
    assert flagged.returncode == 3 and "test.json" in flagged.stderr and "Traceback" not in flagged.stderr
