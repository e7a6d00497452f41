"""A queue history checked straight from its file, holding no list of its ops.

A loaded history is mostly its ops' values (micro-ops, poll maps, [offset, value] lists),
and the index build_index makes from them keeps only a part of that: each op's sends as
tuples and its reads. So `check_history` given a `HistoryFile` instead of a list indexes
the ops as they are read, one at a time: each poll's pairs go into one PairStore
(queue_pairs.py), the op becomes a StoredTxn (queue_index.py) keeping its sends, its other
fields columns of one TxnTable with where its reads lie in the store (made into a dict of
views only when asked: LazyReads), and the op itself, like an invocation once completed,
is dropped. The few analyses that read the ops' own fields
again (final_read; duplicate_cases with a dedup window and a duplicate) iterate the
HistoryFile, which reads the file anew.

Measured on bench_checker's 1M-op history (214 MiB): see memory.STREAMED_CHECK_PER_BYTE.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from logquake.checker.queue_pairs import PairStore
from logquake.history import INVOKE, NEMESIS, Op, read_history

__all__ = ["HistoryFile", "indexed_ops"]

FINAL = "final"  # (final_read.FINAL: an op of the drain's final read)
_CHUNK = 4096  # ops read ahead, so their polls are moved into the store in one batch


class HistoryFile:
    """A history.jsonl where a list of ops would go: each iteration reads the file anew.

    `has_final` is whether some op is marked final, once `indexed_ops` has read it all
    (None before): final_read then need not read the file again to find out.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.has_final: bool | None = None

    def __iter__(self) -> Iterator[Op]:
        return read_history(self.path)

    def __repr__(self) -> str:
        return f"HistoryFile({str(self.path)!r})"


def indexed_ops(history: HistoryFile) -> Iterator[Op]:
    """The history's ops, read ahead in chunks so that each completion's polls are already
    views into one PairStore when it is yielded (build_index then reads them in place)."""
    store = PairStore()
    chunk: list[Op] = []
    final = False
    for op in history:
        if op.process != NEMESIS and op.type != INVOKE:
            store.take_polls(op.value)
        if op.extra and op.extra.get(FINAL):
            final = True
        chunk.append(op)
        if len(chunk) >= _CHUNK:
            store.flush()
            yield from chunk
            chunk = []
    store.flush()
    yield from chunk
    history.has_final = final
