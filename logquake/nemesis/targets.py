"""Which nodes a fault hits: pure functions of (nodes, rng), as Jepsen's node specs."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

__all__ = ["TARGETS", "pick_targets"]

TARGETS = ("one", "minority", "majority", "all", "leaders")


def pick_targets(kind: str, nodes: Sequence[str], rng: random.Random, *, current_leaders: Iterable[str] = ()) -> list[str]:
    """Nodes for `kind`, in the order given: one, a minority (1..ceil(n/2)-1 nodes, at least 1),
    exactly a majority, all, or the current leaders (one random node when none is known)."""
    n = len(nodes)
    if kind == "one":
        size = 1
    elif kind == "minority":
        size = rng.randint(1, max(1, (n - 1) // 2))
    elif kind == "majority":
        size = n // 2 + 1
    elif kind == "all":
        size = n
    elif kind == "leaders":
        lead = [x for x in nodes if x in set(current_leaders)]
        return lead or pick_targets("one", nodes, rng)
    else:
        raise ValueError(f"unknown target kind {kind!r}; allowed: {', '.join(TARGETS)}")
    chosen = set(rng.sample(list(nodes), min(size, n)))
    return [x for x in nodes if x in chosen]
