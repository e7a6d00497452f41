"""Contracts runnable against any implementation: `check_host` for every Host backend,
`check_node_lifecycle` for every system's NodeLifecycle.

Like trio's check_*_stream helpers: a backend's tests call `check_host(host, workdir)` with a
scratch directory on the node, a system's tests `check_node_lifecycle(lifecycle, host, node)`
on an installed node; each raises AssertionError naming the broken promise.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time

from logquake.cluster.host import Host, pid_alive, run_checked, shell_join, wait_dead, wait_stopped
from logquake.systems.base import Kill, NodeLifecycle, Pause

__all__ = ["check_host", "check_node_lifecycle"]

AWKWARD = ["plain", "two words", "it's", '"dq"', "$HOME", "`x`", "a;b", "*", "", "back\\slash", "new\nline"]


def check_host(host: Host, workdir: str) -> None:
    rc, out, err = host.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (rc, out, err) == (3, "out\n", "err\n"), f"exec must return (rc, stdout, stderr), got {(rc, out, err)}"
    out = run_checked(host, ["printf", "%s\\0", *AWKWARD])
    assert out.split("\0")[:-1] == AWKWARD, f"arguments must arrive verbatim: {out!r}"
    assert run_checked(host, ["cat"], input="stdin text") == "stdin text", "exec must pass input on stdin"
    assert run_checked(host, ["sh", "-c", 'printf %s "$1"', "sh", shell_join(["a b"])]) == "'a b'"
    # put / get round trip, creating parent directories
    with tempfile.TemporaryDirectory() as tmp:
        src, back = os.path.join(tmp, "src"), os.path.join(tmp, "back")
        with open(src, "wb") as f:
            f.write(b"bytes \x00\xff\n")
        host.put(src, f"{workdir}/sub/dir/file")
        host.get(f"{workdir}/sub/dir/file", back)
        with open(back, "rb") as f:
            assert f.read() == b"bytes \x00\xff\n", "put then get must give the same bytes"
    # spawn: detached, pid file names the daemon itself, env passed, output to the log file
    pid = host.spawn(["sh", "-c", 'echo "started $LQ_VAR"; exec sleep 300'], pidfile=f"{workdir}/d.pid",
                     logfile=f"{workdir}/d.log", env={"LQ_VAR": "with space"})
    assert pid_alive(host, pid), "a spawned daemon must be running"
    assert run_checked(host, ["cat", f"{workdir}/d.pid"]).strip() == str(pid), "pid file must hold the daemon's pid"
    deadline = time.monotonic() + 30
    while "started with space" not in host.exec(["cat", f"{workdir}/d.log"]).out:
        assert time.monotonic() < deadline, "daemon output must reach its log file, with env set"
        time.sleep(0.02)
    # pause as the faults send it: a SIGSTOP, then wait_stopped reads the threads' states
    host.signal(pid, signal.SIGSTOP)
    assert wait_stopped(host, pid), "a SIGSTOPped daemon must be seen stopped"
    host.signal(pid, signal.SIGCONT)
    assert not wait_stopped(host, pid, timeout=0.2), "a resumed daemon must not be seen stopped"
    host.signal(pid, signal.SIGKILL)
    assert wait_dead(host, pid), "SIGKILL must end the daemon"
    host.signal(pid, signal.SIGKILL)  # a process already gone is not an error


def check_node_lifecycle(lc: NodeLifecycle, host: Host, node: str) -> None:
    """The NodeLifecycle contract (and Kill's, Pause's where offered) on an installed node; leaves it up."""
    spec = lc.spec(node)
    assert spec.name == node, f"spec({node!r}) must describe that node, got {spec.name!r}"
    can_kill = isinstance(lc, Kill)

    def up() -> bool:
        return lc.is_up(node) if isinstance(lc, Kill) else True

    lc.start(node)
    lc.start(node)  # a running node is left alone
    assert up(), "start must leave the node up"
    logs = lc.logs(node)
    assert logs and all(isinstance(p, str) for p in logs), f"logs must list paths, got {logs!r}"
    assert host.exec(["test", "-e", logs[0]]).rc == 0, f"the process's own output {logs[0]} must exist once started"
    if isinstance(lc, Pause):
        assert lc.pause(node) and up(), "a paused node is still up"
        assert lc.resume(node), "resume must reach a paused node"
    lc.stop(node, timeout=10.0)
    assert not can_kill or not up(), "stop must end the node's process"
    lc.stop(node, timeout=10.0)  # a stopped node is not an error
    lc.start(node)
    marker = f"{spec.data_dir}/lq-conformance"
    run_checked(host, ["sh", "-c", 'echo x > "$1"', "sh", marker])
    lc.wipe(node)
    assert not can_kill or not up(), "wipe must stop the node at once"
    assert host.exec(["test", "-e", marker]).rc != 0, "wipe must delete the node's data"
    lc.start(node)  # the configuration survives a wipe
    assert up(), "a wiped node must start again"
    if isinstance(lc, Kill):
        assert lc.kill(node) and not lc.is_up(node), "kill must end the process"
        assert not lc.kill(node), "killing a dead node must say it was not running"
        lc.start(node)
        assert lc.is_up(node), "a killed node must start again"
