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
O(n * concurrency). scipy's csgraph finds them on the edge arrays, since a networkx graph
of a million nodes costs ~10x the memory and time (and a Tarjan in Python ~5x the time).
Then each component with two or more ops becomes a small graph of plain dicts (there are
thousands, each built and searched once) with explicit, typed edges, and for each anomaly
type we look for the shortest cycle using only its edge types and containing its required
ones (a BFS over (op, edge types used) states), explained step by step in plain words.

Which edges are inferred. A ww edge comes from the version order, which is itself put
together from polls and send offsets: it may be wrong (Kafka does not isolate writes, and
an unread send's place is a guess), which is why G1c is tolerated with ww-deps. The other
edges are observations: a poll returned the value (wr), a process ran one op after
another (process), one op completed before the other was invoked (realtime). A cycle
that needs no ww edge rests on observations alone, so with ww-deps the search also looks
for those and reports them under types no guarantee tolerates:

- G1c-wr: each op read a send of the next, around a cycle of wr edges only (under
  read_committed every send read had committed first, which no ring allows);
- future-read: wr edges closed by process or realtime order: some op read information
  that was sent only after that op had completed.

Without ww-deps no edge is inferred and every G1c is bad under its own name. Each
cycle's example lists its inferred steps (`inferred`).
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

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
# Cycles that need no inferred (ww) edge, searched with ww-deps: (type, edge types it may
# use, edge types it must use). Several specs of one type: the first that finds a cycle in
# a component gives its example.
NOT_INFERRED_SPECS = (
    ("G1c-wr", WR, WR),
    ("future-read", WR | PROCESS, WR | PROCESS),
    ("future-read", WR | PROCESS | REALTIME, WR | REALTIME),
)
INFERRED = WW  # edge types that are inferences, not observations
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
    specs = SPECS + NOT_INFERRED_SPECS if opts.ww_deps else SPECS
    out = CycleSearch(cases={name: [] for name, _, _ in specs})
    found: dict[str, list] = {name: [] for name, _, _ in specs}  # (length, path, whys)
    try:
        comps = _components(ix, opts, deadline)
        out.stats["components"] = len(comps)
        out.stats["largest_component"] = max((len(c) for c in comps), default=0)
        for comp in comps:
            g = component_graph(ix, opts, comp)
            out_types = _out_types(g)
            present = 0
            for types in out_types.values():
                present |= types
            done: set[str] = set()
            for name, allowed, required in specs:
                if present & required != required or name in done:
                    continue
                path = shortest_cycle(g, allowed, required, deadline, out_types)
                if path is not None:
                    # Keep the path's own edges, not the component's graph.
                    whys = [g[a][path[(i + 1) % len(path)][0]][1][rel] for i, (a, rel) in enumerate(path)]
                    found[name].append((len(path), path, whys))
                    done.add(name)
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


def _components(ix: QueueIndex, opts: CheckOptions, deadline: float) -> list[list[int]]:
    """The components of the compact graph holding two or more ops."""
    src, dst, n_nodes = _edge_arrays(ix, opts)
    if time.monotonic() > deadline:
        raise OutOfTime
    return strongly_connected(src, dst, n_nodes, len(ix.txns))


def strongly_connected(src: np.ndarray, dst: np.ndarray, n_nodes: int, n_real: int) -> list[list[int]]:
    """Components holding two or more real nodes (ids < n_real), each as its sorted real
    nodes, in the order of their first node (for ops: history order, earliest first).

    scipy's csgraph finds the components (Pearce's algorithm, in C): on a million ops a
    pure-Python Tarjan took ~0.8 s and ~100 MB of lists; this takes ~0.15 s. The order is
    canonical, independent of how the search walks the graph, so which of several equally
    short cycles is reported no longer depends on the order edges were gathered in.
    """
    if not n_real or not len(src):
        return []
    graph = csr_matrix((np.ones(len(src)), (src, dst)), shape=(n_nodes, n_nodes))  # float64: what csgraph takes
    _, labels = connected_components(graph, directed=True, connection="strong")
    labels = labels[:n_real]
    by_label = np.argsort(labels, kind="stable")  # each component's ops, ascending
    sorted_labels = labels[by_label]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    sizes = np.diff(np.r_[starts, n_real])
    big = sizes > 1
    starts, sizes = starts[big], sizes[big]
    in_order = np.argsort(by_label[starts])  # by each component's first op
    ops = by_label.tolist()
    return [ops[a : a + z] for a, z in zip(starts[in_order].tolist(), sizes[in_order].tolist(), strict=True)]


def _edge_arrays(ix: QueueIndex, opts: CheckOptions) -> tuple[np.ndarray, np.ndarray, int]:
    """The compact graph's edges over ops (ids 0..n-1) and time nodes (n..).

    Edges are gathered as arrays, kind by kind (ww, wr, process, realtime). Returns
    (sources, targets, number of nodes).
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
    return np.concatenate(srcs), np.concatenate(dsts), n + m


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
    # The values whose writer is a member, per key: most reads are of values written
    # outside, and a read list holding none of these needs no walk (one C-level check).
    ours: dict[Any, set] = {}
    for t in members:
        for k, v, _ in t.sends:
            w = ix.writer_of[k].get(v)
            if w is not None and w.id in inside:
                ours.setdefault(k, set()).add(v)
    for t in members:
        for k, pairs in t.reads.items():
            vs = ours.get(k)
            if vs is None or vs.isdisjoint(map(_second, pairs)):
                continue
            writers = ix.writer_of[k]
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


def _out_types(g: Graph) -> dict[int, int]:
    """Each node's edge types out, together (in g's order)."""
    out = {}
    for u, nbrs in g.items():
        types = 0
        for e in nbrs.values():
            types |= e[0]
        out[u] = types
    return out


def shortest_cycle(g: Graph, allowed: int, required: int, deadline: float, out_types: dict[int, int]) -> list | None:
    """The shortest cycle using only `allowed` edge types and every `required` one.

    Returns [(node, rel used to reach the next node), ...] or None. BFS over states
    (node, edge types used so far) from up to MAX_STARTS roots. `out_types` is
    _out_types(g), made once per component for every type of cycle searched.
    """
    want = required & allowed
    roots = [u for u, types in out_types.items() if types & want]
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


_TYPE_BITS = 4  # edge types fit in 4 bits (WW..REALTIME): a state is node << 4 | types
_TYPES = (1 << _TYPE_BITS) - 1


def _bfs_cycle(g: Graph, root: int, allowed: int, required: int, best: list | None) -> list | None:
    """The shortest cycle through root using `required`, shorter than `best` if given.

    BFS over states (node, edge types used so far), one level at a time (the order of a
    FIFO queue), each edge type tried lowest bit first. States are ints, node << 4 | types:
    hashing and storing them is cheaper than tuples, and most searches are tiny.
    """
    limit = len(best) if best is not None else None
    start = root << _TYPE_BITS
    parent: dict[int, int] = {start: -1}  # state -> previous state << 4 | the edge's type
    level = [start]
    depth = 0
    while level:
        if limit is not None and depth + 1 >= limit:
            return None
        next_level = []
        for state in level:
            mask = state & _TYPES
            for nbr, e in g[state >> _TYPE_BITS].items():
                rels = e[0] & allowed
                while rels:
                    bit = rels & -rels
                    rels ^= bit
                    m = mask | bit
                    if nbr == root:
                        if m & required == required:
                            return _unwind(parent, state, bit)
                        continue
                    nxt = nbr << _TYPE_BITS | m
                    if nxt not in parent:
                        parent[nxt] = state << _TYPE_BITS | bit
                        next_level.append(nxt)
        level = next_level
        depth += 1
    return None


def _unwind(parent: dict[int, int], state: int, last_bit: int) -> list:
    steps = [(state >> _TYPE_BITS, last_bit)]
    while (prev := parent[state]) != -1:
        state, bit = prev >> _TYPE_BITS, prev & _TYPES
        steps.append((state >> _TYPE_BITS, bit))
    steps.reverse()
    return steps


# --- explanations ---------------------------------------------------------------------


def explain(ix: QueueIndex, path: list, whys: list[dict]) -> dict[str, Any]:
    """A cycle as op references, typed steps and a plain-words explanation.

    `whys` holds each step's witness (the key and values behind a ww or wr edge).
    """
    ids = [node for node, _ in path]
    names = {node: f"T{i + 1}" for i, node in enumerate(ids)}
    inferred = []
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
        if rel & INFERRED:
            inferred.append(f"{names[node]} < {names[nxt]}")
    lines.append("  A cycle: " + " < ".join([names[n] for n in ids] + [names[ids[0]]]) + ".")
    if inferred:
        lines.append(
            "  Inferred from the version order (ww, which may be wrong): " + ", ".join(inferred) + "."
        )
    else:
        lines.append("  No step is inferred: each is a read, a process's order or real time.")
    return {
        "cycle": [op_ref(t.op) for t in txns],
        "steps": steps,
        "inferred": inferred,
        "explanation": "\n".join(lines),
    }


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
