"""The broker process: an asyncio loop driving this node's Raft groups.

One `Node` owns the metadata group (every node is a voter) and one Raft group per partition
it replicates, created as the metadata log assigns them. The loop (`_ready_loop`) runs
etcd's shell contract for all groups at once, which is where batching happens:

    collect a Ready from every group that has one
    send leaders' appends, heartbeats and heartbeat answers, grouped per peer into one frame
    write their entries and hard states, then one fsync per written log (policy `always`):
        inline when the entries are small, else started in a thread
    apply committed entries (answers acks=all, wakes long-polling fetches; they are durable on
        a majority); while a threaded write runs, every 2 ms apply entries that became
        committed since and send heartbeats (`RaftNode.take_committed/take_messages`)
    send the other messages (votes, acknowledgements): only now that what they promise is durable
    answer acks=1 requests now persisted; advance every Ready

Timers: every `tick_ms` each group ticks. Fsync policy: `always` syncs before messages go
out (so a follower acknowledges only durable entries); `interval` syncs on a timer; `never`
leaves it to the OS.

Peer channels (transport.py): RAFT carries encoded Raft messages; FORWARD carries a metadata
command for the metadata leader to propose (topic creation, producer-id blocks requested on
another node); LEADERS gossips who leads which group, so a node answers Metadata for
partitions it does not replicate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from logquake.broker.heap import heap_figures, trim_heap
from logquake.broker.kerrors import ErrorCode
from logquake.broker.logstats import log_stats
from logquake.broker.metadata import (
    METADATA_GROUP,
    PartitionInfo,
    alloc_producer_ids_entry,
    create_topic_entry,
)
from logquake.broker.nodeconfig import NodeConfig
from logquake.broker.partition import PartitionState
from logquake.broker.raft import (
    EARLY_KINDS,
    LEADER,
    Message,
    RaftConfig,
    RaftNode,
    Ready,
    decode_messages,
)
from logquake.broker.replica import MetadataReplica, PartitionReplica
from logquake.broker.server import KafkaServer
from logquake.broker.storage import DirLock, OpenFiles
from logquake.broker.storage_adapter import open_store
from logquake.broker.transport import PeerTransport
from logquake.broker.wire import encode_message_parts
from logquake.broker.writer import (
    INLINE_SYNCED_BYTES,
    INLINE_WRITE_BYTES,
    WriterThread,
    Writes,
    is_small,
    write_and_sync,
)

__all__ = ["Node"]

log = logging.getLogger("logquake.broker.node")

CH_RAFT, CH_FORWARD, CH_LEADERS = 0, 1, 2
SERVE_DURING_WRITE_S = 0.002  # while a write runs: how often to apply new commits and send heartbeats
META_NAME = "meta"
E = ErrorCode
PID_BLOCK = 1000
# Active segments kept open: the most recently written logs, none idle longer than this.
OPEN_LOGS, OPEN_LOG_IDLE_S = 32, 30.0
HEAP_TRIM_EVERY_S = 60
CATCH_UP_POLL_S = 0.02  # how often a starting node looks whether its metadata is caught up
LEADERS_WAIT_S = 3.0  # then how long it waits to know every partition's leader (gossip: every 1 s)
MEMORY_STATS_EVERY_S = 30  # memory gauges join the stats line this often
# Committed entries one loop turn applies before leaving the other groups' Readies to the next
# turn (~25 us each in a replay: ~50 ms), so a restart's replay lets sockets and timers in.
TURN_APPLY_ENTRIES = 2048
META_COMMITTED_PER_READY = 8  # metadata entries applied per Ready (each may open a group's log)
IDLE_RELEASE_S = 5  # a group whose log did not grow for this long releases its payload window
LOAD_WINDOW_BYTES = 64 << 10  # payloads a group loads at start (n3 of a soak: 204 groups, 469 KiB kept)


def window_shares(held: Sequence[int], budget: int) -> list[int | None]:
    """What each group may keep of the payload bytes it holds (`held`) for all to fit in
    `budget`: None (all of it) for those within an even share of what the smaller ones leave,
    that share for the others (water-filling: small windows are never cut for big ones)."""
    out: list[int | None] = [None] * len(held)
    if sum(held) <= budget:
        return out
    left = budget
    order = sorted(range(len(held)), key=held.__getitem__)
    for i, k in enumerate(order):
        share = left // (len(held) - i)
        if held[k] > share:
            out[k] = share
        left -= min(held[k], share)
    return out


def group_name(gid: int) -> str:
    return META_NAME if gid == METADATA_GROUP else f"p{gid}"


class Node:
    """One broker node. `await node.run()` serves until `node.stop()`."""

    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        self.id = cfg.node_id
        self.node_ids = tuple(n.node_id for n in cfg.nodes)
        self.rng = random.Random(f"{self.id}-{time.time_ns()}")
        # At most 8 x 1 MiB of appends in flight per follower: heartbeats share the connection,
        # and a deeper backlog delays them past the election timeout on a busy follower.
        self.raft_cfg = RaftConfig(election_ticks=cfg.election_ticks, heartbeat_ticks=cfg.heartbeat_ticks,
                                   idle_heartbeat_ticks=cfg.idle_heartbeat_ticks,
                                   unclean_election=cfg.unsafe.get("election") == "unclean",
                                   max_append_bytes=1 << 20, max_inflight=8,
                                   log_window_bytes=cfg.log_window_bytes)
        self.partitions: dict[int, PartitionReplica] = {}  # group id -> replica on this node
        self.groups: dict[str, PartitionReplica | MetadataReplica] = {}
        self.leaders: dict[int, tuple[int, int]] = {}  # group id -> (term, leader) as gossiped
        self._stopped = asyncio.Event()
        self._dirty = asyncio.Event()
        # The groups the loop's next turn asks for a Ready and a leadership change: those
        # given input since the last turn (a peer message, a proposal, an advance, a new
        # group), or every group after a tick. Asking every group on every turn cost more the
        # more topics a run had made (each turn polled all of them, several times).
        self._touched: dict[str, Any] = {}
        self._scan_all = True
        self._pids: list[int] = []  # unused producer ids of this node's block
        self._pid_lock = asyncio.Lock()
        self._unsynced: set[Any] = set()  # stores written since the last fsync (policy interval)
        self._last_sync = 0.0
        self._campaign_soon: dict[str, int] = {}
        self.stats: dict[str, int] = defaultdict(int)  # logged every 5 s when non-zero
        self._meta_fast_start = True
        self._tasks: list[asyncio.Task[None]] = []
        self._writer: WriterThread | None = None  # the ready loop's writes and fsyncs
        self._heap_mark = self._heap_trimmed_at = self._heap_trim_n = 0  # _maybe_trim_heap
        self._group_marks: dict[str, tuple[int, int]] = {}  # group -> (last index, second it was seen)
        me = cfg.me
        self.transport = PeerTransport(
            node_id=self.id, host=me.host, port=me.raft_port,
            peers={n.node_id: (n.host, n.raft_port) for n in cfg.nodes if n.node_id != self.id},
            on_message=self._on_peer)
        from logquake.broker.handlers import KafkaApi  # late: handlers import node types

        self.api = KafkaApi(self)
        self.server = KafkaServer(self.api.handle, me.host, me.kafka_port, max_frame_bytes=cfg.max_frame_bytes)
        # One lock for the whole data directory (not one per group) and a bounded set of open
        # segments: fds must not grow with the partitions a node has ever held.
        self._dir_lock = DirLock(cfg.data_dir)
        self._files = OpenFiles(OPEN_LOGS, OPEN_LOG_IDLE_S)
        self.meta = self._open_metadata()

    # ---- life cycle ----------------------------------------------------------------------

    async def run(self) -> None:
        self.cfg.data_dir.mkdir(parents=True, exist_ok=True)
        await self.transport.start()
        await self.server.bind()
        log.info("node %d up: peers on %s:%d (fsync %s); Kafka on %s:%d once its metadata is caught up",
                 self.id, self.cfg.me.host, self.cfg.me.raft_port, self.cfg.effective_fsync, self.cfg.me.host,
                 self.cfg.me.kafka_port)
        self._tasks = [asyncio.create_task(c) for c in (self._ready_loop(), self._tick_loop(),
                                                         self._gossip_loop(), self.api.txn.tick_loop())]
        self.kick()
        try:
            await self._serve_once_caught_up()
        except OSError:
            self.stop()
            await self._shut_down()
            raise
        await self._stopped.wait()
        await self._shut_down()

    async def _serve_once_caught_up(self) -> None:
        """Open the Kafka listener once the metadata group is caught up (RaftNode.caught_up).

        Until then this node's topics are those it knew when it stopped: answering Metadata from
        them told clients that topics made meanwhile did not exist (librdkafka's
        _UNKNOWN_PARTITION, seen for minutes of a soak's final reads), and auto-created them
        again. A node that never hears from a leader never serves clients, as a KRaft broker
        stays fenced. Then, for at most LEADERS_WAIT_S, until it knows a leader for every
        partition (its own groups' Raft, the others' gossip): before that it answered that
        topics it does not replicate had no partitions."""
        t0 = time.monotonic()
        while not self.meta.raft.caught_up:
            if self._stopped.is_set():
                return
            await asyncio.sleep(CATCH_UP_POLL_S)
        t1 = time.monotonic()
        while (unknown := self._leaders_unknown()) and time.monotonic() - t1 < LEADERS_WAIT_S:
            if self._stopped.is_set():
                return
            await asyncio.sleep(CATCH_UP_POLL_S)
        await self.server.serve()
        log.info("node %d serving Kafka on %s:%d (metadata caught up at index %d after %.2f s, leaders %s "
                 "after %.2f s more)", self.id, self.cfg.me.host, self.cfg.me.kafka_port,
                 self.meta.raft.applied_index, t1 - t0, f"of {unknown} partition(s) unknown" if unknown else "known",
                 time.monotonic() - t1)

    def _leaders_unknown(self) -> int:
        return sum(1 for gid in self.meta.state.groups if self.leader_of(gid)[0] < 0)

    async def _shut_down(self) -> None:
        ready_task, others = self._tasks[0], self._tasks[1:]
        for t in others:
            t.cancel()
        self.kick()  # the ready loop finishes its current write (never cut in a worker thread) and exits
        try:
            await asyncio.wait_for(ready_task, 30)
        except TimeoutError:
            log.error("the ready loop did not finish within 30 s; closing anyway")
        await asyncio.gather(*others, return_exceptions=True)
        await self.server.close()
        await self.transport.close()
        if self._writer is not None:
            self._writer.close()
        for g in self.groups.values():
            g.store.close()
        self._dir_lock.close()
        log.info("node %d stopped", self.id)

    def stop(self) -> None:
        self._stopped.set()

    def kick(self) -> None:
        self._dirty.set()

    def touch(self, g: Any) -> None:
        """Group g got input: the next turn asks it for a Ready (kick() wakes that turn)."""
        self._touched[g.name] = g

    def _groups_with_input(self) -> list[Any]:
        """The groups given input since the last turn (every group after a tick)."""
        return list(self.groups.values()) if self._scan_all else list(self._touched.values())

    def _due_groups(self) -> list[Any]:
        """The groups this turn asks (and forgets until they are touched again)."""
        due = self._groups_with_input()
        self._scan_all = False
        self._touched.clear()
        return due

    # ---- groups ----------------------------------------------------------------------------

    def _make_raft(self, name: str, voters: tuple[int, ...], config: RaftConfig | None = None, *,
                   partition: bool = False) -> tuple[RaftNode, Any, PartitionState | None]:
        """The group's Raft node over its store, and for a `partition` the state checkpointed
        in it, if still valid (Raft then hands out only the committed entries after it)."""
        store = open_store(self.cfg.data_dir / "groups" / name, fsync=self.cfg.effective_fsync,
                           files=self._files)
        cfg = config or self.raft_cfg
        # Only the newest payloads are loaded, at most LOAD_WINDOW_BYTES of them: the node
        # trims every window to its budget soon after, and Raft reads older ones back.
        hs, runs, entries = store.load(min(cfg.log_window_bytes, LOAD_WINDOW_BYTES))
        state = store.load_checkpoint() if partition else None
        raft = RaftNode(group=name, node_id=self.id, voters=voters, config=cfg,
                        rng=random.Random(self.rng.random()), hard_state=hs, entries=entries,
                        term_runs=runs, reader=store.read, payload_reader=store.read_payloads,
                        applied=state.applied_index if state is not None else 0,
                        repaired_term=store.repaired_term)
        return raft, store, state

    def _open_metadata(self) -> MetadataReplica:
        # Followers create a new topic's replicas when they apply its entry: tell them of the
        # commit at once, not at the next heartbeat (up to heartbeat_ticks later). An entry
        # may open a group's log (~5 ms, a 25 MB one 0.3 s): a restart opening 140 in one
        # turn held the loop for 0.75 s, so a few per Ready.
        raft, store, _ = self._make_raft(META_NAME, self.node_ids,
                                      dataclasses.replace(self.raft_cfg, commit_heartbeats=True,
                                                          max_committed_entries=META_COMMITTED_PER_READY))
        m = MetadataReplica(raft, store, self.node_ids, self._on_new_partition)
        m.on_input = self.touch
        self.groups[META_NAME] = m
        self.touch(m)
        return m

    def _on_new_partition(self, info: PartitionInfo) -> None:
        if self.id not in info.replicas or info.group_id in self.partitions:
            return
        raft, store, state = self._make_raft(group_name(info.group_id), info.replicas, partition=True)
        rep = PartitionReplica(info, raft, store, state=state)
        rep.on_input = self.touch
        log.info("%s: replica of %s-%d created (replicas %s, applied %d from a checkpoint)", rep.name,
                 info.topic, info.partition, info.replicas, raft.applied_index)
        self.partitions[info.group_id] = rep
        self.groups[rep.name] = rep
        self.touch(rep)  # a restarted replica may have entries to apply at once
        if info.replicas[0] == self.id:
            # The preferred replica campaigns now instead of waiting out an election timeout,
            # and again each tick while the others may still be creating the group.
            raft.campaign()
            self._campaign_soon[rep.name] = 0
        self.kick()

    # ---- the loop ----------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        period = self.cfg.tick_ms / 1000
        nxt = time.monotonic()
        while True:
            # Never catch up missed ticks in a burst: after a stall (GC, a busy loop, SIGSTOP)
            # that would expire election and check-quorum timers before any queued message
            # from the peers has been read.
            nxt = max(nxt + period, time.monotonic())
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
            for g in list(self.groups.values()):
                g.raft.tick()
            self._scan_all = True  # ticks make heartbeats, elections, check-quorum step-downs
            self._early_campaigns()
            self.kick()

    def _early_campaigns(self) -> None:
        """Shorten start-up: skip the first election timeout where no split vote is likely."""
        for name, ticks in list(self._campaign_soon.items()):
            self._campaign_soon[name] = ticks - 1
            g = self.groups[name]
            if g.raft.leader_id is not None or ticks <= -8:
                del self._campaign_soon[name]
            elif g.raft.role != "candidate":
                # Pre-vote never bumps the term, so retrying while the other replicas are still
                # creating the group (their pre-votes were dropped) disturbs nothing.
                g.raft.campaign()
        r = self.meta.raft
        if self._meta_fast_start and r.leader_id is None and r.term == 0:
            up = self.transport.connected() | {self.id}
            if len(up) > len(self.node_ids) // 2:
                self._meta_fast_start = False
                if self.id == min(up):  # one campaigner: no split vote on a fresh cluster
                    r.campaign()

    async def _ready_loop(self) -> None:
        while not self._stopped.is_set():
            await self._dirty.wait()
            self._dirty.clear()
            if self._stopped.is_set():
                return
            if await self._process_readies():
                # Event.wait() returns without yielding when the flag is set again already:
                # a restart's replay, a backlog turn after turn, held sockets, timers and
                # peers until no group had work left, 5-20 s after a long run's restart.
                # Other turns go on as before (no yield where no backlog is).
                await asyncio.sleep(0)

    async def _process_readies(self) -> bool:
        """One turn; True if it left committed entries for later turns (caps on a Ready's
        committed entries and on a turn's, `_take_readies`)."""
        # Leadership changes (from steps and ticks since the last turn) are handled before
        # applying: a new leader's readiness is set while applying its own no-op, never undone.
        due = self._due_groups()
        self._check_leadership(due)
        readies, backlog = self._take_readies(due)
        if not readies:
            self._check_leadership(due)
            return backlog
        # A leader's appends and heartbeats may go out before its own write (Raft thesis
        # §10.2.1): it counts itself toward a majority only up to what it has persisted; so may
        # heartbeat answers, which claim nothing durable. Every other message (votes, append
        # acknowledgements) waits until the write is durable.
        early, late = [], []
        for _, rd in readies:
            for m in rd.messages:
                (early if m.kind in EARLY_KINDS else late).append(m)
        self._send(early)
        writes = [(g.store, rd.entries, rd.hard_state) for g, rd in readies
                  if rd.entries or rd.hard_state is not None]
        persist = self._start_persist(writes) if writes else None
        # Committed entries are applied while this turn's write runs (not after it): they
        # are durable on a majority already, so acks=all answers and long-polling fetches
        # need not wait for a fsync that does not concern them.
        for g, rd in readies:
            try:
                g.apply_ready(rd)
            except Exception:
                log.exception("%s: applying committed entries failed", g.name)
                raise
        # Nothing stepped these groups since their Ready: entries still unapplied were capped.
        backlog = backlog or any(g.raft.commit_index > g.raft.applied_index for g, _ in readies)
        if persist is not None:
            await self._serve_until(persist)
        self._send(late)
        for g, rd in readies:
            g.raft.advance(rd)
            self.touch(g)
            if isinstance(g, PartitionReplica):
                g.on_persisted()
        self._check_leadership(due)
        self.kick()  # advancing may have made more work (a leader commits on its own persist)
        return backlog

    def _take_readies(self, due: list[Any]) -> tuple[list[tuple[Any, Ready]], bool]:
        """The Readies of `due`, until they hand out TURN_APPLY_ENTRIES committed entries: the
        groups after that stay touched for the next turn (then True: some were left). A
        restart replays every group's committed log (each Ready at most
        `max_committed_entries` of it), and 140 groups' replays in one turn held the loop
        for seconds."""
        readies: list[tuple[Any, Ready]] = []
        budget = TURN_APPLY_ENTRIES
        for i, g in enumerate(due):
            if budget <= 0:
                for later in due[i:]:
                    self.touch(later)
                self.kick()
                return readies, True
            if g.raft.has_ready():
                rd = g.raft.ready()
                readies.append((g, rd))
                budget -= len(rd.committed)
        return readies, False

    async def _serve_until(self, persist: asyncio.Future[None]) -> None:
        """Await the write, and meanwhile keep the groups moving (etcd's async storage writes idea):
        entries that became committed are applied (acks=all answers, fetch wake-ups) and
        heartbeats and heartbeat answers go out, so a long fsync neither delays a write that
        two other replicas made durable nor looks like a dead node."""
        loop = asyncio.get_running_loop()
        while not persist.done():
            # On a short timer, not on every kick: under load a kick comes with every
            # request and peer frame, and serving each one halved the throughput.
            # (A future and a timer rather than asyncio.wait, which costs several times more.)
            wake: asyncio.Future[None] = loop.create_future()
            timer = loop.call_later(SERVE_DURING_WRITE_S, _wake, wake)
            persist.add_done_callback(wake_on_done := functools.partial(_wake_on, wake))
            try:
                await wake
            finally:
                timer.cancel()
                persist.remove_done_callback(wake_on_done)
            if not persist.done() and self._dirty.is_set():
                self._serve_during_persist()
        persist.result()

    def _serve_during_persist(self) -> None:
        # Only groups given input since the turn began can have committed entries or
        # messages (after a tick: every group). They stay due for the next turn.
        groups = self._groups_with_input()
        self._check_leadership(groups)  # before applying: readiness is set by the new term's no-op
        msgs: list[Message] = []
        for g in groups:
            r = g.raft
            entries = r.take_committed()
            if entries:
                g.apply_entries(entries)
            msgs.extend(r.take_messages())
        self._send(msgs)

    def _check_leadership(self, groups: Any = None) -> None:
        """Handle the leadership changes of `groups` (default: every group)."""
        changed = []
        for g in self.groups.values() if groups is None else groups:
            if g.leadership_changed():
                r = g.raft
                log.info("%s: role %s term %d leader %s", g.name, r.role, r.term, r.leader_id)
                if isinstance(g, PartitionReplica):
                    g.on_leadership_change()
                    if r.leader_id is not None:
                        self.leaders[g.info.group_id] = (r.term, r.leader_id)
                changed.append(g)
        if changed:
            self._gossip_leaders([g for g in changed if isinstance(g, PartitionReplica)])

    def _send(self, msgs: list[Message]) -> None:
        by_peer: dict[int, list[Message]] = defaultdict(list)
        for m in msgs:
            by_peer[m.to].append(m)
            if m.entries:
                self.stats["append_msgs"] += 1
                self.stats["append_bytes"] += sum(len(e.data) for e in m.entries)
        self.stats["raft_msgs"] += len(msgs)
        for peer, ms in by_peer.items():
            self.transport.send(peer, CH_RAFT, encode_message_parts(ms))

    def _start_persist(self, writes: Writes) -> asyncio.Future[None] | None:
        """Write the Readies' entries and hard states, then fsync per policy: inline when the
        entries are small (None: done already), else in one worker thread (started now, before
        the caller applies anything; writer.py says why the thread writes too)."""
        policy = self.cfg.effective_fsync
        to_sync: set[Any] = set()
        written = {w[0] for w in writes if w[1]}  # a commit-only hard state needs no fsync
        if policy == "always":
            to_sync = written
        elif policy == "interval":
            self._unsynced.update(written)
            now = time.monotonic()
            if now - self._last_sync >= self.cfg.fsync_interval_ms / 1000:
                self._last_sync = now
                to_sync, self._unsynced = self._unsynced, set()
        self.stats["fsyncs"] += len(to_sync)
        # A replica that fell behind syncs several writes at once: entries say "every write".
        self.stats["synced_entries"] += sum(len(w[1]) for w in writes if w[0] in to_sync)
        if is_small(writes, INLINE_SYNCED_BYTES if to_sync else INLINE_WRITE_BYTES):
            # The hand-off to a thread and back (a queue put, a wake-up through the loop's
            # self-pipe, two context switches) costs more CPU than a small write and its
            # fdatasync (~50 us of CPU, ~120 us of wall here): inline, the default 5-node
            # cluster did ~14% more ops/s. The loop
            # waits for the fsync meanwhile: elections take 30 ticks of 50 ms, and big writes,
            # whose fsync takes longer, still go to the thread.
            # The appends already queued go out first: the followers write while we do.
            self.transport.flush()
            write_and_sync(writes, to_sync)
            self.stats["inline_turns"] += 1
            self.stats["inline_fsyncs"] += len(to_sync)
            return None
        t0 = time.monotonic()
        self.stats["persist_turns"] += 1
        if self._writer is None:
            self._writer = WriterThread(asyncio.get_running_loop(), f"lq-writer-{self.id}")
        fut = self._writer.submit(writes, to_sync)
        fut.add_done_callback(lambda _: self._persist_stats(t0))
        return fut

    def _persist_stats(self, t0: float) -> None:
        ms = int((time.monotonic() - t0) * 1000)
        self.stats["persist_max_ms"] = max(self.stats["persist_max_ms"], ms)
        self.stats["persist_total_ms"] += ms

    # ---- peers -----------------------------------------------------------------------------

    def _on_peer(self, peer: int, channel: int, payload: bytes) -> None:
        try:
            if channel == CH_RAFT:
                for m in decode_messages(payload):
                    g = self.groups.get(m.group)
                    if g is not None:
                        g.raft.step(m)
                        self.touch(g)
                self.kick()
            elif channel == CH_FORWARD:
                if self.meta.raft.role == LEADER:
                    self.meta.raft.propose(payload)
                    self.touch(self.meta)
                    self.kick()
            elif channel == CH_LEADERS:
                for gid, term, leader in json.loads(payload):
                    if term >= self.leaders.get(gid, (-1, -1))[0]:
                        self.leaders[gid] = (term, leader)
        except Exception:  # noqa: BLE001 - a bad peer frame must not stop the node
            log.exception("bad frame from peer %d on channel %d", peer, channel)

    def _gossip_leaders(self, reps: list[PartitionReplica]) -> None:
        items = [[r.info.group_id, r.raft.term, r.raft.leader_id] for r in reps
                 if r.raft.role == LEADER]
        if items:
            data = json.dumps(items).encode()
            for p in self.node_ids:
                if p != self.id:
                    self.transport.send(p, CH_LEADERS, data)

    async def _gossip_loop(self) -> None:
        n = 0
        while True:
            await asyncio.sleep(1.0)
            self._gossip_leaders(list(self.partitions.values()))
            n += 1
            self._release_memory(n)
            if n % 5 == 0 and self.transport.frames_sent:
                self.stats["peer_frames"] += self.transport.frames_sent
                self.transport.frames_sent = 0
            if n % 5 == 0 and any(self.stats.values()):
                if n % MEMORY_STATS_EVERY_S == 0:
                    self._memory_stats()
                log_stats(log, self.stats)
                self.stats.clear()

    def _memory_stats(self) -> None:
        """Gauges for the stats line: the process's resident and C-heap figures (heap.py),
        the Raft groups held and the entry payload bytes their windows keep, so a soak's log
        says whether RSS follows the payloads, the heap's fragmentation or something else."""
        self.stats |= heap_figures()
        self.stats["groups"] = len(self.groups)
        self.stats["window_kib"] = sum(g.raft.memory_bytes for g in self.groups.values()) >> 10

    def _release_memory(self, n: int) -> None:
        """Groups whose log has not grown for IDLE_RELEASE_S let go of the payloads they keep
        in memory for fetches and followers (read back from disk if asked for again); then
        the heap gives freed pages back. A run that writes each key to its own topic and moves
        on leaves its partitions idle: a window each would be most of what was written.
        One walk over the groups a second gathers what the budget and the heap trim need."""
        released = False
        marks = self._group_marks
        total = 0
        groups = list(self.groups.values())
        held = []
        for g in groups:
            last = g.raft.last_index
            total += last
            seen = marks.get(g.name)
            if seen is None or seen[0] != last:
                marks[g.name] = (last, n)
            elif n - seen[1] >= IDLE_RELEASE_S:
                released = g.release_memory() or released
            held.append(g.raft.memory_bytes)
        released = self._hold_to_budget(groups, held) or released
        self._maybe_trim_heap(n, total, force=released)

    def _hold_to_budget(self, groups: list[Any], held: list[int]) -> bool:
        """Keep the payloads all groups hold (`held`, each group's after any idle release)
        within `node_window_bytes` (`window_shares`). The internal partitions
        (`__transaction_state`, `__consumer_offsets`) are never idle, and a window each filled
        for an hour of a soak before it was bounded."""
        released = False
        for g, keep in zip(groups, window_shares(held, self.cfg.node_window_bytes), strict=True):
            if keep is not None:
                released = g.release_memory(keep) or released
        return released

    def _maybe_trim_heap(self, n: int, mark: int, *, force: bool = False) -> None:
        """Give freed heap pages back (heap.py) once writes stop for a second or memory was
        released, and every HEAP_TRIM_EVERY_S seconds under load. Not every second: the pages
        trimmed under a bulk write are faulted back in at once (100 MB took twice as long).
        `mark`: the sum of every group's last index (unchanged: nothing was written)."""
        idle = mark == self._heap_mark
        self._heap_mark = mark
        if force or (idle and mark != self._heap_trimmed_at) or n - self._heap_trim_n >= HEAP_TRIM_EVERY_S:
            self._heap_trimmed_at, self._heap_trim_n = mark, n
            ms = int(trim_heap() * 1000)
            self.stats["heap_trims"] += 1
            self.stats["heap_trim_max_ms"] = max(self.stats["heap_trim_max_ms"], ms)

    # ---- services for the Kafka handlers ------------------------------------------------------

    def leader_of(self, gid: int) -> tuple[int, int]:
        """(leader node id or -1, leader epoch) for a partition group, as best known here."""
        rep = self.partitions.get(gid)
        if rep is not None:
            r = rep.raft
            if r.role == LEADER:
                return (self.id, r.term) if rep.leader_ready else (-1, r.term)
            known = self.leaders.get(gid)
            if known and known[0] > r.term and known[1] != self.id:
                return known[1], known[0]  # gossip is ahead of our own Raft view
            return (r.leader_id, r.term) if r.leader_id is not None else (-1, r.term)
        known = self.leaders.get(gid)
        return (known[1], known[0]) if known else (-1, -1)

    def propose_metadata(self, data: bytes) -> None:
        """Propose a metadata command here if we lead the metadata group, else forward it."""
        r = self.meta.raft
        if r.role == LEADER:
            r.propose(data)
            self.touch(self.meta)
            self.kick()
        elif r.leader_id is not None:
            self.transport.send(r.leader_id, CH_FORWARD, data)

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           timeout: float = 10.0) -> tuple[int, str | None]:
        """Create a topic through the metadata group; (error code, message) once applied here."""
        deadline = time.monotonic() + timeout
        entry = create_topic_entry(name, partitions, replication_factor)
        while time.monotonic() < deadline:
            if name in self.meta.state.topics:
                return E.NONE, None
            self.propose_metadata(entry)
            try:
                await asyncio.wait_for(self._wait_topic(name), min(1.0, deadline - time.monotonic()))
            except TimeoutError:
                continue
        if name in self.meta.state.topics:
            return E.NONE, None
        return E.REQUEST_TIMED_OUT, "timed out waiting for the metadata group"

    async def _wait_topic(self, name: str) -> None:
        while name not in self.meta.state.topics:
            await self.meta.wait_change()

    def request_topic(self, name: str) -> None:
        """Auto-create `name` in the background (Metadata/Produce of an unknown topic)."""
        self.propose_metadata(create_topic_entry(name, self.cfg.default_partitions,
                                                 min(self.cfg.default_replication_factor, len(self.node_ids))))

    async def new_producer_id(self, timeout: float = 10.0) -> int | None:
        """A cluster-unique producer id, from this node's block (refilled via the metadata group)."""
        async with self._pid_lock:
            if not self._pids:
                nonce = uuid.uuid4().hex
                entry = alloc_producer_ids_entry(PID_BLOCK, node=self.id, nonce=nonce)
                deadline = time.monotonic() + timeout
                while (blk := self.meta.state.producer_id_blocks.get(self.id)) is None or blk[0] != nonce:
                    if time.monotonic() > deadline:
                        return None
                    self.propose_metadata(entry)
                    try:
                        await asyncio.wait_for(self._wait_block(nonce), 1.0)
                    except TimeoutError:
                        pass
                _, first, count = self.meta.state.producer_id_blocks[self.id]
                self._pids = list(range(first + count - 1, first - 1, -1))
            return self._pids.pop()

    async def _wait_block(self, nonce: str) -> None:
        while (blk := self.meta.state.producer_id_blocks.get(self.id)) is None or blk[0] != nonce:
            await self.meta.wait_change()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wake_on(fut: asyncio.Future[None], _: Any) -> None:
    _wake(fut)
