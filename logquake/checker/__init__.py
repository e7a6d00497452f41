"""History analyses (docs/architecture.md's anomaly types).

`check_history(ops, opts)` runs the queue analysis (Jepsen's Kafka checker) and returns
the results.json object; `CheckOptions` says which anomalies the test tolerates.
`check_linearizable(ops, model)` checks a history against a sequential `Model` (register,
cas-register; `MODELS`), Knossos/Porcupine style.
"""

from logquake.checker.linear import check_linearizable
from logquake.checker.models import MODELS, Model, Operation, get_model
from logquake.checker.options import QUEUE_TYPES, CheckOptions, allowed_types
from logquake.checker.queue import check_history
from logquake.checker.result import UNKNOWN, merge_valid

__all__ = [
    "MODELS",
    "QUEUE_TYPES",
    "UNKNOWN",
    "CheckOptions",
    "Model",
    "Operation",
    "allowed_types",
    "check_history",
    "check_linearizable",
    "get_model",
    "merge_valid",
]
