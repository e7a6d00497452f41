"""`logquake test-all merge`: the shards of one matrix joined into one result.

Each shard's index.json lists every cell of the matrix, its fingerprint and which shard it
was; its runs are that shard's pairs. The merge checks that all shards ran one matrix (same
fingerprint, same N, each K once), then lists the runs in the order an unsharded test-all
runs them, so the joined index.json is the one a single machine would have written (apart
from times and run directories). A pair no shard reports (its shard missing, or stopped
half way) becomes an `error` run saying so: a lost shard can never pass. junit.xml is
rendered from the joined runs, as each shard's was from its own, so its cases are the
shards' cases in matrix order.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from logquake.errors import UserError
from logquake.matrix.run import index_json, write_index
from logquake.matrix.shard import WHOLE, Shard, shard_pairs
from logquake.matrix.spec import Cell, Matrix, expand, fingerprint
from logquake.matrix.verdicts import ERROR, RunResult

__all__ = ["find_indexes", "merge_indexes", "merge_shards"]

INDEX = "index.json"


def find_indexes(paths: list[Path]) -> list[Path]:
    """The index.json files given: a file itself, or every index.json under a directory
    (a downloaded artifact holds results/test-all/<time>/index.json)."""
    found: list[Path] = []
    for p in paths:
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            under = sorted(Path(d) / INDEX for d, _, files in os.walk(p) if INDEX in files)
            if not under:
                raise UserError(f"no {INDEX} under {p}", hint="give the shards' results directories or their "
                                                              "test-all/<time>/ directories")
            found.extend(under)
        else:
            raise UserError(f"{p}: no such file or directory")
    return list(dict.fromkeys(f.resolve() for f in found))


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: cannot read a test-all index: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise UserError(f"{path}: not a test-all index.json (no `runs` list)")
    if "fingerprint" not in data:
        raise UserError(f"{path}: has no matrix fingerprint", hint="written by a logquake without "
                        "`--shard`; run the shards again with this version")
    return data


def _matrix(data: dict[str, Any], path: Path) -> Matrix:
    try:
        cells = tuple(Cell(**{**c, "expect": tuple(c.get("expect") or ())}) for c in data["cells"])
        matrix = Matrix(cells=cells, test_count=int(data["test_count"]), seed=int(data["seed"]),
                        skipped=tuple(data.get("skipped") or ()))
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path}: the matrix in this index.json cannot be read ({type(e).__name__}: {e})") from None
    if fingerprint(matrix) != data["fingerprint"]:
        raise UserError(f"{path}: its cells do not match its fingerprint: edited by hand?")
    return matrix


def _shard(data: dict[str, Any], path: Path) -> Shard:
    raw = data.get("shard") or {"index": 1, "total": 1}
    try:
        return Shard(index=int(raw["index"]), total=int(raw["total"]))
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{path}: its `shard` is not {{index, total}}: {raw!r}") from None


def merge_indexes(indexes: list[tuple[Path, dict[str, Any]]]) -> tuple[dict[str, Any], list[RunResult]]:
    """The joined index.json and its runs; UserError for shards of different matrices."""
    if not indexes:
        raise UserError("nothing to merge: no index.json given")
    first_path, first = indexes[0]
    for path, data in indexes[1:]:
        if data["fingerprint"] != first["fingerprint"]:
            raise UserError(f"{path} and {first_path} are shards of different matrices (fingerprints "
                            f"{data['fingerprint']} and {first['fingerprint']})",
                            hint="merge only the shards of one test-all: the same matrix, --only, --test-count, "
                                 "--time-limit, --guarantee and seed")
    matrix = _matrix(first, first_path)
    shards: dict[int, tuple[Path, dict[str, Any]]] = {}
    total = _shard(first, first_path).total
    for path, data in indexes:
        shard = _shard(data, path)
        if shard.total != total:
            raise UserError(f"{path} is shard {shard} but {first_path} is one of {total} shards",
                            hint="merge the shards of one run of the matrix")
        if shard.index in shards:
            raise UserError(f"shard {shard} given twice: {shards[shard.index][0]} and {path}",
                            hint="keep one test-all run's shards only")
        shards[shard.index] = (path, data)
    runs_by_pair: dict[tuple[str, int], RunResult] = {}
    for path, data in shards.values():
        for raw in data["runs"]:
            try:
                r = RunResult.from_json(raw)
            except TypeError as e:
                raise UserError(f"{path}: a run cannot be read: {e}") from None
            runs_by_pair[(r.cell, r.seed)] = r
    missing = [Shard(index=k, total=total) for k in range(1, total + 1) if k not in shards]
    why = {(c.name, s): f"not run: shard {m} gave no index.json" for m in missing for c, s in shard_pairs(matrix, m)}
    runs = []
    for cell, seed in expand(matrix):
        r = runs_by_pair.get((cell.name, seed))
        if r is None:
            r = RunResult(cell=cell.name, seed=seed, expect=cell.expect, valid="unknown", outcome=ERROR,
                          guarantee=cell.guarantee,
                          message=why.get((cell.name, seed), "not run: its shard stopped before it"))
        runs.append(r)
    done = not missing and all(d.get("done") is True for _, d in shards.values())
    data = index_json(matrix, runs, started=min(float(d.get("started") or 0) for _, d in shards.values()),
                      done=done, shard=WHOLE)
    data["merged"] = [{"index": str(p), "shard": k, "runs": len(d["runs"]), "done": d.get("done") is True}
                      for k, (p, d) in sorted(shards.items())]
    data["missing_shards"] = [m.index for m in missing]
    return data, runs


def merge_shards(paths: list[Path], out_dir: Path) -> tuple[dict[str, Any], list[RunResult]]:
    """Join the shards' index.json files under `paths` into out_dir (index.json, junit.xml)."""
    indexes = [(p, _load(p)) for p in find_indexes(paths) if p.parent.resolve() != out_dir.resolve()]
    data, runs = merge_indexes(indexes)
    write_index(out_dir, data, runs)
    return data, runs
