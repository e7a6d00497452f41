"""The suite's guard on leaked file descriptors fires on a leak and stays quiet without one."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import FD_LIMIT, fd_leak_message


def test_quiet_while_the_process_holds_few_files() -> None:
    assert fd_leak_message() is None


def test_fires_past_the_limit_and_names_what_is_open(tmp_path: Path) -> None:
    held = len(os.listdir("/proc/self/fd"))
    fds = [os.open(tmp_path / f"f{i}", os.O_CREAT | os.O_RDONLY) for i in range(FD_LIMIT - held + 5)]
    try:
        message = fd_leak_message()
    finally:
        for fd in fds:
            os.close(fd)
    assert message is not None
    assert f"x {tmp_path}" in message
    assert fd_leak_message() is None
