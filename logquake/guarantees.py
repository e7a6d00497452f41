"""Delivery guarantees (docs/architecture.md): one record per promise, read by everything that judges one.

A guarantee fixes both sides of a promise: the client settings meant to give it (producer
acks/retries/idempotence/transactions, consumer isolation, when offsets are committed
relative to processing) and which anomaly types the checkers then call bad, so that a run
answers "does my cluster, with these settings, give this guarantee?". Config validates
names against `GUARANTEES`, the runner applies `apply_guarantee`, the queue and pipeline
checkers ask `allowed_types`, the matrix and the report read the same records.

One set of allowed types serves every workload because their anomaly names do not overlap
(queue: lost-write, duplicate...; pipeline: lost-processing, double-processing...; offsets is
checked as registers, with nothing a guarantee could excuse): each checker keeps the names it
reports (`allowed_types(reported=...)`). Settings are library-neutral; each adapter maps them
to its own keys, and a user's own `producer:` settings override the guarantee's, so their real
client settings can be checked.

Besides the guarantee, two test settings widen what is allowed, and they live here too so the
whole answer to "is this anomaly bad here?" has one home: subscribing (`sub_via`) and
inferring write-write order (`ww_deps`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from logquake.errors import ConfigError

if TYPE_CHECKING:
    from logquake.config import TestConfig

#: How consumers get their partitions: `assign` fixes them, `subscribe` lets a group rebalance.
SUB_VIAS = ("assign", "subscribe")

# Allowed under every guarantee: Kafka does not isolate writes, and a transaction's sends
# interleave with others' (Jepsen's allowed set); and a duplicate stored by a retry made
# after the system's dedup window, which no guarantee promises to catch.
ALWAYS_ALLOWED = frozenset({"int-send-skip", "G0", "G0-process", "G0-realtime", "duplicate-after-window"})
# A rebalance may hand a consumer any position; only assign promises poll order.
SUBSCRIBE_ALLOWS = frozenset({"poll-skip", "nonmonotonic-poll"})
# A consumer shared by several workers (JetStream's durable pull consumer) hands one key's
# values to all of them at once, where a Kafka group gives a partition to one member: nothing
# orders the pipeline's outputs, one worker's read of a key holds gaps (the values between
# went to the others). Loss is still caught: each value must be read by some worker (lost,
# unseen, lost-write). A value redelivered after its ack wait comes after later ones, but the
# server says so (the op's `redelivered`): the queue check exempts those steps one by one and
# still calls any other step back inside a poll an int-nonmonotonic-poll (queue_internal.py).
SHARED_CONSUMER_ALLOWS = frozenset({"output-reorder", "int-poll-skip"})
# t0 <ww t1 <wr t0 is normal without write isolation, and inferred ww edges may be wrong.
WW_DEPS_ALLOW = frozenset({"G1c", "G1c-process", "G1c-realtime"})


@dataclass(frozen=True, kw_only=True)
class Guarantee:
    """One delivery guarantee: client settings plus the anomaly types it tolerates.

    Attributes:
        acks: producer acks ("0", "1" or "all").
        retries: producer retries (None: the library's default, effectively unbounded).
        idempotence: enable.idempotence.
        transactions: transactional producer and transaction ops.
        isolation: consumer isolation.level.
        commit: when consumer offsets are committed: "before" processing, "after" it,
            or "in-transaction" (sendOffsetsToTransaction).
        allowed: anomaly types reported but not bad, of every workload.
        txn_refusal: why this guarantee cannot run with transactions (None: it can).
    """

    name: str
    acks: str
    retries: int | None
    idempotence: bool
    transactions: bool
    isolation: str
    commit: str
    allowed: frozenset[str]
    txn_refusal: str | None = None

    def producer(self) -> dict[str, Any]:
        """The library-neutral producer settings (`producer:` keys plus idempotence)."""
        out: dict[str, Any] = {"acks": self.acks, "idempotence": self.idempotence}
        if self.retries is not None:
            out["retries"] = self.retries
        return out

    def consumer(self) -> dict[str, Any]:
        return {"isolation": self.isolation, "commit": self.commit, "auto_commit": False}


# A zombie worker of the pipeline (its partitions already handed over) may still write older
# values after the new owner's: only exactly-once fences it (group metadata in the
# transaction), so everywhere else output-reorder is reported but not bad.
GUARANTEES: dict[str, Guarantee] = {
    g.name: g
    for g in (
        # acks=1 without retries (acks=0 gives no offsets, which the history needs):
        # a send is tried once, so it may be lost but never written twice.
        Guarantee(name="at-most-once", acks="1", retries=0, idempotence=False, transactions=False,
                  isolation="read_uncommitted", commit="before",
                  allowed=ALWAYS_ALLOWED | {"lost-write", "lost", "unseen", "lost-processing", "output-reorder"},
                  txn_refusal="transactions make the producer idempotent; at-most-once cannot use them"),
        # Kafka's default: retries may write a value twice, nothing acknowledged may vanish.
        Guarantee(name="at-least-once", acks="all", retries=None, idempotence=False, transactions=False,
                  isolation="read_uncommitted", commit="after",
                  allowed=ALWAYS_ALLOWED | {"duplicate", "double-processing", "output-reorder"}),
        # enable.idempotence without transactions: no duplicate writes and no loss per
        # partition, but a consumer may still process a value twice (offsets after processing).
        Guarantee(name="idempotent", acks="all", retries=None, idempotence=True, transactions=False,
                  isolation="read_uncommitted", commit="after",
                  allowed=ALWAYS_ALLOWED | {"double-processing", "output-reorder"}),
        Guarantee(name="exactly-once", acks="all", retries=None, idempotence=True, transactions=True,
                  isolation="read_committed", commit="in-transaction", allowed=ALWAYS_ALLOWED),
    )
}


def get_guarantee(name: str) -> Guarantee:
    """The record of `name`, or ConfigError naming the allowed ones."""
    try:
        return GUARANTEES[name]
    except KeyError:
        raise ConfigError("guarantee", f"expected one of {', '.join(GUARANTEES)}, got {name!r}") from None


def check_txn(guarantee: str | None, txn: bool) -> None:
    """ConfigError("txn", ...) when `guarantee` cannot be run or checked with transactions.

    `run` and `check` both ask here, so they refuse the same pairs with the same words.
    """
    g = GUARANTEES.get(guarantee) if guarantee is not None else None
    if txn and g is not None and g.txn_refusal:
        raise ConfigError("txn", g.txn_refusal)


def apply_guarantee(cfg: TestConfig) -> TestConfig:
    """The config a run really uses: the guarantee's settings under the user's own `producer:`.

    exactly-once turns transactions on where the workload makes it of them (read_committed
    consumers come with them; not JetStream's pipeline, `Workload.needs`), and transactions
    turn idempotence on: what test.json stores is what the clients ran.
    """
    from logquake.workloads.registry import get_workload  # it builds on this module

    g = get_guarantee(cfg.guarantee)
    check_txn(g.name, cfg.txn)
    txn = cfg.txn or (g.transactions and "transactions" in get_workload(cfg.workload).needs(cfg))
    producer = {**g.producer(), **(cfg.producer or {})}
    if txn:  # a transactional producer is idempotent whatever was asked (both clients force it)
        producer["idempotence"] = True
    return replace(cfg, producer=producer, txn=txn)


def allowed_types(*, reported: Iterable[str], guarantee: str | None = None, sub_via: str = "assign",
                  ww_deps: bool = True, ignore: Iterable[str] = (),
                  shared_consumer: bool = False) -> frozenset[str]:
    """Anomaly types a test tolerates among those its checker `reported` can name, plus
    `ignore` (the user's own: reported, never bad). An unknown guarantee name (an old run, a
    typo in a stored file) widens nothing. `shared_consumer`: the workers share one consumer
    (a pipeline's `PipelineAdapter.shared_consumer`, a queue test's subscribe on a system
    with `System.shared_subscribe`)."""
    allowed = set(ALWAYS_ALLOWED)
    if sub_via == "subscribe":
        allowed |= SUBSCRIBE_ALLOWS
    if shared_consumer:
        allowed |= SHARED_CONSUMER_ALLOWS
    if ww_deps:
        allowed |= WW_DEPS_ALLOW
    g = GUARANTEES.get(guarantee) if guarantee is not None else None
    if g is not None:
        allowed |= g.allowed
    return frozenset((allowed & set(reported)) | set(ignore))
