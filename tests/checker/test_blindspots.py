"""The checker's former blind spots, each on a literal history that fires and one beside it
that stays quiet."""

from __future__ import annotations

from logquake.checker import CheckOptions, check_history, queue
from tests.checker.histories import H


def check(h: H, **opts):
    return check_history(h.ops, CheckOptions(**opts))


# --- an informational analysis that fails ----------------------------------------------


def _lost_write() -> H:
    h = H()
    for i in range(3):
        h.send(0, 1, 10 + i, i)
    h.poll(1, {1: [(0, 10), (2, 12)]})
    return h


def _boom(ix):
    raise RuntimeError("injected")


def test_a_failed_realtime_lag_leaves_the_anomaly_verdict(monkeypatch):
    monkeypatch.setattr(queue, "worst_realtime_lag", _boom)
    r = check(_lost_write())
    assert r["valid"] is False and "lost-write" in r["bad_error_types"]
    assert "analysis_errors" not in r and "unknown_because" not in r
    assert r["informational_errors"]["realtime-lag"].startswith("RuntimeError: injected")
    assert r["worst_realtime_lag"] is None


def test_a_failed_realtime_lag_leaves_a_clean_history_valid(monkeypatch):
    monkeypatch.setattr(queue, "worst_realtime_lag", _boom)
    h = H()
    h.send(0, 1, 10, 0)
    h.poll(1, {1: [(0, 10)]})
    r = check(h)
    assert r["valid"] is True
    assert list(r["informational_errors"]) == ["realtime-lag"]


def test_a_working_realtime_lag_reports_no_failure():
    r = check(_lost_write())
    assert "informational_errors" not in r and r["worst_realtime_lag"] is not None


