"""A deterministic in-process cluster of `RaftNode`s on a seeded, faulty network (etcd's rafttest).

`Sim` plays the shell of every node: it persists each `Ready` in memory, delivers messages after a
random delay (so they reorder), drops them at a configurable rate or across a partition (cut
links drop even messages already in flight, as iptables would), crashes nodes (losing every
Ready not yet advanced) and restarts them from what they persisted, and pauses nodes (SIGSTOP:
what is sent to a paused node waits, and it reads all of it in one step when resumed). Optionally a node also dies
in the middle of a Ready (`crash_in_ready`: after the messages a shell may send early, before or
halfway through the write), and persistence can go through real `SegmentLog`s (`disk`), whose
torn writes are then repaired on restart. Every node reads its persisted entries back
(its `reader` is its disk), so a small `RaftConfig.log_window_bytes` makes followers catch up,
restarts replay and the oracle read through it. Time is a step counter; nothing sleeps: a 300-step
schedule takes some 10-20 ms, so thousands run in a minute (benchmarks/bench_raft.py).
`corrupt_tail` plays the nemesis's fault of that name: a node loses the newest entries it had
persisted (and maybe acked) and restarts quarantined (raft.py, "Repaired storage").

An oracle watches every step and records violations instead of raising, so a test can show it
catches a deliberately unsafe configuration (`unclean_election=True`):
- election safety: at most one leader per term;
- committed entries never change: every entry any node reports in `Ready.committed` is
  remembered per index, and any other report for that index must be identical;
- leader completeness: a node becoming leader holds every entry already reported committed
  in an earlier term (one first reported by a node in a lower term: a candidate resumed from
  a pause may yet win the old term it stood in, with the votes that waited in its socket);
- log matching: at the end, two logs with the same term at an index agree on the whole prefix,
  and every node's log up to its commit index equals the committed record;
- no leader's Ready sends one follower the same entry more than `MAX_COPIES` times (a resumed
  follower's queued heartbeat answers once made the leader re-send its whole missing window
  once per answer: a 44 MB peer frame in a soak).
`run_schedule(seed)` drives one random schedule of faults and proposals, then heals everything
and checks liveness: a leader is elected and a new proposal commits on every node.
"""

from __future__ import annotations

import functools
import heapq
import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from logquake.broker.raft import LEADER, Entry, HardState, Message, MsgKind, RaftConfig, RaftNode, Ready
from logquake.broker.storage import RECORD_OVERHEAD, SegmentLog

# What a shell may send before persisting the Ready (see raft.py's module docstring).
_EARLY = frozenset({MsgKind.APPEND, MsgKind.HEARTBEAT, MsgKind.HEARTBEAT_RESP})

__all__ = ["MAX_COPIES", "Sim", "SimResult", "SimNode", "describe", "run_many", "run_schedule", "unsafe"]

# A probe and then, on the answer to an older append, the pipeline from the follower's match:
# two copies of an entry in one Ready are expected; more are a re-send storm.
MAX_COPIES = 1


@dataclass
class SimNode:
    """One simulated machine: its durable state outlives `raft`, which is None while down."""

    node_id: int
    raft: RaftNode | None
    hard_state: HardState | None = None
    log: list[Entry] = field(default_factory=list)  # what it persisted
    applied: list[Entry] = field(default_factory=list)  # its state machine: committed entries in order
    pending: tuple[Ready, list[Message], int] | None = None  # a slow write: (Ready, late messages, done at)
    repaired_term: int | None = None  # its disk lost a tail in this term (`SegmentLog.repaired_term`)


@dataclass(frozen=True, kw_only=True)
class SimResult:
    """What one schedule did and what the oracle found (empty `violations` = safe and live)."""

    seed: int
    violations: tuple[str, ...]
    max_term: int
    committed: int
    leaders: int
    crashes: int
    messages: int
    committed_truncations: int
    max_copies: int = 0  # most copies of one entry to one follower in one leader Ready
    reads: int = 0  # reads of persisted entries below a node's window (in-memory disk only)


class Sim:
    """The cluster, its network and the oracle. See the module docstring.

    Args:
        n: number of nodes (ids 1..n).
        seed: everything random (delays, drops, election timeouts) derives from it.
        config: every node's `RaftConfig`.
        drop: probability a message is lost.
        max_delay: messages arrive 1..max_delay steps after they are sent.
        group: the Raft group's name.
        crash_in_ready: probability that a node dies while handling a Ready, after sending its
            appends, heartbeats and heartbeat answers but before persisting (a shell may send
            those early, thesis §10.2.1; everything else goes out only after the write).
        slow_write: probability that a Ready's write takes 2-6 steps, as a long fsync does in
            the broker. Meanwhile the node goes on like node.py's shell: it applies what
            became committed (`take_committed`) and sends heartbeats and heartbeat answers
            (`take_messages`); its committed entries are applied before the write. A
            crash meanwhile loses the whole write.
        disk: if set, every node also persists through a real `SegmentLog` in `disk/n<id>` and
            restarts from `load()`; a crash inside a Ready then leaves that write torn at a
            random byte, so storage recovery is exercised together with Raft.
    """

    def __init__(
        self,
        *,
        n: int = 3,
        seed: int = 0,
        config: RaftConfig | None = None,
        drop: float = 0.0,
        max_delay: int = 1,
        group: str = "g",
        crash_in_ready: float = 0.0,
        slow_write: float = 0.0,
        disk: Path | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.crash_in_ready = crash_in_ready
        self.slow_write = slow_write
        self.disk = disk
        self.stores: dict[int, SegmentLog] = {}
        self.reads = 0
        self.config = config or RaftConfig()
        self.group = group
        self.ids = tuple(range(1, n + 1))
        self.drop = drop
        self.max_delay = max_delay
        self.now = 0
        self.cut: set[tuple[int, int]] = set()
        self.paused: dict[int, list[Message]] = {}  # paused node -> what waits in its socket
        self.queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.nodes = {i: SimNode(i, None) for i in self.ids}
        for i in self.ids:
            self.restart(i)
        self.leaders_by_term: dict[int, int] = {}
        self.committed: dict[int, Entry] = {}
        self.commit_terms: dict[int, int] = {}  # index -> the reporter's term at its first report
        self.violations: list[str] = []
        self.messages_sent = 0
        self.max_copies = 0  # most copies of one entry to one follower in one Ready
        self.crashes = 0
        self.reads = 0  # reads of persisted entries (below some node's window)
        self._seen_leader: set[tuple[int, int]] = set()
        self._seen_leadership: dict[int, tuple[RaftNode, tuple[object, ...]]] = {}
        self.trace: list[str] | None = None  # set to [] to record every delivered message

    # ---- nodes -----------------------------------------------------------------------------

    def _new_raft(self, i: int, hs: HardState | None, log: Sequence[Entry]) -> RaftNode:
        """Node `i` restarted as the broker does: only its window's payloads loaded, the rest
        read back from its disk when needed."""
        rng = random.Random(self.rng.getrandbits(64))
        store = self.stores.get(i)
        node = self.nodes[i]
        if store is not None:
            hs, runs, tail = store.load_window(self.config.log_window_bytes)
            reader = store.read
            node.repaired_term = store.repaired_term
        else:
            runs, tail = window_of(log, self.config.log_window_bytes)
            reader = functools.partial(self._read_disk, i)
            if node.repaired_term is not None and log and log[-1].term > node.repaired_term:
                node.repaired_term = None  # caught up by a later leader: as storage forgets it
        return RaftNode(
            group=self.group,
            node_id=i,
            voters=self.ids,
            config=self.config,
            rng=rng,
            hard_state=hs,
            entries=tail,
            term_runs=runs,
            reader=reader,
            repaired_term=node.repaired_term,
        )

    def _read_disk(self, i: int, lo: int, hi: int, max_bytes: int | None) -> list[Entry]:
        """Node `i`'s persisted entries lo..hi-1 (a prefix with `max_bytes`), as
        `SegmentLog.read` returns them. Asking for more than it persisted is a bug."""
        self.reads += 1
        log = self.nodes[i].log
        if not 1 <= lo < hi <= len(log) + 1:
            raise AssertionError(f"node {i} read {lo}..{hi - 1} but persisted 1..{len(log)}")
        out = log[lo - 1 : hi - 1]
        if max_bytes is not None:
            for k, e in enumerate(out):
                max_bytes -= len(e.data)
                if max_bytes <= 0:
                    return out[: k + 1]
        return out

    def raft(self, i: int) -> RaftNode:
        """The running RaftNode of node `i` (raises if it is down)."""
        r = self.nodes[i].raft
        if r is None:
            raise RuntimeError(f"node {i} is down")
        return r

    def up(self) -> list[int]:
        return [i for i in self.ids if self.nodes[i].raft is not None]

    def crash(self, i: int) -> None:
        """Kill node `i`: whatever it had not persisted (advanced) is gone."""
        if self.nodes[i].raft is not None:
            self.nodes[i].raft = None
            self.nodes[i].pending = None
            self.crashes += 1
            store = self.stores.pop(i, None)
            if store is not None:
                store.close()
        self.paused.pop(i, None)  # its socket and what waited in it are gone

    def load(self, i: int, hard_state: HardState | None, log: Sequence[Entry], *,
             repaired_term: int | None = None) -> None:
        """Replace node `i`'s disk with `hard_state` and `log` and restart it (for scripted
        states); `repaired_term`: as if its storage had cut a damaged tail in that term."""
        if self.disk is not None:
            raise RuntimeError("Sim.load works on the in-memory disk only")
        node = self.nodes[i]
        node.raft = None
        node.pending = None
        self.paused.pop(i, None)
        node.hard_state = hard_state
        node.log = list(log)
        node.repaired_term = repaired_term
        self.restart(i)

    def corrupt_tail(self, i: int, k: int) -> None:
        """Kill node `i`, cut the newest `k` entries it persisted, restart it (the nemesis's
        corrupt-tail: storage repairs the tail on load and reports it)."""
        node = self.nodes[i]
        self.crash(i)
        hs = node.hard_state
        self.load(i, hs, node.log[: max(0, len(node.log) - k)], repaired_term=hs.term if hs else 0)

    def restart(self, i: int) -> None:
        """Start node `i` again from its persisted hard state and log; it replays its log."""
        node = self.nodes[i]
        if node.raft is None:
            if self.disk is not None:
                store = self.stores[i] = SegmentLog(self.disk / f"n{i}", fsync="never")
                node.hard_state, node.log = store.load()
            node.raft = self._new_raft(i, node.hard_state, node.log)
            node.applied = []

    def pause(self, i: int) -> None:
        """Stop node `i` (SIGSTOP): it neither ticks nor reads nor writes; messages sent to it
        wait, in order, until `resume`."""
        if self.nodes[i].raft is not None:
            self.paused.setdefault(i, [])

    def resume(self, i: int) -> None:
        """Continue node `i`: at the next step it reads everything that waited, at once."""
        for m in self.paused.pop(i, []):
            self._seq += 1
            heapq.heappush(self.queue, (self.now + 1, self._seq, m))

    def leaders(self) -> list[int]:
        return [i for i in self.up() if self.nodes[i].raft.role == LEADER]  # type: ignore[union-attr]

    def leader(self) -> int | None:
        """The up leader with the highest term, if any."""
        best = None
        for i in self.leaders():
            if best is None or self.raft(i).term > self.raft(best).term:
                best = i
        return best

    def propose(self, data: bytes, node: int | None = None) -> int | None:
        """Propose on `node` (default: the current leader); the index, or None."""
        i = self.leader() if node is None else node
        if i is None or self.nodes[i].raft is None:
            return None
        return self.raft(i).propose(data)

    # ---- network ---------------------------------------------------------------------------

    def partition(self, *sides: Iterable[int]) -> None:
        """Cut every link between different sides (nodes listed nowhere form one more side)."""
        groups = [set(s) for s in sides]
        rest = set(self.ids) - set().union(*groups)
        if rest:
            groups.append(rest)
        side = {i: k for k, g in enumerate(groups) for i in g}
        self.cut = {(a, b) for a in self.ids for b in self.ids if side[a] != side[b]}

    def isolate(self, i: int) -> None:
        self.partition([i])

    def cut_one_way(self, frm: int, to: int) -> None:
        self.cut.add((frm, to))

    def heal(self) -> None:
        self.cut = set()

    def _send(self, m: Message) -> None:
        self.messages_sent += 1
        if self.drop and self.rng.random() < self.drop:
            return
        delay = 1 if self.max_delay <= 1 else self.rng.randint(1, self.max_delay)
        self._seq += 1
        heapq.heappush(self.queue, (self.now + delay, self._seq, m))

    # ---- time ------------------------------------------------------------------------------

    def step(self, *, tick: bool = True) -> None:
        """One unit of time: tick every up node, deliver due messages, process every Ready."""
        self.now += 1
        if tick:
            for i in self.ids:
                r = self.nodes[i].raft
                if r is not None and i not in self.paused:
                    r.tick()
        q = self.queue
        while q and q[0][0] <= self.now:
            _, _, m = heapq.heappop(q)
            r = self.nodes[m.to].raft
            if r is None or (m.frm, m.to) in self.cut:
                continue
            if m.to in self.paused:
                self.paused[m.to].append(m)
                continue
            if self.trace is not None:
                self.trace.append(describe(m))
            r.step(m)
        self.process_readies()

    def process_readies(self) -> None:
        for i in self.ids:
            node, r = self.nodes[i], self.nodes[i].raft
            if i in self.paused:
                continue
            if r is not None and node.pending is not None:
                self._serve_pending(node, r)
            elif r is not None and r.has_ready():
                self._handle_ready(self.nodes[i], r)
            r = self.nodes[i].raft  # None if it died in the Ready
            if r is not None:
                self._observe(i, r)

    def _handle_ready(self, node: SimNode, r: RaftNode) -> None:
        rd = r.ready()
        self._check_copies(node.node_id, rd)
        late = []
        for m in rd.messages:
            if m.kind in _EARLY:
                self._send(m)
            else:
                late.append(m)
        if self.crash_in_ready and self.rng.random() < self.crash_in_ready:
            if rd.entries and node.node_id in self.stores:
                self._torn_write(self.stores[node.node_id], rd.entries)
            elif rd.entries and self.rng.random() < 0.5:  # entries written, hard state not
                del node.log[rd.entries[0].index - 1 :]
                node.log.extend(rd.entries)
            self.crash(node.node_id)  # the write never completed; votes and acks never left
            return
        if self.slow_write and self.rng.random() < self.slow_write:
            if rd.rewind_to is not None:
                del node.applied[rd.rewind_to :]
            for e in rd.committed:  # applied before the write, as node.py does
                self._record_commit(node, e)
            node.pending = (rd, late, self.now + self.rng.randint(2, 6))
            return
        self._finish_write(node, r, rd, late, apply=True)

    def _serve_pending(self, node: SimNode, r: RaftNode) -> None:
        rd, late, done_at = node.pending  # type: ignore[misc]
        if self.now >= done_at:
            node.pending = None
            self._finish_write(node, r, rd, late, apply=False)
            return
        for e in r.take_committed():
            self._record_commit(node, e)
        for m in r.take_messages():
            self._send(m)

    def _finish_write(self, node: SimNode, r: RaftNode, rd: Ready, late: list[Message], *, apply: bool) -> None:
        store = self.stores.get(node.node_id)
        if store is not None:
            store.append(rd.entries)
            if rd.hard_state is not None:
                store.save_hard_state(rd.hard_state)
        if rd.entries:
            first = rd.entries[0].index
            if first > len(node.log) + 1:
                self._violate(
                    f"node {node.node_id}: Ready entries start at {first}, log ends at {len(node.log)}"
                )
            del node.log[first - 1 :]
            node.log.extend(rd.entries)
        if rd.hard_state is not None:
            node.hard_state = rd.hard_state
        for m in late:
            self._send(m)
        if apply:
            if rd.rewind_to is not None:
                del node.applied[rd.rewind_to :]
            for e in rd.committed:
                self._record_commit(node, e)
        r.advance(rd)

    def _torn_write(self, store: SegmentLog, entries: tuple[Entry, ...]) -> None:
        """Write `entries`, then cut the segment at a random byte of what was just written."""
        store.append(entries)  # one append writes into the last segment only
        seg = store._segments[-1]  # noqa: SLF001 - our own module's internals
        start = seg.size - sum(RECORD_OVERHEAD + len(e.data) for e in entries)
        os.truncate(seg.path, self.rng.randrange(start, seg.size))

    def close(self) -> None:
        """Release the on-disk logs (disk mode)."""
        for i in list(self.stores):
            self.stores.pop(i).close()

    def stabilize(self, max_steps: int = 1000) -> None:
        """Deliver messages without ticking until the network is quiet."""
        for _ in range(max_steps):
            busy = any(self.raft(i).has_ready() or self.nodes[i].pending for i in self.up())
            if not self.queue and not busy:
                return
            self.step(tick=False)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def run_until(self, cond, max_steps: int) -> bool:  # noqa: ANN001 - a zero-arg predicate
        for _ in range(max_steps):
            if cond():
                return True
            self.step()
        return cond()

    # ---- oracle ----------------------------------------------------------------------------

    def _violate(self, what: str) -> None:
        self.violations.append(f"t={self.now}: {what}")

    def _record_commit(self, node: SimNode, e: Entry) -> None:
        if e.index != len(node.applied) + 1:
            self._violate(f"node {node.node_id} applied index {e.index} after {len(node.applied)}")
        node.applied.append(e)
        seen = self.committed.setdefault(e.index, e)
        if node.raft is not None:
            self.commit_terms.setdefault(e.index, node.raft.term)
        if seen != e:
            self._violate(f"committed entry {e.index} changed: {seen} then {e} (node {node.node_id})")

    def _observe(self, i: int, r: RaftNode) -> None:
        # Shells skip groups whose leadership_version did not move: it must move with any change.
        now = (r.leadership_version, r.role, r.term, r.leader_id)
        seen = self._seen_leadership.get(i)
        if seen is not None and seen[0] is r and seen[1][0] == now[0] and seen[1][1:] != now[1:]:
            self._violate(f"node {i}: role/term/leader {seen[1][1:]} -> {now[1:]} without a leadership_version bump")
        self._seen_leadership[i] = (r, now)
        if r.role != LEADER or (i, r.term) in self._seen_leader:
            return
        self._seen_leader.add((i, r.term))
        other = self.leaders_by_term.setdefault(r.term, i)
        if other != i:
            self._violate(f"two leaders in term {r.term}: {other} and {i}")
        for idx, e in self.committed.items():
            if self.commit_terms.get(idx, 0) >= r.term:
                continue  # maybe committed in this term or later: r may be a stale leader
            if r.entry(idx) != e:
                self._violate(f"leader {i} of term {r.term} lacks committed entry {e} (has {r.entry(idx)})")
                break

    def _check_copies(self, i: int, rd: Ready) -> None:
        sent: dict[tuple[int, int], int] = {}  # (follower, index) -> copies in this Ready
        for m in rd.messages:
            if m.kind is MsgKind.APPEND:
                for e in m.entries:
                    k = sent[m.to, e.index] = sent.get((m.to, e.index), 0) + 1
                    self.max_copies = max(self.max_copies, k)
        worst = max(sent.items(), key=lambda kv: kv[1], default=None)
        if worst is not None and worst[1] > MAX_COPIES:
            (to, idx), k = worst
            self._violate(f"leader {i} sent entry {idx} to {to} {k} times in one Ready")

    def check_logs(self) -> None:
        """Log matching and committed prefixes across all nodes (down nodes: their disk)."""
        logs = {}
        for i in self.ids:
            r = self.nodes[i].raft
            logs[i] = (r.entries_from(1), r.commit_index) if r is not None else (tuple(self.nodes[i].log), 0)
        for i, (log, commit) in logs.items():
            for idx in range(1, commit + 1):
                want = self.committed.get(idx)
                if want is not None and log[idx - 1] != want:
                    self._violate(
                        f"node {i} commit {commit} but entry {idx} is {log[idx - 1]}, committed {want}"
                    )
                    break
        ids = list(logs)
        for a_pos, a in enumerate(ids):
            for b in ids[a_pos + 1 :]:
                la, lb = logs[a][0], logs[b][0]
                n = min(len(la), len(lb))
                # the highest index where both logs hold the same term must have equal prefixes
                for idx in range(n, 0, -1):
                    if la[idx - 1].term == lb[idx - 1].term:
                        if la[:idx] != lb[:idx]:
                            self._violate(f"log matching broken between {a} and {b} at/below {idx}")
                        break


def window_of(log: Sequence[Entry], window: int) -> tuple[list[tuple[int, int]], list[Entry]]:
    """(term runs, newest entries within `window` bytes, at least the last) of a whole log,
    as `SegmentLog.load_window` returns them."""
    runs: list[tuple[int, int]] = []
    for e in log:
        if not runs or runs[-1][1] != e.term:
            runs.append((e.index, e.term))
    k, size = len(log), 0
    while k > 0 and (k == len(log) or size + len(log[k - 1].data) < window):
        size += len(log[k - 1].data)
        k -= 1
    return runs, list(log[k:])


def describe(m: Message) -> str:
    """A one-line, transcript-friendly rendering of a message."""
    s = f"{m.frm}->{m.to} {m.kind.name} t{m.term}"
    if m.kind.name in ("PREVOTE", "VOTE"):
        s += f" last={m.index}@{m.log_term}"
    elif m.kind.name == "APPEND":
        ents = " ".join(f"{e.index}@{e.term}" for e in m.entries)
        s += f" prev={m.index}@{m.log_term} [{ents}] commit={m.commit}"
    elif m.kind.name == "APPEND_RESP":
        s += f" index={m.index}" + (f" hint={m.reject_hint}@{m.log_term}" if m.reject else "")
    elif m.kind.name == "HEARTBEAT":
        s += f" commit={m.commit}"
    if m.reject:
        s += " REJECT"
    return s


def run_schedule(
    seed: int,
    *,
    n: int = 3,
    steps: int = 300,
    config: RaftConfig | None = None,
    fault_rate: float = 0.04,
    max_drop: float = 0.2,
    max_delay: int = 3,
    propose_rate: float = 0.3,
    heal_steps: int = 400,
    crash_in_ready: float = 0.0,
    slow_write: float = 0.0,
    disk: Path | None = None,
    pause_rate: float = 0.0,
    corrupt_rate: float = 0.0,
) -> SimResult:
    """One random schedule: faults and proposals for `steps`, then heal and check liveness.

    `disk`: persist through real `SegmentLog`s under this directory (see `Sim`).
    `pause_rate`: per step, the chance to pause one node or all, or to resume (see `_random_pause`).
    `corrupt_rate`: per step, the chance that an up node loses its newest 1-3 persisted entries
    (`Sim.corrupt_tail`), while no other node is still marked repaired: two nodes losing the
    same acked entry is beyond what any replication protocol survives."""
    cfg = config or RaftConfig()
    sim = Sim(n=n, seed=seed, config=cfg, max_delay=max_delay, crash_in_ready=crash_in_ready,
              slow_write=slow_write, disk=disk)
    rng = random.Random(seed ^ 0x5EED)
    for t in range(steps):
        if rng.random() < fault_rate:
            _random_fault(sim, rng, max_drop)
        if pause_rate and rng.random() < pause_rate:
            _random_pause(sim, rng)
        if corrupt_rate and rng.random() < corrupt_rate:
            _random_corrupt(sim, rng)
        if rng.random() < propose_rate:
            for i in sim.leaders():
                sim.propose(f"{seed}:{t}:{i}".encode(), i)
        sim.step()
    if not heal_and_commit(sim, f"{seed}:final".encode(), heal_steps):
        sim._violate(f"liveness: no leader committed a proposal within {heal_steps} steps after healing")
    sim.check_logs()
    sim.close()
    return SimResult(
        seed=seed,
        violations=tuple(sim.violations),
        max_term=max(sim.raft(i).term for i in sim.ids),
        committed=len(sim.committed),
        leaders=len(sim.leaders_by_term),
        crashes=sim.crashes,
        messages=sim.messages_sent,
        committed_truncations=sum(sim.raft(i).committed_truncations for i in sim.ids),
        max_copies=sim.max_copies,
        reads=sim.reads,
    )


def heal_and_commit(sim: Sim, marker: bytes, steps: int) -> bool:
    """Heal everything (every node up, every link whole, no loss), then whether within `steps`
    a leader got `marker` committed on every node.

    The marker is proposed again to each new leader: one proposed to a leader about to be
    deposed (a candidate of a higher term was already collecting votes) is rightly lost."""
    for i in sim.ids:
        sim.restart(i)
        sim.resume(i)
    sim.heal()
    sim.drop = 0.0
    sim.crash_in_ready = 0.0
    proposed: list[tuple[int, int, int]] = []  # (node, index, term)

    def live() -> bool:
        lead = sim.leader()
        if lead is None:
            return False
        r = sim.raft(lead)
        if not proposed or proposed[-1][2] != r.term:
            idx = r.propose(marker)
            if idx is not None:
                proposed.append((lead, idx, r.term))
            return False
        _, idx, term = proposed[-1]
        return all(
            sim.raft(i).commit_index >= idx and sim.raft(i).entry(idx) == Entry(term, idx, marker)
            for i in sim.ids
        )

    return sim.run_until(live, steps)


def _random_fault(sim: Sim, rng: random.Random, max_drop: float) -> None:
    action = rng.randrange(6)
    ids = list(sim.ids)
    if action == 0:
        sim.crash(rng.choice(ids))
    elif action == 1:
        down = [i for i in ids if i not in sim.up()]
        if down:
            sim.restart(rng.choice(down))
    elif action == 2:
        rng.shuffle(ids)
        k = rng.randint(1, len(ids) // 2)
        sim.partition(ids[:k])
    elif action == 3:
        sim.cut_one_way(*rng.sample(ids, 2))
    elif action == 4:
        sim.heal()
    else:
        sim.drop = rng.uniform(0.0, max_drop)


def _random_corrupt(sim: Sim, rng: random.Random) -> None:
    if any(sim.nodes[i].repaired_term is not None for i in sim.ids):
        return
    up = [i for i in sim.up() if sim.nodes[i].log]
    lead = sim.leader()
    if not up:
        return
    # The leader half the time (its newest entries were just committed), and half the time
    # another node goes down with it: maybe the only other holder, as in the soak.
    i = lead if lead is not None and rng.random() < 0.5 else rng.choice(up)
    sim.corrupt_tail(i, rng.randint(1, 3))
    if rng.random() < 0.5:
        sim.crash(rng.choice([j for j in sim.ids if j != i]))


def _random_pause(sim: Sim, rng: random.Random) -> None:
    """Pause one node, or all of them (the nemesis's all-node pause), or resume one or all."""
    action = rng.randrange(4)
    if action == 0:
        sim.pause(rng.choice(sim.ids))
    elif action == 1:
        for i in sim.ids:
            sim.pause(i)
    elif action == 2 and sim.paused:
        sim.resume(rng.choice(sorted(sim.paused)))
    else:
        for i in sorted(sim.paused):
            sim.resume(i)


def run_many(seeds: Iterable[int], **kwargs) -> list[SimResult]:  # noqa: ANN003 - run_schedule's options
    """`run_schedule` for each seed; returns every result (check `.violations`)."""
    return [run_schedule(s, **kwargs) for s in seeds]


def unsafe(config: RaftConfig | None = None) -> RaftConfig:
    """`config` with `unclean_election=True` (for showing the oracle catches data loss)."""
    return replace(config or RaftConfig(), unclean_election=True)
