"""Raft for one replication group, sans-I/O (the shape of etcd-io/raft's RawNode).

A `RaftNode` is a pure object: the shell feeds it ticks (`tick`), peer messages (`step`) and
proposals (`propose`), then drains a `Ready` (entries and hard state to persist, messages to
send, committed entries to apply) and calls `advance(ready)` once the Ready is persisted. No
sockets, files, clocks or threads live here, so the same code runs in the broker's asyncio loop
and in the deterministic simulation of `logquake.broker.raftsim`.

The shell's loop, for every node and group:

    if node.has_ready():
        rd = node.ready()
        storage.append(rd.entries)               # truncating from rd.entries[0].index if needed
        if rd.hard_state: storage.save_hard_state(rd.hard_state)
        send(rd.messages)                        # only after the two lines above are durable
        if rd.rewind_to is not None: state_machine.truncate_to(rd.rewind_to)
        state_machine.apply(rd.committed)        # in order
        node.advance(rd)

Appends and heartbeats (only leaders send them) may go out before the write: the leader counts
its own log only up to what it persisted, so sending early is safe (thesis §10.2.1). So may
heartbeat answers, which claim nothing durable (and then a slow disk does not look like a dead
follower to check-quorum). raftsim's `crash_in_ready` checks both. Votes and append answers
must wait for the write.

At most one Ready is outstanding: `has_ready()` is False and `ready()` raises until `advance`.
`tick`, `step` and `propose` may be called between `ready()` and `advance()`; messages they
produce wait for the next Ready, which is what makes "answer only after persisting" hold.

Rules this implementation keeps (Raft paper §5, thesis §9.6 for pre-vote and check-quorum):
- The leader counts its own log toward a majority only up to the index it has persisted
  (advanced); it commits only entries of its own term by counting (§5.4.2); a new leader
  appends a no-op (`Entry.data == b""`) so earlier-term entries commit through it.
- Pre-vote: a node campaigns for term+1 only after a majority says it would vote for it, so a
  node rejoining from a partition does not bump terms and depose a healthy leader.
- Check-quorum: a leader that heard from no majority within an election timeout steps down,
  and a node that heard from a leader within that time ignores vote requests (the lease).
- Log conflicts are resolved with the follower's hint (largest index whose term is <= the
  leader's term at the probe index), so one round trip skips a whole term.
- Flow control (etcd's probe and replicate states): one Ready sends a follower each entry at
  most once. Resetting a follower's progress drops the appends to it still queued, and a
  probe is re-sent only once overdue (`resend_ticks`), not on every heartbeat answer: a
  follower resumed from a pause answers dozens at once.
- Memory: every entry's term stays in memory (run-length, `_Log`), but only the newest
  `log_window_bytes` of payloads; older entries, persisted and applied, are read back through
  the shell's `reader` when a follower lags or a restart replays, one call per range (never
  per entry), and a read cut short by its byte cap is returned as a prefix, never with a gap.
- `RaftConfig.unclean_election` (the broker's unsafe `election: unclean`) is read at exactly
  one place, `_log_ok`: voters then ignore log freshness, so a stale node can win and truncate
  committed entries on the others. Followers then rewind (`Ready.rewind_to`) instead of
  crashing, so the loss is observable by the history checker.
- Repaired storage: Raft assumes a node never loses what it persisted; one that does (storage
  cut a torn or corrupt tail on load) may have acked committed entries it no longer holds, and
  with one lagging peer it could win an election and overwrite them (Alagappan et al.,
  "Protocol-Aware Recovery for Consensus-Based Storage", FAST'18). So a node built with
  `repaired_term` (its term when the tail was lost; storage keeps it across restarts) is
  quarantined: it neither campaigns nor grants a vote or pre-vote until it appends an entry
  of a later term (`_append_from_leader`; reads never end it). Only a leader of a later term
  can have sent that entry, and by log matching our log then equals that leader's up to its
  first entry of its term, past every entry committed in the terms our lost acks could have
  counted in (our term is durable before any ack; a later truncation removes only what was
  never committed). Like Kafka's ISR, the repaired replica is electable again once caught up.
  A follower that lost entries it acked answers heartbeats and probes with rejects, and the
  leader then forgets its match and walks back (`_handle_reject`). The quarantine expires after
  `repair_quarantine_ticks`: without that, two repaired nodes of three (a crash mid-write, or
  unsynced pages lost on two machines) would block the group forever even when the lost
  entries were never acknowledged. The trade-off: if a repaired node's lost entries were
  committed and every other holder stays down past the expiry, they are lost as before.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

__all__ = [
    "CANDIDATE",
    "EARLY_KINDS",
    "FOLLOWER",
    "LEADER",
    "PRECANDIDATE",
    "Entry",
    "HardState",
    "Message",
    "MessageDecodeError",
    "MsgKind",
    "PayloadReader",
    "RaftConfig",
    "RaftNode",
    "Ready",
    "Reader",
    "decode_messages",
    "encode_messages",
]

FOLLOWER, CANDIDATE, PRECANDIDATE, LEADER = "follower", "candidate", "precandidate", "leader"


class MsgKind(IntEnum):
    """What a `Message` asks or answers. Heartbeats stay a distinct kind so the shell can batch
    every group's heartbeats between two nodes into one network message."""

    PREVOTE = 1
    PREVOTE_RESP = 2
    VOTE = 3
    VOTE_RESP = 4
    APPEND = 5
    APPEND_RESP = 6
    HEARTBEAT = 7
    HEARTBEAT_RESP = 8


_KINDS = {int(k): k for k in MsgKind}
# Kinds a shell may send before persisting the Ready they came with (module docstring).
EARLY_KINDS = frozenset({MsgKind.APPEND, MsgKind.HEARTBEAT, MsgKind.HEARTBEAT_RESP})
_HEARTBEAT_KINDS = frozenset({MsgKind.HEARTBEAT, MsgKind.HEARTBEAT_RESP})


# Entry and Message are positional (hot path, and the agreed call shape) yet frozen with slots.
@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry. `data == b""` is the no-op a new leader appends at the start of its term;
    the broker puts a whole Kafka record batch (or a metadata command) in one entry."""

    term: int
    index: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Message:
    """A Raft message between two nodes of one group.

    Field use by kind (the paper's names in brackets):
    - PREVOTE/VOTE: term = proposed term, log_term/index = candidate's last log term/index.
    - *_RESP of votes: reject = not granted; term = the proposed term when granted.
    - APPEND: index/log_term = prevLogIndex/prevLogTerm, entries, commit = leaderCommit.
    - APPEND_RESP: success -> index = last index now matching the leader; reject -> index =
      the rejected prevLogIndex, reject_hint/log_term = the follower's suggested probe point.
    - HEARTBEAT: commit = min(follower's match, leader commit), index = leader's tick counter,
      log_term = the leader's own commit index (so a restarted follower knows how far it has to
      apply before it is caught up: `caught_up`); HEARTBEAT_RESP echoes index (so the leader can
      tell an append was lost).
    """

    kind: MsgKind
    group: str
    frm: int
    to: int
    term: int
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0


def _fast_init(cls: type) -> type:
    """Give a frozen slots dataclass an `__init__` that fills its slots directly.

    The generated frozen `__init__` goes through `object.__setattr__` per field; writing through
    the slot descriptors is the same thing at half the cost, and Messages and Entries are made
    on every append, answer and heartbeat. Same signature, same immutability afterwards."""
    flds = list(dataclasses.fields(cls))
    env: dict[str, Any] = {}
    params, body = [], []
    for k, f in enumerate(flds):
        env[f"_set{k}"] = cls.__dict__[f.name].__set__
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            env[f"_default{k}"] = f.default
            params.append(f"{f.name}=_default{k}")
        body.append(f"    _set{k}(self, {f.name})\n")
    exec(f"def __init__(self, {', '.join(params)}):\n" + "".join(body), env)  # noqa: S102 - as dataclasses does
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[misc]
    return cls


_fast_init(Entry)
_fast_init(Message)


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before messages go out: term and vote (for safety) and commit
    (advisory: a restarted node learns the commit index again from the leader)."""

    term: int
    vote: int | None
    commit: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Ready:
    """Work for the shell, in this order: persist `entries` (if `entries[0].index` is at or
    below the last persisted index, truncate from there first) and `hard_state` (when not
    None); then send `messages`; then, if `rewind_to` is not None, roll the state machine back
    to that index (only after an unclean election lost committed entries); then apply
    `committed` in order; then `advance(ready)`."""

    hard_state: HardState | None = None
    entries: tuple[Entry, ...] = ()
    messages: tuple[Message, ...] = ()
    committed: tuple[Entry, ...] = ()
    rewind_to: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RaftConfig:
    """Tuning and safety knobs of one group.

    Args:
        election_ticks: followers wait a random [election_ticks, 2*election_ticks) ticks without
            hearing from a leader before campaigning; also the check-quorum window and lease.
        heartbeat_ticks: a leader sends heartbeats every this many ticks.
        idle_heartbeat_ticks: ... and every this many once the group is idle: nothing appended
            for election_ticks and every follower holding the whole log (0: heartbeat_ticks).
            A replicated log keeps every partition a client ever wrote as a group, and most
            are idle; their heartbeats were most of the Raft messages in a long run.
        pre_vote: campaign for term+1 only after a majority would vote (no disruption).
        check_quorum: leaders step down without a majority; followers honour a leader lease.
        unclean_election: UNSAFE (`election: unclean`): voters ignore log freshness.
        max_append_entries / max_append_bytes: cap on one append message.
        max_inflight: appends in flight per follower before the leader waits for acks.
        max_inflight_bytes: ... and the entry bytes they may carry: a lagging follower does
            not make the leader hold (and the network buffer) more than this in appends.
        log_window_bytes: entries kept in memory (payloads plus ENTRY_COST each), newest
            first; older ones (always persisted and applied) are read back through the node's `reader` when needed
            (a lagging follower, a restart's replay). Terms of every entry stay in memory.
            Without a reader the whole log stays in memory.
        resend_ticks: an append (or probe) unacked while a heartbeat sent this many ticks
            later came back is presumed lost; the leader then probes again.
        commit_heartbeats: a leader whose commit index advances tells every follower at once
            (a heartbeat carrying it) rather than with the next append or heartbeat, for groups
            whose followers act on what they apply (the metadata group creates partitions).
        max_committed_entries: committed entries handed out per Ready at most (etcd's
            MaxCommittedSizePerReady, by count): a restart replays the whole committed log,
            and in one Ready its apply held the shell's loop for seconds; the rest follow
            in the next Readies.
        repair_quarantine_ticks: how long a node whose storage cut a damaged log tail at load
            stays out of elections unless a later-term leader catches it up first (module
            docstring, "Repaired storage"); None: 10 election timeouts, 0: no quarantine.
    """

    election_ticks: int = 10
    heartbeat_ticks: int = 1
    idle_heartbeat_ticks: int = 0
    pre_vote: bool = True
    check_quorum: bool = True
    unclean_election: bool = False
    max_append_entries: int = 256
    max_append_bytes: int = 4 << 20
    max_inflight: int = 64
    max_inflight_bytes: int = 32 << 20
    log_window_bytes: int = 4 << 20
    resend_ticks: int = 3
    commit_heartbeats: bool = False
    max_committed_entries: int = 1024
    repair_quarantine_ticks: int | None = None

    def __post_init__(self) -> None:
        if self.heartbeat_ticks < 1 or self.election_ticks <= self.heartbeat_ticks:
            raise ValueError(
                f"need 1 <= heartbeat_ticks < election_ticks, got {self.heartbeat_ticks} and {self.election_ticks}"
            )
        if self.idle_heartbeat_ticks and not self.heartbeat_ticks <= self.idle_heartbeat_ticks < self.election_ticks:
            raise ValueError(
                "need heartbeat_ticks <= idle_heartbeat_ticks < election_ticks, got "
                f"{self.heartbeat_ticks}, {self.idle_heartbeat_ticks} and {self.election_ticks}"
            )
        if self.max_append_entries < 1 or self.max_inflight < 1 or self.max_append_bytes < 1:
            raise ValueError("max_append_entries, max_append_bytes and max_inflight must be >= 1")
        if self.max_inflight_bytes < 1:
            raise ValueError(f"max_inflight_bytes must be >= 1, got {self.max_inflight_bytes}")
        if self.log_window_bytes < 0:
            raise ValueError(f"log_window_bytes must be >= 0, got {self.log_window_bytes}")
        if self.max_committed_entries < 1:
            raise ValueError(f"max_committed_entries must be >= 1, got {self.max_committed_entries}")
        if self.resend_ticks < 1:
            raise ValueError(f"resend_ticks must be >= 1, got {self.resend_ticks}")
        if self.repair_quarantine_ticks is not None and self.repair_quarantine_ticks < 0:
            raise ValueError(f"repair_quarantine_ticks must be >= 0, got {self.repair_quarantine_ticks}")


class _Progress:
    """The leader's view of one follower (etcd's tracker.Progress, reduced)."""

    __slots__ = ("match", "next", "replicate", "probe_sent", "probe_tick", "inflight", "inflight_bytes",
                 "recent_active")

    def __init__(self, next_index: int) -> None:
        self.match = 0
        self.next = next_index
        self.replicate = False  # False: probe one append at a time; True: pipeline
        self.probe_sent = False
        self.probe_tick = 0  # the leader tick the last probe went out
        self.inflight: deque[tuple[int, int, int]] = deque()  # (last index sent, leader tick, bytes)
        self.inflight_bytes = 0
        self.recent_active = True

    def become_probe(self) -> None:
        self.replicate = False
        self.probe_sent = False
        self.inflight.clear()
        self.inflight_bytes = 0
        self.next = self.match + 1

    def become_replicate(self) -> None:
        self.replicate = True
        self.probe_sent = False
        self.inflight.clear()
        self.inflight_bytes = 0
        self.next = self.match + 1


Reader = Callable[[int, int, int | None], Sequence[Entry]]
"""`reader(lo, hi, max_bytes)`: the persisted entries lo..hi-1, all of them or, when
`max_bytes` is not None, a prefix of at least one entry whose payloads reach `max_bytes`.
Called only for entries this node has persisted, and for a whole range at once."""

PayloadReader = Callable[[int, int], Sequence[bytes]]
"""`payload_reader(lo, hi)`: just the payloads of persisted entries lo..hi-1 (a fetch's
read needs no terms, and making an Entry per record cost a fetch of small batches 5x)."""


# What an entry held in memory costs besides its payload: the Entry (a 3-tuple), its index
# (an int), the payload's bytes header and a list slot (~135 bytes). Counted in the window:
# a window of 80-byte entries otherwise held nearly three times its size.
ENTRY_COST = 128


class _Log:
    """The Raft log: every entry's term in memory, payloads only for the newest entries.

    Terms are run-length encoded (`_starts[k]` is the first index of term `_terms[k]`; terms
    only grow along a log), so `term_at` and the conflict search never touch payloads and
    cost memory per term, not per entry. Entries from `_first` on are held in `_mem`; the
    older ones were persisted and are read back through `reader`, one call per range.
    `mem_bytes` counts what they hold: payloads plus ENTRY_COST each."""

    __slots__ = ("_starts", "_terms", "last", "_mem", "_first", "mem_bytes", "_reader", "_payload_reader")

    def __init__(self, entries: Sequence[Entry], runs: Sequence[tuple[int, int]], reader: Reader | None,
                 payload_reader: PayloadReader | None = None) -> None:
        mem = list(entries)
        if mem and (mem[-1].index - mem[0].index != len(mem) - 1):
            raise ValueError("entries must be contiguous")
        first = mem[0].index if mem else 1
        if mem and first > 1 and (reader is None or not runs or runs[0][0] != 1):
            raise ValueError("entries must start at index 1 unless term runs from 1 and a reader are given")
        if not mem and runs:
            raise ValueError("a log with term runs needs at least its last entry in memory")
        self._starts: list[int] = []
        self._terms: list[int] = []
        for start, term in runs:
            if start >= first:
                break
            if self._terms and term <= self._terms[-1]:
                raise ValueError(f"term runs must grow: {term} after {self._terms[-1]}")
            self._starts.append(start)
            self._terms.append(term)
        self._first = first  # index of _mem[0] (last + 1 when _mem is empty)
        self._mem: list[Entry] = []
        self.mem_bytes = 0
        self.last = first - 1
        self._reader = reader
        self._payload_reader = payload_reader
        self.append(mem)

    @property
    def first_in_memory(self) -> int:
        return self._first

    @property
    def last_term(self) -> int:
        return self._terms[-1] if self._terms else 0

    def term_at(self, index: int) -> int | None:
        if index > self.last or index < 0:
            return None
        if index == 0:
            return 0
        starts = self._starts
        if index >= starts[-1]:
            return self._terms[-1]
        return self._terms[bisect_right(starts, index) - 1]

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """The largest index <= `index` (<= last) whose term is <= `term`."""
        k = bisect_right(self._terms, term)  # the runs of terms <= `term`
        if k == 0 or index <= 0:
            return 0
        end = self._starts[k] - 1 if k < len(self._starts) else self.last
        return min(index, end)

    def append(self, entries: Sequence[Entry]) -> None:
        """Add `entries`, which continue the log at `last + 1`."""
        if not entries:
            return
        terms = self._terms
        mem = self._mem
        size = self.mem_bytes
        for e in entries:
            if not terms or e.term != terms[-1]:
                self._starts.append(e.index)
                terms.append(e.term)
            size += len(e.data) + ENTRY_COST
        mem.extend(entries)
        self.mem_bytes = size
        self.last = entries[-1].index

    def append_one(self, e: Entry) -> None:
        if not self._terms or e.term != self._terms[-1]:
            self._starts.append(e.index)
            self._terms.append(e.term)
        self._mem.append(e)
        self.mem_bytes += len(e.data) + ENTRY_COST
        self.last = e.index

    def truncate(self, index: int) -> None:
        """Drop the entries from `index` on."""
        if index > self.last:
            return
        k = index - self._first
        if k > 0:
            dropped = self._mem[k:]
            del self._mem[k:]
            self.mem_bytes -= sum(len(e.data) for e in dropped) + ENTRY_COST * len(dropped)
        else:  # below the window (only after an unclean election)
            self._mem = []
            self.mem_bytes = 0
            self._first = index
        j = bisect_left(self._starts, index)
        del self._starts[j:]
        del self._terms[j:]
        self.last = index - 1

    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> tuple[Entry, ...]:
        """Entries lo..hi-1 (clamped to the log), or with `max_bytes` a prefix of at least one
        entry whose payloads just reach it. Entries below the window are read back in one
        call; if that read stops short (its byte cap), the prefix ends there: never a gap."""
        lo = max(lo, 1)
        hi = min(hi, self.last + 1)
        if lo >= hi:
            return ()
        first = self._first
        if lo >= first:
            mem = self._mem
            if max_bytes is None:
                return tuple(mem[lo - first : hi - first])
            return _prefix(mem, lo - first, hi - first, max_bytes)
        if self._reader is None:
            raise RuntimeError(f"entries below {first} are not in memory and there is no reader")
        stop = min(hi, first)
        old = tuple(self._reader(lo, stop, max_bytes))
        if not old or old[0].index != lo or old[-1].index - lo != len(old) - 1 or old[-1].index >= stop:
            raise RuntimeError(f"reader returned {len(old)} entries for {lo}..{stop - 1}, not a prefix of them")
        if old[-1].index < stop - 1 or stop == hi:
            return old
        if max_bytes is not None:
            max_bytes -= sum(len(e.data) for e in old)
            if max_bytes <= 0:
                return old
        return old + self.slice(first, hi, max_bytes)

    def payloads(self, lo: int, hi: int) -> list[bytes]:
        """The payloads of entries lo..hi-1 (within the log): one read for those below the window."""
        first = self._first
        out: list[bytes] = []
        if lo < first:
            stop = min(hi, first)
            if self._payload_reader is not None:
                out = list(self._payload_reader(lo, stop))
            else:
                out = [e.data for e in self.slice(lo, stop)]
            if len(out) != stop - lo:
                raise RuntimeError(f"payload reader returned {len(out)} payloads for {lo}..{stop - 1}")
            lo = stop
        if lo < hi:
            out.extend([e.data for e in self._mem[lo - first : hi - first]])
        return out

    def trim(self, upto: int, window: int) -> None:
        """Drop payloads at or below `upto` from memory while more than `window` bytes are held.
        Only once a quarter over the window, so the list is cut rarely and in big pieces."""
        if self._reader is None or self.mem_bytes <= window + (window >> 2):
            return
        mem = self._mem
        size = self.mem_bytes
        k, stop = 0, min(upto - self._first + 1, len(mem))
        while k < stop and size > window:
            size -= len(mem[k].data) + ENTRY_COST
            k += 1
        if k:
            del mem[:k]
            self._first += k
            self.mem_bytes = size


def _prefix(mem: list[Entry], a: int, b: int, max_bytes: int) -> tuple[Entry, ...]:
    """mem[a:b] up to and including the entry whose payload makes `max_bytes` (at least one)."""
    budget = max_bytes
    i = a
    while i < b:
        budget -= len(mem[i].data)
        i += 1
        if budget <= 0:
            break
    return tuple(mem[a:i])


class RaftNode:
    """One member of one Raft group. See the module docstring for the shell's contract.

    Args:
        group: the group's name, stamped on every message (a partition, or the metadata group).
        node_id: this node's id; must be one of `voters`.
        voters: every member's id (fixed membership).
        config: `RaftConfig`.
        rng: the only source of randomness (election timeouts), so simulations are seeded.
        hard_state, entries: what storage loaded, to restart from disk: `entries` is the
            contiguous log from index 1, or with `term_runs` and `reader` only its newest
            entries (at least the last one).
        term_runs: (first index, term) of each term's entries from index 1, for a log whose
            older entries are not passed in `entries` (`SegmentLog.load_window`).
        reader: reads persisted entries back (`Reader`); with one, only the newest
            `config.log_window_bytes` of payloads stay in memory. The node never does I/O
            itself: the shell's reader does, and only for entries below the window.
        payload_reader: optionally, a faster read of just the payloads (`PayloadReader`).
        applied: entries up to this index are already reflected in the state machine and are
            not delivered again in `Ready.committed` (0: replay the committed log on restart);
            they are committed, so the commit index starts at least there.
        repaired_term: storage cut a damaged tail of this log when the node was in this term
            (`SegmentLog.repaired_term`): entries it persisted, and maybe acked, are gone. The
            node stays out of elections until caught up (module docstring, "Repaired storage").
    """

    def __init__(
        self,
        *,
        group: str,
        node_id: int,
        voters: Sequence[int],
        config: RaftConfig | None = None,
        rng: random.Random,
        hard_state: HardState | None = None,
        entries: Sequence[Entry] = (),
        term_runs: Sequence[tuple[int, int]] = (),
        reader: Reader | None = None,
        payload_reader: PayloadReader | None = None,
        applied: int = 0,
        repaired_term: int | None = None,
    ) -> None:
        if node_id not in voters:
            raise ValueError(f"node_id {node_id} is not among voters {list(voters)}")
        self.group = group
        self.id = node_id
        self.voters = tuple(sorted(set(voters)))
        self._peers = tuple(v for v in self.voters if v != node_id)
        self._quorum = len(self.voters) // 2 + 1
        self.cfg = config or RaftConfig()
        self._rng = rng
        self._log = log = _Log(entries, term_runs, reader, payload_reader)
        self._window = self.cfg.log_window_bytes
        hs = hard_state or HardState(0, None, 0)
        self._term = hs.term
        self._vote = hs.vote
        # Entries applied were committed: a checkpoint of the state machine may be ahead of
        # the hard state's commit index, which is written lazily (the shell checked that the
        # log holds `applied` with the checkpoint's term, so by log matching it is that entry).
        self._commit = min(max(hs.commit, applied), log.last)
        self._persisted_hs = HardState(self._term, self._vote, self._commit)
        if log.last_term > self._term:
            # A crash between writing a Ready's entries and its hard state: we accepted entries
            # of that term, so we were in it. Restore currentTerm >= every log term; the vote is
            # None because a vote is always durable before it is sent.
            self._term, self._vote = log.last_term, None
        self._stable = log.last  # last index known durable (advanced)
        self._handed = log.last  # last index handed out in a Ready
        self._applied = min(applied, self._commit)  # last index handed out as committed
        self._rewind: int | None = None
        self._outstanding = False
        self._msgs: list[Message] = []
        self._role = FOLLOWER
        self._leader: int | None = None
        self._leader_commit = -1  # the current leader's commit index as it last told us (-1: not yet)
        # Bumped whenever role, term or leader may change: a shell polling many groups for
        # leadership changes compares this one int instead of the three.
        self.leadership_version = 0
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = 0
        self._ticks = 0
        self._appended_at = 0  # leader: the tick it last sent entries
        self._votes: dict[int, bool] = {}
        self._progress: dict[int, _Progress] = {}
        self._bcast = False
        self.committed_truncations = 0  # committed entries this node lost (unclean only)
        # Quarantine (repaired storage): the term storage lost a tail in, None once over.
        qt = self.cfg.repair_quarantine_ticks
        self._quarantine_left = 10 * self.cfg.election_ticks if qt is None else qt
        caught_up = repaired_term is not None and log.last_term > repaired_term
        self._quarantine_term = None if caught_up or self._quarantine_left <= 0 else repaired_term
        self._reset_timers()

    # ---- read-only state -------------------------------------------------------------------

    @property
    def role(self) -> str:
        return self._role

    @property
    def leader_id(self) -> int | None:
        return self._leader

    @property
    def caught_up(self) -> bool:
        """Applied all the group had committed when its leader last spoke to this node: a
        follower once its applied index reaches the commit index the leader told it; a leader
        once it has applied an entry of its own term. A restarted broker serves clients only from
        then on, as a KRaft broker waits for its initial metadata catch-up: before, its view of
        the topics is the one it had when it stopped."""
        if self._role == LEADER:
            return self._applied >= self._commit and self.term_at(self._commit) == self._term
        return self._leader is not None and 0 <= self._leader_commit <= self._applied

    @property
    def term(self) -> int:
        return self._term

    @property
    def vote(self) -> int | None:
        return self._vote

    @property
    def commit_index(self) -> int:
        return self._commit

    @property
    def last_index(self) -> int:
        return self._log.last

    @property
    def last_term(self) -> int:
        return self._log.last_term

    @property
    def quarantined(self) -> bool:
        """True while a repaired log keeps this node out of elections (see `repaired_term`)."""
        return self._quarantine_term is not None

    @property
    def memory_bytes(self) -> int:
        """Bytes of the entries held in memory (the window, plus what is not yet persisted):
        payloads plus ENTRY_COST each."""
        return self._log.mem_bytes

    @property
    def first_in_memory(self) -> int:
        """The oldest index whose entry is held in memory (older ones are read back)."""
        return self._log.first_in_memory

    @property
    def stable_index(self) -> int:
        """Last index persisted (its Ready advanced)."""
        return self._stable

    @property
    def applied_index(self) -> int:
        """Last index handed out in `Ready.committed`."""
        return self._applied

    def entry(self, index: int) -> Entry | None:
        """The entry at `index`, or None when the log does not reach it."""
        if 1 <= index <= self._log.last:
            return self._log.slice(index, index + 1)[0]
        return None

    def entries_from(self, index: int, max_entries: int | None = None, *, max_bytes: int | None = None
                     ) -> tuple[Entry, ...]:
        """Entries from `index` on, to the end of the log or `max_entries` of them; with
        `max_bytes`, a prefix of them (at least one entry) whose payloads just reach it.
        Entries below the window are read back in one go per range; always a contiguous prefix."""
        lo = max(index, 1)
        hi = self._log.last + 1 if max_entries is None else lo + max_entries
        return self._log.slice(lo, hi, max_bytes)

    def release_memory(self, keep: int = 0) -> int:
        """Drop from memory the oldest payloads that are persisted and applied until `keep`
        bytes are held (the shell's call for an idle group, or one over the node's budget);
        returns the bytes let go. Without a reader nothing can be dropped."""
        before = self._log.mem_bytes
        self._log.trim(min(self._stable, self._applied), keep)
        return before - self._log.mem_bytes

    def payloads(self, lo: int, hi: int) -> list[bytes]:
        """The payloads of entries lo..hi-1 (clamped to the log), read in one go per range."""
        return self._log.payloads(max(lo, 1), min(hi, self._log.last + 1))

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index` (0 for index 0), None beyond the log."""
        return self._log.term_at(index)

    def status(self) -> dict[str, Any]:
        """A JSON-able snapshot for logs and debugging."""
        st: dict[str, Any] = {
            "group": self.group,
            "id": self.id,
            "role": self._role,
            "term": self._term,
            "vote": self._vote,
            "leader": self._leader,
            "commit": self._commit,
            "applied": self._applied,
            "last_index": self.last_index,
            "last_term": self.last_term,
            "stable": self._stable,
            "memory_bytes": self._log.mem_bytes,
            "first_in_memory": self._log.first_in_memory,
            "committed_truncations": self.committed_truncations,
            "quarantined": self.quarantined,
        }
        if self._role == LEADER:
            st["progress"] = {
                p: {
                    "match": pr.match,
                    "next": pr.next,
                    "state": "replicate" if pr.replicate else "probe",
                    "inflight": len(pr.inflight),
                    "inflight_bytes": pr.inflight_bytes,
                    "active": pr.recent_active,
                }
                for p, pr in self._progress.items()
            }
        return st

    # ---- inputs ------------------------------------------------------------------------------

    def tick(self) -> None:
        """One unit of logical time (the shell calls it on a timer)."""
        if self._role == LEADER:
            self._tick_leader()
            return
        if self._quarantine_term is not None:
            self._quarantine_left -= 1
            if self._quarantine_left <= 0:
                self._quarantine_term = None  # expired (module docstring, "Repaired storage")
        self._election_elapsed += 1
        if self._election_elapsed >= self._timeout:
            self._election_elapsed = 0
            self.campaign()

    def campaign(self) -> None:
        """Start an election now (pre-vote first when configured). No-op for a leader, and
        for a node quarantined after a repaired log."""
        if self._role == LEADER or not self._may_elect():
            return
        if self.cfg.pre_vote:
            self._become_precandidate()
        else:
            self._become_candidate()

    def propose(self, data: bytes) -> int | None:
        """Append `data` as a new entry if this node leads; returns its index, else None.

        The entry is committed once it shows up in some `Ready.committed` with this term;
        if leadership changes first it may be overwritten (compare the term)."""
        if self._role != LEADER:
            return None
        index = self._log.last + 1
        self._log.append_one(Entry(self._term, index, data))
        self._bcast = True  # appends go out at the next Ready, batching proposals
        return index

    def step(self, m: Message) -> None:
        """Feed one message addressed to this node."""
        if m.group != self.group:
            raise ValueError(f"message for group {m.group!r} stepped into group {self.group!r}")
        if m.to != self.id or m.frm == self.id or m.frm not in self.voters:
            return
        k = m.kind
        if m.term > self._term:
            if k is MsgKind.PREVOTE or k is MsgKind.VOTE:
                in_lease = (
                    self.cfg.check_quorum
                    and self._leader is not None
                    and self._election_elapsed < self.cfg.election_ticks
                )
                if in_lease:
                    return
            if k is MsgKind.PREVOTE or (k is MsgKind.PREVOTE_RESP and not m.reject):
                pass  # pre-vote traffic never changes our term
            else:
                lead = m.frm if (k is MsgKind.APPEND or k is MsgKind.HEARTBEAT) else None
                self._become_follower(m.term, lead)
        elif m.term < self._term:
            if (k is MsgKind.APPEND or k is MsgKind.HEARTBEAT) and (
                self.cfg.check_quorum or self.cfg.pre_vote
            ):
                # A stale leader learns our term and steps down (we may have been cut off and
                # bumped our term; without this it would never hear of it).
                self._send(MsgKind.APPEND_RESP, m.frm)
            elif k is MsgKind.PREVOTE:
                self._send(MsgKind.PREVOTE_RESP, m.frm, reject=True)
            return
        if k is MsgKind.PREVOTE or k is MsgKind.VOTE:
            self._handle_vote_request(m)
        elif self._role == LEADER:
            self._step_leader(m)
        elif self._role == FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    # ---- Ready / advance -----------------------------------------------------------------

    def has_ready(self) -> bool:
        """True when `ready()` has work (and no Ready is outstanding)."""
        if self._outstanding:
            return False
        self._flush()
        return bool(
            self._msgs
            or self._log.last > self._handed
            or self._commit > self._applied
            or self._rewind is not None
            or self._hard_state_changed()
        )

    def ready(self) -> Ready:
        """Hand out the pending work. Call `advance(ready)` once it is persisted."""
        if self._outstanding:
            raise RuntimeError("ready() called again before advance() of the previous Ready")
        self._flush()
        hs = None
        if self._hard_state_changed():
            hs = HardState(self._term, self._vote, self._commit)
        log = self._log
        entries = log.slice(self._handed + 1, log.last + 1) if log.last > self._handed else ()
        committed = self._committed_chunk()
        rd = Ready(
            hard_state=hs,
            entries=entries,
            messages=tuple(self._msgs),
            committed=committed,
            rewind_to=self._rewind,
        )
        self._msgs = []
        self._handed = log.last
        self._rewind = None
        self._outstanding = True
        return rd

    def _committed_chunk(self) -> tuple[Entry, ...]:
        """The committed entries to hand out next, marked applied: at most
        `max_committed_entries`, and those below the window (a restart's replay) at most
        `log_window_bytes` (or `max_append_bytes`, if more) at a time, so replaying a long
        log neither holds much of it in memory nor one loop turn for long, yet a tiny
        window does not mean a read per entry; the rest follow in the next Readies."""
        lo = self._applied + 1
        hi = min(self._commit + 1, lo + self.cfg.max_committed_entries)
        if lo >= hi:
            return ()
        log = self._log
        if lo < log.first_in_memory:
            out = log.slice(lo, min(hi, log.first_in_memory), max(self._window, self.cfg.max_append_bytes))
        else:
            out = log.slice(lo, hi)
        self._applied = out[-1].index
        return out

    def take_committed(self) -> tuple[Entry, ...]:
        """Committed entries not handed out yet, also while a Ready is outstanding.

        Committed means durable on a majority, so applying them needs no local write first: a
        shell whose own fsync is slow still answers acks=all writes that two other replicas
        made durable. None while a rewind (unclean election) waits to be handed out."""
        if self._commit <= self._applied or self._rewind is not None:
            return ()
        out = self._committed_chunk()
        self._log.trim(min(self._stable, self._applied), self._window)
        return out

    def take_messages(self) -> list[Message]:
        """Queued heartbeats and heartbeat answers, also while a Ready is outstanding: they
        promise nothing about this node's disk, and a slow write must not look like a dead
        node. Everything else stays for the next Ready: votes and append answers wait for its
        write, and new appends batch there (sent piecemeal they would fill the followers'
        in-flight windows with tiny messages and cut throughput by half)."""
        out = [m for m in self._msgs if m.kind in _HEARTBEAT_KINDS]
        if out:
            self._msgs = [m for m in self._msgs if m.kind not in _HEARTBEAT_KINDS]
        return out

    def advance(self, rd: Ready) -> None:
        """`rd` is persisted (and its messages sent, committed entries applied)."""
        self._outstanding = False
        if rd.hard_state is not None:
            self._persisted_hs = rd.hard_state
        if rd.entries:
            last = rd.entries[-1]
            # The log may have been truncated meanwhile; same term at the index means same
            # prefix (log matching), so the persisted copy is still ours.
            if self.term_at(last.index) == last.term and last.index > self._stable:
                self._stable = last.index
            if self._role == LEADER:
                self._progress[self.id].match = self._stable
                if self._maybe_commit():
                    self._bcast = True
        # Persisted and applied entries may leave memory (read back if ever needed).
        self._log.trim(min(self._stable, self._applied), self._window)

    # ---- roles ---------------------------------------------------------------------------

    def _reset_timers(self) -> None:
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self.cfg.election_ticks + self._rng.randrange(self.cfg.election_ticks)
        self._votes = {}
        self._progress = {}
        self._bcast = False

    def _become_follower(self, term: int, leader: int | None) -> None:
        if term != self._term:
            self._term = term
            self._vote = None
        self._role = FOLLOWER
        self._leader = leader
        self._leader_commit = -1
        self.leadership_version += 1
        self._reset_timers()

    def _become_precandidate(self) -> None:
        self._role = PRECANDIDATE
        self._leader = None
        self._leader_commit = -1
        self.leadership_version += 1
        self._reset_timers()
        self._votes = {self.id: True}
        if self._quorum == 1:
            self._become_candidate()
            return
        for p in self._peers:
            self._msgs.append(
                Message(
                    MsgKind.PREVOTE, self.group, self.id, p, self._term + 1, self.last_term, self.last_index
                )
            )

    def _become_candidate(self) -> None:
        self._term += 1
        self._vote = self.id
        self._role = CANDIDATE
        self._leader = None
        self._leader_commit = -1
        self.leadership_version += 1
        self._reset_timers()
        self._votes = {self.id: True}
        if self._quorum == 1:
            self._become_leader()
            return
        for p in self._peers:
            self._msgs.append(
                Message(MsgKind.VOTE, self.group, self.id, p, self._term, self.last_term, self.last_index)
            )

    def _become_leader(self) -> None:
        self._role = LEADER
        self._leader = self.id
        self._leader_commit = -1
        self.leadership_version += 1
        self._reset_timers()
        nxt = self._log.last + 1
        self._progress = {v: _Progress(nxt) for v in self.voters}
        self._progress[self.id].match = self._stable
        self._log.append_one(Entry(self._term, nxt, b""))  # the no-op that commits earlier terms
        for p in self._peers:
            self._send_append(p)

    # ---- voting ---------------------------------------------------------------------------

    def _may_elect(self) -> bool:
        """May this node campaign or grant a (pre-)vote? The one place the quarantine of a
        repaired log is read (module docstring, "Repaired storage"); it ends in
        `_append_from_leader` (caught up) or `tick` (expired), never on a read."""
        return self._quarantine_term is None

    def _log_ok(self, log_term: int, index: int) -> bool:
        """Is a candidate's log at least as up to date as ours (§5.4.1)?"""
        if self.cfg.unclean_election:
            return True  # UNSAFE `election: unclean`: the one place this flag is read
        lt = self.last_term
        return log_term > lt or (log_term == lt and index >= self._log.last)

    def _handle_vote_request(self, m: Message) -> None:
        pre = m.kind is MsgKind.PREVOTE
        resp = MsgKind.PREVOTE_RESP if pre else MsgKind.VOTE_RESP
        can_vote = (
            self._vote == m.frm
            or (self._vote is None and self._leader is None)
            or (pre and m.term > self._term)
        )
        if can_vote and self._log_ok(m.log_term, m.index) and self._may_elect():
            self._msgs.append(Message(resp, self.group, self.id, m.frm, m.term))
            if not pre:
                self._election_elapsed = 0
                self._vote = m.frm
        else:
            self._send(resp, m.frm, reject=True)

    def _step_candidate(self, m: Message) -> None:
        k = m.kind
        if k is MsgKind.APPEND or k is MsgKind.HEARTBEAT:
            self._become_follower(self._term, m.frm)  # someone won this term
            self._step_follower(m)
            return
        pre = self._role == PRECANDIDATE
        if pre and k is MsgKind.PREVOTE_RESP:
            if not m.reject and m.term != self._term + 1:
                return  # a grant from an earlier pre-campaign
        elif not (not pre and k is MsgKind.VOTE_RESP):
            return
        self._votes.setdefault(m.frm, not m.reject)
        granted = sum(self._votes.values())
        if granted >= self._quorum:
            if pre:
                self._become_candidate()
            else:
                self._become_leader()
        elif len(self._votes) - granted >= self._quorum:
            self._become_follower(self._term, None)

    # ---- follower -------------------------------------------------------------------------

    def _step_follower(self, m: Message) -> None:
        k = m.kind
        if k is MsgKind.APPEND:
            self._election_elapsed = 0
            if self._leader != m.frm:
                self._follow(m.frm)
            self._leader_commit = max(self._leader_commit, m.commit)
            self._handle_append(m)
        elif k is MsgKind.HEARTBEAT:
            self._election_elapsed = 0
            if self._leader != m.frm:
                self._follow(m.frm)
            self._leader_commit = max(self._leader_commit, m.log_term)
            if m.commit > self._commit:
                self._commit = min(m.commit, self._log.last)
            # m.commit is at most what we acked: if our log ends below it, storage lost a tail
            # we had acked, and the reject makes the leader probe us again (`_handle_reject`).
            self._msgs.append(
                Message(MsgKind.HEARTBEAT_RESP, self.group, self.id, m.frm, self._term, index=m.index,
                        reject=m.commit > self._log.last)
            )

    def _follow(self, leader: int) -> None:
        self._leader = leader
        self._leader_commit = -1
        self.leadership_version += 1

    def _handle_append(self, m: Message) -> None:
        if self.term_at(m.index) == m.log_term:
            last_new = m.index + len(m.entries)
            if m.entries:
                self._append_from_leader(m.entries)
            c = min(m.commit, last_new)
            if c > self._commit:
                self._commit = c
            self._msgs.append(
                Message(MsgKind.APPEND_RESP, self.group, self.id, m.frm, self._term, index=last_new)
            )
            return
        hint = self._find_conflict_by_term(min(m.index, self._log.last), m.log_term)
        self._msgs.append(
            Message(
                MsgKind.APPEND_RESP,
                self.group,
                self.id,
                m.frm,
                self._term,
                log_term=self.term_at(hint) or 0,
                index=m.index,
                reject=True,
                reject_hint=hint,
            )
        )

    def _append_from_leader(self, ents: tuple[Entry, ...]) -> None:
        log = self._log
        n = log.last
        for j, e in enumerate(ents):
            i = e.index
            if i > n:
                log.append(ents[j:])
                break
            if log.term_at(i) != e.term:
                self._truncate(i)
                log.append(ents[j:])
                break
        q = self._quarantine_term
        if q is not None and log.last_term > q:
            # Only a leader of a later term sent this: log matching makes us its copy up to
            # here, past what our lost acks counted for. A later truncation cannot undo that.
            self._quarantine_term = None

    def _truncate(self, index: int) -> None:
        """Drop the log from `index` on (a conflicting suffix)."""
        self._log.truncate(index)
        keep = index - 1
        self._stable = min(self._stable, keep)
        self._handed = min(self._handed, keep)
        if keep < self._commit:
            # Only reachable after an unclean election: committed entries are being lost.
            self.committed_truncations += 1
            self._commit = keep
            if keep < self._applied:
                self._applied = keep
                self._rewind = keep if self._rewind is None else min(self._rewind, keep)

    def _find_conflict_by_term(self, index: int, term: int) -> int:
        """The largest index <= `index` whose term is <= `term` (terms only grow along a log)."""
        return self._log.find_conflict_by_term(index, term)

    # ---- leader ---------------------------------------------------------------------------

    def _tick_leader(self) -> None:
        self._ticks += 1
        self._election_elapsed += 1
        self._heartbeat_elapsed += 1
        if self._election_elapsed >= self.cfg.election_ticks:
            self._election_elapsed = 0
            if self.cfg.check_quorum:
                active = 1
                for p in self._peers:
                    pr = self._progress[p]
                    active += pr.recent_active
                    pr.recent_active = False
                if active < self._quorum:
                    self._become_follower(self._term, None)
                    return
        if self._heartbeat_elapsed >= self.cfg.heartbeat_ticks and (
            not self.cfg.idle_heartbeat_ticks
            or self._heartbeat_elapsed >= self.cfg.idle_heartbeat_ticks
            or not self._idle()
        ):
            self._heartbeat_elapsed = 0
            self._send_heartbeats()

    def _idle(self) -> bool:
        """Nothing appended for election_ticks, and every follower holds the whole log (so
        it has nothing to catch up and no append is in flight)."""
        if self._ticks - self._appended_at < self.cfg.election_ticks:
            return False
        last = self._log.last
        for p in self._peers:
            pr = self._progress[p]
            if pr.match < last or pr.inflight:
                return False
        return True

    def _send_heartbeats(self) -> None:
        for p in self._peers:
            self._heartbeat(p)

    def _heartbeat(self, p: int) -> None:
        c = min(self._progress[p].match, self._commit)  # never past what p is known to hold
        self._msgs.append(
            Message(MsgKind.HEARTBEAT, self.group, self.id, p, self._term, log_term=self._commit,
                    index=self._ticks, commit=c)
        )

    def _step_leader(self, m: Message) -> None:
        pr = self._progress.get(m.frm)
        if pr is None:
            return
        k = m.kind
        if k is MsgKind.APPEND_RESP:
            pr.recent_active = True
            if m.reject:
                self._handle_reject(m.frm, pr, m)
                return
            if m.index > pr.match:
                pr.match = m.index
                if self._maybe_commit():
                    self._bcast = True
                elif self.cfg.commit_heartbeats and pr.match <= self._commit:
                    self._heartbeat(m.frm)  # a late acker of committed entries: it may apply them
            if pr.replicate:
                infl = pr.inflight
                while infl and infl[0][0] <= m.index:
                    pr.inflight_bytes -= infl.popleft()[2]
                if pr.next <= pr.match:
                    pr.next = pr.match + 1
            else:
                pr.become_replicate()
                self._retract_appends(m.frm)
            while self._send_append(m.frm):
                pass
        elif k is MsgKind.HEARTBEAT_RESP:
            pr.recent_active = True
            if m.reject and (pr.replicate or m.index - pr.probe_tick >= self.cfg.resend_ticks):
                pr.become_probe()  # it lost entries it acked: probe at its match, to be rejected
                self._retract_appends(m.frm)
                self._send_append(m.frm)
                return
            if pr.replicate:
                if pr.inflight and m.index - pr.inflight[0][1] >= self.cfg.resend_ticks:
                    pr.become_probe()  # an append (or its answer) was lost
                    self._retract_appends(m.frm)
            elif m.index - pr.probe_tick >= self.cfg.resend_ticks:
                # The probe (or its answer) is lost, as in replicate above. Not on any answer:
                # a follower resumed from a pause answers every heartbeat queued meanwhile at
                # once, and each answer re-sent the whole missing window (a 44 MB peer frame).
                pr.probe_sent = False
                self._retract_appends(m.frm)  # a probe still queued (our write is slow) is resent
            if pr.match < self._log.last:
                self._send_append(m.frm)

    def _handle_reject(self, p: int, pr: _Progress, m: Message) -> None:
        if pr.replicate:
            if m.index <= pr.match:
                return  # stale
        elif m.index != pr.next - 1:
            return  # answer to an earlier probe
        probe = m.reject_hint
        if m.log_term > 0:
            probe = self._find_conflict_by_term(min(probe, self._log.last), m.log_term)
        if m.index <= pr.match:
            # Our probe at its match was rejected: the follower lost entries it had acked (its
            # storage cut a damaged tail). Forget the match (a lower one is always safe: commit
            # never goes back) so the probe walks back below it.
            pr.match = 0
        pr.become_probe()
        self._retract_appends(p)
        pr.next = max(min(m.index, probe + 1), pr.match + 1)
        self._send_append(p)

    def _retract_appends(self, p: int) -> None:
        """Drop the appends to `p` queued since the last Ready: its progress was just reset to
        its match, and the window sent next starts there. So one turn's answers that switch it
        between probe and replicate (a reject, then an older append's ack) send it one window,
        not one per switch. Unsent, they are no loss."""
        msgs = self._msgs
        if any(m.to == p and m.kind is MsgKind.APPEND for m in msgs):
            self._msgs = [m for m in msgs if m.to != p or m.kind is not MsgKind.APPEND]

    def _send_append(self, p: int) -> bool:
        """Send `p` the next append if its flow control allows; False when nothing was sent."""
        pr = self._progress[p]
        cfg = self.cfg
        if pr.replicate:
            if len(pr.inflight) >= cfg.max_inflight or pr.inflight_bytes >= cfg.max_inflight_bytes:
                return False
        elif pr.probe_sent:
            return False
        log = self._log
        prev = pr.next - 1
        last = log.last
        if prev > last:  # defensive: next never passes our log end + 1
            pr.next = last + 1
            prev = last
        if pr.replicate and prev == last:
            return False  # nothing new; heartbeats carry the commit index
        budget = cfg.max_append_bytes
        if pr.replicate:
            budget = min(budget, cfg.max_inflight_bytes - pr.inflight_bytes)
        # One read for the whole message when it starts below the window (a lagging follower).
        ents = log.slice(prev + 1, prev + 1 + cfg.max_append_entries, budget)
        hi = prev + len(ents)
        size = 0
        if ents:
            self._appended_at = self._ticks
            for e in ents:
                size += len(e.data)
        self._msgs.append(
            Message(
                MsgKind.APPEND,
                self.group,
                self.id,
                p,
                self._term,
                log_term=log.term_at(prev) or 0,
                index=prev,
                entries=ents,
                commit=self._commit,
            )
        )
        if pr.replicate:
            pr.next = hi + 1
            pr.inflight.append((hi, self._ticks, size))
            pr.inflight_bytes += size
        else:
            pr.probe_sent = True
            pr.probe_tick = self._ticks
        return True

    def _maybe_commit(self) -> bool:
        matches = sorted((pr.match for pr in self._progress.values()), reverse=True)
        n = matches[self._quorum - 1]
        if n > self._commit and self.term_at(n) == self._term:  # §5.4.2: own term only
            self._commit = n
            if self.cfg.commit_heartbeats:
                self._send_heartbeats()
            return True
        return False

    def _flush(self) -> None:
        if self._bcast and self._role == LEADER:
            self._bcast = False
            for p in self._peers:
                while self._send_append(p):
                    pass

    # ---- helpers --------------------------------------------------------------------------

    def _send(self, kind: MsgKind, to: int, *, reject: bool = False) -> None:
        self._msgs.append(Message(kind, self.group, self.id, to, self._term, reject=reject))

    def _hard_state_changed(self) -> bool:
        ps = self._persisted_hs
        return ps.term != self._term or ps.vote != self._vote or ps.commit != self._commit


# ---- wire format -------------------------------------------------------------------------------


class MessageDecodeError(ValueError):
    """Bytes that are not a valid `encode_messages` frame (the peer's fault, never a crash)."""


# logquake.broker.wire reuses these four names to write frames without joining them.
_VERSION = 1
_FRAME = struct.Struct("<BI")  # version, message count
# kind, flags(bit0=reject), group length, frm, to, term, log_term, index, commit, reject_hint, n_entries
_MSG = struct.Struct("<BBHIIQQQQQI")
_ENT = struct.Struct("<QQI")  # term, index, data length


def encode_messages(msgs: Sequence[Message]) -> bytes:
    """Pack messages into one compact binary frame (entry data is copied once, by join)."""
    parts: list[bytes] = [_FRAME.pack(_VERSION, len(msgs))]
    pack_msg = _MSG.pack
    pack_ent = _ENT.pack
    for m in msgs:
        g = m.group.encode()
        parts.append(
            pack_msg(
                m.kind,
                1 if m.reject else 0,
                len(g),
                m.frm,
                m.to,
                m.term,
                m.log_term,
                m.index,
                m.commit,
                m.reject_hint,
                len(m.entries),
            )
        )
        parts.append(g)
        for e in m.entries:
            parts.append(pack_ent(e.term, e.index, len(e.data)))
            parts.append(e.data)
    return b"".join(parts)


def decode_messages(buf: bytes | bytearray | memoryview) -> list[Message]:
    """Inverse of `encode_messages`; raises `MessageDecodeError` on any malformed input."""
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    src = buf
    whole = isinstance(buf, bytes)  # slicing bytes copies once and is cheaper than via memoryview
    n = len(mv)
    if n < _FRAME.size:
        raise MessageDecodeError(f"frame of {n} bytes is shorter than its header")
    version, count = _FRAME.unpack_from(mv, 0)
    if version != _VERSION:
        raise MessageDecodeError(f"unknown frame version {version}")
    pos = _FRAME.size
    out: list[Message] = []
    unpack_msg = _MSG.unpack_from
    unpack_ent = _ENT.unpack_from
    msize, esize = _MSG.size, _ENT.size
    for _ in range(count):
        if pos + msize > n:
            raise MessageDecodeError(f"truncated message header at byte {pos}")
        kind, flags, glen, frm, to, term, log_term, index, commit, hint, nent = unpack_msg(mv, pos)
        pos += msize
        k = _KINDS.get(kind)
        if k is None:
            raise MessageDecodeError(f"unknown message kind {kind} at byte {pos - msize}")
        if flags & ~1:
            raise MessageDecodeError(f"unknown flags {flags:#x}")
        if pos + glen > n:
            raise MessageDecodeError("truncated group name")
        try:
            group = str(mv[pos : pos + glen], "utf-8")
        except UnicodeDecodeError as exc:
            raise MessageDecodeError("group name is not UTF-8") from exc
        pos += glen
        if nent * esize > n - pos:
            raise MessageDecodeError(f"{nent} entries cannot fit in the {n - pos} bytes left")
        ents: list[Entry] = []
        for _ in range(nent):
            if pos + esize > n:
                raise MessageDecodeError("truncated entry header")
            et, ei, dlen = unpack_ent(mv, pos)
            pos += esize
            if pos + dlen > n:
                raise MessageDecodeError("truncated entry data")
            ents.append(Entry(et, ei, src[pos : pos + dlen] if whole else bytes(mv[pos : pos + dlen])))
            pos += dlen
        out.append(
            Message(k, group, frm, to, term, log_term, index, tuple(ents), commit, bool(flags & 1), hint)
        )
    if pos != n:
        raise MessageDecodeError(f"{n - pos} trailing bytes after {count} messages")
    return out
