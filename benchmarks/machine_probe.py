"""How fast this machine is right now: four small fixed probes, for telling a slow machine
from a slow change.

A VM's speed drifts through the day, for reasons outside it (other load on its host), and
the benchmarks' figures drift with it. Each benchmark compares against a reference of its
own in the same run, which places a figure but cannot say that the machine as a whole was
slow. These probes can: run_all measures them before and after the benchmarks, so two tables taken
hours apart show whether the machine or the code changed.

- python: a fixed loop of integer arithmetic and dict inserts, CPU seconds (the interpreter's
  speed: the brokers, the harness and the checker are mostly this);
- python objects: building half a million small dicts and lists with the GC paused, CPU s
  (allocation and first touch of the memory they take: the history's ops and the checker's
  index are this);
- fresh memory: first writes to newly mapped memory, MB/s (page faults and zeroing: what
  large allocations, such as the checker's index, pay for);
- fdatasync: median latency of one 1 KiB append + fdatasync in the temporary directory, ms
  (what every acknowledged write of the brokers waits for).

    .venv/bin/python benchmarks/machine_probe.py [--json]
"""

from __future__ import annotations

import gc
import json
import mmap
import os
import statistics
import sys
import tempfile
import time

_LOOP = 2_000_000
_FRESH_BYTES = 256 << 20
_SYNCS = 100


def python_seconds() -> float:
    t = time.process_time()
    x = 0
    for i in range(_LOOP):
        x += i * i % 7
    d = {}
    for i in range(_LOOP // 10):
        d[i] = i
    return time.process_time() - t


def objects_seconds() -> float:
    """With the cyclic GC paused, as the checker runs: otherwise its scans are most of the time."""
    gc.disable()
    try:
        t = time.process_time()
        objs = [{"index": i, "value": [i, [i, i]]} for i in range(500_000)]
        took = time.process_time() - t
        del objs
    finally:
        gc.enable()
    return took


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


def probe() -> dict[str, float]:
    return {"python_s": python_seconds(), "objects_s": objects_seconds(), "fresh_memory_mb_s": fresh_memory_mb_s(),
            "fdatasync_ms": fdatasync_ms()}


def main() -> None:
    p = probe()
    if "--json" in sys.argv[1:]:
        print(json.dumps(p))
        return
    print(f"python loop: {p['python_s']:.3f} s")
    print(f"python objects: {p['objects_s']:.3f} s")
    print(f"fresh memory: {p['fresh_memory_mb_s']:,.0f} MB/s")
    print(f"fdatasync p50: {p['fdatasync_ms']:.3f} ms")


if __name__ == "__main__":
    main()
