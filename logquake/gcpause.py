"""Pausing the cyclic garbage collector around passes that build millions of containers.

Reading or checking a history allocates tens of millions of small lists, dicts and ops and
keeps most of them alive, with no reference cycles among them. With the collector on, it
rescans the survivors over and over (it more than doubled the load time). Merely pausing
it is not enough: every container made meanwhile is still in the youngest generation when
it is switched back on, so the very next allocation anywhere starts a collection that walks
all of them once (3.8 s after loading a 1M-op history, paid by whatever ran next).

`paused_gc` therefore also moves what survived into the oldest generation on the way out
(gc.freeze then gc.unfreeze: two list splices, no scan). The oldest generation is only
collected once the objects promoted since its last collection outnumber a quarter of those
it held then, so these are walked again only by a later full collection, if any.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic collection inside; the survivors promoted to the oldest generation after."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            frozen_before = gc.get_freeze_count()
            gc.freeze()  # every tracked object into the permanent generation...
            if not frozen_before:  # (a program that froze objects itself keeps them frozen)
                gc.unfreeze()  # ...and back into the oldest one; the young generations are empty
            gc.enable()
