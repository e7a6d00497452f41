"""heap.py's figures follow real allocations (the memory gauges of the broker's stats line)."""

from __future__ import annotations

import ctypes

import pytest

from logquake.broker.heap import heap_figures


def test_heap_figures_see_a_block_malloc_hands_out() -> None:
    f0 = heap_figures()
    assert f0["rss_kib"] > 0
    if "heap_used_kib" not in f0:
        pytest.skip("no glibc mallinfo2 here")
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    p = libc.malloc(16 << 20)
    ctypes.memset(p, 1, 16 << 20)  # touched: resident too
    try:
        f1 = heap_figures()
    finally:
        libc.free(p)
    held = (f1["heap_used_kib"] + f1["heap_mmap_kib"]) - (f0["heap_used_kib"] + f0["heap_mmap_kib"])
    assert 16 << 10 <= held < 17 << 10
    assert f1["rss_kib"] - f0["rss_kib"] >= 15 << 10
