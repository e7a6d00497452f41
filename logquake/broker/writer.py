"""Writing a turn's Readies to the Raft logs: inline when small, else in one writer thread.

The node's ready loop is the only writer of the logs, so the thread never races another
writer; the event loop keeps serving requests and stepping messages meanwhile. Writing in
the thread too (not only the fsync) matters: a write() to a file being fdatasync'ed waits
for the sync, and the CRCs and the write release the GIL, so the second core gets real work.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["INLINE_SYNCED_BYTES", "INLINE_WRITE_BYTES", "WriterThread", "Writes", "is_small", "write_and_sync"]

Writes = list[tuple[Any, tuple[Any, ...], Any]]
"""(store, entries, hard state or None) per group with something to persist."""

INLINE_WRITE_BYTES = 64 << 10  # written inline when no fsync follows
INLINE_SYNCED_BYTES = 8 << 10  # written and fsynced inline


def is_small(writes: Writes, limit: int) -> bool:
    """At most `limit` bytes of entries in all."""
    size = 0
    for _, entries, _ in writes:
        for e in entries:
            size += len(e.data)
        if size > limit:
            return False
    return True


def write_and_sync(writes: Writes, to_sync: set[Any]) -> None:
    """Append every group's entries and hard state, then fsync the stores in `to_sync`."""
    for store, entries, hs in writes:
        store.append(entries, hs)
    for store in to_sync:
        store.sync()


class WriterThread:
    """One thread that runs the ready loop's `write_and_sync` calls, one at a time, each
    answered through an asyncio future.

    Instead of the loop's default executor: run_in_executor's submit, work item, semaphore
    and concurrent future chained to an asyncio one cost more than the rest of a write
    turn's hand-off; here it is a SimpleQueue put and one call_soon_threadsafe back."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self._loop = loop
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, writes: Writes, to_sync: set[Any]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self._loop.create_future()
        self._q.put((fut, writes, to_sync))
        return fut

    def close(self) -> None:
        """Stop after the queued writes (the ready loop has none left when the node stops)."""
        self._q.put(None)
        self._thread.join(30)

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            fut, writes, to_sync = item
            try:
                write_and_sync(writes, to_sync)
            except BaseException as e:  # noqa: BLE001 - handed to the ready loop, which raises it
                self._call(_fail, fut, e)
            else:
                self._call(_done, fut)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody waits for this write any more
            pass


def _done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _fail(fut: asyncio.Future[None], e: BaseException) -> None:
    if not fut.done():
        fut.set_exception(e)
