"""Why ops ended indeterminate: the error strings of info ops."""

from __future__ import annotations

from collections import Counter
from typing import Any

from logquake.checker.queue_index import (
    QueueIndex,
)
from logquake.history import INFO


def info_causes(ix: QueueIndex) -> list[dict[str, Any]]:
    """Why ops ended indeterminate: each distinct error string of info ops, with a count."""
    c: Counter = Counter()
    for t in ix.txns:
        if t.type == INFO:
            err = t.op.get("error")
            c[err if isinstance(err, str) else str(err)] += 1
    return [{"error": e, "count": n} for e, n in c.most_common()]
