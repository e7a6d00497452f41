"""Property tests: a simulated log with injectable bugs drives the checker.

The bug-free log must always check valid; every bug that fires must be reported as its
anomaly (a bad type of the results).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logquake.checker import CheckOptions, check_history
from logquake.checker.generate import BUGS, SimConfig, simulate
from tests.checker.histories import sim_configs

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

configs = sim_configs()


@SETTINGS
@given(cfg=configs, ww_deps=st.booleans())
def test_bug_free_log_is_always_valid(cfg: SimConfig, ww_deps: bool) -> None:
    ops, fired = simulate(cfg)
    assert fired == []
    r = check_history(ops, CheckOptions(ww_deps=ww_deps, txn=cfg.txn))
    assert r["valid"] is True, (r["bad_error_types"], r["anomalies"])
    assert "unseen" not in r["error_types"] and "lost-write" not in r["error_types"]


@SETTINGS
@given(cfg=configs, bug=st.sampled_from(BUGS))
def test_every_fired_bug_is_reported_as_its_anomaly(cfg: SimConfig, bug: str) -> None:
    cfg = SimConfig(**{**cfg.__dict__, "bugs": frozenset([bug]), "p_bug": 0.2})
    ops, fired = simulate(cfg)
    r = check_history(ops, CheckOptions(txn=cfg.txn))
    bad = set(r["bad_error_types"])
    for name, expect in fired:
        assert bad & set(expect), f"{name} fired, expected one of {expect}, got {sorted(bad)}"
    if fired:
        assert r["valid"] is False


@pytest.mark.parametrize("bug", BUGS)
def test_each_bug_fires_and_is_caught_on_a_fixed_run(bug: str) -> None:
    """Guards the property above against passing vacuously."""
    cfg = SimConfig(
        ops=400,
        workers=4,
        active_keys=3,
        max_writes_per_key=50,
        txn=True,
        p_fail=0.1,
        p_info=0.1,
        bugs=frozenset([bug]),
        p_bug=0.3,
        seed=7,
    )
    ops, fired = simulate(cfg)
    assert fired, f"{bug} never fired"
    r = check_history(ops)
    assert set(fired[0][1]) & set(r["bad_error_types"])
