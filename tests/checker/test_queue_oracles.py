"""The checker's array analyses against plain-loop oracles (oracles.py), on random histories.

Process order, unseen and the realtime lag are computed on arrays in the product; the
oracles walk the ops one by one. Histories are simulated (generate.py) with any planted
bug, then optionally made odd: subscribes and seeks, reads reversed, cut or rewound
(poll-order anomalies), the history cut short (ops in flight become info ops whose sends
carry no offset), values spread far apart and offsets moved up by 2**61 (the arrays then
sort and rank instead of using tables).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logquake.checker import CheckOptions, cycles
from logquake.checker.generate import BUGS, simulate
from logquake.checker.queue_build import build_index
from logquake.checker.queue_lag import realtime_lag
from logquake.checker.queue_lost import unseen_analysis
from logquake.checker.queue_process import process_order_cases
from logquake.history import Op
from tests.checker import oracles
from tests.checker.histories import oddly_read, scale_values, shift_offsets, sim_configs

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

configs = sim_configs(bugs=st.sets(st.sampled_from(BUGS), max_size=2).map(frozenset))


@st.composite
def histories(draw: st.DrawFn) -> list[Op]:
    cfg = draw(configs)
    ops, _ = simulate(cfg)
    if draw(st.booleans()):
        ops = oddly_read(ops, cfg.seed)
    if draw(st.booleans()):
        ops = ops[: len(ops) * draw(st.integers(1, 9)) // 10]
    if draw(st.booleans()):
        ops = scale_values(ops, 10**12)
    if draw(st.booleans()):
        ops = shift_offsets(ops, 2**61)
    return ops


@SETTINGS
@given(ops=histories())
def test_process_order_matches_the_oracle(ops: list[Op]) -> None:
    ix = build_index(ops)
    assert process_order_cases(ix, CheckOptions()) == oracles.process_order(ix)


@SETTINGS
@given(ops=histories())
def test_unseen_matches_the_oracle(ops: list[Op]) -> None:
    ix = build_index(ops)
    assert unseen_analysis(ix) == oracles.unseen(ix)


@SETTINGS
@given(ops=histories())
def test_realtime_lag_matches_the_oracle(ops: list[Op]) -> None:
    ix = build_index(ops)
    assert realtime_lag(ix) == oracles.realtime_lag(ix)


@SETTINGS
@given(ops=histories())
def test_last_read_edges_from_arrays_match_the_loop(ops: list[Op]) -> None:
    """cycles' ww-deps wr edges from the read groups equal its loop over the reads."""
    ix = build_index(ops)
    opts = CheckOptions(ww_deps=True)
    fast_src, fast_dst, fast_n = cycles._edge_arrays(ix, opts)
    ix.groups = None  # cycles then walks Txn.reads
    loop_src, loop_dst, loop_n = cycles._edge_arrays(ix, opts)
    assert fast_n == loop_n
    assert fast_src.tolist() == loop_src.tolist() and fast_dst.tolist() == loop_dst.tolist()
