"""The kv workload's generator and its check: hand-made KV histories judged by the cas-register model.

Pure: no servers.
"""

from __future__ import annotations

import random

from logquake.history import FAIL, INFO, INVOKE, OK, Op
from logquake.workloads import kv
from logquake.workloads.generator import DRAIN, MAIN, Context
from logquake.workloads.registry import get_workload


def _history(*events: tuple[int, str, str, object]) -> list[Op]:
    """(process, type, f, value) in order; index and time are the position."""
    return [Op(index=i, time=i, process=p, type=t, f=f, value=v) for i, (p, t, f, v) in enumerate(events)]


def test_a_read_of_the_value_a_completed_cas_replaced_is_not_linearizable():
    ops = _history(
        (0, INVOKE, "write", [0, 1]), (0, OK, "write", [0, 1]),
        (1, INVOKE, "cas", [0, [1, 2]]), (1, OK, "cas", [0, [1, 2]]),
        (2, INVOKE, "read", [0, None]), (2, OK, "read", [0, 1]),  # after the cas completed
        (3, INVOKE, "read", [1, None]), (3, OK, "read", [1, None]),  # key 1 is fine
    )
    res = kv.analyse(ops)
    assert res["valid"] is False
    assert (res["linear"]["model"], res["linear"]["keys"], res["linear"]["invalid_keys"]) == ("cas-register", 2, 1)
    [err] = res["anomalies"]["nonlinearizable"]["errs"]
    assert err["key"] == 0 and err["op"]["description"] == "read -> 1"
    assert "No order of the ops of key 0 explains op 4" in err["explanation"]


def test_the_same_read_concurrent_with_the_cas_is_linearizable_and_failed_ops_say_nothing():
    ops = _history(
        (0, INVOKE, "write", [0, 1]), (0, OK, "write", [0, 1]),
        (1, INVOKE, "cas", [0, [1, 2]]),
        (2, INVOKE, "read", [0, None]), (2, OK, "read", [0, 1]),  # before the cas took effect
        (1, OK, "cas", [0, [1, 2]]),
        (3, INVOKE, "cas", [0, [1, 3]]), (3, FAIL, "cas", [0, [1, 3]]),  # refused: never happened
        (4, INVOKE, "write", [0, 4]), (4, INFO, "write", [0, 4]),  # unknown, never read
        (2, INVOKE, "read", [0, None]), (2, OK, "read", [0, 2]),
    )
    res = kv.analyse(ops)
    assert res["valid"] is True, res
    assert res["linear"]["invalid_keys"] == 0


def test_an_indeterminate_cas_may_explain_a_read():
    ops = _history(
        (0, INVOKE, "write", [0, 1]), (0, OK, "write", [0, 1]),
        (1, INVOKE, "cas", [0, [1, 2]]), (1, INFO, "cas", [0, [1, 2]]),
        (2, INVOKE, "read", [0, None]), (2, OK, "read", [0, 2]),
        (2, INVOKE, "read", [0, None]), (2, OK, "read", [0, 1]),  # but then it cannot go back
    )
    assert kv.analyse(ops)["valid"] is False
    assert kv.analyse(ops[:6])["valid"] is True


def _complete(op: Op, gen: kv.KVGenerator, ctx: Context, value: object = None, type_: str = OK) -> Op:
    done = Op(process=op.process, type=type_, f=op.f, value=op.value if value is None else value)
    gen.update(ctx, done)
    return done


def test_the_generator_writes_unique_values_and_swaps_from_what_it_learned():
    gen = kv.KVGenerator(seed=3)
    ctx = Context(worker=0, process=0, phase=MAIN)
    written: dict[int, list[int]] = {}
    for _ in range(300):
        op = gen.op(ctx)
        assert op is not None and op.f in ("read", "write", "cas") and 0 <= op.value[0] < kv.KEYS
        k = op.value[0]
        if op.f == "cas":
            old, new = op.value[1]
            assert old == gen.last_seen.get(k)
            written.setdefault(k, []).append(new)
            _complete(op, gen, ctx)
            assert gen.last_seen[k] == new
        elif op.f == "write":
            written.setdefault(k, []).append(op.value[1])
            _complete(op, gen, ctx)
        else:
            _complete(op, gen, ctx, [k, gen.last_seen.get(k)])
    assert all(vs == sorted(set(vs)) for vs in written.values()), "values unique and increasing per key"
    assert {op_f for op_f in ("read", "write", "cas")} <= {gen.op(ctx).f for _ in range(50)}


def test_the_drain_reads_every_key_until_a_read_succeeds():
    gen = kv.KVGenerator(seed=1)
    ctx = Context(worker=0, process=0, phase=DRAIN)
    read = []
    while (op := gen.op(ctx)) is not None:
        assert op.f == "read"
        k = op.value[0]
        failed = k == 2 and read.count(2) == 0
        read.append(k)
        _complete(op, gen, ctx, [k, None], FAIL if failed else OK)
    assert read == [0, 1, 2, 3, 4, 2]


def test_the_registry_record_builds_the_kv_workload():
    w = get_workload("kv")
    assert (w.clients, w.guarantee_applies, w.drive) == (("nats-py",), False, None)


def random_history(n_ops: int, *, keys: int = kv.KEYS, workers: int = 10, seed: int = 7) -> list[Op]:
    """A linearizable history shaped as a run's: `workers` overlapping in time, each op taking
    effect at one instant inside its interval, against one true register per key."""
    rng = random.Random(seed)
    gen = kv.KVGenerator(seed=seed, keys=keys)
    state: dict[int, int | None] = {}
    free = [0.0] * workers  # when each worker may invoke next
    last_effect = 0.0
    events: list[tuple[float, int, Op]] = []
    for i in range(n_ops):
        w = min(range(workers), key=free.__getitem__)  # starts never go back in time
        ctx = Context(worker=w, process=w, phase=MAIN)
        inv = gen.op(ctx)
        assert inv is not None
        start = free[w]
        last_effect = effect = max(start, last_effect) + rng.random() * 0.5
        free[w] = end = effect + rng.random() * 3
        k = inv.value[0]
        if inv.f == "read":
            done = Op(process=w, type=OK, f="read", value=[k, state.get(k)])
        elif inv.f == "write":
            state[k] = inv.value[1]
            done = Op(process=w, type=OK, f="write", value=inv.value)
        else:
            old, new = inv.value[1]
            swapped = state.get(k) == old
            if swapped:
                state[k] = new
            done = Op(process=w, type=OK if swapped else FAIL, f="cas", value=inv.value)
        gen.update(ctx, done)
        events += [(start, 2 * i, inv), (end, 2 * i + 1, done)]
    events.sort(key=lambda e: (e[0], e[1]))
    return [Op(index=j, time=int(t * 1_000_000), process=o.process, type=o.type, f=o.f, value=o.value)
            for j, (t, _, o) in enumerate(events)]


def test_a_run_sized_history_is_linearizable_and_one_stale_read_makes_it_not():
    ops = random_history(10_000)
    res = kv.analyse(ops)
    assert (res["valid"], res["linear"]["keys"], res["linear"]["ops"]) == (True, kv.KEYS, 10_000 - _failed(ops))
    # The last ok read of a key that changed since, answered from before the change.
    reads = [i for i, op in enumerate(ops) if op.type == OK and op.f == "read" and op.value[1] is not None]
    i = reads[len(reads) // 2]
    k, v = ops[i].value
    stale = [*ops[:i], Op(index=i, time=ops[i].time, process=ops[i].process, type=OK, f="read",
                          value=[k, _earlier_value(ops, i, k, v)]), *ops[i + 1:]]
    assert kv.analyse(stale)["valid"] is False


def _failed(ops: list[Op]) -> int:
    return sum(1 for op in ops if op.type == FAIL)


def _earlier_value(ops: list[Op], before: int, k: int, v: int) -> int:
    """A value key k held before v that completed well before op `before` was invoked."""
    written = [op.value[1] if op.f == "write" else op.value[1][1] for op in ops[:before]
               if op.type == OK and op.f in ("write", "cas") and op.value[0] == k]
    older = [w for w in written if w < v]
    assert older, "pick a read of a key written more than once"
    return older[0]
