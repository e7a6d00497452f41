"""The idempotent-producer state machine: transcripts, then a Hypothesis model of a producer."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logquake.broker import producer_state as ps
from logquake.broker.batches import BatchInfo, next_sequence
from logquake.broker.kerrors import ErrorCode
from logquake.broker.producer_state import Outcome


def batch(pid: int, epoch: int, seq: int, n: int = 1, offset: int = 0, **kw) -> BatchInfo:
    return BatchInfo(first_offset=offset, record_count=n, producer_id=pid, producer_epoch=epoch,
                     base_sequence=seq, **kw)


class Log:
    """A leader's log of one partition in miniature: check, then append and apply."""

    def __init__(self, dedup: bool = True) -> None:
        self.states = ps.EMPTY
        self.end = 0
        self.dedup = dedup

    def produce(self, pid: int, epoch: int, seq: int, n: int = 1) -> tuple[str, object]:
        info = batch(pid, epoch, seq, n, offset=self.end)
        verdict = ps.check_batch(self.states, info, dedup=self.dedup)
        if verdict.outcome is Outcome.APPEND:
            self.states = ps.apply_batch(self.states, info)
            self.end += n
            return "append", info.first_offset
        if verdict.outcome is Outcome.DUPLICATE:
            return "dup", verdict.base_offset
        return "reject", verdict.error.name


def test_transcript_sequences_duplicates_gaps_and_fencing() -> None:
    log = Log()
    assert log.produce(1, 0, 0, 3) == ("append", 0)
    assert log.produce(1, 0, 3, 2) == ("append", 3)
    assert log.produce(1, 0, 0, 3) == ("dup", 0)  # retry of the first batch
    assert log.produce(1, 0, 3, 2) == ("dup", 3)
    assert log.produce(1, 0, 6, 1) == ("reject", "OUT_OF_ORDER_SEQUENCE_NUMBER")  # 5 is missing
    assert log.produce(1, 0, 4, 1) == ("reject", "OUT_OF_ORDER_SEQUENCE_NUMBER")  # overlaps, not a retry
    assert log.produce(1, 0, 5, 1) == ("append", 5)
    assert log.produce(1, 1, 3, 1) == ("reject", "OUT_OF_ORDER_SEQUENCE_NUMBER")  # new epoch starts at 0
    assert log.produce(1, 1, 0, 1) == ("append", 6)  # KIP-360: the bump resets sequences
    assert log.produce(1, 0, 6, 1) == ("reject", "INVALID_PRODUCER_EPOCH")  # the zombie
    assert log.produce(1, 0, 0, 3) == ("reject", "INVALID_PRODUCER_EPOCH")  # even its old retries
    assert log.produce(2, 0, 17, 1) == ("append", 7)  # unknown producer: any start (Kafka)
    assert log.produce(-1, -1, -1, 4) == ("append", 8)  # not idempotent: no checks


def test_window_remembers_exactly_five_batches() -> None:
    log = Log()
    for seq in range(7):
        log.produce(1, 0, seq)
    assert [b.base_sequence for b in log.states.get(1).batches] == [2, 3, 4, 5, 6]
    assert log.produce(1, 0, 2) == ("dup", 2)
    assert log.produce(1, 0, 1) == ("reject", "OUT_OF_ORDER_SEQUENCE_NUMBER")  # fell out of the window


def test_sequence_wraps_at_int32_max() -> None:
    log = Log()
    top = 2**31 - 1
    assert log.produce(1, 0, top - 1, 2) == ("append", 0)
    assert next_sequence(top) == 0
    assert log.produce(1, 0, 0, 1) == ("append", 2)


def test_dedup_off_appends_duplicates_but_still_fences() -> None:
    log = Log(dedup=False)
    log.produce(1, 1, 0, 2)
    assert log.produce(1, 1, 0, 2) == ("append", 2)
    assert log.produce(1, 1, 9, 1) == ("append", 4)
    assert log.produce(1, 0, 5, 1) == ("reject", "INVALID_PRODUCER_EPOCH")


def test_control_batch_bumps_epoch_without_a_window() -> None:
    states = ps.apply_batch(ps.EMPTY, batch(1, 0, 0, 2, offset=0, is_transactional=True))
    marker = BatchInfo(first_offset=2, record_count=1, producer_id=1, producer_epoch=1,
                       is_transactional=True, is_control=True, control_commit=False)
    states = ps.apply_batch(states, marker)
    assert states.get(1) == ps.ProducerEntry(epoch=1)
    assert ps.check_batch(states, batch(1, 0, 2)).error is ErrorCode.INVALID_PRODUCER_EPOCH
    assert ps.check_batch(states, batch(1, 1, 0)).outcome is Outcome.APPEND


def test_replicas_rebuild_the_same_state_from_the_log() -> None:
    log = Log()
    for pid, epoch, seq in [(1, 0, 0), (2, 0, 0), (1, 0, 1), (1, 0, 0), (2, 3, 0), (1, 0, 2)]:
        log.produce(pid, epoch, seq)
    replayed = ps.EMPTY
    offsets = 0
    for pid, epoch, seq in [(1, 0, 0), (2, 0, 0), (1, 0, 1), (2, 3, 0), (1, 0, 2)]:  # what was appended
        replayed = ps.apply_batch(replayed, batch(pid, epoch, seq, offset=offsets))
        offsets += 1
    assert replayed == log.states


class IdempotentProducerMachine(RuleBasedStateMachine):
    """Producers send, retry and reorder batches; the log must hold each sequence exactly once."""

    def __init__(self) -> None:
        super().__init__()
        self.log = Log()
        self.sent: dict[int, list[tuple[int, int, int]]] = {1: [], 2: []}  # pid -> (epoch, seq, n) sent
        self.epoch = {1: 0, 2: 0}
        self.next_seq = {1: 0, 2: 0}
        self.written: list[tuple[int, int, int, int]] = []  # (pid, epoch, seq, offset) per record
        self.acked: dict[tuple[int, int, int], int] = {}  # (pid, epoch, base seq) -> first offset

    def _send(self, pid: int, epoch: int, seq: int, n: int) -> None:
        kind, value = self.log.produce(pid, epoch, seq, n)
        if kind == "append":
            for i in range(n):
                self.written.append((pid, epoch, next_sequence(seq, i), value + i))
        if kind in ("append", "dup"):
            key = (pid, epoch, seq)
            assert self.acked.setdefault(key, value) == value, "a retry got other offsets than the original"

    @rule(pid=st.sampled_from([1, 2]), n=st.integers(1, 4))
    def send_next(self, pid: int, n: int) -> None:
        seq = self.next_seq[pid]
        self.sent[pid].append((self.epoch[pid], seq, n))
        self.next_seq[pid] = next_sequence(seq, n)
        self._send(pid, self.epoch[pid], seq, n)

    @precondition(lambda self: any(self.sent.values()))
    @rule(data=st.data())
    def retry_an_old_batch(self, data) -> None:
        pid = data.draw(st.sampled_from([p for p, s in self.sent.items() if s]))
        epoch, seq, n = data.draw(st.sampled_from(self.sent[pid][-8:]))
        self._send(pid, epoch, seq, n)

    @precondition(lambda self: self.written)
    @rule(data=st.data(), skip=st.integers(1, 3))
    def send_with_a_gap(self, data, skip: int) -> None:
        pid = data.draw(st.sampled_from(sorted({w[0] for w in self.written})))
        kind, _ = self.log.produce(pid, self.epoch[pid], next_sequence(self.next_seq[pid], skip))
        assert kind == "reject"

    @rule(pid=st.sampled_from([1, 2]))
    def bump_epoch(self, pid: int) -> None:
        self.epoch[pid] += 1
        self.next_seq[pid] = 0

    @invariant()
    def no_sequence_written_twice_per_epoch(self) -> None:
        keys = [(pid, epoch, seq) for pid, epoch, seq, _ in self.written]
        assert len(keys) == len(set(keys))

    @invariant()
    def sequences_contiguous_per_epoch(self) -> None:
        last: dict[tuple[int, int], int] = {}
        for pid, epoch, seq, _ in self.written:
            if (pid, epoch) in last:
                assert seq == next_sequence(last[(pid, epoch)])
            last[(pid, epoch)] = seq

    @invariant()
    def epochs_never_go_back_in_the_log(self) -> None:
        for pid in (1, 2):
            epochs = [e for p, e, _, _ in self.written if p == pid]
            assert epochs == sorted(epochs)


TestIdempotentProducer = IdempotentProducerMachine.TestCase
TestIdempotentProducer.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)
