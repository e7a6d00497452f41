"""What a check is asked to do, and which anomaly types count as bad for it.

Jepsen's Kafka checker reports many anomalies that are normal in Kafka's model (writes
are not isolated, so G0 cycles are expected); `allowed_types` says which ones a given
test tolerates, so that `valid` means something. What each guarantee and test setting allows
is logquake.guarantees' (docs/architecture.md's anomaly types); this module names the queue's anomaly types.
"""

from __future__ import annotations

from dataclasses import dataclass

from logquake import guarantees
from logquake.guarantees import GUARANTEES, SUB_VIAS

#: Every anomaly type the queue analysis can report, in the order results list them.
QUEUE_TYPES = (
    "inconsistent-offsets",
    "duplicate",
    "duplicate-after-window",
    "no-writer",
    "lost-write",
    "lost",
    "G1a",
    "precommitted-read",
    "int-poll-skip",
    "int-nonmonotonic-poll",
    "int-send-skip",
    "int-nonmonotonic-send",
    "poll-skip",
    "nonmonotonic-poll",
    "nonmonotonic-send",
    "unseen",
    "G0",
    "G0-process",
    "G0-realtime",
    "G1c",
    "G1c-process",
    "G1c-realtime",
    "G1c-wr",
    "future-read",
)


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    """Options of the queue analysis.

    Args:
        sub_via: how consumers got their partitions. With `subscribe` a rebalance may move
            a consumer anywhere, so poll-skip and nonmonotonic-poll are not bad.
        txn: the workload used transactions (recorded in results; the analyses are the same).
        ww_deps: infer write-write edges from log order. Kafka does not isolate writes, so
            with them G1c cycles are normal; without them a G1c is an anomaly.
        ignore: anomaly types still reported but never bad (e.g. `("unseen",)`).
        guarantee: a delivery guarantee profile (docs/architecture.md) that widens what is allowed:
            at-most-once allows loss, at-least-once allows duplicates; idempotent and
            exactly-once allow neither.
        duplicate_window: seconds the system remembers a message id for dedup (JetStream's
            stream `duplicate_window`), None where dedup has no window (Kafka's idempotent
            producer). With it, duplicates a retry after the window explains are reported
            as `duplicate-after-window`, never bad (queue_duplicates.py).
        shared_consumer: with `subscribe`, the consumers shared one server-side consumer that
            splits a key's values among them (`System.shared_subscribe`: JetStream's durable
            pull consumer), so gaps inside one poll are not bad either, nor a step back to a
            message the op marks `redelivered` (queue_internal.py).
        time_budget: seconds the cycle search may take before it gives up (`unknown`).
        max_examples: examples kept per anomaly type.
    """

    sub_via: str = "assign"
    txn: bool = False
    ww_deps: bool = True
    ignore: tuple[str, ...] = ()
    guarantee: str | None = None
    duplicate_window: float | None = None
    shared_consumer: bool = False
    time_budget: float = 300.0
    max_examples: int = 8

    def __post_init__(self) -> None:
        if self.sub_via not in SUB_VIAS:
            raise ValueError(f"sub_via must be one of {', '.join(SUB_VIAS)}, got {self.sub_via!r}")
        if self.guarantee is not None and self.guarantee not in GUARANTEES:
            raise ValueError(f"guarantee must be one of {', '.join(GUARANTEES)}, got {self.guarantee!r}")
        if self.duplicate_window is not None and not self.duplicate_window > 0:
            raise ValueError(f"duplicate_window must be a positive number of seconds, got {self.duplicate_window!r}")
        object.__setattr__(self, "ignore", tuple(self.ignore))
        # Only subscribers share a consumer: with assign each client reads by its own position.
        object.__setattr__(self, "shared_consumer", self.shared_consumer and self.sub_via == "subscribe")


def allowed_types(opts: CheckOptions) -> frozenset[str]:
    """Anomaly types this test tolerates: reported, but they do not make it invalid."""
    return guarantees.allowed_types(reported=QUEUE_TYPES, guarantee=opts.guarantee, sub_via=opts.sub_via,
                                    ww_deps=opts.ww_deps, ignore=opts.ignore,
                                    shared_consumer=opts.shared_consumer)
