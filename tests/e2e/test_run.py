"""`logquake run` end to end: a lab cluster of real brokers, real clients, real faults.

Each test runs the real command in a subprocess and reads the run directory it leaves.
Ctrl-C under partitions is in the default suite; the rest are slow (the calm run's
assertions run by default on the safe broker's power-loss run, tests/e2e/test_final_read_run.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import requires_root_or_userns

pytestmark = pytest.mark.lab

RUN_FILES = ("test.json", "history.jsonl", "results.json", "junit.xml", "harness.log")


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _run(tmp_path: Path, *flags: str, timeout: float = 300) -> tuple[int, Path, dict, str]:
    """`logquake run` with flags; (exit code, run dir, results.json, output)."""
    requires_root_or_userns()
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "logquake", "run", "--results-dir", str(results), "--nodes", "3", *flags]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGUSR1)  # the runner appends every thread's stack to harness.log
            time.sleep(2)
            p.kill()
            p.communicate()
            _down_labs_of(results)
            logs = "\n".join(f.read_text()[-20000:] for f in results.glob("*/*/harness.log"))
            pytest.fail(f"logquake run still running after {timeout} s; harness.log:\n{logs}")
    latest = results / "latest"
    assert latest.exists(), f"no run directory; output:\n{out}"
    run_dir = latest.resolve()
    res = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").exists() else {}
    return p.returncode, run_dir, res, out


def _down_labs_of(results: Path) -> dict[str, subprocess.CompletedProcess]:
    """`cluster down` every lab a killed run under `results` left up: the next test starts clean."""
    from logquake.cluster import load_states

    return {st.cluster_id: subprocess.run([sys.executable, "-m", "logquake", "cluster", "down", "--id", st.cluster_id],
                                          capture_output=True, text=True, timeout=120, check=False)
            for st in load_states() if Path(st.run_dir).resolve().is_relative_to(results.resolve())}


def assert_valid(code: int, run_dir: Path, res: dict, out: str) -> None:
    """A valid run: exit 0, every run file written, the run directory printed."""
    for name in RUN_FILES:
        assert (run_dir / name).is_file(), f"{name} missing in {run_dir}\n{out}"
    assert res.get("valid") is True, f"{json.dumps(res, indent=1)[:3000]}\n{out[-3000:]}"
    assert code == 0, out
    assert f"run: {run_dir}" in out.replace("\n", "") or str(run_dir) in out


def _client_ops(run_dir: Path) -> list[dict]:
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if '"nemesis"' not in x]


def assert_a_run_did_its_work(run_dir: Path, *, seed: int) -> None:
    """Sends acknowledged, polls that read something, and the seed it was given in test.json."""
    ops = _client_ops(run_dir)
    assert sum(1 for o in ops if o["type"] == "ok" and o["f"] == "send") > 30
    assert sum(1 for o in ops if o["type"] == "ok" and o["f"] == "poll" and o["value"][0][1]) > 10
    assert json.loads((run_dir / "test.json").read_text())["seed"] == seed


# Slow: its assertions run in the default suite on the safe broker's power-loss run of
# tests/e2e/test_final_read_run.py, the same workload, client and guarantee with a fault added.
@pytest.mark.slow
def test_a_short_run_without_faults_is_valid(tmp_path):
    code, run_dir, res, out = _run(tmp_path, "--time-limit", "6", "--rate", "50", "--concurrency", "4",
                                   "--seed", "1")
    assert_valid(code, run_dir, res, out)
    assert_a_run_did_its_work(run_dir, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["partition", "kill", "pause", "clock", "disk"])
def test_a_short_run_with_each_fault_is_valid(tmp_path, fault):
    code, run_dir, res, out = _run(tmp_path, "--time-limit", "20", "--rate", "50", "--concurrency", "5",
                                   "--nemesis", fault, "--nemesis-interval", "4", "--seed", "7")
    assert_valid(code, run_dir, res, out)
    nem = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines() if '"nemesis"' in x]
    assert any(o["f"].startswith("start-") for o in nem), "the nemesis never started a fault"


@pytest.mark.slow
def test_a_transactional_run_with_kafka_python_is_valid(tmp_path):
    code, run_dir, res, out = _run(tmp_path, "--time-limit", "15", "--rate", "30", "--concurrency", "4",
                                   "--txn", "--client", "kafka-python", "--seed", "3")
    assert_valid(code, run_dir, res, out)
    assert any(o["f"] == "txn" and o["type"] == "ok" for o in _client_ops(run_dir))


@pytest.mark.slow
def test_a_subscribe_run_with_transactions_under_partitions_is_valid(tmp_path):
    code, run_dir, res, out = _run(tmp_path, "--time-limit", "20", "--rate", "30", "--concurrency", "4",
                                   "--txn", "--sub-via", "subscribe", "--nemesis", "partition",
                                   "--nemesis-interval", "5", "--seed", "4")
    assert_valid(code, run_dir, res, out)
    assert any(o["f"] == "subscribe" and o["type"] == "ok" for o in _client_ops(run_dir))


@pytest.mark.slow
def test_acks_1_with_leaders_cut_off_reports_lost_writes(tmp_path):
    # With acks=1 a leader answers after its own append. Cut off from its followers it keeps
    # acknowledging until check-quorum deposes it, while the majority elects a new leader
    # that reuses those offsets: every such partition loses acknowledged writes. Leader kills
    # alone rarely do on loopback, where followers replicate within milliseconds.
    cfg = tmp_path / "acks1.yaml"
    cfg.write_text("producer: {acks: 1}\nnemesis: [partition]\nnemesis_interval: 3\ndrain_time: 15\n")
    code, run_dir, res, out = _run(tmp_path, "--config", str(cfg), "--time-limit", "30", "--rate", "200",
                                   "--concurrency", "10", "--seed", "11", timeout=400)
    assert res.get("valid") is False, json.dumps(res, indent=1)[:3000]
    assert code == 1
    assert "lost-write" in res["bad_error_types"], res["bad_error_types"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_leaves_a_complete_run_directory_and_no_lab_behind(tmp_path, signum):
    # SIGTERM too: a CI job's timeout sends it, and a harness it killed outright left five
    # brokers and their LazyFS processes running.
    requires_root_or_userns()
    before = _netns()
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "logquake", "run", "--results-dir", str(results), "--nodes", "3",
           "--time-limit", "300", "--rate", "50", "--concurrency", "3", "--nemesis", "partition",
           "--nemesis-interval", "2", "--seed", "5"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        history = None
        while time.monotonic() < deadline and p.poll() is None:
            found = list(results.glob("*/*/history.jsonl"))
            if found and sum(1 for _ in found[0].open()) > 50:
                history = found[0]
                break
            time.sleep(0.5)
        assert history is not None, "the run never got going"
        p.send_signal(signum)
        out, _ = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    run_dir = history.parent
    for name in RUN_FILES:
        assert (run_dir / name).is_file(), f"{name} missing\n{out}"
    res = json.loads((run_dir / "results.json").read_text())
    assert res.get("interrupted") is True
    assert p.returncode in (0, 1, 2), out
    assert _netns() == before
    leftovers = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False)
    assert leftovers.stdout.strip() == "", f"processes left: {leftovers.stdout}"
    assert (results / "latest").resolve() == run_dir.resolve()
    assert os.path.getsize(run_dir / "history.jsonl") > 0


@pytest.mark.slow
def test_after_a_sigkilled_run_the_history_checks_and_cluster_down_cleans_up(tmp_path):
    requires_root_or_userns()
    from logquake.cluster import load_states

    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "logquake", "run", "--results-dir", str(results), "--nodes", "3",
           "--time-limit", "300", "--rate", "50", "--concurrency", "3", "--seed", "6"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    history = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            found = list(results.glob("*/*/history.jsonl"))
            if found and sum(1 for _ in found[0].open()) > 100:
                history = found[0]
                break
            time.sleep(0.5)
        assert history is not None, "the run never got going"
    finally:
        p.kill()
        p.wait(30)
    run_dir = history.parent
    check = subprocess.run([sys.executable, "-m", "logquake", "check", str(history)], capture_output=True,
                           text=True, timeout=120, check=False)
    assert check.returncode in (0, 1, 2), check.stdout + check.stderr
    mine = [s.cluster_id for s in load_states() if Path(s.run_dir).resolve() == run_dir.resolve()]
    assert mine, "a SIGKILLed run leaves its lab for `cluster down` to find"
    downs = _down_labs_of(results)
    assert sorted(downs) == sorted(mine)
    for down in downs.values():
        assert down.returncode == 0, down.stdout + down.stderr
    assert not [s for s in load_states() if s.cluster_id in mine]
    leftovers = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False)
    assert leftovers.stdout.strip() == ""
