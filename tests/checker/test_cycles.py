"""The compact graph (time-node chain, pruned edges) finds exactly the components of the
plain dependency graph, built here naively with networkx, on simulated histories."""

from __future__ import annotations

import networkx as nx
import pytest

from logquake.checker import cycles as cy
from logquake.checker.generate import BUGS, SimConfig, simulate
from logquake.checker.options import CheckOptions
from logquake.checker.queue_build import build_index


def naive_components(ix, ww_deps: bool) -> list[list[int]]:
    nodes = [t for t in ix.txns if t.type != "fail"]
    ids = {t.id for t in nodes}
    g = nx.DiGraph()
    g.add_nodes_from(ids)
    for t in nodes:
        for k, pairs in t.reads.items():
            for _, v in pairs:
                w = ix.writer(k, v)
                if w is not None and w.id in ids and w is not t:
                    g.add_edge(w.id, t.id)
        if ww_deps:
            for k, v, _ in t.sends:
                nxt = cy._next_writer(ix, k, v, t)
                if nxt is not None and nxt[0].id in ids:
                    g.add_edge(t.id, nxt[0].id)
    for a in nodes:
        for b in nodes:
            if a is not b and (a.comp_index < b.inv_index or (a.process == b.process and a.id < b.id)):
                g.add_edge(a.id, b.id)
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 5, 9, 11, 13])  # odd seeds: one bug each
@pytest.mark.parametrize("ww_deps", [True, False])
def test_compact_graph_has_the_same_components(seed: int, ww_deps: bool) -> None:
    bugs = frozenset([BUGS[seed % len(BUGS)]]) if seed % 2 else frozenset()
    cfg = SimConfig(ops=120, workers=5, active_keys=3, max_writes_per_key=20, seed=seed, bugs=bugs, p_bug=0.3)
    ops, _ = simulate(cfg)
    ix = build_index(ops)
    got = cy._components(ix, CheckOptions(ww_deps=ww_deps), float("inf"))
    assert sorted(got) == naive_components(ix, ww_deps)
