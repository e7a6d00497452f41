"""`logquake test-all` (and `test-all merge`) on the terminal: a live table of the runs, then
the summary tables.

Rendering only: the matrix comes from logquake.matrix (spec, shard, run, merge, verdicts);
the tables show its `RunResult`s and the rows of `summarize` and `by_profile` with rich.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.table import Table

from logquake.matrix import (
    Cell,
    RunResult,
    Shard,
    by_profile,
    exit_code,
    load_matrix,
    merge_shards,
    run_matrix,
    select,
    shard_pairs,
    summarize,
)
from logquake.matrix.shard import WHOLE
from logquake.matrix.verdicts import ERROR, FAIL, PASS, XFAIL
from logquake.results.store import portable_name

__all__ = ["merge_with_display", "run_with_display"]

_STYLE = {PASS: "green", FAIL: "red", ERROR: "yellow", XFAIL: "magenta"}


def _column(t: Table, header: str, justify: Any = "left") -> None:
    """A column that never cuts its text with an ellipsis: the cell name keeps its line (it is
    what a user copies into --only), the other columns fold onto more lines instead."""
    if header == "cell":
        t.add_column(header, no_wrap=True)
    else:
        t.add_column(header, justify=justify, overflow="fold")


def _table(runs: list[RunResult], current: str, total: int) -> Any:
    t = Table(title=f"test-all: {len(runs)}/{total} runs", title_justify="left")
    # The message says what was expected and which bad anomalies the run had: no columns of
    # their own, so the cell name keeps its line at 120 columns.
    for col in ("cell", "guarantee", "seed", "result", "s"):
        _column(t, col, justify="right" if col in ("seed", "s") else "left")
    for r in runs:
        s = _STYLE[r.outcome]
        t.add_row(r.cell, r.guarantee, str(r.seed), f"[{s}]{r.outcome}[/]: {r.message}", f"{r.duration:.0f}")
    if current:
        t.caption = f"running {current}"
    return t


def run_with_display(path: Path | None, *, test_count: int | None, time_limit: float | None,
                     results_dir: str, console: Any, guarantees: list[str] | None = None,
                     only: list[str] | None = None, shard: Shard = WHOLE) -> int:
    """Load the matrix, run (its shard of) it under a live table, print the summary; the exit code."""
    matrix = select(load_matrix(path, test_count=test_count, time_limit=time_limit, guarantees=guarantees),
                    only or [])
    for why in matrix.skipped:
        console.print(f"[dim]left out: {why}[/]", highlight=False)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    if shard != WHOLE:  # shards of one night side by side once their artifacts are downloaded together
        stamp = portable_name(f"{stamp}-shard-{shard.index}-of-{shard.total}")
    out_dir = Path(results_dir) / "test-all" / stamp
    total = len(shard_pairs(matrix, shard))
    if shard != WHOLE:
        console.print(f"shard {shard}: {total} of the matrix's {len(matrix.cells) * matrix.test_count} runs",
                      highlight=False)
    shown: list[RunResult] = []  # filled as runs finish, for the live table
    current = [""]
    with Live(get_renderable=lambda: _table(shown, current[0], total), console=console,
              refresh_per_second=1, transient=False):
        def start(cell: Cell, seed: int) -> None:
            current[0] = f"{cell.name} seed {seed}"

        runs = run_matrix(matrix, out_dir, results_dir=results_dir, on_start=start, on_result=shown.append,
                          shard=shard)
        current[0] = ""
    return _summary(runs, out_dir, console)


def merge_with_display(paths: list[Path], *, out_dir: Path | None, results_dir: str, console: Any) -> int:
    """Join shards' results into one index.json and junit.xml, print the summary; the exit code."""
    if out_dir is None:
        out_dir = Path(results_dir) / "test-all" / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-merged")
    data, runs = merge_shards(paths, out_dir)
    for m in data["merged"]:
        state = "" if m["done"] else " (stopped early)"
        console.print(f"shard {m['shard']}: {m['runs']} runs{state} from {m['index']}", highlight=False, soft_wrap=True)
    for k in data["missing_shards"]:
        console.print(f"[yellow]shard {k}: no index.json given; its runs count as errors[/]", highlight=False)
    return _summary(runs, out_dir, console)


def _summary(runs: list[RunResult], out_dir: Path, console: Any) -> int:
    console.print(_summary_table(summarize(runs)))
    profiles = by_profile(runs)
    if len(profiles) > 1:
        console.print(_profiles_table(profiles))
        console.print(f"profiles: {out_dir / 'profiles.html'}", soft_wrap=True)
    # soft_wrap: a path cut across lines cannot be copied
    console.print(f"index: {out_dir / 'index.json'}\njunit: {out_dir / 'junit.xml'}", soft_wrap=True)
    return exit_code(runs)


def _summary_table(rows: list[dict[str, Any]]) -> Any:
    t = Table(title="per cell", title_justify="left")
    for col in ("cell", "guarantee", "expect", "as expected", "fail", "xfail", "error", "bad anomalies seen (runs)"):
        _column(t, col)
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
