"""`logquake run --workload offsets` end to end: real lab brokers, real clients, real faults.

Committed consumer-group offsets are registers; each run must be linearizable under the
register model with no faults, with kills (confluent-kafka and kafka-python), with partitions
and with the stale-leader recipe; with `election: unclean` that recipe must make it
nonlinearizable. Slow: 20-60 s of ops each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_root_or_userns

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _run(tmp_path: Path, *flags: str, **opts: str) -> tuple[int, Path, dict, str]:
    """`logquake run --workload offsets` on 3 nodes; `opts` override the short run's flags."""
    requires_root_or_userns()
    results = tmp_path / "results"
    settings = {"time_limit": "20", "rate": "50", "concurrency": "5", "seed": "7", **opts}
    cmd = [sys.executable, "-m", "logquake", "run", "--workload", "offsets", "--results-dir", str(results),
           "--nodes", "3", *flags]
    for k, v in settings.items():
        cmd += [f"--{k.replace('_', '-')}", v]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    out = p.stdout + p.stderr
    latest = results / "latest"
    assert latest.exists(), f"no run directory; output:\n{out}"
    run_dir = latest.resolve()
    res = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").exists() else {}
    return p.returncode, run_dir, res, out


@pytest.mark.parametrize(("fault", "client"), [(None, "confluent"), ("kill", "confluent"),
                                               ("partition", "confluent"), ("stale-leader", "confluent"),
                                               ("kill", "kafka-python")])
def test_an_offsets_run_is_linearizable(tmp_path, fault, client):
    flags = ("--nemesis", fault, "--nemesis-interval", "4") if fault else ()
    code, run_dir, res, out = _run(tmp_path, *flags, client=client)
    assert res.get("valid") is True, f"{json.dumps(res, indent=1)[:3000]}\n{out[-3000:]}"
    assert code == 0, out
    assert "over 8 key(s) -> linearizable" in out.replace("\n", " "), out[-2000:]
    assert run_dir.parent.name == "offsets"  # the default test name is the workload
    lin = res["linear"]
    assert lin["model"] == "register" and lin["keys"] == 8 and lin["unknown_key_count"] == 0, lin
    assert res["offsets"]["keys"]["5"] == "lq-offsets-2 lq-offsets/1"
    ops = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    client = [o for o in ops if o["process"] != "nemesis"]
    ok_writes = [o for o in client if o["type"] == "ok" and o["f"] == "write"]
    reads_of_writes = [o for o in client if o["type"] == "ok" and o["f"] == "read" and o["value"][1] is not None]
    assert len(ok_writes) > 50 and len(reads_of_writes) > 50, (len(ok_writes), len(reads_of_writes))
    if fault:
        assert any(o["f"] == f"start-{fault}" for o in ops if o["process"] == "nemesis"), "no fault started"
    assert (run_dir / "report.html").is_file() and (run_dir / "junit.xml").is_file()


def test_an_unclean_election_makes_an_offsets_run_nonlinearizable(tmp_path):
    """A real broker fault the register check must catch: with `election: unclean`, the
    stale-leader fault gets a node lacking committed offset commits elected coordinator, and
    fetches go back to older offsets. Whether a 60 s run hits it depends on timing (5 of 6
    runs did when written), so up to three seeds are tried: the first that catches it passes."""
    cfg = tmp_path / "unclean.yaml"
    cfg.write_text("broker:\n  unsafe: {election: unclean}\n")
    missed = []
    for seed in ("4", "5", "6"):
        code, run_dir, res, out = _run(tmp_path / seed, "--config", str(cfg), "--nemesis", "stale-leader",
                                       "--nemesis-interval", "4", time_limit="60", rate="150",
                                       concurrency="6", seed=seed)
        if res.get("valid") is False:
            break
        missed.append(f"seed {seed}: valid={res.get('valid')!r}, {out[-600:]}")
    else:
        raise AssertionError("an unclean election went unnoticed in 3 runs:\n" + "\n".join(missed))
    assert code == 1 and res["bad_error_types"] == ["nonlinearizable"], out[-3000:]
    err = res["anomalies"]["nonlinearizable"]["errs"][0]
    assert err["op"]["f"] == "read" and "cannot be placed" in out, err  # a write is always allowed
