"""The test-all verdicts: each run's outcome against what its cell expects, and their tallies.

Pure: a cell and a run's results.json in, a `RunResult` out (`judge`); rows per cell
(`summarize`, the recall table) and per guarantee profile (`by_profile`); the matrix's
exit code. Outcomes: `pass` (valid on the safe broker, or the unsafe mode caught), `fail`
(the reverse), `xfail` (a miss on a cell that declares a known gap: reported, not failing),
`error` (verdict unknown, or the run could not happen).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from logquake.matrix.spec import Cell

__all__ = ["ERROR", "FAIL", "PASS", "XFAIL", "RunResult", "by_profile", "exit_code", "judge", "summarize"]

PASS, FAIL, ERROR, XFAIL = "pass", "fail", "error", "xfail"


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """One finished (or failed-to-run) run of a cell."""

    cell: str
    seed: int
    expect: tuple[str, ...]
    valid: bool | str
    bad: tuple[str, ...] = ()
    outcome: str = ERROR  # pass | fail | xfail | error
    message: str = ""
    run_dir: str = ""
    duration: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    guarantee: str = ""
    processing_counts: dict[str, int] = field(default_factory=dict)  # pipeline runs: {times: inputs}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunResult:
        """A run as index.json stores it (lists where the record has tuples)."""
        return cls(**{**d, "expect": tuple(d.get("expect") or ()), "bad": tuple(d.get("bad") or ())})


def judge(cell: Cell, seed: int, results: Mapping[str, Any], *, run_dir: str = "", duration: float = 0.0) -> RunResult:
    """A run's outcome against what its cell expects."""
    valid = results.get("valid", "unknown")
    bad = tuple(sorted(results.get("bad_error_types") or ()))
    counts = {k: (v.get("count", 0) if isinstance(v, Mapping) else 0)
              for k, v in (results.get("anomalies") or {}).items()}
    common = dict(cell=cell.name, seed=seed, expect=cell.expect, valid=valid, bad=bad, run_dir=run_dir,
                  duration=duration, counts=counts, guarantee=cell.guarantee,
                  processing_counts=_processing(results.get("processing_counts")))
    if valid not in (True, False):
        return RunResult(**common, outcome=ERROR, message=f"verdict unknown: {results.get('error', '')}".strip())
    if not cell.expect:
        if valid:
            return RunResult(**common, outcome=PASS, message="valid")
        return RunResult(**common, outcome=FAIL, message=f"invalid on the safe broker: {', '.join(bad)}")
    hit = [a for a in cell.expect if a in bad]
    if hit:
        return RunResult(**common, outcome=PASS, message=f"caught: {', '.join(hit)}")
    # A miss on a cell with a known gap is reported (xfail) but does not fail the matrix.
    miss = XFAIL if cell.known_gap else FAIL
    gap = f" (known gap: {cell.known_gap})" if cell.known_gap else ""
    if valid:
        return RunResult(**common, outcome=miss, message=f"not caught: valid, expected {' or '.join(cell.expect)}{gap}")
    return RunResult(**common, outcome=miss,
                     message=f"invalid with {', '.join(bad)}, but not the expected {' or '.join(cell.expect)}{gap}")


def _processing(raw: Any) -> dict[str, int]:
    """A pipeline run's {times processed: input values}, {} for other runs or odd shapes."""
    if not isinstance(raw, Mapping):
        return {}
    try:
        return {str(int(k)): int(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        return {}


def summarize(runs: list[RunResult]) -> list[dict[str, Any]]:
    """Per cell: runs, passes, fails, errors (in first-seen order) - the recall table."""
    rows: dict[str, dict[str, Any]] = {}
    for r in runs:
        row = rows.setdefault(r.cell, {"cell": r.cell, "guarantee": r.guarantee, "expect": list(r.expect) or ["valid"],
                                       "runs": 0, PASS: 0, FAIL: 0, ERROR: 0, XFAIL: 0, "anomalies": {}})
        row["runs"] += 1
        row[r.outcome] += 1
        for a in r.bad:
            row["anomalies"][a] = row["anomalies"].get(a, 0) + 1
    return list(rows.values())


def by_profile(runs: list[RunResult]) -> list[dict[str, Any]]:
    """Per guarantee profile (first-seen order): outcomes, bad anomalies, and the processing
    counts of its pipeline runs added up - the comparison of profiles."""
    rows: dict[str, dict[str, Any]] = {}
    for r in runs:
        row = rows.setdefault(r.guarantee, {"guarantee": r.guarantee, "runs": 0, PASS: 0, FAIL: 0, ERROR: 0,
                                            XFAIL: 0, "anomalies": {}, "pipeline_runs": 0,
                                            "processing_counts": {}})
        row["runs"] += 1
        row[r.outcome] += 1
        for a, n in r.counts.items():
            row["anomalies"][a] = row["anomalies"].get(a, 0) + n
        if r.processing_counts:
            row["pipeline_runs"] += 1
            for k, n in r.processing_counts.items():
                row["processing_counts"][k] = row["processing_counts"].get(k, 0) + n
    for row in rows.values():
        row["processing_counts"] = dict(sorted(row["processing_counts"].items(), key=lambda kv: int(kv[0])))
    return list(rows.values())


def exit_code(runs: list[RunResult]) -> int:
    """0 every run as expected (or a known gap), 1 any run invalid/valid against expectation, 2 errors."""
    if any(r.outcome == FAIL for r in runs):
        return 1
    return 2 if any(r.outcome == ERROR for r in runs) else 0
