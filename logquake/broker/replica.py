"""One Raft group on this node, with its state machine and the leader's bookkeeping.

`PartitionReplica` is the shell around one partition's `RaftNode`: it applies committed
entries to the `PartitionState`, and while this node leads it assigns Kafka offsets at
append time and tracks the requests waiting for their entry to be persisted (acks=1) or
committed (acks=all). `MetadataReplica` does the same for the metadata group.

Leader readiness: a new leader serves produce only once it has applied an entry of its own
term (its no-op). From then on the committed state covers every earlier entry of its log,
so the next offset and the speculative producer state are the committed ones plus its own
proposals, which Raft never drops while it stays leader in that term.

Restarts: a replica may start from a checkpoint of its state (checkpoint.py), its Raft node
built with `applied` at the checkpoint's index so only the entries after it are applied. It
saves checkpoints as it applies (the store's `Checkpoints` says when), each at an index its
own log has persisted, so a crash rarely leaves one ahead of the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from logquake.broker import partition as pmod
from logquake.broker import producer_state
from logquake.broker.kerrors import ErrorCode
from logquake.broker.metadata import MetadataState, PartitionInfo, apply_metadata
from logquake.broker.raft import LEADER, Entry, RaftNode, Ready
from logquake.broker.records import BatchHeader, batches_span, rewrite_batches

__all__ = ["AppendOutcome", "MetadataReplica", "PartitionReplica"]

log = logging.getLogger("logquake.broker.replica")

E = ErrorCode


@dataclass(frozen=True, kw_only=True, slots=True)
class AppendOutcome:
    error_code: int
    base_offset: int = -1


@dataclass(slots=True)
class _Waiter:
    index: int
    term: int
    acks: int  # 1: resolve when persisted locally; -1: when committed
    base_offset: int
    future: asyncio.Future[AppendOutcome]


def _no_one(group: Any) -> None:
    pass


class _GroupBase:
    def __init__(self, raft: RaftNode, store: Any) -> None:
        self.raft = raft
        self.store = store
        # Called after each input the node's loop did not make itself (a proposal from a
        # handler), so the loop knows this group may have a Ready (Node.touch).
        self.on_input: Callable[[Any], None] = _no_one
        self.seen_role = raft.role
        self.seen_term = raft.term
        self.seen_leader = raft.leader_id
        self.seen_version = raft.leadership_version

    @property
    def name(self) -> str:
        return self.raft.group

    def release_memory(self, keep: int = 0) -> bool:
        """Let go of the payloads held that can be read back, the oldest first, down to `keep`
        bytes (0: an idle group); True if any went."""
        return self.raft.release_memory(keep) > 0

    def leadership_changed(self) -> bool:
        r = self.raft
        if r.leadership_version == self.seen_version:
            return False  # the common case, polled for every group on every loop turn
        self.seen_version = r.leadership_version
        changed = (r.role, r.term, r.leader_id) != (self.seen_role, self.seen_term, self.seen_leader)
        self.seen_role, self.seen_term, self.seen_leader = r.role, r.term, r.leader_id
        return changed


class PartitionReplica(_GroupBase):
    """A partition's Raft group on this node."""

    def __init__(self, info: PartitionInfo, raft: RaftNode, store: Any, *,
                 state: pmod.PartitionState | None = None) -> None:
        """`state`: a checkpoint to start from (`GroupStore.load_checkpoint`), whose applied
        index `raft` was built with."""
        super().__init__(raft, store)
        self.info = info
        if state is not None and state.applied_index != raft.applied_index:
            raise ValueError(f"state at index {state.applied_index}, Raft applied {raft.applied_index}")
        self.state = self._new_state() if state is None else self._attach(state)
        self._checkpoints = getattr(store, "checkpoints", None)
        if self._checkpoints is not None:
            self._checkpoints.restored(self.state)
            self._checkpoints.source = lambda: self.state
        self.leader_ready = False
        self.next_offset = 0  # leader: next Kafka offset to assign (includes uncommitted appends)
        self.spec_producers = producer_state.EMPTY
        self._waiters: dict[int, _Waiter] = {}
        self._persist_waiters: list[_Waiter] = []
        self._hw_waiters: list[asyncio.Future[None]] = []

    def release_memory(self, keep: int = 0) -> bool:
        held = self.state.payload_bytes
        self.state.trim(keep)
        return super().release_memory(keep) or self.state.payload_bytes < held

    def _new_state(self) -> pmod.PartitionState:
        """An empty state that holds the same payload window as the Raft log (they share the
        payload objects) and reads older batches back through the Raft log."""
        return pmod.PartitionState(payload_window=self.raft.cfg.log_window_bytes, loader=self._load_entries)

    def _attach(self, state: pmod.PartitionState) -> pmod.PartitionState:
        """A restored state, reading its batches back through this replica's Raft log."""
        state.payload_window = self.raft.cfg.log_window_bytes
        state.loader = self._load_entries
        return state

    def _load_entries(self, lo: int, hi: int) -> list[bytes]:
        return self.raft.payloads(lo, hi)

    # ---- leader side ----------------------------------------------------------------------

    @property
    def is_ready_leader(self) -> bool:
        return self.leader_ready and self.raft.role == LEADER

    def check_producer(self, body: bytes, headers: list[BatchHeader], *, dedup: bool
                       ) -> producer_state.Verdict | None:
        """The idempotence verdict for an incoming request's batches, None when all may append."""
        for h in headers:
            if h.producer_id < 0:
                continue
            v = producer_state.check_batch(self.spec_producers, pmod.batch_info(body, h, 0), dedup=dedup)
            if v.outcome is not producer_state.Outcome.APPEND:
                return v
        return None

    def append(self, body: bytes, headers: list[BatchHeader], acks: int) -> AppendOutcome | asyncio.Future:
        """Assign offsets, propose; resolve now (acks=0) or later through the returned future."""
        if not self.is_ready_leader:
            return AppendOutcome(error_code=E.NOT_LEADER_OR_FOLLOWER)
        base = self.next_offset
        # A bytearray made once and never mutated after: Raft, storage and fetch only read it.
        data = rewrite_batches(body, headers, base, self.raft.term, prefix=pmod.RECORDS_PREFIX)
        index = self.raft.propose(data)
        if index is None:
            return AppendOutcome(error_code=E.NOT_LEADER_OR_FOLLOWER)
        self.on_input(self)
        self.next_offset = base + batches_span(headers)
        off = base
        for h in headers:
            if h.producer_id >= 0:
                self.spec_producers = producer_state.apply_batch(
                    self.spec_producers, pmod.batch_info(body, h, off))
            off += h.last_offset_delta + 1
        if acks == 0:
            return AppendOutcome(error_code=E.NONE, base_offset=base)
        fut: asyncio.Future[AppendOutcome] = asyncio.get_running_loop().create_future()
        w = _Waiter(index, self.raft.term, acks, base, fut)
        if acks == 1:
            self._persist_waiters.append(w)
        else:
            self._waiters[index] = w
        return fut

    def on_persisted(self) -> None:
        """After a Ready was made durable: answer acks=1 requests up to the stable index."""
        if not self._persist_waiters:
            return
        stable, keep = self.raft.stable_index, []
        for w in self._persist_waiters:
            if w.index <= stable and self.raft.term_at(w.index) == w.term:
                _resolve(w.future, AppendOutcome(error_code=E.NONE, base_offset=w.base_offset))
            else:
                keep.append(w)
        self._persist_waiters = keep

    def on_leadership_change(self) -> None:
        """Lost (or regained) leadership: pending requests can no longer be answered for sure."""
        self.leader_ready = False
        for w in list(self._waiters.values()) + self._persist_waiters:
            _resolve(w.future, AppendOutcome(error_code=E.NOT_LEADER_OR_FOLLOWER))
        self._waiters.clear()
        self._persist_waiters = []
        self._wake_fetchers()  # a long poll here is answered now (not ours to serve), not at max_wait

    # ---- every replica ---------------------------------------------------------------------

    def apply_ready(self, rd: Ready) -> None:
        if rd.rewind_to is not None:
            self._rebuild(rd.rewind_to)
        self.apply_entries(rd.committed)

    def apply_entries(self, entries: tuple[Entry, ...]) -> None:
        """Apply committed entries in order; wake long-polling fetches when the HW moved."""
        hw_before = self.state.next_offset
        for e in entries:
            self._apply(e)
        if self.state.next_offset != hw_before:
            self._wake_fetchers()
        ck = self._checkpoints
        # Only at an index this log has persisted: one ahead of it would be discarded after a crash.
        if (ck is not None and entries and ck.note(len(entries), sum(len(e.data) for e in entries))
                and self.state.applied_index <= self.raft.stable_index):
            ck.save(self.state)

    def _apply(self, e: Entry) -> None:
        res = pmod.apply(self.state, index=e.index, term=e.term, data=e.data)
        w = self._waiters.pop(e.index, None)
        if w is not None:
            ok = w.term == e.term
            _resolve(w.future, AppendOutcome(error_code=E.NONE if ok else E.NOT_LEADER_OR_FOLLOWER,
                                             base_offset=res.base_offset if ok and res.base_offset is not None
                                             else -1))
        r = self.raft
        if not self.leader_ready and r.role == LEADER and e.term == r.term:
            self.leader_ready = True
            self.next_offset = self.state.next_offset
            self.spec_producers = self.state.producers
            log.info("%s: leader ready in term %d at offset %d", self.name, r.term, self.next_offset)

    def _rebuild(self, upto: int) -> None:
        """Unclean election lost committed entries: replay the surviving log from scratch."""
        log.warning("%s: committed entries lost after index %d (unclean election); rebuilding", self.name, upto)
        self.state = self._new_state()
        i = 1
        while i <= upto:  # a window's worth of entries per read, not one read per entry
            cfg = self.raft.cfg
            chunk = self.raft.entries_from(i, upto + 1 - i, max_bytes=max(cfg.log_window_bytes, cfg.max_append_bytes))
            if not chunk:
                break
            for e in chunk:
                pmod.apply(self.state, index=e.index, term=e.term, data=e.data)
            i = chunk[-1].index + 1
        if self._checkpoints is not None:
            self._checkpoints.forget()

    def wake_on_data(self, fut: asyncio.Future[None]) -> None:
        """Resolve `fut` when committed entries move the high watermark (a long-polling fetch
        registers one future with each partition it watches; the first wake-up wins)."""
        if len(self._hw_waiters) > 256:  # long polls on an idle partition: drop the finished ones
            self._hw_waiters = [f for f in self._hw_waiters if not f.done()]
        self._hw_waiters.append(fut)

    def _wake_fetchers(self) -> None:
        waiters, self._hw_waiters = self._hw_waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)


class MetadataReplica(_GroupBase):
    """The metadata group on this node."""

    def __init__(self, raft: RaftNode, store: Any, node_ids: tuple[int, ...],
                 on_topic: Callable[[PartitionInfo], None]) -> None:
        super().__init__(raft, store)
        self.state = MetadataState(node_ids=node_ids)
        self._on_partition = on_topic
        self._changed: list[asyncio.Future[None]] = []

    def apply_ready(self, rd: Ready) -> None:
        if rd.rewind_to is not None:
            log.error("metadata group lost committed entries (unclean election); keeping the applied state")
        self.apply_entries(rd.committed)

    def apply_entries(self, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            res = apply_metadata(self.state, index=e.index, data=e.data)
            for gid in res.get("groups", ()):
                self._on_partition(self.state.groups[gid])
        if entries:
            waiters, self._changed = self._changed, []
            for f in waiters:
                if not f.done():
                    f.set_result(None)

    def wait_change(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._changed.append(fut)
        return fut


def _resolve(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)
