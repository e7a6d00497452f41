"""The trimmed component search (cycles._trimmed_components) returns exactly what Tarjan
over the whole compact graph returns, in the same order: on random graphs and on
simulated histories with every bug."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logquake.checker import cycles as cy
from logquake.checker.generate import BUGS, SimConfig, simulate
from logquake.checker.options import CheckOptions
from logquake.checker.queue_index import build_index

INF = float("inf")


@st.composite
def graphs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Edges grouped by source, node positions (-1 for a node without edges), ops below n."""
    n_nodes = draw(st.integers(1, 40))
    n = draw(st.integers(0, n_nodes))
    node = st.integers(0, n_nodes - 1)
    edges = draw(st.lists(st.tuples(node, node), max_size=4 * n_nodes))
    # mostly forward in position, as in the compact graph, with a few edges going back
    pos = np.asarray(draw(st.permutations(range(n_nodes))), dtype=np.int64)
    if draw(st.booleans()):
        edges = [(a, b) if pos[a] < pos[b] or draw(st.integers(0, 9)) == 0 else (b, a) for a, b in edges]
    src = np.asarray([a for a, _ in edges], dtype=np.int64)
    dst = np.asarray([b for _, b in edges], dtype=np.int64)
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    lone = np.ones(n_nodes, dtype=bool)
    lone[src] = lone[dst] = False
    pos[lone] = -1
    return src, dst, pos, n_nodes, n


@settings(max_examples=400, deadline=None)
@given(graphs())
def test_trimmed_search_is_the_whole_search(g) -> None:
    src, dst, pos, n_nodes, n = g
    whole = cy.strongly_connected(cy._adjacency(src, dst, n_nodes), n, INF)
    assert cy._trimmed_components(src, dst, pos, n_nodes, n, INF) == whole


@settings(max_examples=400, deadline=None)
@given(graphs())
def test_candidates_hold_every_node_on_a_cycle(g) -> None:
    src, dst, pos, n_nodes, _ = g
    keep = cy._cycle_candidates(src, dst, pos, n_nodes)
    if keep is None:
        return
    nxg = nx.DiGraph()
    nxg.add_nodes_from(range(n_nodes))
    nxg.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    for comp in nx.strongly_connected_components(nxg):
        v = next(iter(comp))
        if len(comp) > 1 or nxg.has_edge(v, v):
            assert keep[sorted(comp)].all()


@pytest.mark.parametrize("bug", ["none", *BUGS])
@pytest.mark.parametrize("ww_deps", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_trimmed_search_on_histories(bug: str, ww_deps: bool, seed: int) -> None:
    bugs = frozenset() if bug == "none" else frozenset([bug])
    cfg = SimConfig(
        ops=400, workers=5, active_keys=3, max_writes_per_key=30, seed=seed, bugs=bugs, p_bug=0.05
    )
    ix = build_index(simulate(cfg)[0])
    opts = CheckOptions(ww_deps=ww_deps)
    src, dst, pos, n_nodes = cy._edge_arrays(ix, opts)
    assert (pos[np.concatenate([src, dst])] >= 0).all()  # the contract _cycle_candidates relies on
    whole = cy.strongly_connected(cy._compact_graph(ix, opts), len(ix.txns), INF)
    assert cy._components(ix, opts, INF) == whole
