"""Shared test fixtures, and a guard on the pytest process's open files."""

from __future__ import annotations

import collections
import os
import shutil
from collections.abc import Iterator

import pytest

# One pytest process runs every test: a leak of a few hundred files per module once took it past
# select()'s FD_SETSIZE (1024), and a test far from the leak failed. A quarter of that is the alarm.
FD_LIMIT = 256


def requires_root_or_userns() -> None:
    """Skip (with the reason) when this machine cannot make network namespaces."""
    if os.geteuid() != 0 and not shutil.which("unshare"):
        pytest.skip("needs root or unshare for network namespaces")


def open_fd_targets() -> list[str]:
    """What each of this process's open file descriptors points at (a path, socket:[n], pipe:[n])."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed between the listing and the readlink (the listing's own fd)
            pass
    return targets


def fd_leak_message(limit: int = FD_LIMIT) -> str | None:
    """None while the process holds at most `limit` files; else how many, and of what kinds."""
    targets = open_fd_targets()
    if len(targets) <= limit:
        return None
    kinds = collections.Counter(t.split(":[")[0] if ":[" in t else os.path.dirname(t) for t in targets)
    common = ", ".join(f"{n} x {kind}" for kind, n in kinds.most_common(5))
    return f"the test process holds {len(targets)} open files (alarm above {limit}): {common}"


@pytest.fixture(autouse=True, scope="module")
def _no_fd_leak() -> Iterator[None]:
    yield
    message = fd_leak_message()
    if message:
        pytest.fail(f"{message}; a test in this module left them open", pytrace=False)
