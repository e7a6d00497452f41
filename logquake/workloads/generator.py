"""The queue workload's generator: pure `op(ctx)` / `update(ctx, event)`, no I/O, no clock.

It decides *what* each worker does next; the runner decides *when* (rate limit, phases)
and a client does it. Each worker draws its choices (op kinds, keys, assignments) from its
own RNG seeded from (seed, worker), and key budgets come from one more, so a seed fixes
each worker's sequence of op kinds however threads interleave; which key and value an op
gets still depends on the interleaving, as in Jepsen. The same seed and the same sequence
of requests give exactly the same ops (tests drive it that way).

Keys rotate as in Elle's list-append generator: `active_keys` keys are live at a time, each
with a random write budget of 1..`max_writes_per_key`; a key whose budget is spent is
retired and replaced by a fresh one (the next integer). Values are unique per key: 1, 2, 3...

Ops (docs/architecture.md): `send` / `poll` (one micro-op each), `txn` (1-4 micro-ops with
`txn=True`), `assign` / `subscribe` (about 1 op in 64, and first for every fresh client),
`crash` (the worker drops its client and opens a fresh one). With `txn=True`, a share
(`abort_fraction`, 10 %) of the transactions that send are marked `abort` (op extra): the
client aborts them on purpose after their records reached the brokers, so aborted writes
exist for read_committed to hide (a G1a otherwise has nothing to find).

In the drain phase every worker makes a final read: it assigns all keys from the beginning
(the client records each key's end of the log on that assign, `ends`), then polls until its
position reached every key's end (`positions` on each poll). Those ops carry `final: true`,
so the checker knows which reads must hold every acknowledged write (checker/final_read.py).
Where a key's end is unknown the worker polls up to the highest offset known for it instead.
Where a reported end lies below an offset known to hold an acknowledged or read value, the
log may have lost its tail, or a transaction left open holds back the last stable offset
until the coordinator aborts it: the worker polls on a while (`SETTLE_POLLS`) and reads
everything again with a fresh end, up to `FINAL_REREADS` times, so only a loss that lasts
is a loss; a worker whose final assign got no end for some key asks again the same way.
A worker set to read from one node (`read_from`, the drain's read from every node) makes
the same final read with every op marked `node`, its client reading what that node holds.

With `resend=True` (a system whose dedup is keyed by a message id the client picks, under an
idempotent producer: JetStream's Nats-Msg-Id) a worker is one logical producer across its
clients: when its client crashes or is replaced, the new one first resends every send of the
worker that ended `info` (stored or not, nobody knows), as a `resend` op carrying the same
key and value and `resend_of`, the index of the original's completion, so the system's dedup
alone keeps the value single. With `txn=True` a transaction that ended info is resent whole,
its sends in one `resend` op (one atomic batch again; an `abort` op is never resent). The
resend is an op of its own, not a `send`, so that each value keeps one writer in the queue
analysis; a resend that ends info is resent at the next crash.
A worker holding unsure sends crashes 1 op in `UNSURE_CRASH_ONE_IN` rather than 1 in
`CRASH_ONE_IN` (a producer in trouble restarts sooner): info sends come in bursts while a
fault lasts, and at 1 in 256 a restart rarely followed one, so resends were rarely made.
Kafka's idempotent producer dedups per producer id, which a new client does not keep: there
`resend` is off and a crash's unsure sends stay unsure, as in Jepsen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from logquake.history import INFO, INVOKE, OK, Op

MAIN, DRAIN = "main", "drain"
#: The op f of a restarted producer's resend of an unsure send (README.md's History format).
RESEND = "resend"
#: The extra field that marks the drain's ops: the final read (README.md's History format).
FINAL = "final"
#: The extra field naming the node a final op reads from (README.md's History format).
NODE = "node"

REASSIGN_ONE_IN = 64
CRASH_ONE_IN = 256
UNSURE_CRASH_ONE_IN = 16  # with resend, for a worker holding sends that ended info
ABORT_FRACTION = 0.1  # of sending transactions, when txn=True
# A final read whose ends fell short of known offsets is made again after this many more
# polls (each waits up to the client's poll timeout, 100 ms: ~5 s, half the transaction
# timeout after which a coordinator aborts a transaction left open), at most this often.
SETTLE_POLLS = 50
FINAL_REREADS = 2


@dataclass(frozen=True, kw_only=True)
class Context:
    """What the generator may know when asked for an op: who asks and in which phase."""

    worker: int
    process: int
    phase: str = MAIN


@dataclass
class _Worker:
    rng: random.Random
    needs_assign: bool = True
    drain_assigned: bool = False
    # Drain: the highest offset this worker has read per key, the end of each key's log as
    # its final assign reported it (None: unknown), and its consumer's position per key.
    read_up_to: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int | None] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    rereads: int = 0
    settle: int = 0
    # resend: (sends, index of the completion that left them unsure) of this worker's
    # publishes that ended info since its client last restarted, and those its new client
    # owes: one send each, or a transaction's sends together (one atomic batch).
    unsure: list[tuple[list[list[Any]], int | None]] = field(default_factory=list)
    owed: list[tuple[list[list[Any]], int | None]] = field(default_factory=list)


def micro_f(value: list[list[Any]]) -> str:
    """`send` or `poll` when every micro-op is of that kind, else `txn` (README.md's History format)."""
    kinds = {m[0] for m in value}
    return kinds.pop() if len(kinds) == 1 else "txn"


class QueueGenerator:
    """Chooses the queue workload's ops; see the module docstring."""

    def __init__(
        self,
        *,
        seed: int,
        txn: bool = False,
        sub_via: str = "assign",
        active_keys: int = 10,
        max_writes_per_key: int = 1024,
        abort_fraction: float | None = None,
        first_key: int = 0,
        one_key_txns: bool = False,
        resend: bool = False,
    ) -> None:
        if abort_fraction is not None and not 0 <= abort_fraction <= 1:
            raise ValueError(f"abort_fraction must be within [0, 1], got {abort_fraction}")
        self.seed = seed
        self.abort_fraction = (ABORT_FRACTION if txn else 0.0) if abort_fraction is None else abort_fraction
        self.rng = random.Random(f"keys-{seed}")
        self.txn = txn
        # A transaction is sends to one key and nothing else (JetStream's atomic batch is
        # publishes to one stream); polls then go alone, outside transactions.
        self.one_key_txns = one_key_txns
        self.resend = resend  # a restarted client resends its worker's unsure sends (module docstring)
        self.sub_via = sub_via
        self.max_writes_per_key = max_writes_per_key
        self._next_key = first_key  # keys are numbered from here (a benchmark's fresh topics)
        self.active: list[int] = []
        self.budget: dict[int, int] = {}
        self.next_value: dict[int, int] = {}
        self._workers: dict[int, _Worker] = {}
        self._nodes: dict[int, str] = {}  # worker -> the node its final read reads from
        # Highest offset per key that an ok op sent or any ok poll read: the drain target.
        # Sends of info ops are left out: they may never have committed (or were aborted).
        self.highest: dict[int, int] = {}
        for _ in range(active_keys):
            self._add_key()

    # -- keys -------------------------------------------------------------------------

    def _add_key(self) -> None:
        k = self._next_key
        self._next_key += 1
        self.active.append(k)
        self.budget[k] = self.rng.randint(1, self.max_writes_per_key)
        self.next_value[k] = 1

    def _write(self, k: int) -> int:
        """Take the next value of key k, retiring k when its budget is spent."""
        v = self.next_value[k]
        self.next_value[k] = v + 1
        self.budget[k] -= 1
        if self.budget[k] <= 0:
            self.active.remove(k)
            self._add_key()
        return v

    @property
    def all_keys(self) -> list[int]:
        """Every key written to so far (retired or active)."""
        return sorted(k for k, v in self.next_value.items() if v > 1)

    # -- ops --------------------------------------------------------------------------

    def _worker(self, w: int) -> _Worker:
        st = self._workers.get(w)
        if st is None:
            st = self._workers[w] = _Worker(rng=random.Random(f"worker-{self.seed}-{w}"))
        return st

    def read_from(self, worker: int, node: str) -> None:
        """Mark every final op of `worker` as reading from `node` alone."""
        self._nodes[worker] = node

    def fresh_client(self, worker: int) -> None:
        """The worker's client was replaced: its next op must (re)assign (and, with `resend`,
        first resend what the worker was unsure of)."""
        st = self._worker(worker)
        st.needs_assign = True
        self._restarted(st)

    def _restarted(self, st: _Worker) -> None:
        if self.resend:
            st.owed.extend(st.unsure)
            st.unsure.clear()

    def op(self, ctx: Context) -> Op | None:
        """The next invocation for this worker, or None when it has nothing left to do."""
        if ctx.phase == DRAIN:
            return self._drain_op(ctx)
        st = self._worker(ctx.worker)
        if st.owed:  # drawn from no RNG
            sends, of = st.owed.pop(0)
            return invoke(ctx, RESEND, sends, resend_of=of)
        rng = st.rng
        if st.needs_assign or rng.randrange(REASSIGN_ONE_IN) == 0:
            return self._assign_op(ctx, rng)
        if rng.randrange(UNSURE_CRASH_ONE_IN if st.unsure else CRASH_ONE_IN) == 0:
            return invoke(ctx, "crash", None)
        n = rng.randint(1, 4) if self.txn else 1
        value = self._one_key_sends(rng, n) if self.txn and self.one_key_txns else [self._micro(rng) for _ in range(n)]
        if self.txn and self.abort_fraction and rng.random() < self.abort_fraction:
            if any(m[0] == "send" for m in value):  # a read-only transaction has nothing to abort
                return invoke(ctx, micro_f(value), value, abort=True)
        return invoke(ctx, micro_f(value), value)

    def _micro(self, rng: random.Random) -> list[Any]:
        if rng.random() < 0.5:
            k = rng.choice(self.active)
            return ["send", k, self._write(k)]
        return ["poll"]

    def _one_key_sends(self, rng: random.Random, n: int) -> list[list[Any]]:
        """A lone poll half the time, else up to n sends to one key (no more than its budget)."""
        if rng.random() < 0.5:
            return [["poll"]]
        k = rng.choice(self.active)
        return [["send", k, self._write(k)] for _ in range(min(n, self.budget[k]))]

    def _assign_op(self, ctx: Context, rng: random.Random) -> Op:
        n = rng.randint(1, len(self.active))
        keys = sorted(rng.sample(self.active, n))
        return invoke(ctx, self.sub_via, keys)

    def _drain_op(self, ctx: Context) -> Op | None:
        st = self._worker(ctx.worker)
        final: dict[str, Any] = {FINAL: True}
        if ctx.worker in self._nodes:
            final[NODE] = self._nodes[ctx.worker]
        if st.needs_assign or not st.drain_assigned:
            return invoke(ctx, "assign", self.all_keys, seek_to_beginning=True, **final)
        drained = self.drained(ctx.worker)
        if drained and not self._short(st):
            return None
        # Short ends, or ends the system did not give: after a while, ask again.
        if (drained or None in st.ends.values()) and st.rereads < FINAL_REREADS:
            if st.settle < SETTLE_POLLS:
                st.settle += 1
            else:
                st.rereads, st.settle, st.drain_assigned = st.rereads + 1, 0, False
                return invoke(ctx, "assign", self.all_keys, seek_to_beginning=True, **final)
        elif drained:
            return None
        return invoke(ctx, "poll", [["poll"]], **final)

    def _short(self, st: _Worker) -> bool:
        """Does a reported end lie below an offset known to hold a value?"""
        return any(end is not None and end <= self.highest.get(k, -1) for k, end in st.ends.items())

    def drained(self, worker: int) -> bool:
        """Has this worker's final read reached the end of every key's log?"""
        return self._worker(worker).drain_assigned and not self.short_keys(worker)

    def short_keys(self, worker: int) -> list[int]:
        """The keys whose end of the log this worker's final read has not reached (all
        known keys before its final assign). A key is judged alone: one whose stream does
        not answer leaves the others' reads complete.

        The end is what the system reported at the final assign; where it reported none,
        the highest offset known for the key stands in (a log that lost its tail then never
        gets there, and the drain runs out of time).
        """
        st = self._worker(worker)
        keys = set(self.highest) | set(st.ends)
        if not st.drain_assigned:
            return sorted(keys)
        short = []
        for k in sorted(keys):
            end = st.ends.get(k)
            if end is None:
                if st.read_up_to.get(k, -1) < self.highest.get(k, -1):
                    short.append(k)
            elif max(st.positions.get(k, 0), st.read_up_to.get(k, -1) + 1) < end:
                short.append(k)
        return short

    # -- completions ------------------------------------------------------------------

    def update(self, ctx: Context, event: Op) -> None:
        """Learn from a completion: assignments, crashes, offsets sent and read."""
        if event.type == INVOKE:
            return
        st = self._worker(ctx.worker)
        if event.type == INFO and ctx.phase == DRAIN:
            # The worker goes on as a new process (crew.Worker): its final read starts over
            # with an assign of its own, as the checker counts a final read per process.
            st.drain_assigned = False
        if event.f in ("assign", "subscribe"):
            if event.type == OK:
                st.needs_assign = False
                if ctx.phase == DRAIN:
                    st.drain_assigned = True
                    st.read_up_to.clear()
                    st.positions.clear()
                    st.ends = {int(k): e for k, e in (event.get("ends") or {}).items()}
            return
        if event.f == "crash":
            st.needs_assign = True
            self._restarted(st)
            return
        if not isinstance(event.value, list):
            return
        if self.resend and event.type == INFO and event.f in ("send", "txn", RESEND):
            self._unsure(st, event)
        if event.type == OK:
            for key, pos in (event.get("positions") or {}).items():
                st.positions[int(key)] = max(pos, st.positions.get(int(key), 0))
        for m in event.value:
            if m[0] == "send" and event.type == OK and isinstance(m[2], list) and m[2][0] is not None:
                self._saw(m[1], m[2][0])
            elif m[0] == "poll" and event.type == OK and len(m) > 1:
                for key, pairs in m[1].items():
                    k = int(key)
                    for offset, _v in pairs:
                        self._saw(k, offset)
                        if offset > st.read_up_to.get(k, -1):
                            st.read_up_to[k] = offset

    def _unsure(self, st: _Worker, event: Op) -> None:
        """Note the sends of an info op for the worker's next client to resend: each alone,
        or a transaction's together (one batch again, never split). An `abort` op's sends
        were never meant to be stored, and a transaction that polls is no batch to resend."""
        orig = event.get("resend_of", event.index) if event.f == RESEND else event.index
        sends = [["send", m[1], m[2]] for m in event.value if m[0] == "send" and not isinstance(m[2], list)]
        if not self.txn:
            st.unsure.extend(([m], orig) for m in sends)
        elif sends and len(sends) == len(event.value) and not event.get("abort"):
            st.unsure.append((sends, orig))

    def _saw(self, k: int, offset: int) -> None:
        if offset > self.highest.get(k, -1):
            self.highest[k] = offset


def invoke(ctx: Context, f: str, value: Any, **extra: Any) -> Op:
    """The invocation of an op by ctx's process (every generator's ops are made here)."""
    return Op(process=ctx.process, type=INVOKE, f=f, value=value, extra=extra)


def settle_drain_read(left: list[Any], event: Op) -> None:
    """A register workload's drain: the key of a read is done once a read of it succeeded;
    one whose read did not goes to the back of the line."""
    k = event.value[0]
    if k in left:
        left.remove(k)
        if event.type != OK:
            left.append(k)
