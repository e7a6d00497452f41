"""The transaction coordinator of KIP-98 ("transactions v1"), as a pure state machine.

One `TxnMetadata` per transactional id lives in the `__transaction_state` partition that
the id hashes to; that partition's leader is the coordinator. Every decision is a pure
function of the current metadata, the request and an explicit `now_ms`, returning a
`TxnDecision`: an error code for the client, or a new metadata record to replicate (every
replica `apply`s it) and, for EndTxn and timeouts, the COMMIT/ABORT markers to write.

The protocol, as Kafka runs it (the handler does the I/O in this order):
  InitProducerId   fences older producers by bumping the epoch; an ongoing transaction is
                   first aborted with the bumped epoch (the caller retries on
                   CONCURRENT_TRANSACTIONS until the abort has completed).
  AddPartitionsToTxn / AddOffsetsToTxn   Empty|Complete* -> Ongoing, remembers the partitions.
  EndTxn           Ongoing -> PrepareCommit|PrepareAbort (replicated, then the client is answered),
                   markers written to every partition, then -> CompleteCommit|CompleteAbort.
  timeout          an Ongoing transaction older than its timeout is aborted with a bumped
                   epoch, which fences the producer that let it expire.

States change only through `TxnMetadata.transition`, checked against `VALID_PREVIOUS` (Kafka's
table): an illegal transition is our bug, raises `IllegalTxnTransition`, and changes nothing
(h11's rule). A client's misuse is never an exception but an error code.

Unsafe mode `txn_markers: partial` is read in one place, `marker_plan`'s `partial` argument:
markers then go to the first partition of the transaction only, so the others (and the
group's offsets) stay open although the client was told the commit succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from logquake.broker.kerrors import ErrorCode

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "TopicPartition",
    "TxnState",
    "VALID_PREVIOUS",
    "IllegalTxnTransition",
    "TxnMetadata",
    "MarkerPlan",
    "TxnDecision",
    "TxnCoordinatorState",
    "EMPTY",
    "apply",
    "needs_new_producer_id",
    "init_producer_id",
    "add_partitions",
    "end_txn",
    "complete",
    "expire",
    "marker_plan",
    "pending_markers",
]

MAX_EPOCH = 32767  # producer epochs are int16
MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


S = TxnState
VALID_PREVIOUS: Mapping[TxnState, frozenset[TxnState]] = MappingProxyType({
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
})
_PREPARED = {S.PREPARE_COMMIT: S.COMPLETE_COMMIT, S.PREPARE_ABORT: S.COMPLETE_ABORT}


class IllegalTxnTransition(RuntimeError):
    """The coordinator tried a state change the transition table forbids: a logquake bug."""


@dataclass(frozen=True, kw_only=True)
class TxnMetadata:
    """The replicated record of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = 0
    # the (id, epoch) before the last bump: a KIP-360 client recovering from it is not a zombie
    prev_producer_id: int = -1
    prev_producer_epoch: int = -1

    def transition(self, state: TxnState, *, now_ms: int, **changes: object) -> TxnMetadata:
        """This metadata in `state`; raises IllegalTxnTransition (changing nothing) if not allowed."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTxnTransition(
                f"transactional id {self.transactional_id!r}: {self.state.value} -> {state.value} is not allowed"
            )
        return replace(self, state=state, last_update_ms=now_ms, **changes)


@dataclass(frozen=True, kw_only=True)
class MarkerPlan:
    """The control batches to write once a Prepare* record is replicated."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    txn_start_ms: int = -1  # with the ids, which transaction of its producer these markers end


@dataclass(frozen=True, kw_only=True)
class TxnDecision:
    """What the coordinator answers: an error, or a record to replicate (then markers to write)."""

    error: ErrorCode = ErrorCode.NONE
    record: TxnMetadata | None = None
    markers: MarkerPlan | None = None
    producer_id: int = -1  # for InitProducerId
    producer_epoch: int = -1


def _error(code: ErrorCode) -> TxnDecision:
    return TxnDecision(error=code)


@dataclass(frozen=True, kw_only=True)
class TxnCoordinatorState:
    """Every transactional id's metadata in one `__transaction_state` partition."""

    txns: Mapping[str, TxnMetadata] = field(default_factory=lambda: MappingProxyType({}))

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self.txns.get(transactional_id)


EMPTY = TxnCoordinatorState()


def apply(state: TxnCoordinatorState, record: TxnMetadata) -> TxnCoordinatorState:
    """The coordinator state after a metadata record was committed in `__transaction_state`."""
    txns = dict(state.txns)
    txns[record.transactional_id] = record
    return TxnCoordinatorState(txns=MappingProxyType(txns))


def needs_new_producer_id(meta: TxnMetadata | None) -> bool:
    """Whether InitProducerId for this id needs a fresh producer id (new id, or epoch exhausted)."""
    return meta is None or meta.producer_epoch >= MAX_EPOCH - 1


def init_producer_id(
    meta: TxnMetadata | None,
    *,
    transactional_id: str,
    timeout_ms: int,
    now_ms: int,
    new_producer_id: int | None = None,
    expected: tuple[int, int] | None = None,
) -> TxnDecision:
    """InitProducerId for a transactional id; `expected` is the KIP-360 (producer id, epoch)."""
    if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
        return _error(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    if needs_new_producer_id(meta) and new_producer_id is None:
        raise ValueError("init_producer_id needs new_producer_id when needs_new_producer_id(meta)")
    if meta is None:
        record = TxnMetadata(transactional_id=transactional_id, producer_id=new_producer_id, producer_epoch=0,
                             timeout_ms=timeout_ms, last_update_ms=now_ms)
        return _granted(record)
    if meta.state in _PREPARED:
        return _error(ErrorCode.CONCURRENT_TRANSACTIONS)
    if expected is not None and expected not in _known_ids(meta):
        return _error(ErrorCode.PRODUCER_FENCED)
    if meta.state is TxnState.ONGOING:
        # Fence the producer of the ongoing transaction: abort it under a bumped epoch first.
        decision = _prepare(_fence(meta), commit=False, now_ms=now_ms)
        return replace(decision, error=ErrorCode.CONCURRENT_TRANSACTIONS)
    bumped = _bump(meta, new_producer_id)
    return _granted(bumped.transition(TxnState.EMPTY, now_ms=now_ms, timeout_ms=timeout_ms, partitions=frozenset(),
                                      txn_start_ms=-1))


def _known_ids(meta: TxnMetadata) -> set[tuple[int, int]]:
    return {(meta.producer_id, meta.producer_epoch), (meta.prev_producer_id, meta.prev_producer_epoch)}


def _bump(meta: TxnMetadata, new_producer_id: int | None) -> TxnMetadata:
    prev = {"prev_producer_id": meta.producer_id, "prev_producer_epoch": meta.producer_epoch}
    if needs_new_producer_id(meta):
        return replace(meta, producer_id=new_producer_id, producer_epoch=0, **prev)
    return replace(meta, producer_epoch=meta.producer_epoch + 1, **prev)


def _fence(meta: TxnMetadata) -> TxnMetadata:
    # Markers must carry the transaction's producer id, so an exhausted epoch aborts unbumped;
    # the producer id changes at the next InitProducerId.
    return meta if needs_new_producer_id(meta) else _bump(meta, None)


def _granted(record: TxnMetadata) -> TxnDecision:
    return TxnDecision(record=record, producer_id=record.producer_id, producer_epoch=record.producer_epoch)


def _check_producer(meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> ErrorCode:
    if meta is None or meta.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if meta.producer_epoch != producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.NONE


def add_partitions(
    meta: TxnMetadata | None,
    *,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
) -> TxnDecision:
    """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition)."""
    error = _check_producer(meta, producer_id, producer_epoch)
    if error:
        return _error(error)
    if meta.state in _PREPARED:
        return _error(ErrorCode.CONCURRENT_TRANSACTIONS)
    wanted = frozenset(TopicPartition(*tp) for tp in partitions)
    if meta.state is TxnState.ONGOING and wanted <= meta.partitions:
        return TxnDecision()  # nothing new to replicate
    start = meta.txn_start_ms if meta.state is TxnState.ONGOING else now_ms
    return TxnDecision(record=meta.transition(TxnState.ONGOING, now_ms=now_ms, txn_start_ms=start,
                                              partitions=meta.partitions | wanted))


def end_txn(
    meta: TxnMetadata | None, *, producer_id: int, producer_epoch: int, commit: bool, now_ms: int,
    partial: bool = False,
) -> TxnDecision:
    """EndTxn: Ongoing -> Prepare*, with the markers to write; a retry of a finished end succeeds."""
    error = _check_producer(meta, producer_id, producer_epoch)
    if error:
        return _error(error)
    prepare, done = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
    if meta.state is TxnState.ONGOING:
        return _prepare(meta, commit=commit, now_ms=now_ms, partial=partial)
    if meta.state is prepare:
        return _error(ErrorCode.CONCURRENT_TRANSACTIONS)
    if meta.state is done:
        return TxnDecision()
    return _error(ErrorCode.INVALID_TXN_STATE)


def _prepare(meta: TxnMetadata, *, commit: bool, now_ms: int, partial: bool = False) -> TxnDecision:
    record = meta.transition(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms=now_ms)
    return TxnDecision(record=record, markers=marker_plan(record, partial=partial))


def marker_plan(meta: TxnMetadata, *, partial: bool = False) -> MarkerPlan:
    """The markers a Prepare* transaction needs: one per partition, sorted for determinism."""
    partitions = tuple(sorted(meta.partitions))
    if partial:  # unsafe mode `txn_markers: partial`: the one place it is read
        partitions = partitions[:1]
    return MarkerPlan(transactional_id=meta.transactional_id, producer_id=meta.producer_id,
                      producer_epoch=meta.producer_epoch, commit=meta.state is S.PREPARE_COMMIT,
                      partitions=partitions, txn_start_ms=meta.txn_start_ms)


def awaits(meta: TxnMetadata | None, plan: MarkerPlan) -> bool:
    """Is `meta` still the prepared transaction `plan` was made for?

    Only then may its markers be written, and once written complete it. The next transaction
    of the same producer epoch can be prepared by then (a client begins it as soon as this one
    is complete); a marker task running late (resumed on a coordinator tick, or left from an
    earlier shard) must neither write its markers into that one's partitions nor complete it
    with none of its own markers written: read_committed readers would see its aborted records.
    """
    return (meta is not None and meta.state is (S.PREPARE_COMMIT if plan.commit else S.PREPARE_ABORT)
            and (meta.producer_id, meta.producer_epoch, meta.txn_start_ms)
            == (plan.producer_id, plan.producer_epoch, plan.txn_start_ms)
            and frozenset(plan.partitions) <= meta.partitions)


def complete(meta: TxnMetadata, *, now_ms: int) -> TxnDecision:
    """After every marker is written: Prepare* -> Complete* (raises if not prepared)."""
    target = _PREPARED.get(meta.state, S.COMPLETE_COMMIT)
    return TxnDecision(record=meta.transition(target, now_ms=now_ms, partitions=frozenset(), txn_start_ms=-1))


def expire(state: TxnCoordinatorState, *, now_ms: int) -> list[TxnDecision]:
    """Abort (with a fencing epoch bump) every Ongoing transaction that outlived its timeout."""
    return [_prepare(_fence(meta), commit=False, now_ms=now_ms)
            for meta in sorted(state.txns.values(), key=lambda m: m.transactional_id)
            if meta.state is S.ONGOING and meta.txn_start_ms + meta.timeout_ms < now_ms]


def pending_markers(state: TxnCoordinatorState, *, partial: bool = False) -> list[MarkerPlan]:
    """Markers of every prepared transaction: a new coordinator resumes writing them."""
    return [marker_plan(m, partial=partial) for m in sorted(state.txns.values(), key=lambda m: m.transactional_id)
            if m.state in _PREPARED]
