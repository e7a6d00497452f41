"""Running a test-all matrix: each (cell, seed) in turn through `logquake.runner.run_test`.

After every run index.json and junit.xml are rewritten in the matrix's directory, so a CI
job killed half way still leaves the runs so far; profiles.html is added when the matrix
compares several guarantee profiles. A shard (logquake.matrix.shard) runs its pairs only;
its index.json still lists every cell, with the shard and the matrix's fingerprint, so
that `logquake test-all merge` can join the shards and refuse those of another matrix. The run function is a parameter so that tests can
stand in recorded results for a cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from logquake.config import resolve_config
from logquake.errors import LogquakeError
from logquake.matrix.shard import WHOLE, Shard, shard_pairs
from logquake.matrix.spec import Cell, Matrix, fingerprint
from logquake.matrix.verdicts import ERROR, RunResult, by_profile, exit_code, judge, summarize
from logquake.results.junit import render_junit

__all__ = ["RunFn", "index_json", "run_matrix", "write_index"]


def index_json(matrix: Matrix, runs: list[RunResult], *, started: float, done: bool,
               shard: Shard = WHOLE) -> dict[str, Any]:
    """index.json: the cells, every run so far, the per-cell and per-profile rows, the exit code."""
    return {
        "started": started, "done": done, "test_count": matrix.test_count, "seed": matrix.seed,
        "fingerprint": fingerprint(matrix), "shard": {"index": shard.index, "total": shard.total},
        "cells": [asdict(c) for c in matrix.cells],
        "skipped": list(matrix.skipped),
        "runs": [asdict(r) for r in runs],
        "summary": summarize(runs),
        "profiles": by_profile(runs),
        "exit_code": exit_code(runs),
    }


# A run: the test config (with its seed) in, its results.json and run directory out.
RunFn = Callable[[dict[str, Any]], tuple[dict[str, Any], str]]


def _run_one(config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    from logquake.runner import run_test

    outcome = run_test(resolve_config(None, config))
    return outcome.results, str(outcome.run_dir)


def run_matrix(matrix: Matrix, out_dir: Path, *, results_dir: str = "results",
               on_result: Callable[[RunResult], None] | None = None,
               on_start: Callable[[Cell, int], None] | None = None,
               run: RunFn = _run_one, shard: Shard = WHOLE) -> list[RunResult]:
    """Run every (cell, seed) of the shard in turn; index.json and junit.xml in out_dir after each run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started, runs = time.time(), []
    _write(out_dir, matrix, runs, started, done=False, shard=shard)  # a shard with no pairs still says so
    for cell, seed in shard_pairs(matrix, shard):
        if on_start is not None:
            on_start(cell, seed)
        t0 = time.monotonic()
        try:
            results, run_dir = run({**cell.config, "seed": seed, "results_dir": results_dir})
            r = judge(cell, seed, results, run_dir=run_dir, duration=time.monotonic() - t0)
        except LogquakeError as e:  # the run could not happen: an error, never a pass
            r = RunResult(cell=cell.name, seed=seed, expect=cell.expect, valid="unknown", outcome=ERROR,
                          message=f"could not run: {type(e).__name__}: {e}", duration=time.monotonic() - t0)
        runs.append(r)
        _write(out_dir, matrix, runs, started, done=False, shard=shard)
        if on_result is not None:
            on_result(r)
    _write(out_dir, matrix, runs, started, done=True, shard=shard)
    return runs


def write_index(out_dir: Path, data: dict[str, Any], runs: list[RunResult]) -> None:
    """index.json (replaced atomically), junit.xml, and profiles.html when several profiles ran."""
    out_dir.mkdir(parents=True, exist_ok=True)
    index = out_dir / "index.json"
    tmp = index.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(index)
    (out_dir / "junit.xml").write_bytes(render_junit(runs))
    if len(data["profiles"]) > 1:  # several profiles: compare them side by side
        from logquake.results.profiles import write_profiles_report

        write_profiles_report(out_dir, data)


def _write(out_dir: Path, matrix: Matrix, runs: list[RunResult], started: float, *, done: bool,
           shard: Shard) -> None:
    write_index(out_dir, index_json(matrix, runs, started=started, done=done, shard=shard), runs)
