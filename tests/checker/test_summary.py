"""`logquake check`'s summary prints the history's own text as it is, never as rich markup."""

from __future__ import annotations

from rich.console import Console

from logquake.checker.summary import render_summary


def test_text_from_the_history_is_printed_literally() -> None:
    result = {
        "valid": "unknown",
        "stats": {"txns": 1, "keys": 1},
        "anomalies": {"G1a": {"count": 1, "errs": [{"explanation": "T1 read [bold] from key [k]"}]}},
        "info_txn_causes": [{"error": "[timeout] waiting", "count": 2}],
        "unknown_because": "an analysis failed: index",
        "analysis_errors": {"index": "ValueError: op 1 polled key 1: [5] is not an [offset, value] pair"},
    }
    console = Console(record=True, width=200)
    render_summary(result, console)
    out = console.export_text()
    assert "T1 read [bold] from key [k]" in out
    assert "[timeout] waiting x2" in out
    assert "[5] is not an [offset, value] pair" in out


def test_a_failed_figure_is_printed_beside_a_standing_verdict() -> None:
    result = {
        "valid": False,
        "stats": {"txns": 3, "keys": 1},
        "bad_error_types": ["lost-write"],
        "anomalies": {"lost-write": {"count": 1, "errs": [{"explanation": "value 11 was lost"}]}},
        "informational_errors": {"realtime-lag": "RuntimeError: injected\n  File ..."},
    }
    console = Console(record=True, width=200)
    render_summary(result, console)
    out = console.export_text()
    assert "figure realtime-lag failed: RuntimeError: injected" in out
    assert "File ..." not in out and "analysis realtime-lag" not in out


def test_a_history_without_a_final_read_says_the_analysis_did_not_run() -> None:
    result = {"valid": True, "stats": {"txns": 2, "keys": 1}, "anomalies": {},
              "final_read": {"ran": False, "why": "the history has no final read"}}
    console = Console(record=True, width=200)
    render_summary(result, console)
    assert "final read: not checked (the history has no final read)" in console.export_text()
