"""Loaded (via PYTHONPATH) only into brokers started under libfaketime for clock faults.

libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1 answers Python's time.sleep (an
absolute clock_nanosleep on CLOCK_MONOTONIC) with EINVAL, and faking the monotonic clock
instead hangs timed thread waits. So the broker keeps a real monotonic clock, and time.sleep
is re-implemented on select(2), which libfaketime leaves alone.

Python imports only the first sitecustomize on its path, so this one then runs the one it
hides (the next on sys.path: a venv's, a distribution's), as if this one were not there.
"""

import importlib.machinery
import importlib.util
import os
import select
import sys
import time

if "faketime" in os.environ.get("LD_PRELOAD", ""):
    _monotonic = time.monotonic

    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        deadline = _monotonic() + seconds
        while (left := deadline - _monotonic()) > 0:
            select.select([], [], [], left)

    time.sleep = _sleep


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [os.path.abspath(p or os.curdir) for p in sys.path]
    # Only the entries after ours: a second copy of this shim further on chains onwards, never back.
    later = sys.path[dirs.index(here) + 1:] if here in dirs else [p for p, d in zip(sys.path, dirs, strict=True) if d != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_chain()
