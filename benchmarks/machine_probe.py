"""How fast this machine is right now: four small fixed probes, for telling a slow machine
from a slow change.

A VM's speed drifts through the day, for reasons outside it (other load on its host), and
the benchmarks' figures drift with it. Each benchmark compares against a reference of its
own in the same run, which places a figure but cannot say that the machine as a whole was
slow. These probes can: run_all measures them before and after the benchmarks, so two
tables taken hours apart show whether the machine or the code changed.

- python loop: a loop of integer arithmetic, millions of iterations per CPU second (the
  interpreter's speed: the brokers, the harness and the checker are mostly this);
- python objects: small dicts and lists built and freed with the GC paused, millions per CPU
  second (allocation: the history's ops and the checker's index are this);
- fresh memory: first writes to newly mapped memory, MB/s (page faults and zeroing: what
  large allocations, such as the checker's index, pay for);
- fdatasync: median latency of one 1 KiB append + fdatasync in the temporary directory, ms
  (what every acknowledged write of the brokers waits for).

Each CPU probe runs for 3 s of wall time: from one second to the next this VM's speed moved
by up to 1.8x (a plain loop: 13.8-24.6 M iterations per second over 30 s), so a probe of a
fraction of a second measured the second it ran in, not the machine.

Read the four together: a slow phase may be in memory alone. The loop can run at full speed
(~26 M/s) while the checker's json reference takes 1.7x its usual time; then the objects and
fresh-memory figures are the ones that are down, and work that allocates much slows while a
loop over a few objects does not.

    .venv/bin/python benchmarks/machine_probe.py [--json] [--seconds 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import mmap
import os
import statistics
import tempfile
import time
from collections.abc import Callable

_SECONDS = 3.0  # per CPU probe: this VM's speed moves second by second, a short probe is noise
_FRESH_BYTES = 256 << 20
_SYNCS = 100


def _rate(step: Callable[[], int], seconds: float) -> float:
    """Units per CPU second of `step` (returning how many it did), run for `seconds` of wall time."""
    done, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        done += step()
    return done / (time.process_time() - c0)


def _loop() -> int:
    x = 0
    for i in range(20_000):
        x += i * i % 7
    return 20_000


def _objects() -> int:
    objs = [{"index": i, "value": [i, [i, i]]} for i in range(20_000)]
    del objs
    return 20_000


def python_rate(seconds: float = _SECONDS) -> float:
    """Millions of loop iterations (integer arithmetic) per CPU second."""
    return _rate(_loop, seconds) / 1e6


def objects_rate(seconds: float = _SECONDS) -> float:
    """Millions of small dicts and lists built per CPU second, with the cyclic GC paused as the
    checker runs (otherwise its scans are most of the time)."""
    gc.disable()
    try:
        return _rate(_objects, seconds) / 1e6
    finally:
        gc.enable()


def fresh_memory_mb_s() -> float:
    """First writes to an anonymous mapping, one 1 MiB slice at a time."""
    chunk = b"\1" * (1 << 20)
    m = mmap.mmap(-1, _FRESH_BYTES)
    try:
        t = time.perf_counter()
        for off in range(0, _FRESH_BYTES, len(chunk)):
            m[off : off + len(chunk)] = chunk
        return _FRESH_BYTES / 2**20 / (time.perf_counter() - t)
    finally:
        m.close()


def fdatasync_ms(directory: str | None = None) -> float:
    with tempfile.TemporaryDirectory(dir=directory, prefix="logquake-probe-") as d:
        fd = os.open(os.path.join(d, "probe"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            times = []
            for _ in range(_SYNCS):
                os.write(fd, b"x" * 1024)
                t = time.perf_counter()
                os.fdatasync(fd)
                times.append(time.perf_counter() - t)
        finally:
            os.close(fd)
    return statistics.median(times) * 1e3


def probe(seconds: float = _SECONDS) -> dict[str, float]:
    return {"python_mops": python_rate(seconds), "objects_mops": objects_rate(seconds),
            "fresh_memory_mb_s": fresh_memory_mb_s(), "fdatasync_ms": fdatasync_ms()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--seconds", type=float, default=_SECONDS, help="wall time of each CPU probe")
    a = ap.parse_args()
    if not a.seconds > 0:
        ap.error(f"--seconds must be positive, got {a.seconds:g}")
    p = probe(a.seconds)
    if a.json:
        print(json.dumps(p))
        return
    print(f"python loop: {p['python_mops']:.1f} M iterations per CPU s")
    print(f"python objects: {p['objects_mops']:.2f} M per CPU s")
    print(f"fresh memory: {p['fresh_memory_mb_s']:,.0f} MB/s")
    print(f"fdatasync p50: {p['fdatasync_ms']:.3f} ms")


if __name__ == "__main__":
    main()
