"""dockerd for the docker backend's tests: started when absent (scripts/start-dockerd.sh), else a skip."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def docker_skip_reason() -> str | None:
    """None when dockerd answers (starting it if needed) and the node image builds; else why not."""
    if os.geteuid() != 0:
        return "the docker tests start dockerd and need root"
    p = subprocess.run([str(ROOT / "scripts" / "start-dockerd.sh")], capture_output=True, text=True, timeout=180)
    if p.returncode != 0:
        return f"dockerd cannot run here: {(p.stderr or p.stdout).strip()[-400:]}"
    from logquake.cluster.docker import build_image, docker_client
    from logquake.errors import LogquakeError

    try:
        build_image(docker_client())
    except LogquakeError as e:
        return f"the node image cannot be built: {e}"
    return None


def require_docker() -> None:
    reason = docker_skip_reason()
    if reason:
        pytest.skip(reason)
