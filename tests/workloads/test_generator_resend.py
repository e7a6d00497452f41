"""The queue generator's resends: a restarted producer resends its worker's unsure sends."""

from __future__ import annotations

from dataclasses import replace

from logquake.history import FAIL, INFO, OK, Op
from logquake.workloads import MAIN, Context, QueueGenerator
from logquake.workloads.generator import RESEND


class _Run:
    """One worker driven op by op, every completion numbered as the recorder numbers them."""

    def __init__(self, gen: QueueGenerator) -> None:
        self.gen = gen
        self.index = 0
        self.ctx = Context(worker=0, process=0, phase=MAIN)

    def complete(self, op: Op, outcome: str = OK) -> Op:
        """op completed: a crash is info, an assign ok, a send/poll as `outcome` says."""
        self.index += 2
        if op.f == "crash":
            outcome = INFO
        value = op.value
        if outcome == OK and op.f not in ("assign", "subscribe"):
            value = [["send", m[1], [self.index, m[2]]] if m[0] == "send" else ["poll", {}] for m in op.value]
        done = replace(op, type=OK if op.f in ("assign", "subscribe") else outcome, value=value, index=self.index)
        self.gen.update(self.ctx, done)
        return done

    def next(self) -> Op:
        op = self.gen.op(self.ctx)
        assert op is not None
        return self.complete(op)

    def until(self, f: str, outcome: str = OK) -> Op:
        """Ops completed ok until one of f, which ends as `outcome`."""
        for _ in range(10_000):
            op = self.gen.op(self.ctx)
            assert op is not None
            if op.f == f:
                return self.complete(op, outcome)
            self.complete(op)
        raise AssertionError(f"no {f} op in 10,000")


def test_after_a_crash_the_new_client_first_resends_what_ended_info():
    run = _Run(QueueGenerator(seed=3, resend=True))
    unsure = run.until("send", INFO)
    run.until("send", FAIL)  # certainly not stored: nothing to resend
    run.until("crash")
    resend = run.gen.op(run.ctx)
    assert resend.f == RESEND and resend.value == unsure.value
    assert resend.get("resend_of") == unsure.index
    # A resend that ends ok is done with, and the failed send is not resent: the worker goes
    # on as before (assign first).
    run.gen.update(run.ctx, replace(resend, type=OK, index=999, value=[["send", unsure.value[0][1],
                                                                        [5, unsure.value[0][2]]]]))
    assert run.gen.op(run.ctx).f == "assign"


def test_a_resend_that_ends_info_is_resent_at_the_next_crash_under_the_original_index():
    run = _Run(QueueGenerator(seed=3, resend=True))
    unsure = run.until("send", INFO)
    run.until("crash")
    first = run.gen.op(run.ctx)
    run.gen.update(run.ctx, replace(first, type=INFO, index=500))
    assert run.gen.op(run.ctx).f != RESEND  # only at the next restart
    run.until("crash")
    again = run.gen.op(run.ctx)
    assert (again.f, again.value, again.get("resend_of")) == (RESEND, unsure.value, unsure.index)


def test_a_replaced_client_resends_too():
    run = _Run(QueueGenerator(seed=3, resend=True))
    unsure = run.until("send", INFO)
    run.gen.fresh_client(0)  # the watchdog's successor, or a broken client's
    assert run.gen.op(run.ctx).value == unsure.value


def test_without_resend_nothing_is_resent():
    run = _Run(QueueGenerator(seed=3))
    run.until("send", INFO)
    run.until("crash")
    assert RESEND not in {run.next().f for _ in range(300)}


def test_a_worker_holding_unsure_sends_restarts_sooner():
    def ops_to_crash(resend: bool) -> int:
        run = _Run(QueueGenerator(seed=3, resend=resend))
        run.until("send", INFO)
        for n in range(1, 10_000):
            if run.next().f == "crash":
                return n
        raise AssertionError("no crash in 10,000 ops")

    # 1 in 16 rather than 1 in 256 (the seed fixes the draws): a resend comes while it matters.
    assert ops_to_crash(True) < 64 < ops_to_crash(False)


# -- transactions: a batch that ended info is resent whole ----------------------------------

def _txn_run() -> _Run:
    return _Run(QueueGenerator(seed=3, txn=True, one_key_txns=True, abort_fraction=0.0, resend=True))


def _until_batch(run: _Run, outcome: str, *, size: int = 2) -> Op:
    """Ops completed ok until a transaction of at least `size` sends, which ends as `outcome`."""
    for _ in range(10_000):
        op = run.gen.op(run.ctx)
        assert op is not None
        if op.f == "send" and len(op.value) >= size:
            return run.complete(op, outcome)
        run.complete(op)
    raise AssertionError(f"no batch of {size} sends in 10,000 ops")


def test_a_batch_that_ended_info_is_resent_whole_in_one_op():
    run = _txn_run()
    unsure = _until_batch(run, INFO)
    _until_batch(run, FAIL)  # certainly not stored: nothing to resend
    run.until("crash")
    resend = run.gen.op(run.ctx)
    assert (resend.f, resend.value, resend.get("resend_of")) == (RESEND, unsure.value, unsure.index)
    assert len({m[1] for m in resend.value}) == 1 and len(resend.value) >= 2  # one key: one batch again
    run.gen.update(run.ctx, replace(resend, type=OK, index=999,
                                    value=[["send", m[1], [None, m[2]]] for m in resend.value],
                                    extra={**resend.extra, "duplicate": True}))
    assert run.gen.op(run.ctx).f == "assign"  # done with: the worker goes on


def test_a_resent_batch_that_ends_info_is_resent_whole_at_the_next_crash():
    run = _txn_run()
    unsure = _until_batch(run, INFO)
    run.until("crash")
    first = run.gen.op(run.ctx)
    run.gen.update(run.ctx, replace(first, type=INFO, index=500))
    assert run.gen.op(run.ctx).f != RESEND
    run.until("crash")
    again = run.gen.op(run.ctx)
    assert (again.f, again.value, again.get("resend_of")) == (RESEND, unsure.value, unsure.index)


def test_an_abort_that_ended_info_is_never_resent():
    # Its batch was meant never to be stored: resending would store it.
    run = _Run(QueueGenerator(seed=3, txn=True, one_key_txns=True, abort_fraction=1.0, resend=True))
    for _ in range(10_000):
        op = run.gen.op(run.ctx)
        if op.get("abort"):
            run.complete(op, INFO)
            break
        run.complete(op)
    else:
        raise AssertionError("no abort in 10,000 ops")
    run.gen.fresh_client(0)
    assert run.gen.op(run.ctx).f == "assign"
