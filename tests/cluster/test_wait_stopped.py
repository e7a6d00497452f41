"""wait_stopped: a pause returns once every thread of the process is stopped, not at kill()."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from logquake.cluster.host import all_threads_stopped, wait_stopped
from logquake.cluster.lab import LocalHost

HERE = LocalHost("here")
BUSY_THREADS = """
import sys, threading
def spin():
    while True:
        pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("up", flush=True)
sys.stdin.read()
"""


def _states(pid: int) -> list[str]:
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/stat") as f:
            states.append(f.read().rpartition(")")[2].split()[0])
    return states


def test_thread_states_are_read_past_a_command_name_with_spaces_and_parens() -> None:
    assert all_threads_stopped("12 (a) b) T 1 2\n13 (x y) t 1 2\n")
    assert not all_threads_stopped("12 (a) b) T 1 2\n13 (x y) R 1 2\n")
    assert not all_threads_stopped("12 (T) S 1 2\n")  # the state field, not the name
    assert not all_threads_stopped("")


def test_a_paused_process_with_busy_threads_is_waited_for_until_every_thread_stopped() -> None:
    p = subprocess.Popen([sys.executable, "-c", BUSY_THREADS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "up\n"
        assert len(_states(p.pid)) == 5
        os.kill(p.pid, signal.SIGSTOP)
        assert wait_stopped(HERE, p.pid)
        assert set(_states(p.pid)) == {"T"}, _states(p.pid)  # every thread, the spinning ones too
        os.kill(p.pid, signal.SIGCONT)
        assert not wait_stopped(HERE, p.pid, timeout=0.2)  # running again
    finally:
        p.kill()
        p.wait()
    assert not wait_stopped(HERE, p.pid)  # gone: at once, not at the timeout
