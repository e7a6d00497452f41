"""What a check is asked to do, and which anomaly types count as bad for it.

Jepsen's Kafka checker reports many anomalies that are normal in Kafka's model (writes
are not isolated, so G0 cycles are expected); `allowed_types` encodes which ones a given
test tolerates, so that `valid` means something. The table is DESIGN.md §8 and §6.
"""

from __future__ import annotations

from dataclasses import dataclass

SUB_VIAS = ("assign", "subscribe")
GUARANTEES = ("exactly-once", "idempotent", "at-least-once", "at-most-once")

#: Every anomaly type the queue analysis can report, in the order results list them.
QUEUE_TYPES = (
    "inconsistent-offsets",
    "duplicate",
    "lost-write",
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
        guarantee: a delivery guarantee profile (DESIGN.md §6) that widens what is allowed:
            at-most-once allows loss, at-least-once allows duplicates; idempotent and
            exactly-once allow neither.
        time_budget: seconds the cycle search may take before it gives up (`unknown`).
        max_examples: examples kept per anomaly type.
    """

    sub_via: str = "assign"
    txn: bool = False
    ww_deps: bool = True
    ignore: tuple[str, ...] = ()
    guarantee: str | None = None
    time_budget: float = 300.0
    max_examples: int = 8

    def __post_init__(self) -> None:
        if self.sub_via not in SUB_VIAS:
            raise ValueError(f"sub_via must be one of {', '.join(SUB_VIAS)}, got {self.sub_via!r}")
        if self.guarantee is not None and self.guarantee not in GUARANTEES:
            raise ValueError(f"guarantee must be one of {', '.join(GUARANTEES)}, got {self.guarantee!r}")
        object.__setattr__(self, "ignore", tuple(self.ignore))


def allowed_types(opts: CheckOptions) -> frozenset[str]:
    """Anomaly types this test tolerates: reported, but they do not make it invalid."""
    # Transactions interleave their sends, and writes are never isolated: always allowed.
    allowed = {"int-send-skip", "G0", "G0-process", "G0-realtime"}
    if opts.sub_via == "subscribe":
        # A rebalance may hand a consumer any position; only assign promises order.
        allowed |= {"poll-skip", "nonmonotonic-poll"}
    if opts.ww_deps:
        # t0 <ww t1 <wr t0 is normal without write isolation.
        allowed |= {"G1c", "G1c-process", "G1c-realtime"}
    if opts.guarantee == "at-most-once":
        allowed |= {"lost-write", "unseen"}
    elif opts.guarantee == "at-least-once":
        allowed |= {"duplicate"}
    allowed |= set(opts.ignore)
    return frozenset(allowed)
