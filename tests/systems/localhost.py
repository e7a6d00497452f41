"""`LocalHost`: a Host that is this machine itself, for tests of a system's lifecycle on 127.0.0.1.

The lab gives every node its own address and needs namespaces; a lifecycle's own tests need
neither, only distinct ports. Passes `check_host` like every backend.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from logquake.cluster.host import ExecResult, spawn_by_shell


class LocalHost:
    def __init__(self, name: str) -> None:
        self.name = name

    def exec(self, argv: Sequence[str], *, timeout: float = 60.0, input: str | None = None) -> ExecResult:
        try:
            p = subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=timeout, input=input)
        except subprocess.TimeoutExpired:
            return ExecResult(124, "", f"timed out after {timeout}s")
        return ExecResult(p.returncode, p.stdout, p.stderr)

    def put(self, local: str, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote)

    def get(self, remote: str, local: str) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(remote, local)

    def spawn(self, argv: Sequence[str], *, pidfile: str, logfile: str, env: Mapping[str, str] = {}) -> int:
        return spawn_by_shell(self, argv, pidfile=pidfile, logfile=logfile, env=env)

    def signal(self, pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
