"""Cycle anomalies (G0, G1c and their -process / -realtime variants), as Elle finds them.

Dependency edges between ops (nodes are ok and info send/poll/txn ops; a failed op did
not happen):

- ww: T1 sent v1 to k, T2 sent v2 to k, v2 the next value after v1 in k's version order
- wr: T1 sent v to k and T2 polled it
- process: T2 is the next op of T1's process
- realtime: T1 completed before T2 was invoked

The search runs in two stages. First the strongly connected components of the whole
graph, on a compact integer graph: realtime order is encoded by a chain of "time" nodes
(each op links to the time node after its completion, each time node to the op invoked
there and to the next one), which keeps reachability exact with O(n) edges instead of
O(n * concurrency). Our own iterative Tarjan does this stage, since a networkx graph of a
million nodes costs ~10x the memory and time. Then each component with two or more ops
becomes a small graph of plain dicts (there are thousands, each built and searched once)
with explicit, typed edges, and for each anomaly type we look for the shortest cycle using
only its edge types and containing its required ones (a BFS over (op, edge types used)
states), explained step by step in plain words.
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from logquake.checker.options import CheckOptions
from logquake.checker.queue_index import INF, QueueIndex, Txn, txn_columns
from logquake.checker.result import op_ref
from logquake.history import FAIL

WW, WR, PROCESS, REALTIME = 1, 2, 4, 8
REL_NAMES = {WW: "ww", WR: "wr", PROCESS: "process", REALTIME: "realtime"}

# (type, edge types it may use, edge types it must use), in Elle's order.
SPECS = (
    ("G0", WW, WW),
    ("G1c", WW | WR, WR),
    ("G0-process", WW | PROCESS, PROCESS),
    ("G1c-process", WW | WR | PROCESS, WR | PROCESS),
    ("G0-realtime", WW | PROCESS | REALTIME, REALTIME),
    ("G1c-realtime", WW | WR | PROCESS | REALTIME, WR | REALTIME),
)
_second = itemgetter(1)
_id = attrgetter("id")
MAX_STARTS = 8  # BFS roots tried per component and type: bounds work in a huge component


class OutOfTime(Exception):
    """The cycle search's time budget ran out."""


@dataclass
class CycleSearch:
    """What the search found: cycles per type, and whether it finished."""

    cases: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # the first examples
    counts: dict[str, int] = field(default_factory=dict)  # cycles found per type
    timed_out: bool = False
    stats: dict[str, Any] = field(default_factory=dict)


def cycle_cases(ix: QueueIndex, opts: CheckOptions) -> CycleSearch:
    """Find and explain the cycles of a history within opts.time_budget seconds."""
    started = time.monotonic()
    deadline = started + opts.time_budget
    out = CycleSearch(cases={name: [] for name, _, _ in SPECS})
    found: dict[str, list] = {name: [] for name, _, _ in SPECS}  # (length, graph, path)
    try:
        comps = _components(ix, opts, deadline)
        out.stats["components"] = len(comps)
        out.stats["largest_component"] = max((len(c) for c in comps), default=0)
        for comp in comps:
            g = component_graph(ix, opts, comp)
            present = 0
            for nbrs in g.values():
                for e in nbrs.values():
                    present |= e[0]
            for name, allowed, required in SPECS:
                if present & required != required:
                    continue
                path = shortest_cycle(g, allowed, required, deadline)
                if path is not None:
                    # Keep the path's own edges, not the component's graph.
                    whys = [g[a][path[(i + 1) % len(path)][0]][1][rel] for i, (a, rel) in enumerate(path)]
                    found[name].append((len(path), path, whys))
    except OutOfTime:
        out.timed_out = True
    # Explaining is costly and only the first examples are kept: explain just those.
    for name, paths in found.items():
        paths.sort(key=lambda x: x[0])
        out.counts[name] = len(paths)
        out.cases[name] = [explain(ix, path, whys) for _, path, whys in paths[: opts.max_examples]]
    out.stats["seconds"] = round(time.monotonic() - started, 3)
    return out


# --- stage 1: the whole graph, compact --------------------------------------------------


class Adjacency:
    """Successor lists in one flat list (CSR): adj[v] is v's list, made when asked for."""

    __slots__ = ("bounds", "dst")

    def __init__(self, dst: list[int], bounds: list[int]) -> None:
        self.dst, self.bounds = dst, bounds

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, v: int) -> list[int]:
        return self.dst[self.bounds[v] : self.bounds[v + 1]]


def _components(ix: QueueIndex, opts: CheckOptions, deadline: float) -> list[list[int]]:
    """strongly_connected over the compact graph, most of it trimmed away first.

    Tarjan runs on the nodes _cycle_candidates keeps (all those on a cycle, few others),
    which finds the same components. The order they are found in may differ from a search
    of the whole graph, and that order picks which of equally short cycles are reported:
    with two or more components, the whole graph is searched again, as before.
    """
    src, dst, pos, n_nodes = _edge_arrays(ix, opts)
    return _trimmed_components(src, dst, pos, n_nodes, len(ix.txns), deadline)


def _trimmed_components(
    src: np.ndarray, dst: np.ndarray, pos: np.ndarray, n_nodes: int, n: int, deadline: float
) -> list[list[int]]:
    """_components on _edge_arrays' output: ops are the nodes below n."""
    keep = _cycle_candidates(src, dst, pos, n_nodes)
    if keep is None:  # most nodes may be on cycles: trimming would not pay
        return strongly_connected(_adjacency(src, dst, n_nodes), n, deadline)
    kept = np.flatnonzero(keep)
    if not len(kept):
        return []
    new_id = np.cumsum(keep) - 1
    both = keep[src] & keep[dst]
    sub = _adjacency(new_id[src[both]], new_id[dst[both]], len(kept))
    comps = strongly_connected(sub, int(np.searchsorted(kept, n)), deadline)
    if len(comps) < 2:
        old = kept.tolist()
        return [[old[v] for v in c] for c in comps]
    return strongly_connected(_adjacency(src, dst, n_nodes), n, deadline)


def _cycle_candidates(src: np.ndarray, dst: np.ndarray, pos: np.ndarray, n_nodes: int) -> np.ndarray | None:
    """A mask of nodes holding every node on a cycle (and, usually, few others), or None
    when it would hold most nodes.

    A node on a cycle at position p lies within [pos[v], pos[u]] of some edge u -> v of
    that cycle with pos[v] <= pos[u]: the edge leaving it, if it does not go up, or else
    the edge by which the cycle comes back down to p. Nodes outside the union of those
    intervals go (pos < 0: a node with no edges); then, pass after pass, nodes left
    without a kept predecessor or successor. None if the intervals cover more than two
    thirds of the nodes, or if a pass trims less than 2 % of what is left while more than
    5 % of the nodes are (in the benchmark's history with ww edges, 18,541 components).
    """
    back = pos[dst] <= pos[src]
    top = int(pos.max()) + 2 if len(pos) else 1
    cover = np.cumsum(
        np.bincount(pos[dst[back]], minlength=top)[:top]
        - np.bincount(pos[src[back]] + 1, minlength=top)[:top]
    )
    keep = (pos >= 0) & (cover[np.maximum(pos, 0)] > 0)
    left = int(np.count_nonzero(keep))
    if 3 * left > 2 * n_nodes:
        return None
    a, b = src, dst
    while True:
        both = keep[a] & keep[b]
        a, b = a[both], b[both]
        now = keep & (np.bincount(a, minlength=n_nodes) > 0) & (np.bincount(b, minlength=n_nodes) > 0)
        now_left = int(np.count_nonzero(now))
        if now_left == left:
            return keep
        if 50 * (left - now_left) < left and 20 * now_left > n_nodes:
            return None
        keep, left = now, now_left


def _compact_graph(ix: QueueIndex, opts: CheckOptions) -> Adjacency:
    """Adjacency lists over ops (ids 0..n-1) and time nodes (n..).

    Each node lists its successors in the order _edge_arrays gives them, which is the
    order the search walks them (and so the order components are found in).
    """
    src, dst, _, n_nodes = _edge_arrays(ix, opts)
    return _adjacency(src, dst, n_nodes)


def _adjacency(src: np.ndarray, dst: np.ndarray, n_nodes: int) -> Adjacency:
    """The Adjacency of edges already grouped by source (src sorted)."""
    # Through an object array of the node ids, so the lists share one int object per node
    # rather than making one per edge (millions).
    ints = np.arange(n_nodes).astype(object)
    return Adjacency(ints[dst].tolist(), np.searchsorted(src, np.arange(n_nodes + 1)).tolist())


def _edge_arrays(ix: QueueIndex, opts: CheckOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The compact graph's edges over ops (ids 0..n-1) and time nodes (n..).

    Edges are gathered as arrays, kind by kind (ww, wr, process, realtime), then grouped
    by source with a stable sort. Returns (sources, targets, position of each node,
    number of nodes): time node j at 2j, the op invoked there at 2j + 1, a failed op -1.
    """
    txns = ix.txns
    n = len(txns)
    cols = txn_columns(ix)
    inv, comp, fail = cols.inv_index, cols.comp_index, cols.fail
    srcs: list = []
    dsts: list = []
    cache: dict = {}  # writers dict id -> its values and ops as sorted arrays
    if opts.ww_deps:
        _ww_edges(ix, inv, comp, fail, srcs, dsts, cache)
    if opts.ww_deps and ix.groups is not None:
        _last_read_edges(ix, inv, comp, fail, srcs, dsts, cache)
    else:
        ws, rs = _wr_edges(ix, [t for t in txns if t.type != FAIL], opts.ww_deps)
        srcs.append(np.asarray(ws, dtype=np.int64))
        dsts.append(np.asarray(rs, dtype=np.int64))
    ids = np.flatnonzero(~fail)
    # process: each op to the next op of its process (one such edge per op, so how the
    # processes are numbered does not change any op's list of successors)
    code = cols.process[ids]
    by_proc = np.argsort(code, kind="stable")
    same = code[by_proc[1:]] == code[by_proc[:-1]]
    srcs.append(ids[by_proc[:-1]][same])
    dsts.append(ids[by_proc[1:]][same])
    # realtime via time nodes: time node j stands for the j-th invocation
    by_inv = ids[np.argsort(inv[ids], kind="stable")]
    m = len(by_inv)
    tnodes = np.arange(n, n + m, dtype=np.int64)
    srcs += [tnodes, tnodes[:-1]]
    dsts += [by_inv, tnodes[1:]]
    done = comp[ids] != INF
    j = np.searchsorted(inv[by_inv], comp[ids][done], side="right")
    srcs.append(ids[done][j < m])
    dsts.append(j[j < m] + n)
    src = np.concatenate(srcs)
    order = np.argsort(src, kind="stable")
    pos = np.full(n + m, -1, dtype=np.int64)
    pos[n:] = np.arange(0, 2 * m, 2)
    pos[by_inv] = np.arange(1, 2 * m, 2)
    return src[order], np.concatenate(dsts)[order], pos, n + m


def _ww_edges(
    ix: QueueIndex, inv: np.ndarray, comp: np.ndarray, fail: np.ndarray, srcs: list, dsts: list, cache: dict
) -> None:
    """Each writer to the next other writer in its key's version order.

    An edge from an op that completed before its target began is already implied by the
    realtime chain: left out (most edges are such).
    """
    for k, ko in ix.orders.items():
        writers = ix.writer_of.get(k, {})
        if ko.conflicts:  # offsets with two values: no single chain, ask each writer
            a, b = [], []
            for v1, t in writers.items():
                nxt = _next_writer(ix, k, v1, t) if t.type != FAIL else None
                if nxt is not None and not t.comp_index < nxt[0].inv_index:
                    a.append(t.id)
                    b.append(nxt[0].id)
            srcs.append(np.asarray(a, dtype=np.int64))
            dsts.append(np.asarray(b, dtype=np.int64))
            continue
        if len(ko.values) < 2:
            continue
        try:
            w = _writer_ids(writers, np.frombuffer(array("q", ko.values), dtype=np.int64), cache)
        except (TypeError, OverflowError):
            w = np.fromiter((-1 if x is None else x.id for x in map(writers.get, ko.values)), dtype=np.int64)
        w = w[w >= 0]
        w = w[~fail[w]]
        a, b = w[:-1], w[1:]
        keep = (a != b) & ~(comp[a] < inv[b])
        srcs.append(a[keep])
        dsts.append(b[keep])


def _writer_ids(writers: dict, vals: np.ndarray, cache: dict) -> np.ndarray:
    """The id of the op that sent each value (-1: none), by one sorted lookup.

    Raises TypeError or OverflowError when some value sent is not an int64. `cache`
    keeps each writers dict's sorted arrays (keyed by its id) for the next call.
    """
    got = cache.get(id(writers))
    if got is None:
        wv = np.frombuffer(array("q", writers), dtype=np.int64)
        wt = np.fromiter(map(_id, writers.values()), dtype=np.int64, count=len(writers))
        order = np.argsort(wv)
        got = cache[id(writers)] = (wv[order], wt[order])
    wv, wt = got
    at = np.minimum(np.searchsorted(wv, vals), len(wv) - 1)
    return np.where(wv[at] == vals, wt[at], -1)


def _last_read_edges(
    ix: QueueIndex, inv: np.ndarray, comp: np.ndarray, fail: np.ndarray, srcs: list, dsts: list, cache: dict
) -> None:
    """_wr_edges with ww-deps, from the index's read groups: one lookup per key, in arrays.

    For each op's read of a key, the writer of the last value read (see _wr_edges), in the
    same order: op by op, key by key.
    """
    g = ix.groups
    writer = np.full(len(g.tid), -1, dtype=np.int64)
    by_key = np.argsort(g.key, kind="stable")
    bounds = np.searchsorted(g.key[by_key], np.arange(len(g.keys) + 1)).tolist()
    for kno, k in enumerate(g.keys):
        writers = ix.writer_of.get(k)
        sel = by_key[bounds[kno] : bounds[kno + 1]]
        if not writers or not len(sel):
            continue
        vals = g.last_value[sel]
        try:
            writer[sel] = _writer_ids(writers, vals, cache)
        except (TypeError, OverflowError):  # some value sent to k is not an int64: ask the dict
            writer[sel] = [-1 if w is None else w.id for w in map(writers.get, vals.tolist())]
    reader = g.tid
    w = np.maximum(writer, 0)
    keep = g.some & (writer >= 0) & (writer != reader) & ~fail[reader] & ~fail[w] & ~(comp[w] < inv[reader])
    srcs.append(writer[keep])
    dsts.append(reader[keep])


def _wr_edges(ix: QueueIndex, nodes: list[Txn], ww_deps: bool) -> tuple[list[int], list[int]]:
    """writer -> reader, leaving out those the realtime chain implies: (writers, readers)."""
    writer_of = ix.writer_of
    nobody: dict = {}
    ws: list[int] = []
    rs: list[int] = []
    for t in nodes:
        if not t.reads:
            continue
        inv, tid = t.inv_index, t.id
        for k, pairs in t.reads.items():
            if not pairs:
                continue
            writers = writer_of.get(k, nobody)
            # With ww edges, the writer of the last value read reaches all earlier ones'
            # writers' successors along the ww chain, so one edge per key keeps reachability.
            if ww_deps:
                w = writers.get(pairs[-1][1])
                if w is not None and w is not t and w.type != FAIL and not w.comp_index < inv:
                    ws.append(w.id)
                    rs.append(tid)
                continue
            for w in set(map(writers.get, map(_second, pairs))):
                if w is not None and w is not t and w.type != FAIL and not w.comp_index < inv:
                    ws.append(w.id)
                    rs.append(tid)
    return ws, rs


def strongly_connected(adj: list[list[int]], n_real: int, deadline: float) -> list[list[int]]:
    """Components (iterative Tarjan) holding two or more real nodes (ids < n_real)."""
    n = len(adj)
    # Successor lists as slices of one flat list, taken inline (no call per node).
    if isinstance(adj, Adjacency):
        dst, bounds = adj.dst, adj.bounds
    else:
        dst, bounds = [w for a in adj for w in a], [0]
        for a in adj:
            bounds.append(bounds[-1] + len(a))
    index = [0] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 1
    for root in range(n):
        if index[root]:
            continue
        if time.monotonic() > deadline:
            raise OutOfTime
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, iter(dst[bounds[root] : bounds[root + 1]]))]
        while work:
            v, it = work[-1]
            for w in it:
                if not index[w]:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, iter(dst[bounds[w] : bounds[w + 1]])))
                    break
                if on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    if low[v] < low[u]:
                        low[u] = low[v]
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        if w < n_real:
                            comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


# --- stage 2: one component, typed edges ------------------------------------------------


Graph = dict[int, dict[int, list]]  # op id -> successor id -> [edge types, {type: witness}]


def component_graph(ix: QueueIndex, opts: CheckOptions, comp: list[int]) -> Graph:
    """The ops of one component with every typed edge between them and its witness.

    Plain dicts, in the order the edges were found (that order picks which of several
    equally short cycles is reported).
    """
    txns = ix.txns
    members = [txns[i] for i in comp]
    g: Graph = {i: {} for i in comp}

    def link(a: Txn, b: Txn, rel: int, why: dict) -> None:
        if a is b:
            return
        nbrs = g[a.id]
        e = nbrs.get(b.id)
        if e is None:
            nbrs[b.id] = [rel, {rel: why}]
        elif not e[0] & rel:
            e[0] |= rel
            e[1][rel] = why

    inside = set(comp)
    if opts.ww_deps:
        for t in members:
            for k, v1, _ in t.sends:
                nxt = _next_writer(ix, k, v1, t)
                if nxt is not None and nxt[0].id in inside:
                    link(t, nxt[0], WW, {"key": k, "value": nxt[1], "value2": nxt[2]})
    for t in members:
        for k, pairs in t.reads.items():
            writers = ix.writer_of.get(k)
            if not writers:
                continue
            for _, v in pairs:
                w = writers.get(v)
                if w is not None and w.id in inside:
                    link(w, t, WR, {"key": k, "value": v})
    last_of: dict[Any, Txn] = {}
    for t in members:  # ids are in completion order, which is process order
        prev = last_of.get(t.process)
        if prev is not None:
            link(prev, t, PROCESS, {})
        last_of[t.process] = t
    for a, b in _realtime_pairs(members):
        link(a, b, REALTIME, {})
    return g


def _next_writer(ix: QueueIndex, k: Any, v1: Any, t: Txn) -> tuple[Txn, Any, Any] | None:
    """The next op after t to write key k in its version order: (op, t's value, its value)."""
    ko = ix.orders.get(k)
    if ko is None or v1 not in ko.first_index:
        return None
    writers = ix.writer_of.get(k, {})
    last = v1
    for j in range(ko.first_index[v1] + 1, len(ko.values)):
        v = ko.values[j]
        w = writers.get(v)
        if w is None or w.type == "fail":
            continue
        if w is t:
            last = v
            continue
        return w, last, v
    return None


def _realtime_pairs(members: list[Txn]) -> list[tuple[Txn, Txn]]:
    """Transitively reduced realtime order: b follows a if a completed before b began."""
    events = []
    for t in members:
        events.append((t.inv_index, 1, t))
        if t.comp_index != INF:
            events.append((t.comp_index, 0, t))
    events.sort(key=lambda e: (e[0], e[1]))
    frontier: list[Txn] = []
    pairs = []
    for _, kind, t in events:
        if kind == 1:
            pairs.extend((a, t) for a in frontier)
        else:
            frontier = [a for a in frontier if not a.comp_index < t.inv_index]
            frontier.append(t)
    return pairs


def shortest_cycle(g: Graph, allowed: int, required: int, deadline: float) -> list | None:
    """The shortest cycle using only `allowed` edge types and every `required` one.

    Returns [(node, rel used to reach the next node), ...] or None. BFS over states
    (node, edge types used so far) from up to MAX_STARTS roots.
    """
    want = required & allowed
    roots = [u for u, nbrs in g.items() if any(e[0] & want for e in nbrs.values())]
    best: list | None = None
    for root in roots[:MAX_STARTS]:
        if time.monotonic() > deadline:
            raise OutOfTime
        path = _bfs_cycle(g, root, allowed, required, best)
        if path is not None and (best is None or len(path) < len(best)):
            best = path
            if len(best) == 2:
                break
    return best


def _bfs_cycle(g: Graph, root: int, allowed: int, required: int, best: list | None) -> list | None:
    limit = len(best) if best is not None else None
    start = (root, 0)
    parent: dict[tuple, tuple | None] = {start: None}
    depth = {start: 0}
    q = deque([start])
    while q:
        state = q.popleft()
        node, mask = state
        if limit is not None and depth[state] + 1 >= limit:
            return None
        for nbr, e in g[node].items():
            rels = e[0] & allowed
            bit = 1
            while rels:
                if rels & bit:
                    rels &= ~bit
                    m = mask | bit
                    if nbr == root and m & required == required:
                        return _unwind(parent, state, bit)
                    nxt = (nbr, m)
                    if nbr != root and nxt not in parent:
                        parent[nxt] = (state, bit)
                        depth[nxt] = depth[state] + 1
                        q.append(nxt)
                bit <<= 1
    return None


def _unwind(parent: dict, state: tuple, last_bit: int) -> list:
    steps = [(state[0], last_bit)]
    while parent[state] is not None:
        prev, bit = parent[state]
        steps.append((prev[0], bit))
        state = prev
    steps.reverse()
    return steps


# --- explanations ---------------------------------------------------------------------


def explain(ix: QueueIndex, path: list, whys: list[dict]) -> dict[str, Any]:
    """A cycle as op references, typed steps and a plain-words explanation.

    `whys` holds each step's witness (the key and values behind a ww or wr edge).
    """
    ids = [node for node, _ in path]
    names = {node: f"T{i + 1}" for i, node in enumerate(ids)}
    txns = [ix.txns[n] for n in ids]
    steps = []
    lines = ["Let:"]
    for t in txns:
        lines.append(
            f"  {names[t.id]} = op {t.op.index} ({t.type} {t.op.f} by process {t.process}, "
            f"invoked at op {t.inv_index})"
        )
    lines.append("Then:")
    for i, (node, rel) in enumerate(path):
        nxt = ids[(i + 1) % len(ids)]
        a, b = ix.txns[node], ix.txns[nxt]
        why = whys[i]
        text = _step_words(names[node], names[nxt], a, b, rel, why)
        lead = "However, " if i == len(path) - 1 else ""
        lines.append(f"  - {lead}{names[node]} < {names[nxt]}, because {text}.")
        steps.append({"from": names[node], "to": names[nxt], "type": REL_NAMES[rel], **why, "text": text})
    lines.append("  A cycle: " + " < ".join([names[n] for n in ids] + [names[ids[0]]]) + ".")
    return {"cycle": [op_ref(t.op) for t in txns], "steps": steps, "explanation": "\n".join(lines)}


def _step_words(na: str, nb: str, a: Txn, b: Txn, rel: int, why: dict) -> str:
    if rel == WW:
        return (
            f"{na} sent {why['value']!r} to key {why['key']!r} just before {nb} sent "
            f"{why['value2']!r} to it in the log"
        )
    if rel == WR:
        return f"{nb} polled {why['value']!r} from key {why['key']!r}, which {na} sent"
    if rel == PROCESS:
        return f"process {a.process} ran {na} and then {nb}"
    return f"{na} completed (op {a.op.index}) before {nb} was invoked (op {b.inv_index})"
