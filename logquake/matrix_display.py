"""`logquake test-all` on the terminal: a live table of the runs, then the summary tables.

Rendering only: the matrix comes from logquake.matrix (spec, run, verdicts); the tables
show its `RunResult`s and the rows of `summarize` and `by_profile` with rich.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.table import Table

from logquake.matrix import Cell, RunResult, by_profile, exit_code, expand, load_matrix, run_matrix, summarize
from logquake.matrix.verdicts import ERROR, FAIL, PASS, XFAIL

__all__ = ["run_with_display"]

_STYLE = {PASS: "green", FAIL: "red", ERROR: "yellow", XFAIL: "magenta"}


def _table(runs: list[RunResult], current: str, total: int) -> Any:
    t = Table(title=f"test-all: {len(runs)}/{total} runs", title_justify="left")
    for col in ("cell", "guarantee", "seed", "expect", "valid", "bad anomalies", "result", "s"):
        t.add_column(col, justify="right" if col in ("seed", "s") else "left")
    for r in runs:
        s = _STYLE[r.outcome]
        t.add_row(r.cell, r.guarantee, str(r.seed), " | ".join(r.expect) or "valid", str(r.valid).lower(),
                  ", ".join(r.bad) or "-", f"[{s}]{r.outcome}[/]: {r.message}", f"{r.duration:.0f}")
    if current:
        t.caption = f"running {current}"
    return t


def run_with_display(path: Path | None, *, test_count: int | None, time_limit: float | None,
                          results_dir: str, console: Any, guarantees: list[str] | None = None) -> int:
    """Load the matrix, run it under a live table, print the summary; the exit code."""
    matrix = load_matrix(path, test_count=test_count, time_limit=time_limit, guarantees=guarantees)
    for why in matrix.skipped:
        console.print(f"[dim]left out: {why}[/]", highlight=False)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out_dir = Path(results_dir) / "test-all" / stamp
    total = len(expand(matrix))
    shown: list[RunResult] = []  # filled as runs finish, for the live table
    current = [""]
    with Live(get_renderable=lambda: _table(shown, current[0], total), console=console,
              refresh_per_second=1, transient=False):
        def start(cell: Cell, seed: int) -> None:
            current[0] = f"{cell.name} seed {seed}"

        runs = run_matrix(matrix, out_dir, results_dir=results_dir, on_start=start, on_result=shown.append)
        current[0] = ""
    console.print(_summary_table(summarize(runs)))
    profiles = by_profile(runs)
    if len(profiles) > 1:
        console.print(_profiles_table(profiles))
        console.print(f"profiles: {out_dir / 'profiles.html'}")
    console.print(f"index: {out_dir / 'index.json'}\njunit: {out_dir / 'junit.xml'}")
    return exit_code(runs)


def _summary_table(rows: list[dict[str, Any]]) -> Any:
    t = Table(title="per cell", title_justify="left")
    for col in ("cell", "guarantee", "expect", "as expected", "fail", "xfail", "error", "bad anomalies seen (runs)"):
        t.add_column(col)
    for row in rows:
        ok = f"{row[PASS]}/{row['runs']}"
        colour = "green" if row[PASS] == row["runs"] else "red"
        seen = ", ".join(f"{k} ({v})" for k, v in sorted(row["anomalies"].items())) or "-"
        t.add_row(row["cell"], row["guarantee"], " | ".join(row["expect"]), f"[{colour}]{ok}[/]", str(row[FAIL]),
                  str(row[XFAIL]), str(row[ERROR]), seen)
    return t


def _profiles_table(rows: list[dict[str, Any]]) -> Any:
    t = Table(title="per guarantee profile", title_justify="left")
    for col in ("guarantee", "as expected", "fail", "error", "anomalies (count)", "processed 0 / 1 / 2+ times"):
        t.add_column(col)
    for row in rows:
        pc = {int(k): n for k, n in row["processing_counts"].items()}
        processed = (f"{pc.get(0, 0):,} / {pc.get(1, 0):,} / {sum(n for k, n in pc.items() if k > 1):,}"
                     if pc else "-")
        seen = ", ".join(f"{k} ({v:,})" for k, v in sorted(row["anomalies"].items())) or "-"
        t.add_row(row["guarantee"], f"{row[PASS]}/{row['runs']}", str(row[FAIL]), str(row[ERROR]), seen, processed)
    return t
