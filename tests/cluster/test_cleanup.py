"""Nothing is left behind: not after a normal teardown, not after the harness was SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .labkit import fake_cluster, require_lab, running

pytestmark = pytest.mark.lab

HERE = Path(__file__).parent


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def _lazyfs_mounts() -> int:
    n = 0
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                n += (d / "mountinfo").read_text().count(" - fuse lazyfs ")
            except OSError:
                pass
    return n


def test_close_leaves_nothing(tmp_path):
    with fake_cluster(2, tmp_path, lazyfs=True) as c:
        pids = [c.lifecycle.pid(n) for n in c.nodes] + [r.pid for r in c.state.holders.values()]
        veth, state_file = c.state.harness_veth, c.state.path
        assert all(running(p) for p in pids) and veth in _links() and state_file.exists()
    assert not any(running(p) for p in pids)
    assert veth not in _links() and not state_file.exists()


def test_cluster_down_cleans_up_after_a_sigkilled_harness(tmp_path):
    require_lab()
    env = dict(os.environ, LOGQUAKE_STATE_DIR=str(tmp_path / "state"))
    harness = subprocess.Popen([sys.executable, str(HERE / "harness_for_kill.py"), str(tmp_path / "run")],
                               stdout=subprocess.PIPE, env=env, text=True, start_new_session=True)
    try:
        info = json.loads(harness.stdout.readline())
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait(30)
    # the dead harness left all of it behind ...
    assert all(running(p) for p in info["pids"])
    assert info["veth"] in _links()
    assert _lazyfs_mounts() >= 3
    # ... and `logquake cluster down` removes it
    out = subprocess.run([sys.executable, "-m", "logquake", "cluster", "down"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"cluster {info['id']} down" in out.stdout
    assert not any(running(p) for p in info["pids"])
    assert info["veth"] not in _links()
    assert not list((tmp_path / "state").glob("*.json"))
    assert _lazyfs_mounts() == 0 or _lazyfs_mounts_not_ours(tmp_path)
    again = subprocess.run([sys.executable, "-m", "logquake", "cluster", "down"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0 and "no lab clusters" in again.stdout


def _lazyfs_mounts_not_ours(tmp_path: Path) -> bool:
    """Another test run's LazyFS may be mounted at the same moment; ours must be gone."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if str(tmp_path) in (d / "mountinfo").read_text():
                    return False
            except OSError:
                pass
    return True


def test_down_spares_a_cluster_whose_harness_is_running_unless_all(tmp_path, monkeypatch):
    from .labkit import lab

    monkeypatch.setenv("LOGQUAKE_STATE_DIR", str(tmp_path / "state"))
    env = dict(os.environ)
    with lab(1, tmp_path) as (state, _hosts):
        down = subprocess.run([sys.executable, "-m", "logquake", "cluster", "down"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert down.returncode == 0 and "spared" in down.stdout
        assert state.path.exists() and running(state.holders["n1"].pid)
        down = subprocess.run([sys.executable, "-m", "logquake", "cluster", "down", "--all"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0 and f"cluster {state.cluster_id} down" in down.stdout
        assert not state.path.exists() and not running(state.holders["n1"].pid)


@pytest.mark.slow
def test_daemons_are_found_even_when_their_namespace_holder_died(tmp_path):
    with fake_cluster(2, tmp_path) as c:
        broker = c.lifecycle.pid("n1")
        holder = c.state.holders["n1"].pid
        os.kill(holder, signal.SIGKILL)
        from .labkit import wait_until

        wait_until(lambda: not running(holder), what="holder gone")
        assert running(broker)  # the namespace lives on through the broker
    assert not running(broker)
