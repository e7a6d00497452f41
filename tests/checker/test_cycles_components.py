"""cycles.strongly_connected (scipy's csgraph) finds exactly networkx's components, in
the order of their first node: on random graphs, and on the compact graphs of simulated
histories with every bug (where the realtime chain adds time nodes above the ops)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logquake.checker import cycles as cy
from logquake.checker.generate import BUGS, SimConfig, simulate
from logquake.checker.options import CheckOptions
from logquake.checker.queue_build import build_index


def expected(src: np.ndarray, dst: np.ndarray, n_nodes: int, n_real: int) -> list[list[int]]:
    g = nx.DiGraph()
    g.add_nodes_from(range(n_nodes))
    g.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    comps = [sorted(v for v in c if v < n_real) for c in nx.strongly_connected_components(g)]
    return sorted(c for c in comps if len(c) > 1)


@st.composite
def graphs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Edges in any order (duplicates and self-loops allowed), real nodes below n_real."""
    n_nodes = draw(st.integers(1, 40))
    n_real = draw(st.integers(0, n_nodes))
    node = st.integers(0, n_nodes - 1)
    edges = draw(st.lists(st.tuples(node, node), max_size=4 * n_nodes))
    src = np.asarray([a for a, _ in edges], dtype=np.int64)
    dst = np.asarray([b for _, b in edges], dtype=np.int64)
    return src, dst, n_nodes, n_real


@settings(max_examples=400, deadline=None)
@given(graphs())
def test_components_are_networkx_s_in_first_node_order(g) -> None:
    src, dst, n_nodes, n_real = g
    got = cy.strongly_connected(src, dst, n_nodes, n_real)
    assert sorted(got) == expected(src, dst, n_nodes, n_real)
    assert got == sorted(got, key=lambda c: c[0])
    assert all(c == sorted(c) for c in got)


def test_a_cycle_through_time_nodes_only_counts_its_ops() -> None:
    # ops 0 and 1 meet only through time nodes 3 and 4; op 2 is alone on a loop with node 5
    src = np.asarray([0, 1, 2, 3, 4, 5])
    dst = np.asarray([3, 4, 5, 1, 0, 2])
    assert cy.strongly_connected(src, dst, 6, 3) == [[0, 1]]
    assert cy.strongly_connected(src[:0], dst[:0], 6, 3) == []


@pytest.mark.parametrize("bug", ["none", *BUGS])
@pytest.mark.parametrize("ww_deps", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_components_of_histories(bug: str, ww_deps: bool, seed: int) -> None:
    bugs = frozenset() if bug == "none" else frozenset([bug])
    cfg = SimConfig(ops=400, workers=5, active_keys=3, max_writes_per_key=30, seed=seed, bugs=bugs, p_bug=0.05)
    ix = build_index(simulate(cfg)[0])
    opts = CheckOptions(ww_deps=ww_deps)
    src, dst, n_nodes = cy._edge_arrays(ix, opts)
    got = cy._components(ix, opts, float("inf"))
    assert sorted(got) == expected(src, dst, n_nodes, len(ix.txns))
    assert got == sorted(got, key=lambda c: c[0])
