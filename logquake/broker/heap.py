"""The C heap: giving its free pages back to the OS (glibc's `malloc_trim`), so a broker's RSS
follows the memory it holds, not the most it ever held; and its figures (`heap_figures`) for
the stats line, so a soak shows where resident memory goes.

Entry payloads, produce requests and fetch responses are blocks of up to megabytes. glibc
serves blocks that big from their own mappings only until one is freed; then it raises its
threshold (up to 32 MiB) and serves them from the heap, where, freed between long-lived small
objects, their pages may stay resident. Pinning the threshold (mallopt) instead cost bulk
writes twice the time (a fresh zeroed mapping per block); node.py trims when writes pause."""

from __future__ import annotations

import ctypes
import os
import time
import tracemalloc

__all__ = ["heap_figures", "trim_heap"]

try:
    _libc = ctypes.CDLL(None)
    _malloc_trim = _libc.malloc_trim
except (OSError, AttributeError):  # no glibc: nothing to do
    _libc = _malloc_trim = None


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


try:
    _mallinfo2 = _libc.mallinfo2  # glibc >= 2.33
    _mallinfo2.restype = _Mallinfo2
except AttributeError:
    _mallinfo2 = None
_PAGE = os.sysconf("SC_PAGE_SIZE")


def trim_heap() -> float:
    """Release the free pages of every malloc arena; returns the seconds it took (0: no glibc)."""
    if _malloc_trim is None:
        return 0.0
    t0 = time.perf_counter()
    _malloc_trim(0)
    return time.perf_counter() - t0


def heap_figures() -> dict[str, int]:
    """KiB of: resident memory (`rss_kib`), the C heap's blocks in use (`heap_used_kib`, glibc's
    uordblks: Python objects under PYTHONMALLOC=malloc, and C libraries' buffers), free inside
    the heap (`heap_free_kib`, fordblks: fragmentation, until trimmed), in big blocks mapped
    on their own (`heap_mmap_kib`, hblkhd); and the arenas' count of free chunks
    (`heap_free_chunks`, ordblks). RSS minus used, free and mapped is what malloc does not
    serve: the interpreter's code and static data, thread stacks, other mappings. With
    tracemalloc on (process.py), `traced_kib`: the part of the heap Python's allocations hold.
    Only `rss_kib` without glibc's mallinfo2."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/statm", "rb") as f:
            out["rss_kib"] = int(f.read().split()[1]) * _PAGE >> 10
    except (OSError, IndexError, ValueError):
        pass
    if _mallinfo2 is not None:
        mi = _mallinfo2()
        out |= {"heap_used_kib": mi.uordblks >> 10, "heap_free_kib": mi.fordblks >> 10,
                "heap_mmap_kib": mi.hblkhd >> 10, "heap_free_chunks": mi.ordblks}
    if tracemalloc.is_tracing():
        out["traced_kib"] = tracemalloc.get_traced_memory()[0] >> 10
    return out
