"""`logquake test-all`: a matrix of workloads x nemeses x broker modes, and its verdicts.

A matrix has two parts (both in the YAML of `--config`, see `DEFAULT_MATRIX`):

- `safe`: every workload preset x every nemesis against the correct broker; each run must
  come out valid.
- `unsafe`: one cell per unsafe broker mode (DESIGN.md §3) with the nemesis and flags that
  expose it and the anomaly types expected; each run must come out invalid with at least
  one of them among the bad anomalies ("caught").

Keys of a run's config: `base`, then `time_limit` (top level or `--time-limit`), then the
workload preset or the unsafe entry's `config` (so a cell that needs a longer run keeps it).

`guarantees` (a list of delivery guarantee profiles, or `--guarantee`) is a further axis:
every safe cell, and every unsafe one, runs once per profile, named `.../<profile>`. A
preset or unsafe entry that names its own `guarantee` keeps it (one cell), as does the
`offsets` workload (consumer-group offsets: no producer a profile could set). Combinations
that cannot mean anything are left out and listed in `Matrix.skipped`: transactions under
at-most-once (a transactional producer is idempotent), and an unsafe mode whose expected
anomalies the profile all allows (lost writes under at-most-once are no broken promise);
an unsafe cell's expectation keeps only the types its profile calls bad. Without the axis
names stay as they were and each cell runs under its config's (or the default) profile;
every row records its profile either way. index.json's `profiles` compares them (outcomes,
anomaly counts, pipeline runs' processing counts added up), and a matrix of several
profiles also gets profiles.html beside index.json (logquake.results.profiles).

Each cell runs `test_count` times with seeds `seed`, `seed+1`, ... The sans-I/O part
(expansion, verdicts, index and junit rendering) is separate from `run_matrix`, which runs
the tests one after another through `logquake.runner.run_test`.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from logquake.config import resolve_config
from logquake.errors import ConfigError, LogquakeError

__all__ = [
    "DEFAULT_MATRIX", "Cell", "Matrix", "RunResult", "by_profile", "expand", "judge", "load_matrix",
    "parse_matrix", "render_junit", "run_matrix", "summarize",
]

PASS, FAIL, ERROR, XFAIL = "pass", "fail", "error", "xfail"

# Every run is short and on 3 nodes: the matrix must fit a nightly job on a small machine.
DEFAULT_MATRIX: dict[str, Any] = {
    "test_count": 1,
    "time_limit": 30,
    "seed": 1,
    "base": {"nodes": 3, "rate": 100, "concurrency": 6, "nemesis_interval": 4, "recovery_time": 3,
             "drain_time": 20},
    "safe": {
        "workloads": {"queue": {}, "txn": {"txn": True}},
        # every nemesis of the recall matrix's safe list (docs/recall-matrix.yaml), so each unsafe
        # cell's fault also runs against the correct broker (replies-reset: dedup off's control)
        "nemeses": ["none", "partition", "partition:leader", "partition:replies", "partition:replies-reset", "kill",
                    "pause", "clock", "disk", "disk:power-loss", "packet-loss", "stale-leader"],
    },
    # Each unsafe mode with the fault variant that exposes it (docs/recall-matrix.yaml; measured
    # recall in docs/recall.md).
    "unsafe": [
        # The busiest leader alone against a majority keeps acking until check-quorum deposes it.
        {"mode": {"ack": "early"}, "nemesis": ["partition:leader"], "expect": ["lost-write"],
         "config": {"rate": 200, "concurrency": 10}},
        # Isolate the leader until stale, kill the up-to-date majority, restart part of it with
        # the stale node: an unclean vote elects it.
        {"mode": {"election": "unclean"}, "nemesis": ["stale-leader"], "expect": ["lost-write", "inconsistent-offsets"],
         "config": {"rate": 200, "concurrency": 10}},
        # Kill a majority at once and drop what it never fsynced: a quorum of empty logs reuses
        # acknowledged offsets. Only writes after the broker serves again reveal it: fewer faults,
        # longer run.
        {"mode": {"fsync": "never"}, "nemesis": ["disk:power-loss-majority"],
         "expect": ["lost-write", "inconsistent-offsets"],
         "config": {"rate": 200, "concurrency": 10, "nemesis_interval": 8, "time_limit": 60}},
        # Brokers' replies to the clients dropped, then the client connections aborted: writes
        # appended unanswered, the idempotent producers retry them at once with the same sequences.
        {"mode": {"dedup": "off"}, "nemesis": ["partition:replies-reset"], "expect": ["duplicate"],
         "config": {"guarantee": "idempotent", "rate": 200, "concurrency": 10}},
        {"mode": {"txn_markers": "partial"}, "nemesis": ["kill"], "expect": ["unseen", "G1c", "G1a", "lost-write"],
         "config": {"txn": True, "partitions": 3}},
        # The txn workload aborts 10 % of its writing transactions on purpose, after 0.3 s open.
        {"mode": {"read_committed": "leak"}, "nemesis": ["partition"], "expect": ["G1a"],
         "config": {"txn": True, "partitions": 3}},
    ],
}


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One row of the matrix: a test config and what its runs must show."""

    name: str
    config: dict[str, Any]  # TestConfig keys, before the seed
    expect: tuple[str, ...] = ()  # empty: must be valid; else any of these anomalies must be bad
    known_gap: str = ""  # why a miss is expected today: reported as xfail, not failing the matrix
    guarantee: str = ""  # the delivery guarantee profile its runs use (filled in by parse_matrix)


@dataclass(frozen=True, kw_only=True)
class Matrix:
    cells: tuple[Cell, ...]
    test_count: int = 1
    seed: int = 1
    skipped: tuple[str, ...] = ()  # combinations of the guarantees axis left out, and why


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """One finished (or failed-to-run) run of a cell."""

    cell: str
    seed: int
    expect: tuple[str, ...]
    valid: bool | str
    bad: tuple[str, ...] = ()
    outcome: str = ERROR  # pass | fail | error
    message: str = ""
    run_dir: str = ""
    duration: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    guarantee: str = ""
    processing_counts: dict[str, int] = field(default_factory=dict)  # pipeline runs: {times: inputs}


# -- the matrix, sans I/O ----------------------------------------------------------------


def _mode_name(mode: Mapping[str, str]) -> str:
    return "+".join(f"{k}-{v}" for k, v in mode.items())


def _nemeses(value: Any, where: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(n, str) for n in items):
        raise ConfigError(where, f"expected nemesis names, got {value!r}")
    return [n for n in items if n != "none"]


def parse_matrix(raw: Mapping[str, Any], *, test_count: int | None = None,
                 time_limit: float | None = None, guarantees: list[str] | None = None) -> Matrix:
    """Expand a matrix mapping (DEFAULT_MATRIX's shape) into validated cells.

    `guarantees` (the `--guarantee` flag) replaces the mapping's own `guarantees` axis.
    """
    unknown = set(raw) - {"test_count", "time_limit", "seed", "base", "safe", "unsafe", "guarantees"}
    if unknown:
        raise ConfigError(f"matrix.{sorted(unknown)[0]}", "unknown key; known: test_count, time_limit, seed, "
                          "base, safe, unsafe, guarantees")
    base = dict(raw.get("base") or {})
    limit = time_limit if time_limit is not None else raw.get("time_limit")
    if limit is not None:
        base["time_limit"] = limit
    axis = _guarantees(guarantees if guarantees else raw.get("guarantees"),
                       "--guarantee" if guarantees else "matrix.guarantees")
    skipped: list[str] = []
    cells = (_safe_cells(raw.get("safe") or {}, base, axis, skipped)
             + _unsafe_cells(raw.get("unsafe") or [], base, axis, skipped))
    if not cells:
        raise ConfigError("matrix", "no cells: give `safe` workloads x nemeses or `unsafe` modes"
                          + (f" ({len(skipped)} left out by the guarantees axis)" if skipped else ""))
    cells = [_resolved(c) for c in cells]
    count = test_count if test_count is not None else int(raw.get("test_count", 1))
    if count < 1:
        raise ConfigError("test_count", f"must be at least 1, got {count}")
    return Matrix(cells=tuple(cells), test_count=count, seed=int(raw.get("seed", 1)), skipped=tuple(skipped))


def _resolved(c: Cell) -> Cell:
    """The cell with its profile filled in; every key and value checked before anything runs."""
    try:
        cfg = resolve_config(None, c.config)
    except ConfigError as e:
        raise ConfigError(f"matrix cell {c.name}", str(e), hint=e.hint) from None
    return replace(c, guarantee=cfg.guarantee)


def _guarantees(value: Any, where: str) -> list[str]:
    """The guarantees axis: profile names, in order, once each ([] when not given)."""
    if value is None or value == []:
        return []
    from logquake.guarantees import GUARANTEES as PROFILES

    items = value if isinstance(value, list) else [value]
    names = [n.strip() for item in items if isinstance(item, str) for n in item.split(",") if n.strip()]
    bad = [n for n in names if n not in PROFILES] + [str(i) for i in items if not isinstance(i, str)]
    if bad or not names:
        raise ConfigError(where, f"expected profiles among {', '.join(PROFILES)}, got {bad[0] if bad else value!r}")
    return list(dict.fromkeys(names))


def _per_profile(name: str, cfg: dict[str, Any], axis: list[str], pinned: bool,
                 skipped: list[str]) -> list[tuple[str, dict[str, Any], str]]:
    """(cell name, config, profile) for each profile of the axis this cell runs under."""
    if not axis or pinned or cfg.get("workload") == "offsets":  # offsets: no producer, no profile to vary
        return [(name, cfg, "")]
    out = []
    for g in axis:
        if g == "at-most-once" and cfg.get("txn"):
            skipped.append(f"{name}/{g}: transactions make the producer idempotent, which at-most-once excludes")
            continue
        out.append((f"{name}/{g}", {**cfg, "guarantee": g, "name": f"{cfg['name']}-{g}"}, g))
    return out


def _safe_cells(safe: Mapping[str, Any], base: dict[str, Any], axis: list[str], skipped: list[str]) -> list[Cell]:
    if not safe:
        return []
    workloads = safe.get("workloads") or {"queue": {}}
    if isinstance(workloads, list):
        workloads = {w: {} for w in workloads}
    cells = []
    for wname, wcfg in workloads.items():
        for nem in safe.get("nemeses") or ["none"]:
            nems = _nemeses(nem, "matrix.safe.nemeses")
            label = "+".join(nems) or "none"
            cfg = {**base, **(wcfg or {}), "nemesis": nems, "name": f"safe-{wname}-{label}"}
            for name, c, _ in _per_profile(f"safe/{wname}/{label}", cfg, axis, "guarantee" in (wcfg or {}),
                                           skipped):
                cells.append(Cell(name=name, config=c))
    return cells


def _unsafe_cells(unsafe: list[Any], base: dict[str, Any], axis: list[str], skipped: list[str]) -> list[Cell]:
    cells = []
    for i, entry in enumerate(unsafe):
        where = f"matrix.unsafe[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("mode"), Mapping) or not entry["mode"]:
            raise ConfigError(where, "needs `mode: {<unsafe mode>: <value>}`")
        extra_keys = set(entry) - {"mode", "nemesis", "expect", "config", "name", "known_gap"}
        if extra_keys:
            raise ConfigError(f"{where}.{sorted(extra_keys)[0]}", "unknown key; known: mode, nemesis, expect, "
                              "config, name, known_gap")
        expect = entry.get("expect")
        if not expect or not isinstance(expect, list):
            raise ConfigError(f"{where}.expect", "needs a list of anomaly types, e.g. [lost-write]")
        mode = _mode(entry["mode"], f"{where}.mode")
        nems = _nemeses(entry.get("nemesis", "none"), f"{where}.nemesis")
        extra = dict(entry.get("config") or {})
        broker = {**base.get("broker", {}), **extra.pop("broker", {})}
        broker["unsafe"] = {**broker.get("unsafe", {}), **mode}
        name = entry.get("name") or f"unsafe/{_mode_name(mode)}/{'+'.join(nems) or 'none'}"
        cfg = {**base, **extra, "nemesis": nems, "broker": broker, "name": name.replace("/", "-")}
        for cname, c, g in _per_profile(name, cfg, axis, "guarantee" in extra, skipped):
            want = _bad_under(g, [str(x) for x in expect])
            if not want:
                skipped.append(f"{cname}: {g} allows every expected anomaly ({', '.join(map(str, expect))})")
                continue
            cells.append(Cell(name=cname, config=c, expect=tuple(want), known_gap=str(entry.get("known_gap") or "")))
    return cells


def _bad_under(guarantee: str, expect: list[str]) -> list[str]:
    """The expected anomaly types that `guarantee` calls bad (all of them when no axis applies)."""
    if not guarantee:
        return expect
    from logquake.guarantees import GUARANTEES as PROFILES

    return [a for a in expect if a not in PROFILES[guarantee].allowed]


def _mode(raw: Mapping[str, Any], where: str) -> dict[str, str]:
    """An unsafe mode mapping, checked against the broker's list (YAML reads a bare `off` as false)."""
    from logquake.broker.nodeconfig import UNSAFE_MODES

    mode = {}
    for k, v in raw.items():
        v = "off" if v is False else v
        if k not in UNSAFE_MODES or v not in UNSAFE_MODES[k]:
            known = ", ".join(f"{m}: {'|'.join(vs)}" for m, vs in UNSAFE_MODES.items())
            raise ConfigError(f"{where}.{k}", f"unknown unsafe mode {k}: {v!r}; known: {known}")
        mode[k] = v
    return mode


def load_matrix(path: Path | None, *, test_count: int | None = None, time_limit: float | None = None,
                guarantees: list[str] | None = None) -> Matrix:
    """The matrix of a YAML file, or the default one."""
    if path is None:
        return parse_matrix(DEFAULT_MATRIX, test_count=test_count, time_limit=time_limit, guarantees=guarantees)
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigError("--config", f"cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError("--config", f"{path} is not valid YAML: {e}") from None
    if not isinstance(raw, Mapping):
        raise ConfigError("--config", f"{path} must hold a mapping (test_count, base, safe, unsafe)")
    return parse_matrix(raw, test_count=test_count, time_limit=time_limit, guarantees=guarantees)


def expand(matrix: Matrix) -> list[tuple[Cell, int]]:
    """Every (cell, seed) to run, cells in order, seeds consecutive."""
    return [(c, matrix.seed + i) for c in matrix.cells for i in range(matrix.test_count)]


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


def render_junit(runs: list[RunResult], *, suite: str = "logquake.test-all") -> bytes:
    """junit.xml: one test case per run; a failure message names the anomalies."""
    root = ET.Element("testsuite", name=suite, tests=str(len(runs)),
                      failures=str(sum(r.outcome == FAIL for r in runs)),
                      errors=str(sum(r.outcome == ERROR for r in runs)),
                      skipped=str(sum(r.outcome == XFAIL for r in runs)),
                      time=f"{sum(r.duration for r in runs):.3f}")
    for r in runs:
        case = ET.SubElement(root, "testcase", classname=f"logquake.{r.cell.replace('/', '.')}",
                             name=f"seed-{r.seed}", time=f"{r.duration:.3f}")
        if r.guarantee:
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", name="guarantee", value=r.guarantee)
        detail = json.dumps({"valid": r.valid, "guarantee": r.guarantee, "bad": list(r.bad), "counts": r.counts,
                             "run_dir": r.run_dir})
        if r.outcome == FAIL:
            ET.SubElement(case, "failure", message=r.message).text = detail
        elif r.outcome == XFAIL:
            ET.SubElement(case, "skipped", message=f"xfail: {r.message}").text = detail
        elif r.outcome == ERROR:
            ET.SubElement(case, "error", message=r.message).text = detail
        else:
            ET.SubElement(case, "system-out").text = f"{r.message} {detail}"
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def index_json(matrix: Matrix, runs: list[RunResult], *, started: float, done: bool) -> dict[str, Any]:
    return {
        "started": started, "done": done, "test_count": matrix.test_count, "seed": matrix.seed,
        "cells": [asdict(c) for c in matrix.cells],
        "skipped": list(matrix.skipped),
        "runs": [asdict(r) for r in runs],
        "summary": summarize(runs),
        "profiles": by_profile(runs),
        "exit_code": exit_code(runs),
    }


# -- running ------------------------------------------------------------------------------


RunFn = Callable[[dict[str, Any]], tuple[dict[str, Any], str]]


def _run_one(config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    from logquake.runner import run_test

    outcome = run_test(resolve_config(None, config))
    return outcome.results, str(outcome.run_dir)


def run_matrix(matrix: Matrix, out_dir: Path, *, results_dir: str = "results",
               on_result: Callable[[RunResult], None] | None = None,
               on_start: Callable[[Cell, int], None] | None = None,
               run: RunFn = _run_one) -> list[RunResult]:
    """Run every (cell, seed) in turn; index.json and junit.xml in out_dir after each run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started, runs = time.time(), []
    for cell, seed in expand(matrix):
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
        _write(out_dir, matrix, runs, started, done=False)
        if on_result is not None:
            on_result(r)
    _write(out_dir, matrix, runs, started, done=True)
    return runs


def _write(out_dir: Path, matrix: Matrix, runs: list[RunResult], started: float, *, done: bool) -> None:
    index = out_dir / "index.json"
    tmp = index.with_suffix(".tmp")
    data = index_json(matrix, runs, started=started, done=done)
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(index)
    (out_dir / "junit.xml").write_bytes(render_junit(runs))
    if len(data["profiles"]) > 1:  # several profiles: compare them side by side
        from logquake.results.profiles import write_profiles_report

        write_profiles_report(out_dir, data)


# -- the command line's view --------------------------------------------------------------

_STYLE = {PASS: "green", FAIL: "red", ERROR: "yellow", XFAIL: "magenta"}


def _table(runs: list[RunResult], current: str, total: int) -> Any:
    from rich.table import Table

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


def test_all_with_display(path: Path | None, *, test_count: int | None, time_limit: float | None,
                          results_dir: str, console: Any, guarantees: list[str] | None = None) -> int:
    """Load the matrix, run it under a live table, print the summary; the exit code."""
    from rich.live import Live

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
    from rich.table import Table

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
    from rich.table import Table

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
