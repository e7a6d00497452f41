"""Where a run is stuck: every thread's stack, dumped into harness.log."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("logquake.runner")  # the runner's: harness.log names the run's lines alike

# s a bound's Python stack dump may wait for the GIL before faulthandler's C dump goes instead
DUMP_GRACE = 2.0


class StackDumps:
    """Every thread's stack appended to harness.log: on `kill -USR1 <pid>`, and unasked when
    a phase outlives its bound (`bound`).

    Written from Python, holding the GIL: no thread can change its frames while they are
    read. faulthandler's C dump reads them without the GIL and can crash the process while
    other threads run (a bound dump did, in the suite), so it is only the fallback, armed
    DUMP_GRACE s after a bound: if a library call holds the GIL (confluent-kafka's assign,
    subscribe and unsubscribe wait on librdkafka holding it), the Python dump cannot run,
    and neither can any other Python code, so the C dump is then the safe one and names the
    call. `kill -USR1` asks for the Python dump, `kill -USR2` for the C one (for a run whose
    USR1 writes nothing: a call holds the GIL). The signals are the main thread's to set;
    elsewhere (tests) only the bounds dump.
    """

    def __init__(self, path: Path) -> None:
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held until close()
        self._lock = threading.RLock()  # RLock: the signal handler may interrupt a dump
        self._closed = False
        self._signal = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1")
        if self._signal:
            self._previous = signal.signal(signal.SIGUSR1, lambda signum, frame: self.dump("SIGUSR1"))
            # When USR1 writes nothing (a call holds the GIL), USR2 asks for the C dump outright.
            faulthandler.register(signal.SIGUSR2, file=self._f, all_threads=True)

    def dump(self, why: str) -> None:
        """Every thread's stack, in faulthandler's layout, under a `why!` line."""
        names = {t.ident: t.name for t in threading.enumerate()}
        lines = [f"{why}!"]
        for ident, frame in sys._current_frames().items():
            lines.append(f"\nThread 0x{ident:016x} [{names.get(ident, '?')}] (most recent call first):")
            lines += [f'  File "{f.filename}", line {f.lineno} in {f.name}'
                      for f in traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)]
        with self._lock:
            if not self._closed:
                self._f.write("\n".join(lines) + "\n\n")
                self._f.flush()

    @contextlib.contextmanager
    def bound(self, what: str, seconds: float) -> Iterator[None]:
        """Dump every stack once if the block is still running after `seconds`."""
        log.info("%s bounded at %.0f s (past it, every thread's stack is dumped here)", what, seconds)
        faulthandler.dump_traceback_later(seconds + DUMP_GRACE, file=self._f)
        timer = threading.Timer(seconds, self._past_bound, args=(what, seconds))
        timer.daemon, timer.name = True, "stack-dump"
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            faulthandler.cancel_dump_traceback_later()

    def _past_bound(self, what: str, seconds: float) -> None:
        faulthandler.cancel_dump_traceback_later()  # the GIL was free: the safe dump goes instead
        self.dump(f"Timeout ({what} still running after its bound of {seconds:.1f} s)")

    def close(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self._signal:
            signal.signal(signal.SIGUSR1, self._previous)
            faulthandler.unregister(signal.SIGUSR2)
        with self._lock:
            self._closed = True
            self._f.close()
