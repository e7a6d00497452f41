"""Idempotent-producer state of one partition: epochs and the last five batches per producer.

Pure data, rebuilt by every replica from the log: `apply_batch(states, info)` is applied to
each batch in log order (control batches included), so a new leader knows every producer's
window without any extra replication. The leader decides about an incoming batch with
`check_batch`, against a state that also includes its appended-but-uncommitted batches.

The rules are Kafka's (ProducerStateManager):
- a batch of an older epoch than the producer's is fenced: INVALID_PRODUCER_EPOCH;
- a retry of one of the last five batches of the same epoch is a duplicate: answer success
  with the offsets it got the first time, append nothing;
- within an epoch, the base sequence must follow the last one: else OUT_OF_ORDER_SEQUENCE_NUMBER;
- a newer epoch must start at sequence 0 (KIP-360: a bumped epoch resets sequences);
- a producer id we hold no state for may start at any sequence (as Kafka: its state may have
  been lost with a truncated log; refusing would make the producer's error fatal).

Unsafe mode `dedup: off` is read in one place, `check_batch`'s `dedup` argument: duplicates
and gaps are then appended like any batch (only fencing remains).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType

from logquake.broker.batches import BatchInfo, next_sequence
from logquake.broker.kerrors import ErrorCode

__all__ = [
    "WINDOW",
    "BatchRecord",
    "ProducerEntry",
    "ProducerStates",
    "EMPTY",
    "Outcome",
    "Verdict",
    "apply_batch",
    "check_batch",
]

WINDOW = 5  # batches remembered per producer: max.in.flight.requests.per.connection for idempotence


@dataclass(frozen=True, kw_only=True)
class BatchRecord:
    """One remembered batch: its sequence range and where it landed."""

    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, kw_only=True)
class ProducerEntry:
    """One producer's current epoch and its last `WINDOW` batches of that epoch, oldest first."""

    epoch: int
    batches: tuple[BatchRecord, ...] = ()

    @property
    def last_sequence(self) -> int | None:
        return self.batches[-1].last_sequence if self.batches else None


@dataclass(frozen=True, kw_only=True)
class ProducerStates:
    """Every producer's entry in one partition (an immutable mapping by producer id)."""

    producers: Mapping[int, ProducerEntry] = field(default_factory=lambda: MappingProxyType({}))

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def _with(self, producer_id: int, entry: ProducerEntry) -> ProducerStates:
        producers = dict(self.producers)
        producers[producer_id] = entry
        return ProducerStates(producers=MappingProxyType(producers))


EMPTY = ProducerStates()


class Outcome(Enum):
    APPEND = "append"  # write the batch
    DUPLICATE = "duplicate"  # answer success with the original offsets, write nothing
    REJECT = "reject"  # answer `error`, write nothing


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The leader's decision about one incoming Produce batch."""

    outcome: Outcome
    error: ErrorCode = ErrorCode.NONE
    base_offset: int | None = None  # for DUPLICATE: where the original landed
    last_offset: int | None = None


_APPEND = Verdict(outcome=Outcome.APPEND)


def _reject(error: ErrorCode) -> Verdict:
    return Verdict(outcome=Outcome.REJECT, error=error)


def check_batch(states: ProducerStates, info: BatchInfo, *, dedup: bool = True) -> Verdict:
    """Decide whether the leader may append an incoming client batch (offsets in `info` ignored)."""
    if not info.is_idempotent:
        return _APPEND
    entry = states.get(info.producer_id)
    if entry is None:
        return _APPEND
    if info.producer_epoch < entry.epoch:
        return _reject(ErrorCode.INVALID_PRODUCER_EPOCH)
    if not dedup:  # unsafe mode `dedup: off`: the one place it is read
        return _APPEND
    if info.producer_epoch > entry.epoch:
        return _APPEND if info.base_sequence == 0 else _reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    duplicate = _find_duplicate(entry, info)
    if duplicate is not None:
        return Verdict(
            outcome=Outcome.DUPLICATE, base_offset=duplicate.first_offset, last_offset=duplicate.last_offset
        )
    last = entry.last_sequence
    if last is None or info.base_sequence == next_sequence(last):
        return _APPEND
    return _reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


def _find_duplicate(entry: ProducerEntry, info: BatchInfo) -> BatchRecord | None:
    for batch in entry.batches:
        if batch.base_sequence == info.base_sequence and batch.last_sequence == info.last_sequence:
            return batch
    return None


def apply_batch(states: ProducerStates, info: BatchInfo) -> ProducerStates:
    """The state after `info` was appended to the log (total: replicas apply whatever is logged)."""
    if info.producer_id < 0:
        return states
    entry = states.get(info.producer_id)
    if info.is_control:
        # A marker may carry a bumped epoch (fencing abort); it ends no sequence range.
        if entry is None or info.producer_epoch > entry.epoch:
            return states._with(info.producer_id, ProducerEntry(epoch=info.producer_epoch))
        return states
    record = BatchRecord(
        base_sequence=info.base_sequence,
        last_sequence=info.last_sequence,
        first_offset=info.first_offset,
        last_offset=info.last_offset,
    )
    if entry is None or info.producer_epoch > entry.epoch:
        return states._with(info.producer_id, ProducerEntry(epoch=info.producer_epoch, batches=(record,)))
    if info.producer_epoch < entry.epoch:
        return states  # only reachable through a buggy leader; keep the newer epoch's window
    return states._with(info.producer_id, replace(entry, batches=(entry.batches + (record,))[-WINDOW:]))
