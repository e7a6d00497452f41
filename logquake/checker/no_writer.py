"""no-writer: a read of a value that no op sent to the key it was read from.

Every value in a queue history is sent by some op (values are unique per key), so a poll
that returns a value with no writer on its key shows the log holding what nobody wrote:
corrupted data (a phantom value, sent nowhere) or a record routed to the wrong partition
(a misrouted value, sent to another key). jepsen.tests.kafka stops with "no writer of
value"; here it is an anomaly of its own, with the example naming the key, the offset,
the value, the op that read it and where the value was really sent, if anywhere. No
guarantee tolerates it: no delivery semantics make up values.

A read of a value whose writer failed is not this (that writer exists: it is G1a).
"""

from __future__ import annotations

from typing import Any

from logquake.checker.options import CheckOptions
from logquake.checker.queue_index import QueueIndex
from logquake.checker.result import op_ref

NO_WRITER = "no-writer"


def no_writer_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """Every (key, value) read with no writer on that key, in key order then offset order.

    The version order of each key already holds every value any poll returned, so the
    common case (all written) is one set difference per key, in C; only the examples kept
    are looked up further (who read them, where they were sent).
    """
    missing: list[tuple[Any, Any, int]] = []  # (key, value, offset)
    nobody: dict = {}
    for k, ko in ix.orders.items():
        seen = set(ko.values)
        for vs in ko.conflicts.values():
            seen.update(vs)
        unwritten = seen.difference(ix.writer_of.get(k, nobody))
        if unwritten:
            first = ko.first_index
            missing.extend(sorted(((k, v, ko.offsets[first[v]]) for v in unwritten), key=_offset))
    if not missing:
        return {NO_WRITER: []}
    shown = missing[: opts.max_examples]
    readers = _first_readers(ix, shown)
    errs = []
    for i, (k, v, o) in enumerate(missing):
        e: dict[str, Any] = {"key": k, "offset": o, "value": v}
        if i < len(shown):
            sent_to = [
                {"key": k2, "writer": op_ref(w[v].op)}
                for k2, w in ix.writer_of.items()
                if k2 != k and v in w
            ]
            e["kind"] = "misrouted" if sent_to else "phantom"
            e["sent_to"] = sent_to
            reader = readers.get((k, v))
            e["reader"] = op_ref(reader) if reader is not None else None
            e["explanation"] = _words(k, o, v, reader, sent_to)
        errs.append(e)
    return {NO_WRITER: errs}


def _offset(m: tuple) -> Any:
    return m[2]


def _first_readers(ix: QueueIndex, shown: list[tuple]) -> dict[tuple, Any]:
    """(key, value) -> the op that first polled it, for the examples shown."""
    wanted: dict[Any, set] = {}
    for k, v, _ in shown:
        wanted.setdefault(k, set()).add(v)
    out: dict[tuple, Any] = {}
    for t in ix.txns:
        for k in wanted.keys() & t.reads.keys():
            vs = wanted[k]
            for _, v in t.reads[k]:
                if v in vs:
                    out.setdefault((k, v), t.op)
    return out


def _words(k: Any, o: int, v: Any, reader: Any, sent_to: list[dict]) -> str:
    who = f"op {reader.index} (process {reader.process})" if reader is not None else "a poll"
    text = f"{who} read value {v!r} from key {k!r} at offset {o}, but no op sent {v!r} to key {k!r}"
    if not sent_to:
        return text + ", nor to any other key: the log holds a value nobody wrote"
    where = ", ".join(f"key {s['key']!r} (op {s['writer']['index']})" for s in sent_to)
    return text + f"; it was sent to {where}: the record reached the wrong key"


__all__ = ["NO_WRITER", "no_writer_cases"]
