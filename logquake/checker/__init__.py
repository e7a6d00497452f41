"""History analyses (DESIGN.md §8).

`check_history(ops, opts)` runs the queue analysis (Jepsen's Kafka checker) and returns
the results.json object; `CheckOptions` says which anomalies the test tolerates.
"""

from logquake.checker.options import QUEUE_TYPES, CheckOptions, allowed_types
from logquake.checker.queue import check_history
from logquake.checker.result import UNKNOWN, merge_valid

__all__ = [
    "QUEUE_TYPES",
    "UNKNOWN",
    "CheckOptions",
    "allowed_types",
    "check_history",
    "merge_valid",
]
