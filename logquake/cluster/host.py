"""The `Host` protocol: how logquake reaches a node (Jepsen's `Remote`), and helpers on top.

Every backend (lab, docker, ssh) implements only these five methods; the broker's lifecycle
and every fault are written once over them. Commands are argument lists; `shell_join` is the
one place that quotes them for a shell, so no caller ever builds a command string by hand.
"""

from __future__ import annotations

import shlex
import signal as _signal
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from logquake.errors import HostError

__all__ = ["ExecResult", "Host", "shell_join", "run_checked", "spawn_script", "pid_alive", "wait_dead",
           "wait_stopped"]


class ExecResult(NamedTuple):
    rc: int
    out: str
    err: str


class Host(Protocol):
    """One node as the harness sees it. Implementations must not interpret commands."""

    name: str

    def exec(self, argv: Sequence[str], *, timeout: float = 60.0, input: str | None = None) -> ExecResult:
        """Run argv on the node and wait; never raises for a non-zero exit (see run_checked)."""
        ...

    def put(self, local: str, remote: str) -> None:
        """Copy a local file to `remote` on the node, creating parent directories."""
        ...

    def get(self, remote: str, local: str) -> None:
        """Copy a file from the node to `local`."""
        ...

    def spawn(self, argv: Sequence[str], *, pidfile: str, logfile: str, env: Mapping[str, str] = {}) -> int:
        """Start a daemon detached from the harness (survives it), write its pid to pidfile, return it."""
        ...

    def signal(self, pid: int, sig: int) -> None:
        """Send a signal to a process on the node; a process already gone is not an error."""
        ...


def shell_join(argv: Sequence[str]) -> str:
    """The single place where an argument list becomes shell text."""
    return " ".join(shlex.quote(str(a)) for a in argv)


def run_checked(host: Host, argv: Sequence[str], *, timeout: float = 60.0, input: str | None = None) -> str:
    """stdout of argv on host, or HostError with node, command, rc and the stderr tail."""
    rc, out, err = host.exec(argv, timeout=timeout, input=input)
    if rc != 0:
        raise HostError(host.name, shell_join(argv), rc, err)
    return out


def spawn_script(argv: Sequence[str], *, pidfile: str, logfile: str, env: Mapping[str, str]) -> list[str]:
    """A command that daemonizes argv the way start-stop-daemon would, portable to any POSIX host.

    `setsid -f` detaches it into its own session (the harness's death or SIGINT never reaches
    it); the shell writes its own pid before exec-ing, so the pid file names the daemon itself.
    """
    prefix = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
    body = f"echo $$ > {shlex.quote(pidfile)}; exec {shell_join([*prefix, *argv])}"
    body += f" >> {shlex.quote(logfile)} 2>&1 < /dev/null"
    return ["setsid", "-f", "sh", "-c", body]


def spawn_by_shell(host: Host, argv: Sequence[str], *, pidfile: str, logfile: str,
                   env: Mapping[str, str]) -> int:
    """`Host.spawn` for hosts reached only through `exec` (docker, ssh): run spawn_script,
    then wait for the daemon's pid file."""
    host.exec(["rm", "-f", pidfile])
    run_checked(host, spawn_script(argv, pidfile=pidfile, logfile=logfile, env=env), timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rc, out, _ = host.exec(["cat", pidfile], timeout=20)
        if rc == 0 and out.strip().isdigit():
            return int(out.strip())
        time.sleep(0.02)
    raise HostError(host.name, shell_join(argv), -1, f"no pid in {pidfile} after 30 s")


def signal_by_kill(host: Host, pid: int, sig: int) -> None:
    """`Host.signal` through `kill` on the host; a process already gone is not an error."""
    host.exec(["kill", f"-{int(sig)}", str(pid)], timeout=20)


def pid_alive(host: Host, pid: int) -> bool:
    """True when pid runs on host and is not a zombie (init here may never reap it)."""
    rc, out, _ = host.exec(["ps", "-o", "stat=", "-p", str(pid)], timeout=20)
    return rc == 0 and bool(out.strip()) and not out.strip().startswith("Z")


def all_threads_stopped(task_stats: str) -> bool:
    """Whether every line of /proc/<pid>/task/*/stat shows a stopped thread (state T or t,
    the field after the command name's closing parenthesis); False for no line at all."""
    states = [line.rpartition(")")[2].split()[:1] for line in task_stats.splitlines() if line.strip()]
    return bool(states) and all(st and st[0] in ("T", "t") for st in states)


def wait_stopped(host: Host, pid: int, *, timeout: float = 5.0) -> bool:
    """Wait until every thread of pid is stopped after a SIGSTOP; False at `timeout` (a thread
    in uninterruptible I/O stops when that ends) or once pid is gone.

    kill() returns before the process stops: the kernel wakes one thread to begin the group
    stop and the others run on until it does, tens of ms later on a loaded CPU, reading and
    answering requests sent after the pause (a suite run on a loaded machine met a "paused"
    nats-server that still took a batch)."""
    # Every thread's stat line (a thread that ends meanwhile is skipped); rc 1 once pid is gone.
    read = ["sh", "-c", f"cat /proc/{int(pid)}/task/*/stat 2>/dev/null; test -d /proc/{int(pid)}"]
    deadline = time.monotonic() + timeout
    while True:
        rc, stats, _ = host.exec(read, timeout=20)
        if rc == 0 and all_threads_stopped(stats):
            return True
        if rc != 0 or time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def wait_dead(host: Host, pid: int, *, timeout: float = 30.0) -> bool:
    """Wait until pid is gone; SIGKILL it again halfway (a stopped process ignores nothing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(host, pid):
            return True
        time.sleep(0.02)
    host.signal(pid, _signal.SIGKILL)
    return not pid_alive(host, pid)
