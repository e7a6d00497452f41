"""Per-key log anomalies: one offset holding two values, one value at two offsets."""

from __future__ import annotations

from logquake.checker.options import CheckOptions
from logquake.checker.queue_index import (
    QueueIndex,
)


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


def duplicate_cases(ix: QueueIndex, opts: CheckOptions) -> dict[str, list]:
    """One value at more than one offset of a key."""
    errs = []
    for k, ko in ix.orders.items():
        for v, offs in ko.dups.items():
            errs.append(
                {
                    "key": k,
                    "value": v,
                    "count": len(offs),
                    "offsets": offs,
                    "explanation": f"value {v} of key {k} appears at {len(offs)} offsets: {offs}",
                }
            )
    errs.sort(key=lambda e: -e["count"])
    return {"duplicate": errs}
