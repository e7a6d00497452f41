"""The node's counters line in broker.log: written every 5 s by the node, read by tests and
benchmarks. Both sides live here so the format has one home.

A line looks like (the format process.py sets up, then the counters as a Python dict):

    2026-12-02 03:14:41,123 n1 INFO logquake.broker.node: stats: {'raft_msgs': 120, ...}
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Iterator, Mapping

__all__ = ["log_stats", "stats_lines"]

_STATS_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ n\d+ INFO [\w.]+: stats: (\{.*\})$")


def log_stats(log: logging.Logger, stats: Mapping[str, int]) -> None:
    """Log the counters as one stats line (at INFO, which `stats_lines` expects)."""
    log.info("stats: %s", dict(stats))


def stats_lines(text: str) -> Iterator[tuple[str, dict[str, int]]]:
    """(time "YYYY-MM-DD HH:MM:SS", counters) of each stats line in a broker.log's text."""
    for line in text.splitlines():
        if (m := _STATS_LINE.match(line)) is not None:
            yield m.group(1), ast.literal_eval(m.group(2))
