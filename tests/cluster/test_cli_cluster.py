"""`logquake cluster up / status / down` end to end, with real brokers."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .labkit import require_lab, status_rows, wait_until

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _cli(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logquake", "cluster", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_up_status_down(tmp_path):
    require_lab()
    from confluent_kafka import Producer

    env = dict(os.environ, LOGQUAKE_STATE_DIR=str(tmp_path / "state"), COLUMNS="200")
    up = _cli("up", "--nodes", "3", "--wait", "90", "--dir", str(tmp_path / "c"), env=env)
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        assert "ready" in up.stderr and "NOT ready" not in up.stderr
        bootstrap = up.stdout.strip()
        assert re.fullmatch(r"(10\.77\.\d+\.\d+:9092,){2}10\.77\.\d+\.\d+:9092", bootstrap)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "logger": logging.getLogger("rdkafka")})
        acked: list[bool] = []
        p.produce("status-topic", b"v", on_delivery=lambda e, m: acked.append(e is None))
        p.flush(60)
        assert acked == [True]

        def leader_row() -> str | None:
            out = _cli("status", env=env).stdout
            rows = [line for line in out.splitlines() if re.search(r"\bn[123]\b", line)]
            assert len(rows) == 3 and all("yes" in r for r in rows), out
            return next((r for r in rows if "status-topic/0" in r), None)

        assert wait_until(leader_row, timeout=60, what="a leader shown for status-topic/0")
        rows = status_rows(_cli("status", env=env).stdout)
        narrow = _cli("status", env={**env, "COLUMNS": "40"}).stdout
        assert f"bootstrap servers: {bootstrap}" in narrow.splitlines(), narrow  # never cut mid-address
        pids = [pid for _addr, pid, _up in rows.values()]
        assert sorted(rows) == ["n1", "n2", "n3"] and all(pids)
    finally:
        down = _cli("down", env=env)
    assert down.returncode == 0 and " down" in down.stdout, down.stderr
    assert not list((tmp_path / "state").glob("*.json"))
    for pid in pids:
        wait_until(lambda pid=pid: not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text(),
                   what=f"pid {pid} gone")
