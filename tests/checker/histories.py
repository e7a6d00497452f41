"""Queue histories for tests: a tiny builder for literal ones, and ways to vary simulated ones.

    h = H()
    h.send(0, 1, 10, offset=0)                 # process 0 sends 10 to key 1, ok at offset 0
    h.poll(1, {1: [(0, 10)]})                  # process 1 polls it
    h.txn(2, [("send", 1, 11, 1), ("poll", {1: [(1, 11)]})], type="info")

Each call appends an invoke and its completion (in that order) unless split with
`invoke` / `complete` to make ops overlap. Where the checker reads times (a dedup window,
an op's attempts), `Timed` writes each op at the times given, as a run records them:

    h = Timed()
    orig = h.send(1.0, 11.0, 0, 1, 7, type_="info")                    # invoked at 1 s, info at 11 s
    h.send(20.0, 20.1, 6, 1, 7, offset=2, f="resend", resend_of=orig.index)
    h.final_read(30.0, 3, {1: 3}, {1: [(1, 7), (2, 7)]})               # assign from the start, poll

`shared_consumer_polls` is the gap and the redelivery a shared consumer's poll holds.

For simulated histories (logquake.checker.generate): `with_bug` is a small fixed simulation
with one bug planted (or none), `sim_configs` draws small simulation settings for Hypothesis; `oddly_read`, `swap_sends`, `shift_offsets` and `scale_values`
rewrite a history so that reads go back or skip, a process's sends go back, offsets lie
beyond what a list can index, or values spread far apart.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import strategies as st

from logquake.checker.generate import SimConfig
from logquake.history import Op


def _invoked(mops: list) -> list:
    return [["send", m[1], m[2]] if m[0] == "send" else ["poll"] for m in mops]


def _completed(mops: list) -> list:
    out = []
    for m in mops:
        if m[0] == "send":
            out.append(["send", m[1], [m[3], m[2]]] if len(m) > 3 else ["send", m[1], m[2]])
        else:
            out.append(
                ["poll", {str(k): [list(p) for p in ps] for k, ps in m[1].items()}]
                if len(m) > 1
                else ["poll"]
            )
    return out


def _f(mops: list) -> str:
    kinds = {m[0] for m in mops}
    return kinds.pop() if len(kinds) == 1 else "txn"


class H:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.pending: dict[Any, tuple[str, list]] = {}

    def _add(self, **kw: Any) -> Op:
        extra = kw.pop("extra", {})
        op = Op(index=len(self.ops), time=len(self.ops) * 1_000_000, **kw, extra=extra)
        self.ops.append(op)
        return op

    def invoke(self, p: Any, mops: list) -> None:
        self.pending[p] = (_f(mops), mops)
        self._add(process=p, type="invoke", f=_f(mops), value=_invoked(mops))

    def complete(self, p: Any, type: str = "ok", mops: list | None = None, **extra: Any) -> Op:
        f, invoked = self.pending.pop(p)
        return self._add(
            process=p, type=type, f=f, value=_completed(mops if mops is not None else invoked), extra=extra
        )

    def txn(self, p: Any, mops: list, type: str = "ok", **extra: Any) -> Op:
        self.invoke(p, mops)
        return self.complete(p, type, mops, **extra)

    def send(self, p: Any, k: Any, v: Any, offset: int | None = None, type: str = "ok", **extra: Any) -> Op:
        return self.txn(p, [("send", k, v, offset)], type, **extra)

    def poll(self, p: Any, reads: dict, type: str = "ok", **extra: Any) -> Op:
        return self.txn(p, [("poll", reads)], type, **extra)

    def assign(self, p: Any, keys: list, seek_to_beginning: bool = False, f: str = "assign") -> None:
        extra = {"seek_to_beginning": True} if seek_to_beginning else {}
        self._add(process=p, type="invoke", f=f, value=keys, extra=extra)
        self._add(process=p, type="ok", f=f, value=keys, extra=extra)

    def nemesis(self, f: str = "start-partition", value: Any = "majority") -> None:
        self._add(process="nemesis", type="info", f=f, value=value)


S = 1_000_000_000  # ns


class Timed:
    """A literal history at given times (s since the test began): each call appends an
    invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _add(self, t: float, process: Any, type_: str, f: str, value: Any, **extra: Any) -> Op:
        op = Op(index=len(self.ops), time=int(t * S), process=process, type=type_, f=f, value=value, extra=extra)
        self.ops.append(op)
        return op

    def batch(self, t0: float, t1: float, p: int, k: int, values: list[int], offsets: list[int | None] | None = None,
              *, type_: str = "ok", f: str = "send", **extra: Any) -> Op:
        """An op sending `values` to key k, invoked at t0 and completed at t1: ok at `offsets`
        (None: unknown), or info/fail. Its invocation carries `resend_of` when given."""
        inv_extra = {"resend_of": extra["resend_of"]} if "resend_of" in extra else {}
        self._add(t0, p, "invoke", f, [["send", k, v] for v in values], **inv_extra)
        done = ([["send", k, [o, v]] for o, v in zip(offsets or [None] * len(values), values, strict=True)]
                if type_ == "ok" else [["send", k, v] for v in values])
        return self._add(t1, p, type_, f, done, **extra)

    def send(self, t0: float, t1: float, p: int, k: int, v: int, offset: int | None = None, *, type_: str = "ok",
             f: str = "send", **extra: Any) -> Op:
        """A batch of one value."""
        return self.batch(t0, t1, p, k, [v], [offset], type_=type_, f=f, **extra)

    def poll(self, t: float, p: int, reads: dict[int, list[tuple[int, int]]], **extra: Any) -> Op:
        self._add(t, p, "invoke", "poll", [["poll"]], **extra)
        return self._add(t + 0.01, p, "ok", "poll",
                         [["poll", {str(k): [list(x) for x in xs] for k, xs in reads.items()}]], **extra)

    def final_read(self, t: float, p: int, ends: dict[int, int], reads: dict[int, list[tuple[int, int]]]) -> None:
        """The drain's final read: an assign from the beginning with each key's end, then one poll."""
        self._add(t, p, "invoke", "assign", list(ends), final=True, seek_to_beginning=True)
        self._add(t + 0.01, p, "ok", "assign", list(ends), final=True, seek_to_beginning=True,
                  ends={str(k): e for k, e in ends.items()})
        self.poll(t + 0.02, p, reads, final=True, positions={str(k): e for k, e in ends.items()})


def shared_consumer_polls(**marks: Any) -> H:
    """What a shared consumer (JetStream's subscribe) does: process 1's poll of key 1 skips 11
    (process 2 was handed it) and then gets 10 again, redelivered after its ack wait; `marks`
    are the poll's extra fields (`redelivered={"1": [0]}` says so)."""
    h = H()
    for i in range(3):
        h.send(0, 1, 10 + i, i)
    h.poll(1, {1: [(0, 10), (2, 12), (0, 10)]}, **marks)
    h.poll(2, {1: [(1, 11)]})
    return h


def oddly_read(ops: list[Op], seed: int) -> list[Op]:
    """Some assigns made subscribes (keys all dropped), some reads reversed, cut or rewound."""
    rng = random.Random(seed)
    out: list[Op] = []
    seen: dict[str, list] = {}
    sub: dict[int, bool] = {}
    for o in ops:
        if o.f == "assign":
            if o.type == "invoke":
                sub[o.process] = rng.random() < 0.5
            if sub.get(o.process):
                o = dataclasses.replace(o, f="subscribe")
        elif o.type != "invoke" and isinstance(o.value, list):
            value = []
            for m in o.value:
                if m[0] == "poll" and len(m) > 1 and m[1] and rng.random() < 0.1:
                    reads = {}
                    for k, prs in m[1].items():
                        prs, c = [list(p) for p in prs], rng.random()
                        if c < 0.3 and len(prs) > 1:
                            prs.reverse()
                        elif c < 0.6 and len(prs) > 2:
                            del prs[1]
                        elif seen.get(k):
                            prs = [list(rng.choice(seen[k]))] + prs
                        reads[k] = prs
                    m = [m[0], reads, *m[2:]]
                if m[0] == "poll" and len(m) > 1 and m[1]:
                    for k, prs in m[1].items():
                        seen.setdefault(k, []).extend(prs)
                value.append(m)
            o = dataclasses.replace(o, value=value)
        out.append(o)
    return out


def swap_sends(ops: list[Op]) -> list[Op]:
    """The results of the first two ok sends of one process to one key swapped: the later op
    now holds the earlier offset (a process's sends going back, no offset holding two values)."""
    seen: dict[tuple, int] = {}
    for i, o in enumerate(ops):
        if o.type == "ok" and o.f == "send" and len(o.value) == 1:
            at = (o.process, o.value[0][1])
            if at in seen:
                j = seen[at]
                ops = list(ops)
                ops[i], ops[j] = (
                    dataclasses.replace(ops[i], value=ops[j].value),
                    dataclasses.replace(ops[j], value=ops[i].value),
                )
                return ops
            seen[at] = i
    raise AssertionError("no process sent twice to one key")


def shift_offsets(ops: list[Op], by: int) -> list[Op]:
    out = []
    for o in ops:
        if o.type != "invoke" and isinstance(o.value, list):
            value = []
            for m in o.value:
                if isinstance(m, list) and m[0] == "send" and len(m) > 2 and isinstance(m[2], list):
                    m = ["send", m[1], [m[2][0] + by, m[2][1]]]
                elif isinstance(m, list) and m[0] == "poll" and len(m) > 1 and m[1]:
                    m = ["poll", {k: [[p[0] + by, p[1]] for p in prs] for k, prs in m[1].items()}]
                value.append(m)
            o = dataclasses.replace(o, value=value)
        out.append(o)
    return out


def scale_values(ops: list[Op], by: int) -> list[Op]:
    """Every value sent or read multiplied by `by`: the same history, values spread far apart."""

    def send(m: list) -> list:
        x = m[2]
        return ["send", m[1], [x[0], x[1] * by] if isinstance(x, list) else x * by]

    out = []
    for o in ops:
        if isinstance(o.value, list):
            value = []
            for m in o.value:
                if isinstance(m, list) and m[0] == "send" and len(m) > 2:
                    m = send(m)
                elif isinstance(m, list) and m[0] == "poll" and len(m) > 1 and m[1]:
                    m = ["poll", {k: [[p[0], p[1] * by] for p in prs] for k, prs in m[1].items()}]
                value.append(m)
            o = dataclasses.replace(o, value=value)
        out.append(o)
    return out


def with_bug(bug: str, **settings: Any) -> SimConfig:
    """A small simulation with `bug` planted ("none": no bug): 3 active keys and 5 % each of
    failed, indeterminate and reassigning ops, unless `settings` says otherwise."""
    defaults: dict[str, Any] = {"active_keys": 3, "p_fail": 0.05, "p_info": 0.05, "p_assign": 0.05}
    return SimConfig(**{**defaults, **settings}, bugs=frozenset() if bug == "none" else frozenset([bug]))


def sim_configs(bugs: st.SearchStrategy[frozenset] = st.just(frozenset())) -> st.SearchStrategy[SimConfig]:
    """Random small simulations (generate.py), with the planted bugs `bugs` draws."""
    return st.builds(
        SimConfig,
        ops=st.integers(20, 250),
        workers=st.integers(1, 6),
        active_keys=st.integers(1, 6),
        max_writes_per_key=st.integers(1, 40),
        txn=st.booleans(),
        p_fail=st.sampled_from([0.0, 0.05, 0.2]),
        p_info=st.sampled_from([0.0, 0.05, 0.2]),
        p_assign=st.sampled_from([0.0, 1 / 64, 0.2]),
        poll_max=st.integers(1, 8),
        bugs=bugs,
        p_bug=st.sampled_from([0.05, 0.2]),
        seed=st.integers(0, 2**32),
    )

