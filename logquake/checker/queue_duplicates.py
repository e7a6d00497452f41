"""Per-key log anomalies: one offset holding two values, one value at two offsets.

A duplicate is one value at more than one offset of its key. Where the system's dedup
forgets a message id after a window (JetStream's `duplicate_window`; `CheckOptions.
duplicate_window`), a retry made after the window may store the value again, within the
promise: such duplicates are `duplicate-after-window`, reported and never bad, and only the
others are `duplicate`. Which is which comes from when the value's publishes were attempted,
by every op that sent it (a `send`, or a restarted producer's `resend`): each op's
invocation, plus its `attempts` where it tried more than once (README.md's History format).

The server counts its window from storing the first copy to receiving the retry; the client
only knows when it sent each attempt. A copy is stored no earlier than the attempt that
carried it was sent, so attempts all sent within the window of each other can store the
value once and only once: the duplicate is then the server's. Attempts spread wider may
each have stored a copy; at most as many copies as there are attempts each sent more than
the window after the last one counted (the earliest first) are excused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from logquake.checker.options import CheckOptions
from logquake.checker.queue_index import QueueIndex, key_of
from logquake.history import FAIL, INVOKE, NEMESIS, Op

#: A duplicate a retry after the dedup window explains: outside the promise, never bad.
AFTER_WINDOW = "duplicate-after-window"
NS = 1_000_000_000


def inconsistent_offset_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """One offset of a key holds two different values."""
    errs = []
    for k, ko in ix.orders.items():
        for o, vs in sorted(ko.conflicts.items()):
            errs.append(
                {
                    "key": k,
                    "offset": o,
                    "index": ko.index_of_offset[o],
                    "values": list(vs),
                    "explanation": f"offset {o} of key {k} was seen holding each of {list(vs)}",
                }
            )
    return {"inconsistent-offsets": errs}


def duplicate_cases(ix: QueueIndex, opts: CheckOptions, ops: Iterable[Op] = ()) -> dict[str, list]:
    """One value at more than one offset of a key; with a dedup window, those a retry after
    it explains apart (`duplicate-after-window`, the module docstring). `ops` is the history,
    read for the attempts only when there is a window and a duplicate."""
    found = [(k, v, offs) for k, ko in ix.orders.items() for v, offs in ko.dups.items()]
    window = opts.duplicate_window
    attempts = publish_attempts(ops, {(k, v) for k, v, _ in found}) if window is not None and found else {}
    bad: list[dict[str, Any]] = []
    excused: list[dict[str, Any]] = []
    for k, v, offs in found:
        e: dict[str, Any] = {
            "key": k,
            "value": v,
            "count": len(offs),
            "offsets": offs,
            "explanation": f"value {v} of key {k} appears at {len(offs)} offsets: {offs}",
        }
        if window is None:
            bad.append(e)
            continue
        times = attempts.get((k, v), [])
        allowed = copies_allowed(times, window)
        e.update(attempts=[round(t / NS, 3) for t in times], window=window, copies_allowed=allowed)
        spread = f"{(times[-1] - times[0]) / NS:.1f} s" if times else "no time"
        if len(offs) <= allowed:
            e["explanation"] += (f"; its {len(times)} publish attempts span {spread}, more than the dedup "
                                 f"window of {window:g} s: a retry after the window may store it again")
            excused.append(e)
        else:
            e["explanation"] += (f"; its {len(times)} publish attempts span {spread}, so a dedup window "
                                 f"of {window:g} s allows at most {allowed} cop{'y' if allowed == 1 else 'ies'}")
            bad.append(e)
    for errs in (bad, excused):
        errs.sort(key=lambda e: -e["count"])
    return {"duplicate": bad, AFTER_WINDOW: excused}


def copies_allowed(times: list[int], window: float) -> int:
    """How many copies attempts sent at `times` (ns, sorted) may store under a dedup window
    of `window` s: each copy makes the server drop the same id for the window after it, so
    count the attempts each sent more than the window after the last one counted."""
    n, last = 0, None
    for t in times:
        if last is None or t - last > window * NS:
            n, last = n + 1, t
    return n


def publish_attempts(ops: Iterable[Op], wanted: set[tuple[Any, Any]]) -> dict[tuple[Any, Any], list[int]]:
    """(key, value) -> when each publish of it was attempted (ns since the test began,
    sorted), for the values `wanted`, by every op that sent one and did not fail (a failed
    op stored nothing). An op's attempts are its invocation's time plus each of its
    `attempts` (ns after it), or the invocation alone; an op never completed counts once."""
    invoked: dict[Any, Op] = {}
    out: dict[tuple[Any, Any], list[int]] = {}

    def add(op: Op, start: int, offsets: list[int]) -> None:
        for m in op.value if isinstance(op.value, list) else ():
            if isinstance(m, list) and len(m) == 3 and m[0] == "send":
                v = m[2][1] if isinstance(m[2], list) and len(m[2]) == 2 else m[2]
                kv = (key_of(m[1]), v)
                if kv in wanted:
                    out.setdefault(kv, []).extend(start + o for o in offsets)

    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.type == INVOKE:
            invoked[op.process] = op
            continue
        inv = invoked.pop(op.process, None)
        if op.type == FAIL or inv is None:
            continue
        got = op.get("attempts")
        offsets = got if isinstance(got, list) and got and all(isinstance(o, int) for o in got) else [0]
        add(inv, inv.time or 0, offsets)
    for inv in invoked.values():
        add(inv, inv.time or 0, [0])
    return {kv: sorted(ts) for kv, ts in out.items()}
