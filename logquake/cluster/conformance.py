"""`check_host`: the contract every Host backend must meet, runnable against any of them.

Like trio's check_*_stream helpers: a backend's tests call `check_host(host, workdir)` with a
scratch directory on the node; it raises AssertionError naming the broken promise.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time

from logquake.cluster.host import Host, pid_alive, run_checked, shell_join, wait_dead

__all__ = ["check_host"]

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
    host.signal(pid, signal.SIGKILL)
    assert wait_dead(host, pid), "SIGKILL must end the daemon"
    host.signal(pid, signal.SIGKILL)  # a process already gone is not an error
