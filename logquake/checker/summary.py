"""A results object as a rich table: what `logquake check` prints."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

_VERDICT = {True: "[bold green]valid[/]", False: "[bold red]INVALID[/]", "unknown": "[bold yellow]unknown[/]"}


def render_summary(result: dict[str, Any], console: Console, *, title: str = "queue analysis") -> None:
    """Print the verdict, one row per anomaly type, and the informational figures."""
    stats = result.get("stats", {})
    console.print(
        f"{title}: {stats.get('txns', 0)} send/poll/txn ops over {stats.get('keys', 0)} keys "
        f"-> {_VERDICT.get(result['valid'], result['valid'])}",
        highlight=False,
    )
    anomalies = result.get("anomalies", {})
    if anomalies:
        bad = set(result.get("bad_error_types", ()))
        table = Table(show_header=True, header_style="bold")
        table.add_column("anomaly")
        table.add_column("count", justify="right")
        table.add_column("bad?")
        table.add_column("first example")
        for typ, entry in anomalies.items():
            errs = entry.get("errs") or [{}]
            first = errs[0].get("explanation", "")
            first = first.splitlines()[0] if "\n" not in first else _cycle_line(errs[0])
            table.add_row(escape(typ), str(entry["count"]), "[red]yes[/]" if typ in bad else "no", escape(first))
        console.print(table)
    lag = result.get("worst_realtime_lag") or {}
    if lag.get("lag"):
        console.print(
            f"worst realtime lag: {lag['lag']:.3f} s (process {lag['process']}, key {escape(str(lag['key']))}, "
            f"at {lag['time']:.3f} s)",
            highlight=False,
        )
    causes = result.get("info_txn_causes") or []
    if causes:
        shown = escape(", ".join(f"{c['error']} x{c['count']}" for c in causes[:5]))
        console.print(f"causes of indeterminate ops: {shown}", highlight=False)
    final = result.get("final_read")
    if isinstance(final, dict) and final.get("ran") is False:
        console.print(f"final read: not checked ({escape(str(final.get('why')))})", highlight=False)
    if result.get("unknown_because"):
        console.print(f"[yellow]unknown because {escape(result['unknown_because'])}[/]", highlight=False)
    for name, err in (result.get("analysis_errors") or {}).items():
        # Escaped: results hold the history's own text (values, client errors), not markup.
        console.print(f"[yellow]analysis {name} failed:[/] {escape(err.splitlines()[0])}", highlight=False)
    for name, err in (result.get("informational_errors") or {}).items():
        # A figure for the report, not an anomaly analysis: the verdict above stands without it.
        console.print(f"[yellow]figure {name} failed:[/] {escape(err.splitlines()[0])}", highlight=False)


def _cycle_line(err: dict[str, Any]) -> str:
    steps = err.get("steps") or []
    return " -> ".join(f"{s['from']} ({s['type']})" for s in steps) + (" -> T1" if steps else "")
