"""What a node gets when a fault needs it (`NodeNeeds`), for any system on any Host.

faketime: libfaketime preloaded, reading a per-node offset file (faketime.rc in node_dir) on
every call, so the clock fault moves a node's wall clock by rewriting one file. lazyfs: the
node's data dir is a FUSE mount over data.backing/ that drops unfsynced writes on demand.
A system's lifecycle calls `faketime_env` and `mount_lazyfs` when it starts a node; the faults
call `set_clock` and `drop_unsynced`. None of them knows which system the node runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from logquake.cluster.host import Host, pid_alive, run_checked
from logquake.errors import HostError
from logquake.systems.base import NodeSpec

__all__ = ["FAKETIME_SITE", "LIBFAKETIME", "drop_unsynced", "faketime_env", "fuse_usable", "mount_lazyfs",
           "put_text", "read_pid", "set_clock"]

log = logging.getLogger(__name__)

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
FAKETIME_SITE = str(Path(__file__).with_name("faketime_site"))


def put_text(host: Host, remote: str, text: str) -> None:
    """Write text to a file on the host (through a local temporary file and `put`)."""
    with tempfile.NamedTemporaryFile("w", delete=False, suffix=".tmp") as f:
        f.write(text)
    try:
        host.put(f.name, remote)
    finally:
        os.unlink(f.name)


def read_pid(host: Host, pidfile: str) -> int | None:
    rc, out, _ = host.exec(["cat", pidfile], timeout=20)
    try:
        return int(out.strip()) if rc == 0 else None
    except ValueError:
        return None


def set_clock(host: Host, spec: NodeSpec, offset_s: float) -> None:
    """Shift the node's wall clock by offset_s from now on (libfaketime re-reads the file)."""
    # Written aside and renamed: libfaketime re-reads the file on every call and must never
    # see it half-written (an empty file would mean true time for an instant).
    path = spec.path("faketime.rc")
    put_text(host, path + ".new", f"{offset_s:+.3f}\n")
    run_checked(host, ["mv", "-f", path + ".new", path])


def faketime_env(spec: NodeSpec, site: str | None) -> dict[str, str]:
    """The environment that puts a node's process under the offset file.

    `site` is where the sitecustomize shim for Python processes is on the node; None when the
    node's interpreter puts it on its path itself (the ssh backend's wrapper).
    """
    # Only CLOCK_REALTIME is faked: a real clock fault (NTP step, bad RTC) never moves the
    # monotonic clock, and faking it would break the node's timers in ways no real
    # deployment sees. FAKETIME_NO_CACHE makes every change visible on the next call
    # (~5 us per wall-clock read, no measurable cost to a broker).
    # libfaketime then breaks Python's time.sleep; FAKETIME_SITE's sitecustomize mends it.
    # FAKETIME_FORCE_MONOTONIC_FIX=0: libfaketime 0.9.10 turns that fix on by itself for this
    # glibc, and with it every hand-over of the GIL between threads (a timed wait on a
    # CLOCK_MONOTONIC condition variable) became ~50x slower: the clock cells ran 7-23
    # transactions per 30 s instead of ~800. Timed waits stay exact without it.
    env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": spec.path("faketime.rc"),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_FORCE_MONOTONIC_FIX": "0"}
    if site:
        # In front of the path the process would have had, not instead of it: a harness run
        # from a snapshot (PYTHONPATH=/tmp/snap) must not get brokers of the editable install.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
    return env


def mount_lazyfs(host: Host, spec: NodeSpec, python: str) -> None:
    """Mount data/ as LazyFS over data.backing/ unless mounted; HostError with its log tail if it fails."""
    running = read_pid(host, spec.path("lazyfs.pid"))
    if running is not None and pid_alive(host, running):
        return
    argv = [python, "-m", "logquake.nemesis.lazyfs", spec.path("data.backing"), spec.data_dir]
    pid = host.spawn(argv, pidfile=spec.path("lazyfs.pid"), logfile=spec.path("lazyfs.log"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rc, _, _ = host.exec(["test", "-e", spec.data_dir + "/.lazyfs"], timeout=20)
        if rc == 0:
            return
        if not pid_alive(host, pid):
            break
        time.sleep(0.05)
    rc, out, _ = host.exec(["tail", "-n", "5", spec.path("lazyfs.log")])
    raise HostError(spec.name, "lazyfs mount", -1, out)


def drop_unsynced(host: Host, spec: NodeSpec) -> None:
    """Lose every write to the node's data dir that was not fsynced (as a power cut would)."""
    run_checked(host, ["sh", "-c", "echo crash > \"$1\"", "sh", spec.data_dir + "/.lazyfs"])


def fuse_usable() -> bool:
    """LazyFS needs /dev/fuse: root has it; inside an unprivileged user namespace it is not ours to open."""
    usable = os.access("/dev/fuse", os.R_OK | os.W_OK) and bool(shutil.which("fusermount3") or os.geteuid() == 0)
    if not usable:
        log.warning("no usable /dev/fuse: disk faults limited to corrupt-tail (lose-unfsynced needs FUSE)")
    return usable

