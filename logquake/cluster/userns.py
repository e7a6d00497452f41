"""Privileges for the lab: root works directly; anyone else first enters a private namespace.

A normal user gets a private user + network + mount namespace (unshare(2), the way
`unshare -U -r -n -m` does it), becomes root inside it, and builds the lab there: no
privileges are needed and no test traffic can leave it. An anchor process keeps that
namespace alive after the harness exits, so a later `logquake cluster status/down` can join it
again (setns(2)). Both calls need a single-threaded process: call them before starting threads.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

from logquake.errors import MissingPrerequisite

__all__ = ["is_real_root", "in_private_userns", "enter_private_userns", "join_userns", "spawn_anchor"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
ENV_FLAG = "LOGQUAKE_USERNS"  # set once inside, inherited by children: we are "root" only in there

_libc = ctypes.CDLL(None, use_errno=True)


def in_private_userns() -> bool:
    return os.environ.get(ENV_FLAG) == "1"


def is_real_root() -> bool:
    """Root of the machine (not merely root inside our own user namespace)."""
    return os.geteuid() == 0 and not in_private_userns()


def _thread_count() -> int:
    try:
        return int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("Threads:")))
    except (OSError, StopIteration, ValueError):
        return 1


def _fail(what: str, errno: int) -> MissingPrerequisite:
    reason = os.strerror(errno)
    hint = "run as root, or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
    hint += "user.max_user_namespaces > 0)"
    if _thread_count() > 1:
        hint = "enter the namespace before any thread starts (the CLI does this first)"
    return MissingPrerequisite(f"cannot {what}: {reason}", hint=hint)


def enter_private_userns() -> None:
    """Move this (single-threaded) process into a new user+net+mount namespace as its root."""
    uid, gid = os.geteuid(), os.getegid()
    os.environ.setdefault("LOGQUAKE_REAL_UID", str(uid))
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS) != 0:
        raise _fail("create a user namespace", ctypes.get_errno())
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    os.environ[ENV_FLAG] = "1"
    subprocess.run(["ip", "link", "set", "lo", "up"], check=False, capture_output=True)


def join_userns(anchor_pid: int) -> None:
    """Join the user, network and mount namespaces of a running anchor process."""
    os.environ.setdefault("LOGQUAKE_REAL_UID", str(os.geteuid()))
    for kind, flag in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET), ("mnt", CLONE_NEWNS)):
        try:
            fd = os.open(f"/proc/{anchor_pid}/ns/{kind}", os.O_RDONLY)
        except OSError as e:
            raise MissingPrerequisite(f"cannot open the lab's {kind} namespace: {e.strerror}") from None
        try:
            if _libc.setns(fd, flag) != 0:
                raise _fail(f"join the lab's {kind} namespace", ctypes.get_errno())
        finally:
            os.close(fd)
    os.environ[ENV_FLAG] = "1"


def spawn_anchor() -> int:
    """A process that keeps the current namespaces alive after the harness exits."""
    p = subprocess.Popen(["sleep", "infinity"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p.pid
