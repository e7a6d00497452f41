"""The final read end to end: a power loss of every node, the workload stopped right after it.

The unsafe `fsync: never` broker loses every write it acknowledged and then comes back with
empty logs, which nothing but the final read can reveal (no write follows the loss, and
every value had been read before it): invalid with `lost`. The safe broker, whose writes
were fsynced before they were acknowledged, keeps them all: valid.

The `fsync: never` brokers lose their topics too (the metadata log was never synced
either), and the final read does not take a topic the cluster does not know for an empty
log: such a key stays unread. The topics come back, empty, from the workers' producers,
idle until the drain: every 2 s (topic.metadata.refresh.interval.ms) they ask for their
topics' metadata, which creates a missing one, until the drain replaces every client. The
run's 15 s of recovery leave room for the restart, a metadata-group election and a refresh
on a loaded machine (7.7 s after the heal at a load of 7.7 on 2 cores); 3 s do not, and then
the drain waits out its 45 s, the verdict unknown.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from logquake.nemesis.schedule import FlipFlop
from tests.conftest import requires_root_or_userns
from tests.e2e.test_run import assert_a_run_did_its_work, assert_valid

pytestmark = pytest.mark.lab

SEED = 8
INTERVAL = 8.0


def _fault_window(seed: int) -> tuple[float, float]:
    """When the run's first power loss starts and stops (s into the main phase), as its
    scheduler will draw them (runner: Random(f"schedule-{seed}"))."""
    ff = FlipFlop(["disk:power-loss"], interval=INTERVAL, rng=random.Random(f"schedule-{seed}"))
    start = ff.next_action()
    ff.advance(start)
    return start.at, ff.next_action().at


def _run(tmp_path: Path, broker: dict, *, recovery_time: float) -> tuple[int, Path, dict, str]:
    requires_root_or_userns()
    start, stop = _fault_window(SEED)
    assert stop - start > 4, "the seed must leave the nodes down past the time limit"
    # The drain ends as soon as every key is read to its end; its long limit only serves a
    # loaded machine, where brokers back from a power loss answer ListOffsets late.
    cfg = {"nodes": 3, "rate": 100, "concurrency": 6, "nemesis": ["disk:power-loss"], "nemesis_interval": INTERVAL,
           "recovery_time": recovery_time, "drain_time": 45, "time_limit": round(start + 2, 1), "seed": SEED,
           "broker": broker, "results_dir": str(tmp_path / "results")}
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "logquake", "run", "--config", str(path)],
                       capture_output=True, text=True, timeout=400, check=False)
    out = p.stdout + p.stderr
    run_dir = (tmp_path / "results" / "latest").resolve()
    assert (run_dir / "results.json").exists(), out[-3000:]
    return p.returncode, run_dir, json.loads((run_dir / "results.json").read_text()), out


def test_fsync_never_under_power_loss_loses_acknowledged_writes(tmp_path):
    code, _, res, out = _run(tmp_path, {"unsafe": {"fsync": "never"}}, recovery_time=15)  # topics made again
    assert res["valid"] is False and code == 1, out[-3000:]
    assert "lost" in res["bad_error_types"], res["bad_error_types"]
    fr = res["final_read"]
    assert fr["ran"] and fr["lost"] > 0 and fr["incomplete_keys"] == []
    e = res["anomalies"]["lost"]["errs"][0]
    assert any(f["f"] == "start-disk:power-loss" for f in e["faults"]), e


def test_the_safe_broker_keeps_every_acknowledged_write_through_power_loss(tmp_path):
    code, run_dir, res, out = _run(tmp_path, {}, recovery_time=3)
    assert res["valid"] is True and code == 0, json.dumps(res, indent=1)[:3000] + out[-2000:]
    fr = res["final_read"]
    assert fr["ran"] and fr["lost"] == 0 and fr["acknowledged"] > 0 and fr["incomplete_keys"] == []
    # What the calm run of tests/e2e/test_run.py asserts (slow: this run, the same workload,
    # client and guarantee, makes it too, with ~400 ops before the power loss).
    assert_valid(code, run_dir, res, out)
    assert_a_run_did_its_work(run_dir, seed=SEED)
