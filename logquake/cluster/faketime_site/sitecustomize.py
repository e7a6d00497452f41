"""Loaded (via PYTHONPATH) only into brokers started under libfaketime for clock faults.

libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1 answers Python's time.sleep (an
absolute clock_nanosleep on CLOCK_MONOTONIC) with EINVAL, and faking the monotonic clock
instead hangs timed thread waits. So the broker keeps a real monotonic clock, and time.sleep
is re-implemented on select(2), which libfaketime leaves alone.
"""

import os
import select
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
