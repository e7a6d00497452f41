"""The queue generator, driven without clients under fixed seeds."""

from __future__ import annotations

from collections import Counter
from typing import Any

from logquake.history import INFO, OK, Op
from logquake.workloads import DRAIN, MAIN, Context, QueueGenerator, micro_f
from logquake.workloads.generator import FINAL_REREADS, SETTLE_POLLS


def _drive(gen: QueueGenerator, n: int, workers: int = 3) -> list[Op]:
    """Ask workers round-robin; complete each op ok with made-up offsets (a perfect log)."""
    ops, logs = [], {}
    for i in range(n):
        ctx = Context(worker=i % workers, process=i % workers, phase=MAIN)
        op = gen.op(ctx)
        ops.append(op)
        gen.update(ctx, _perfect(op, logs))
    return ops


def _perfect(op: Op, logs: dict[int, list[int]]) -> Op:
    if op.f in ("assign", "subscribe"):
        return Op(process=op.process, type=OK, f=op.f, value=op.value)
    if op.f == "crash":
        return Op(process=op.process, type=INFO, f=op.f, value=None)
    value = []
    for m in op.value:
        if m[0] == "send":
            log = logs.setdefault(m[1], [])
            log.append(m[2])
            value.append(["send", m[1], [len(log) - 1, m[2]]])
        else:
            value.append(["poll", {}])
    return Op(process=op.process, type=OK, f=op.f, value=value)


def test_same_seed_same_ops_and_different_seed_differs():
    a = [o.to_dict() for o in _drive(QueueGenerator(seed=7), 2000)]
    b = [o.to_dict() for o in _drive(QueueGenerator(seed=7), 2000)]
    c = [o.to_dict() for o in _drive(QueueGenerator(seed=8), 2000)]
    assert a == b
    assert a != c


def test_values_unique_per_key_and_consecutive():
    ops = _drive(QueueGenerator(seed=1, max_writes_per_key=50), 5000)
    per_key: dict[int, list[int]] = {}
    for op in ops:
        for m in op.value or []:
            if isinstance(m, list) and m[0] == "send":
                per_key.setdefault(m[1], []).append(m[2])
    assert len(per_key) > 10  # keys rotated
    for vs in per_key.values():
        assert vs == list(range(1, len(vs) + 1))


def test_first_key_shifts_every_key_and_nothing_else():
    base = _drive(QueueGenerator(seed=4, max_writes_per_key=30), 1500)
    shifted = _drive(QueueGenerator(seed=4, max_writes_per_key=30, first_key=1000), 1500)

    def keys(ops: list[Op]) -> set[int]:
        return {m[1] for o in ops if o.f in ("send", "poll", "txn") for m in o.value if m[0] == "send"}

    assert min(keys(shifted)) >= 1000 and {k + 1000 for k in keys(base)} == keys(shifted)
    assert [o.f for o in base] == [o.f for o in shifted]


def test_key_rotation_respects_budget_and_keeps_ten_active():
    gen = QueueGenerator(seed=3, max_writes_per_key=20)
    _drive(gen, 3000)
    assert len(gen.active) == 10
    for k, nv in gen.next_value.items():
        assert nv - 1 <= 20, (k, nv)


def test_op_mix_without_txn():
    ops = _drive(QueueGenerator(seed=5), 20000, workers=10)
    fs = Counter(o.f for o in ops)
    assert set(fs) == {"send", "poll", "assign", "crash"}
    assert all(len(o.value) == 1 for o in ops if o.f in ("send", "poll"))
    # about one op in 64 (re)assigns, plus one per fresh client
    assert 0.5 / 64 < fs["assign"] / len(ops) < 2.5 / 64
    assert fs["crash"] > 0


def test_txn_ops_have_one_to_four_micro_ops():
    ops = _drive(QueueGenerator(seed=5, txn=True, sub_via="subscribe"), 5000)
    sizes = Counter(len(o.value) for o in ops if o.f in ("send", "poll", "txn"))
    assert set(sizes) == {1, 2, 3, 4}
    assert "subscribe" in {o.f for o in ops} and "assign" not in {o.f for o in ops}
    for o in ops:
        if o.f in ("send", "poll", "txn"):
            assert o.f == micro_f(o.value)


def test_first_op_of_every_fresh_client_assigns():
    gen = QueueGenerator(seed=9)
    ctx = Context(worker=0, process=0)
    assert gen.op(ctx).f == "assign"
    gen.update(ctx, Op(process=0, type=OK, f="assign", value=[0]))
    gen.fresh_client(0)
    assert gen.op(ctx).f == "assign"


def test_drain_assigns_all_keys_then_polls_until_highest_offsets_read():
    gen = QueueGenerator(seed=11)
    _drive(gen, 500, workers=1)
    ctx = Context(worker=0, process=0, phase=DRAIN)
    op = gen.op(ctx)
    assert op.f == "assign" and op.get("seek_to_beginning") is True
    assert op.value == gen.all_keys
    gen.update(ctx, Op(process=0, type=OK, f="assign", value=op.value))
    target = dict(gen.highest)
    assert target
    assert gen.op(ctx).f == "poll"
    # an info poll teaches nothing, and its worker goes on as a new process, whose final read
    # starts with an assign of its own; an ok poll reaching every key's highest offset ends it
    everything = {str(k): [[off, 0]] for k, off in target.items()}
    gen.update(ctx, Op(process=0, type=INFO, f="poll", value=[["poll", everything]]))
    ctx = Context(worker=0, process=1, phase=DRAIN)
    op = gen.op(ctx)
    assert op.f == "assign" and op.get("final") is True
    gen.update(ctx, Op(process=1, type=OK, f="assign", value=op.value))
    assert gen.op(ctx).f == "poll"
    gen.update(ctx, Op(process=1, type=OK, f="poll", value=[["poll", everything]]))
    assert gen.op(ctx) is None


def test_drain_ops_are_marked_final():
    gen = QueueGenerator(seed=11)
    _drive(gen, 50, workers=1)
    ctx = Context(worker=0, process=0, phase=DRAIN)
    op = gen.op(ctx)
    assert op.get("final") is True
    gen.update(ctx, Op(process=0, type=OK, f="assign", value=op.value, extra=dict(op.extra)))
    assert gen.op(ctx).get("final") is True


def _draining(seed: int = 11) -> tuple[QueueGenerator, Context, list[int]]:
    """A generator after 500 ops of one worker, that worker's drain context, and the keys its
    final assign asks for."""
    gen = QueueGenerator(seed=seed)
    _drive(gen, 500, workers=1)
    ctx = Context(worker=0, process=0, phase=DRAIN)
    return gen, ctx, gen.op(ctx).value


def _final(gen: QueueGenerator, ctx: Context, f: str, value: Any, **extra: Any) -> None:
    gen.update(ctx, Op(process=0, type=OK, f=f, value=value, extra={"final": True, **extra}))


def test_drain_reads_to_the_reported_end_not_the_highest_known_offset():
    gen, ctx, keys = _draining()
    # The log lost its tail: every key ends at 1, below the offsets acknowledged earlier.
    ends = {str(k): 1 for k in keys}
    _final(gen, ctx, "assign", keys, ends=ends)
    assert gen.op(ctx).f == "poll"
    # A position at the end is enough, whatever the poll returned (markers are not records).
    positions = {str(k): 1 for k in keys}
    _final(gen, ctx, "poll", [["poll", {}]], positions=positions)
    assert gen.drained(0)
    # The log looks shorter than what was acknowledged: poll on a while, then read it all again.
    for reread in range(FINAL_REREADS):
        fs = [gen.op(ctx).f for _ in range(SETTLE_POLLS + 1)]
        assert fs == ["poll"] * SETTLE_POLLS + ["assign"], reread
        _final(gen, ctx, "assign", keys, ends=ends)
        assert gen.op(ctx).f == "poll"
        _final(gen, ctx, "poll", [["poll", {}]], positions=positions)
    assert gen.op(ctx) is None


def test_a_final_read_that_reached_every_known_offset_is_not_made_again():
    gen, ctx, keys = _draining()
    ends = {str(k): gen.highest.get(k, -1) + 1 for k in keys}
    _final(gen, ctx, "assign", keys, ends=ends)
    _final(gen, ctx, "poll", [["poll", {}]], positions=ends)
    assert gen.op(ctx) is None


def test_drain_falls_back_to_the_highest_known_offset_where_the_end_is_unknown():
    gen, ctx, keys = _draining()
    unknown = keys[0]
    known = {str(k): gen.highest.get(k, -1) + 1 for k in keys if k != unknown}
    _final(gen, ctx, "assign", keys, ends=known | {str(unknown): None})
    assert gen.op(ctx).f == "poll"
    _final(gen, ctx, "poll", [["poll", {str(unknown): [[gen.highest[unknown], 0]]}]], positions=known)
    assert gen.op(ctx) is None


def test_a_final_read_missing_an_end_asks_for_it_again():
    gen, ctx, keys = _draining()
    _final(gen, ctx, "assign", keys, ends=dict.fromkeys(map(str, keys)))
    fs = [gen.op(ctx).f for _ in range(SETTLE_POLLS + 1)]
    assert fs == ["poll"] * SETTLE_POLLS + ["assign"]
    ends = {str(k): gen.highest.get(k, -1) + 1 for k in keys}
    _final(gen, ctx, "assign", keys, ends=ends)
    _final(gen, ctx, "poll", [["poll", {}]], positions=ends)
    assert gen.op(ctx) is None


def test_info_sends_are_not_a_drain_target():
    gen = QueueGenerator(seed=2)
    ctx = Context(worker=0, process=0)
    gen.update(ctx, Op(process=0, type=INFO, f="send", value=[["send", 1, [99, 5]]]))
    assert gen.highest == {}
    gen.update(ctx, Op(process=0, type=OK, f="send", value=[["send", 1, [3, 6]]]))
    assert gen.highest == {1: 3}


def test_each_workers_op_kinds_do_not_depend_on_the_interleaving():
    import random

    def per_worker(order: list[int]) -> dict[int, list[str]]:
        gen, logs, out = QueueGenerator(seed=21, txn=True), {}, {}
        for w in order:
            ctx = Context(worker=w, process=w)
            op = gen.op(ctx)
            out.setdefault(w, []).append((op.f, len(op.value or [])))
            gen.update(ctx, _perfect(op, logs))
        return out

    round_robin = [i % 4 for i in range(4000)]
    shuffled = round_robin[:]
    random.Random(0).shuffle(shuffled)
    assert per_worker(round_robin) == per_worker(shuffled)


def test_txn_workload_marks_a_tenth_of_sending_transactions_for_abort():
    ops = _drive(QueueGenerator(seed=5, txn=True), 4000)
    txns = [o for o in ops if o.f in ("send", "txn")]
    marked = [o for o in txns if o.get("abort")]
    assert 0.06 < len(marked) / len(txns) < 0.14, len(marked) / len(txns)
    # only transactions that write are aborted on purpose; the same seed marks the same ops
    assert all(o.f in ("send", "txn") for o in ops if o.get("abort"))
    again = _drive(QueueGenerator(seed=5, txn=True), 4000)
    assert [o.to_dict() for o in again] == [o.to_dict() for o in ops]


def test_no_abort_marks_without_txn_or_with_fraction_zero():
    assert not any(o.get("abort") for o in _drive(QueueGenerator(seed=5), 2000))
    assert not any(o.get("abort") for o in _drive(QueueGenerator(seed=5, txn=True, abort_fraction=0.0), 2000))
    everything = _drive(QueueGenerator(seed=5, txn=True, abort_fraction=1.0), 500)
    assert all(o.get("abort") for o in everything if o.f in ("send", "txn"))


def test_a_worker_set_to_read_from_a_node_marks_every_final_op_with_it():
    g = QueueGenerator(seed=1, active_keys=1)
    g.read_from(7, "n2")
    assign = g.op(Context(worker=7, process=70, phase=DRAIN))
    assert (assign.f, assign.get("final"), assign.get("node")) == ("assign", True, "n2")
    other = g.op(Context(worker=0, process=0, phase=DRAIN))
    assert (other.f, other.get("final"), other.get("node")) == ("assign", True, None)  # others read as before


def test_a_key_whose_stream_did_not_answer_is_the_only_one_short():
    gen, ctx, keys = _draining()
    dead, rest = keys[0], keys[1:]
    ends = {str(k): gen.highest.get(k, -1) + 1 for k in keys}
    _final(gen, ctx, "assign", keys, ends=ends)
    assert gen.short_keys(0) == sorted(keys)
    # The final poll is ok with what the answering streams returned; the dead one is unread.
    _final(gen, ctx, "poll", [["poll", {}]], positions={str(k): ends[str(k)] for k in rest},
           unread={str(dead): "TimeoutError: nats: timeout"})
    assert gen.short_keys(0) == [dead] and not gen.drained(0)
    assert gen.op(ctx).f == "poll"  # it goes on reading the dead key, keeping the rest
    _final(gen, ctx, "poll", [["poll", {}]], positions={str(dead): ends[str(dead)]})
    assert gen.short_keys(0) == [] and gen.drained(0)
