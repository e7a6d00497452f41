"""Giving the heap's free pages back to the OS (glibc's `malloc_trim`), so a broker's RSS
follows the memory it holds, not the most it ever held.

Entry payloads, produce requests and fetch responses are blocks of up to megabytes. glibc
serves blocks that big from their own mappings only until one is freed; then it raises its
threshold (up to 32 MiB) and serves them from the heap, where, freed between long-lived small
objects, their pages may stay resident. Pinning the threshold (mallopt) instead cost bulk
writes twice the time (a fresh zeroed mapping per block); node.py trims when writes pause."""

from __future__ import annotations

import ctypes
import time

__all__ = ["trim_heap"]

try:
    _malloc_trim = ctypes.CDLL(None).malloc_trim
except (OSError, AttributeError):  # no glibc: nothing to do
    _malloc_trim = None


def trim_heap() -> float:
    """Release the free pages of every malloc arena; returns the seconds it took (0: no glibc)."""
    if _malloc_trim is None:
        return 0.0
    t0 = time.perf_counter()
    _malloc_trim(0)
    return time.perf_counter() - t0
