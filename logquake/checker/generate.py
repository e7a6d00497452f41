"""A simulated replicated log that produces queue histories, for tests and benchmarks.

`simulate(SimConfig(...))` runs workers against an in-memory log with Kafka's semantics
(transactions with commit/abort markers, read_committed reads that stop at the last
stable offset, consumer positions that seek back after a failed or indeterminate op)
and returns (ops, fired): the history, and the bugs that actually fired, each with the
anomaly types the checker must report for it.

Bugs (`SimConfig.bugs`), each applied with probability `p_bug` where it can apply:

    lose-write      an acked write vanishes from the log             -> lost-write
    duplicate       a retried batch is appended twice                -> duplicate
    reuse-offset    a send is acked with an offset that holds another value
                                                                     -> inconsistent-offsets
    read-aborted    readers see aborted writes                       -> G1a
    read-uncommitted readers see writes of open transactions         -> precommitted-read / G1a
    tear-txn        a transaction commits on its first key only      -> lost-write
    reorder         a producer's two sends to a key land reversed    -> int-nonmonotonic-send

Keys rotate as in the queue workload: `active_keys` keys in use, each retired after a
random number of writes up to `max_writes_per_key`. The run ends with every in-flight op
completed, one closing send to every key (so a vanished write is followed by a read one)
and a drain that reads every key from the beginning.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from logquake.gcpause import paused_gc
from logquake.history import Op

BUGS = ("lose-write", "duplicate", "reuse-offset", "read-aborted", "read-uncommitted", "tear-txn", "reorder")

COMMITTED, PENDING, ABORTED, MARKER, LOST = range(5)


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """How to simulate (all keyword-only, every field has a default)."""

    ops: int = 200  # client ops (each an invoke and a completion) in the main phase
    workers: int = 5
    active_keys: int = 10
    max_writes_per_key: int = 1024
    txn: bool = True
    max_txn_len: int = 4
    p_fail: float = 0.02
    p_info: float = 0.02
    p_assign: float = 1 / 64
    poll_max: int = 8
    bugs: frozenset[str] = frozenset()
    p_bug: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = set(self.bugs) - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}; known: {', '.join(BUGS)}")


@dataclass
class _Flight:
    f: str
    mops: list  # invoked form
    results: list  # completed form so far
    outcome: str  # ok, fail, info-commit, info-abort
    token: int
    keys_sent: list = field(default_factory=list)
    first_polled: dict = field(default_factory=dict)
    read_tokens: list = field(default_factory=list)  # (token, key, value) of odd reads
    reorder: bool = False
    entries: dict = field(default_factory=dict)  # key -> the log entries this op appended


@dataclass
class _Worker:
    process: int
    positions: dict = field(default_factory=dict)
    flight: _Flight | None = None


class _Sim:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.ops: list[Op] = []
        self.logs: dict[int, list[list]] = {}  # key -> [[value, state, token], ...]
        self.next_value: dict[int, int] = {}
        self.budget: dict[int, int] = {}
        self.active: list[int] = []
        self.next_key = 0
        self.next_process = 0
        self.outcomes: dict[int, str] = {}  # token -> final outcome
        self.fired: list[tuple[str, tuple[str, ...]]] = []
        self.bug = {b: b in cfg.bugs for b in BUGS}
        for _ in range(cfg.active_keys):
            self._new_key()

    # --- bookkeeping
    def _new_key(self) -> None:
        k = self.next_key
        self.next_key += 1
        self.logs[k] = []
        self.next_value[k] = 0
        self.budget[k] = self.rng.randint(1, self.cfg.max_writes_per_key)
        self.active.append(k)

    def _record(self, **kw: Any) -> None:
        i = len(self.ops)
        self.ops.append(Op(index=i, time=i * 1000, **kw))

    def _fire(self, bug: str, expect: tuple[str, ...]) -> None:
        self.fired.append((bug, expect))

    def _bug(self, name: str) -> bool:
        return self.bug[name] and self.rng.random() < self.cfg.p_bug

    # --- ops
    def invoke(self, w: _Worker) -> None:
        cfg, rng = self.cfg, self.rng
        if rng.random() < cfg.p_assign:
            keys = sorted(rng.sample(self.active, k=rng.randint(1, len(self.active))))
            self._record(process=w.process, type="invoke", f="assign", value=keys)
            w.positions = {k: w.positions.get(k, 0) for k in keys}
            self._record(process=w.process, type="ok", f="assign", value=keys)
            return
        n = rng.randint(1, cfg.max_txn_len) if cfg.txn else 1
        mops = []
        for _ in range(n):
            if rng.random() < 0.5:
                k = rng.choice(self.active)
                v = self.next_value[k]
                self.next_value[k] = v + 1
                self.budget[k] -= 1
                if self.budget[k] <= 0:
                    self.active.remove(k)
                    self._new_key()
                mops.append(["send", k, v])
            else:
                mops.append(["poll"])
        kinds = {m[0] for m in mops}
        f = kinds.pop() if len(kinds) == 1 else "txn"
        r = rng.random()
        outcome = (
            "fail"
            if r < cfg.p_fail
            else ("info-commit" if rng.random() < 0.5 else "info-abort")
            if r < cfg.p_fail + cfg.p_info
            else "ok"
        )
        token = len(self.ops)
        self.outcomes[token] = outcome
        fl = _Flight(f=f, mops=mops, results=[], outcome=outcome, token=token)
        sent_keys = [m[1] for m in mops if m[0] == "send"]
        fl.reorder = cfg.txn and len(sent_keys) != len(set(sent_keys)) and self._bug("reorder")
        w.flight = fl
        self._record(process=w.process, type="invoke", f=f, value=[list(m) for m in mops])

    def step(self, w: _Worker) -> None:
        fl = w.flight
        i = len(fl.results)
        if i == len(fl.mops):
            self.complete(w)
            return
        mop = fl.mops[i]
        if mop[0] == "send":
            fl.results.append(self._send(fl, mop[1], mop[2]))
        else:
            fl.results.append(self._poll(w, fl))

    def _send(self, fl: _Flight, k: int, v: int) -> list:
        log = self.logs[k]
        if not self.cfg.txn and fl.outcome in ("fail", "info-abort"):
            return ["send", k, v]  # never appended
        state = PENDING if self.cfg.txn else COMMITTED
        offset = len(log)
        log.append([v, state, fl.token])
        fl.entries.setdefault(k, []).append(log[-1])
        if self._bug("duplicate"):
            log.append([v, state, fl.token])
            fl.entries[k].append(log[-1])
            if fl.outcome != "fail" and fl.outcome != "info-abort":
                self._fire("duplicate", ("duplicate",))
        if fl.reorder and k in fl.keys_sent:
            j = max(idx for idx, r in enumerate(fl.results) if r[0] == "send" and r[1] == k)
            prev_off = fl.results[j][2][0]
            log[prev_off], log[offset] = log[offset], log[prev_off]
            fl.results[j] = ["send", k, [offset, fl.results[j][2][1]]]
            offset = prev_off
            if fl.outcome in ("ok", "info-commit"):
                self._fire("reorder", ("int-nonmonotonic-send",))
            fl.reorder = False
        fl.keys_sent.append(k)
        if fl.outcome == "ok" and self._bug("reuse-offset"):
            prior = [o for o in range(offset - 1, -1, -1) if log[o][1] == COMMITTED and log[o][0] != v]
            if prior:
                self._fire("reuse-offset", ("inconsistent-offsets",))
                return ["send", k, [prior[0], v]]
        return ["send", k, [offset, v]]

    def _visible(self, entry: list, fl: _Flight) -> bool | None:
        """True: read it; False: skip it; None: stop here (the last stable offset)."""
        state = entry[1]
        if state == COMMITTED:
            return True
        if state == PENDING:
            return True if self.bug["read-uncommitted"] else None
        if state == ABORTED:
            return self.bug["read-aborted"]
        return False

    def _poll(self, w: _Worker, fl: _Flight) -> list:
        got: dict[str, list] = {}
        for k in sorted(w.positions):
            log, pos = self.logs[k], w.positions[k]
            pairs = []
            while pos < len(log) and len(pairs) < self.cfg.poll_max:
                vis = self._visible(log[pos], fl)
                if vis is None:
                    break
                if vis:
                    pairs.append([pos, log[pos][0]])
                    if log[pos][1] != COMMITTED:
                        fl.read_tokens.append((log[pos][2], k, log[pos][0]))
                pos += 1
            if pairs:
                fl.first_polled.setdefault(k, pairs[0][0])
                got[str(k)] = pairs
            w.positions[k] = pos
        return ["poll", got]

    def complete(self, w: _Worker) -> None:
        fl = w.flight
        w.flight = None
        commit = fl.outcome in ("ok", "info-commit")
        if self.cfg.txn:
            self._finish_txn(fl, commit)
        elif commit and fl.outcome == "ok" and fl.keys_sent and self._bug("lose-write"):
            self._lose(fl.token, fl.keys_sent[:1])
        self._judge_reads(fl)
        typ = {"ok": "ok", "fail": "fail"}.get(fl.outcome, "info")
        extra = {"error": "simulated timeout"} if typ == "info" else {}
        self.ops.append(
            Op(
                index=len(self.ops),
                time=len(self.ops) * 1000,
                process=w.process,
                type=typ,
                f=fl.f,
                value=fl.results,
                extra=extra,
            )
        )
        if typ != "ok":
            for k, o in fl.first_polled.items():
                if k in w.positions:
                    w.positions[k] = o  # seek back to the first offset the op polled
        if typ == "info":
            w.process = self.next_process
            self.next_process += 1

    def _finish_txn(self, fl: _Flight, commit: bool) -> None:
        keys = list(dict.fromkeys(fl.keys_sent))
        torn = commit and len(keys) > 1 and self._bug("tear-txn")
        lose = commit and not torn and fl.outcome == "ok" and keys and self._bug("lose-write")
        for n, k in enumerate(keys):
            log = self.logs[k]
            ok = commit and not (torn and n > 0)
            for e in fl.entries.get(k, ()):  # not a scan of the log: that made generation quadratic
                if e[1] == PENDING:
                    e[1] = COMMITTED if ok else (LOST if torn else ABORTED)
            log.append([None, MARKER, fl.token])
        if torn:
            self._fire("tear-txn", ("lost-write",))
        if lose:
            self._lose(fl.token, keys[:1])

    def _lose(self, token: int, keys: list) -> None:
        k = keys[0]
        for pos, e in enumerate(self.logs[k]):
            if e[2] == token and e[1] == COMMITTED:
                e[1] = LOST
                # A consumer already past it polled it before it vanished (a send is visible
                # before it is acknowledged): if that poll ends ok, no write was lost to it.
                if not any(w.positions.get(k, 0) > pos for w in self.workers):
                    self._fire("lose-write", ("lost-write",))
                return

    def _judge_reads(self, fl: _Flight) -> None:
        for token, _k, _v in fl.read_tokens:
            if token == fl.token:
                self._fire("read-uncommitted", ("precommitted-read",))
        if fl.outcome == "ok" and fl.read_tokens:
            self._odd_reads.append(fl)  # judged at the end, once every writer's fate is known

    # --- the run
    def run(self) -> tuple[list[Op], list]:
        cfg, rng = self.cfg, self.rng
        self._odd_reads: list[_Flight] = []
        workers = self.workers = [_Worker(process=i) for i in range(cfg.workers)]
        self.next_process = cfg.workers
        for w in workers:
            w.positions = {k: 0 for k in self.active}
        started = 0
        while started < cfg.ops or any(w.flight for w in workers):
            w = rng.choice(workers)
            if w.flight is not None:
                self.step(w)
            elif started < cfg.ops:
                self.invoke(w)
                started += 1
        self._close_and_drain()
        for fl in self._odd_reads:
            for token, _k, _v in fl.read_tokens:
                if token != fl.token and self.outcomes.get(token) == "fail":
                    bug = "read-aborted" if self.bug["read-aborted"] else "read-uncommitted"
                    self._fire(bug, ("G1a",))
        return self.ops, self.fired

    def _close_and_drain(self) -> None:
        p = self.next_process
        keys = sorted(self.logs)
        mops = [["send", k, self.next_value[k]] for k in keys]
        self._record(process=p, type="invoke", f="send", value=[list(m) for m in mops])
        results = []
        for k in keys:
            v = self.next_value[k]
            self.next_value[k] = v + 1
            results.append(["send", k, [len(self.logs[k]), v]])
            self.logs[k].append([v, COMMITTED, -1])
        self._record(process=p, type="ok", f="send", value=results)
        d = _Worker(process=p + 1, positions={k: 0 for k in keys})
        self._record(
            process=d.process, type="invoke", f="assign", value=keys, extra={"seek_to_beginning": True}
        )
        self._record(process=d.process, type="ok", f="assign", value=keys, extra={"seek_to_beginning": True})
        while any(d.positions[k] < len(self.logs[k]) for k in keys):
            fl = _Flight(f="poll", mops=[["poll"]], results=[], outcome="ok", token=-2)
            self._record(process=d.process, type="invoke", f="poll", value=[["poll"]])
            res = self._poll(d, fl)
            self._record(process=d.process, type="ok", f="poll", value=[res])


def simulate(cfg: SimConfig) -> tuple[list[Op], list[tuple[str, tuple[str, ...]]]]:
    """Run the simulation: (history ops, [(bug, anomaly types it must cause), ...])."""
    with paused_gc():  # millions of small lists and no reference cycles
        return _Sim(cfg).run()
