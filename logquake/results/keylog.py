"""The per-key log view: a key's offsets left to right, who wrote and who read each value.

Built from a `KeyTrace` (digest.py) plus what the checker's examples name for the key. A
cell is flagged, and highlighted in the report, when the history itself shows a conflict
(two values at one offset, one value at two offsets, a value whose only writers failed, an
acknowledged value below the highest read offset that nobody read) or when an anomaly
example names its offset or value. Long logs show windows around the flagged offsets,
with the skipped stretches counted, so a key with 50,000 offsets stays one screen wide.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from logquake.results.digest import KeyTrace, Write

CONTEXT = 2  # offsets shown either side of a flagged one
MAX_COLUMNS = 150
PLAIN_HEAD, PLAIN_TAIL = 40, 10  # shown when nothing is flagged
MAX_READERS_LISTED = 3


@dataclass(frozen=True, kw_only=True)
class ValueCell:
    value: str
    writers: str
    writers_title: str
    readers: str
    readers_title: str
    flags: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Column:
    offset: int | None  # None: a gap of `skipped` offsets, `hidden` of which hold values not shown
    skipped: int = 0
    hidden: int = 0
    cells: list[ValueCell] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return any(c.flags for c in self.cells)


@dataclass(frozen=True, kw_only=True)
class KeyLogView:
    key: Any
    columns: list[Column]
    unplaced: list[ValueCell]  # writes with no offset (failed, or the ack was lost)
    n_offsets: int
    n_flagged: int
    capped: bool


def _writers(writes: list[Write], offset: int | None = None) -> tuple[str, str]:
    if not writes:
        return "—", "no op in the history sent this value"

    def one(w: Write) -> str:
        elsewhere = offset is not None and w.offset is not None and w.offset != offset
        return f"op {w.op} ({w.type}{f', acked at {w.offset}' if elsewhere else ''})"

    text = ", ".join(one(w) for w in writes[:2]) + (" …" if len(writes) > 2 else "")
    return text, "; ".join(f"op {w.op} {w.type} at offset {w.offset}" for w in writes)


def _readers(readers: list[int]) -> tuple[str, str]:
    if not readers:
        return "never read", "no ok poll read this value here"
    shown = ", ".join(str(r) for r in readers[:MAX_READERS_LISTED])
    more = f" +{len(readers) - MAX_READERS_LISTED}" if len(readers) > MAX_READERS_LISTED else ""
    return f"{len(readers)}× (op {shown}{more})", "read by ops " + ", ".join(str(r) for r in readers[:200])


def _cells_at(trace: KeyTrace, offset: int) -> dict[Any, tuple[list[Write], list[int]]]:
    """value -> (writes that put it at this offset or without one, readers at this offset)."""
    out: dict[Any, tuple[list[Write], list[int]]] = {}
    for v, readers in trace.reads.get(offset, {}).items():
        writes = trace.writes.get(v, [])
        # a duplicate's writer was acknowledged at one of its offsets only: name it anyway
        out[v] = ([w for w in writes if w.offset in (offset, None)] or list(writes), readers)
    return out


def key_log_view(key: Any, trace: KeyTrace, marked_offsets: set[Any], marked_values: set[Any],
                 why: dict[Any, str]) -> KeyLogView:
    """The view of one key; `marked_*` come from the anomaly examples that name it."""
    at: dict[int, dict[Any, tuple[list[Write], list[int]]]] = {o: _cells_at(trace, o) for o in trace.reads
                                                              if isinstance(o, int)}
    offsets_of: dict[Any, set[int]] = {}
    for v, writes in trace.writes.items():
        for w in writes:
            if isinstance(w.offset, int):
                cell = at.setdefault(w.offset, {}).setdefault(v, ([], []))
                if w not in cell[0]:
                    cell[0].append(w)
    for o, values in at.items():
        for v in values:
            offsets_of.setdefault(v, set()).add(o)
    max_read = max((o for o in trace.reads if isinstance(o, int)), default=-1)
    flags: dict[int, dict[Any, list[str]]] = {}
    for o, values in at.items():
        for v, (writes, readers) in values.items():
            f = _flags(o, v, values, writes, readers, offsets_of, max_read, marked_offsets, marked_values, why)
            flags.setdefault(o, {})[v] = f
    flagged = sorted(o for o, fs in flags.items() if any(fs.values()))
    shown, capped = _choose(sorted(at), flagged)
    columns = _columns(shown, sorted(at), at, flags)
    unplaced = [
        ValueCell(value=str(v), writers=_writers([w])[0], writers_title=_writers([w])[1], readers="",
                  readers_title="", flags=["write with no offset" + (f"; {why[v]}" if v in why else "")])
        for v, writes in trace.writes.items() for w in writes
        if w.offset is None and (v in marked_values or v not in offsets_of)
    ][:50]
    return KeyLogView(key=key, columns=columns, unplaced=unplaced, n_offsets=len(at), n_flagged=len(flagged),
                      capped=capped)


def _flags(o: int, v: Any, values: dict, writes: list[Write], readers: list[int], offsets_of: dict,
           max_read: int, marked_offsets: set, marked_values: set, why: dict) -> list[str]:
    out = []
    if len(values) > 1:
        out.append(f"offset {o} holds {len(values)} values")
    if len(offsets_of.get(v, ())) > 1:
        out.append("value also at offsets " + ", ".join(str(x) for x in sorted(offsets_of[v] - {o})[:5]))
    if writes and all(w.type == "fail" for w in writes) and readers:
        out.append("read, but its only writers failed")
    if not readers and o < max_read and any(w.type == "ok" for w in writes):
        out.append("acknowledged, below the highest read offset, never read")
    if o in marked_offsets or v in marked_values:
        out.append(f"named by {why.get(v, 'an anomaly')}")
    return out


def _choose(offsets: list[int], flagged: list[int]) -> tuple[list[int], bool]:
    """Offsets to show: windows around flagged ones, capped; or the head and tail."""
    if len(offsets) <= MAX_COLUMNS:
        return offsets, False
    if not flagged:
        return offsets[:PLAIN_HEAD] + offsets[-PLAIN_TAIL:], True
    index = {o: i for i, o in enumerate(offsets)}
    keep: set[int] = set()
    for o in flagged:
        i = index[o]
        keep.update(offsets[max(0, i - CONTEXT): i + CONTEXT + 1])
        if len(keep) >= MAX_COLUMNS:
            break
    return sorted(keep), True


def _columns(shown: list[int], known: list[int], at: dict, flags: dict) -> list[Column]:
    cols: list[Column] = []
    prev = -1
    for o in shown:
        if o > prev + 1:
            hidden = bisect.bisect_left(known, o) - bisect.bisect_right(known, prev)
            cols.append(Column(offset=None, skipped=o - prev - 1, hidden=hidden))
        cells = []
        for v, (writes, readers) in sorted(at[o].items(), key=lambda kv: str(kv[0])):
            w_text, w_title = _writers(writes, o)
            r_text, r_title = _readers(readers)
            cells.append(ValueCell(value=str(v), writers=w_text, writers_title=w_title, readers=r_text,
                                   readers_title=r_title, flags=flags[o][v]))
        cols.append(Column(offset=o, cells=cells))
        prev = o
    return cols
