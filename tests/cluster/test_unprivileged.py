"""The lab as a normal user: it enters a private user+net+mount namespace and needs no root.

Runs the lab as `nobody` (via setpriv) with the system python3 and this tree on PYTHONPATH
(the venv's interpreter may live where nobody cannot read). Skips with the reason when the
machine cannot do that: no setpriv, not root to switch users, or no unprivileged user namespaces.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .labkit import status_rows

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _site_packages() -> str:
    return next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))


def _as_nobody(argv: list[str], *, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "env", "-i",
           *(f"{k}={v}" for k, v in env.items()), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def nobody_env():
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root (this run already is unprivileged)")
    py = shutil.which("python3", path="/usr/bin:/bin")
    if not shutil.which("setpriv") or not py:
        pytest.skip("needs setpriv and a system python3")
    probe = subprocess.run([py, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    if probe.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip(f"system python {probe.stdout.strip()} cannot load this venv's packages {sys.version_info[:2]}")
    d = Path(tempfile.mkdtemp(prefix="lq-nobody-"))
    d.chmod(0o777)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(d), "LOGQUAKE_STATE_DIR": str(d / "state"),
           "PYTHONPATH": f"{ROOT}:{_site_packages()}"}
    readable = _as_nobody([py, "-c", "import logquake.cluster, pytest, yaml"], env=env)
    if readable.returncode != 0:
        tail = readable.stderr.strip().splitlines()[-1:] or ["?"]
        pytest.skip(f"user nobody cannot load this tree or its venv ({tail[0]}); clone it somewhere world-readable")
    userns = _as_nobody(["unshare", "-U", "-r", "-n", "true"], env=env)
    if userns.returncode != 0:
        pytest.skip(f"the kernel refuses unprivileged user namespaces: {userns.stderr.strip()}")
    yield py, env, d
    _as_nobody([py, "-m", "logquake", "cluster", "down"], env=env)
    shutil.rmtree(d, ignore_errors=True)


def test_lab_partitions_and_heals_as_an_unprivileged_user(nobody_env):
    py, env, d = nobody_env
    p = _as_nobody([py, str(ROOT / "tests/cluster/unprivileged_lab.py"), str(d / "run")], env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["real_uid"] == NOBODY and r["mode"] == "userns" and r["userns"] is True
    assert r["cut"] == r["expected"] and len(r["cut"]) == 2
    assert r["healed"] == []
    # nothing of it was ever in our (the root) network namespace
    assert r["veth"] not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


@pytest.mark.slow
def test_cluster_cli_up_status_down_as_an_unprivileged_user(nobody_env):
    py, env, d = nobody_env
    up = _as_nobody([py, "-m", "logquake", "cluster", "up", "--nodes", "3", "--wait", "0", "--dir", str(d / "c")],
                    env=env)
    assert up.returncode == 0, up.stderr[-3000:]
    assert re.fullmatch(r"(10\.77\.\d+\.\d+:9092,){2}10\.77\.\d+\.\d+:9092", up.stdout.strip())
    status = _as_nobody([py, "-m", "logquake", "cluster", "status"], env={**env, "COLUMNS": "200"})
    assert status.returncode == 0, status.stderr[-3000:]
    rows = status_rows(status.stdout)
    assert sorted(rows) == ["n1", "n2", "n3"], status.stdout
    pids = [pid for _addr, pid, _up in rows.values()]
    assert all(pids) and all(up == "yes" for *_x, up in rows.values())
    down = _as_nobody([py, "-m", "logquake", "cluster", "down"], env=env)
    assert down.returncode == 0 and " down" in down.stdout, down.stderr
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
