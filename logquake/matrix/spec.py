"""The test-all matrix spec: the YAML of `--config` (or `DEFAULT_MATRIX`) parsed into cells.

Pure: no run happens here. Every cell's config is resolved as the runner would resolve it,
so a bad key or value is a `ConfigError` naming it before the first run starts.

A matrix has two parts:

- `safe`: every workload preset x every nemesis against the correct broker; each run must
  come out valid. A preset's own `nemeses` list replaces the matrix's for it.
- `unsafe`: one cell per unsafe broker mode (docs/unsafe-modes.md) with the nemesis and flags
  that expose it and the anomaly types expected; each run must come out invalid with at least
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
every cell records its profile either way.

Each cell runs `test_count` times with seeds `seed`, `seed+1`, ... (`expand`). `select`
keeps the cells an `--only` pattern names; `fingerprint` identifies the matrix, so that
shards of one test-all can be told from shards of another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from logquake.config import resolve_config
from logquake.errors import ConfigError

# The matrix's one read of the delivery guarantees: each profile by name, with the anomaly
# types it allows (the axis's names, and what an unsafe cell may still expect under it).
from logquake.guarantees import GUARANTEES
from logquake.yamlfile import load_mapping

__all__ = ["DEFAULT_MATRIX", "Cell", "Matrix", "expand", "fingerprint", "load_matrix", "matches", "parse_matrix",
           "select"]

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
        # Every node's power lost at once: the broker then takes no writes, so only the final
        # read shows the acknowledged values gone.
        {"mode": {"fsync": "never"}, "nemesis": ["disk:power-loss"], "expect": ["lost"]},
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
    items = value if isinstance(value, list) else [value]
    names = [n.strip() for item in items if isinstance(item, str) for n in item.split(",") if n.strip()]
    bad = [n for n in names if n not in GUARANTEES] + [str(i) for i in items if not isinstance(i, str)]
    if bad or not names:
        raise ConfigError(where, f"expected profiles among {', '.join(GUARANTEES)}, got {bad[0] if bad else value!r}")
    return list(dict.fromkeys(names))


def _guarantee_applies(cfg: dict[str, Any]) -> bool:
    """False for a workload no delivery guarantee changes (offsets: no producer to set)."""
    from logquake.workloads.registry import get_workload

    return get_workload(cfg.get("workload", "queue")).guarantee_applies


def _per_profile(name: str, cfg: dict[str, Any], axis: list[str], pinned: bool,
                 skipped: list[str]) -> list[tuple[str, dict[str, Any], str]]:
    """(cell name, config, profile) for each profile of the axis this cell runs under."""
    if not axis or pinned or not _guarantee_applies(cfg):
        return [(name, cfg, "")]
    out = []
    for g in axis:
        refusal = GUARANTEES[g].txn_refusal
        if refusal and cfg.get("txn"):
            skipped.append(f"{name}/{g}: {refusal}")
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
        wcfg = dict(wcfg or {})
        # A preset may name its own nemeses (a 5-node preset only under the crash faults).
        where = f"matrix.safe.workloads.{wname}.nemeses" if "nemeses" in wcfg else "matrix.safe.nemeses"
        nemeses = wcfg.pop("nemeses", None) or safe.get("nemeses") or ["none"]
        if not isinstance(nemeses, list):
            raise ConfigError(where, f"expected a list of nemeses, got {nemeses!r}")
        for nem in nemeses:
            nems = _nemeses(nem, where)
            label = "+".join(nems) or "none"
            cfg = {**base, **wcfg, "nemesis": nems, "name": f"safe-{wname}-{label}"}
            for name, c, _ in _per_profile(f"safe/{wname}/{label}", cfg, axis, "guarantee" in wcfg,
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
    return [a for a in expect if a not in GUARANTEES[guarantee].allowed]


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
    raw = load_mapping(path, key="--config", holds="cells (test_count, base, safe, unsafe)")
    return parse_matrix(raw, test_count=test_count, time_limit=time_limit, guarantees=guarantees)


def expand(matrix: Matrix) -> list[tuple[Cell, int]]:
    """Every (cell, seed) to run, cells in order, seeds consecutive."""
    return [(c, matrix.seed + i) for c in matrix.cells for i in range(matrix.test_count)]




def matches(name: str, patterns: list[str]) -> bool:
    """Does cell `name` match one of the `--only` patterns? A pattern must start where the name
    or one of its parts does (after `/`, `-` or `:`), so `safe/` never selects an `unsafe/` cell;
    with a trailing `$` it must also end where the name does (`safe/txn/disk$`)."""
    for o in patterns:
        exact, o = o.endswith("$"), o.rstrip("$")
        for i in range(len(name)):
            if (i == 0 or name[i - 1] in "/-:") and name.startswith(o, i) and (not exact or i + len(o) == len(name)):
                return True
    return False


def select(matrix: Matrix, only: list[str]) -> Matrix:
    """The matrix of the cells `only` names (all of them when `only` is empty)."""
    if not only:
        return matrix
    cells = tuple(c for c in matrix.cells if matches(c.name, only))
    if not cells:
        raise ConfigError("--only", f"no cell matches {' or '.join(only)}",
                          hint="a pattern starts where a part of a cell name does, e.g. safe/queue, "
                               "ack-early, partition:leader; end it with $ for the whole rest of the name")
    return replace(matrix, cells=cells)


def fingerprint(matrix: Matrix) -> str:
    """A short digest of what the matrix runs (cells, configs, expectations, seeds): equal for
    every shard of one test-all, different as soon as a cell, a flag or the seeds differ."""
    text = json.dumps({"cells": [asdict(c) for c in matrix.cells], "test_count": matrix.test_count,
                       "seed": matrix.seed}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
