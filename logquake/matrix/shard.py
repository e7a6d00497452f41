"""Shards of a test-all matrix: `--shard K/N` runs a stable 1/N of its (cell, seed) pairs.

The pairs are sorted by (cell name, seed) and dealt round-robin: pair i goes to shard
i mod N + 1. Each shard computes its part alone from the matrix and N, so N machines given
K = 1..N run every pair exactly once, whatever order the YAML or the dicts list cells in,
and the shards differ in size by at most one pair. Seeds of one cell land on different
shards, so a slow cell does not pile up on one machine.

`--shard auto` takes K/N from the CI's own variables:

- GitLab CI `parallel: N`: CI_NODE_INDEX (1-based) and CI_NODE_TOTAL;
- Kubernetes Indexed Job: JOB_COMPLETION_INDEX (0-based) and LOGQUAKE_SHARD_TOTAL, which
  the Job sets to its `completions` (Kubernetes exposes the index, never the count).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from logquake.errors import ConfigError
from logquake.matrix.spec import Cell, Matrix, expand

__all__ = ["WHOLE", "Shard", "parse_shard", "shard_pairs"]

TOTAL_VARIABLE = "LOGQUAKE_SHARD_TOTAL"


@dataclass(frozen=True, kw_only=True)
class Shard:
    """Shard `index` of `total` (1-based, as GitLab counts)."""

    index: int
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"


WHOLE = Shard(index=1, total=1)


def shard_pairs(matrix: Matrix, shard: Shard) -> list[tuple[Cell, int]]:
    """The (cell, seed) pairs of `shard`, in the matrix's own run order."""
    pairs = expand(matrix)
    ranked = sorted(range(len(pairs)), key=lambda i: (pairs[i][0].name, pairs[i][1]))
    mine = {i for rank, i in enumerate(ranked) if rank % shard.total == shard.index - 1}
    return [p for i, p in enumerate(pairs) if i in mine]


def parse_shard(text: str | None, env: Mapping[str, str] | None = None) -> Shard:
    """`K/N` or `auto` (the CI's variables, from `env`, default os.environ); None is the whole matrix."""
    if text is None:
        return WHOLE
    if text.strip() == "auto":
        return _from_env(os.environ if env is None else env)
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        raise ConfigError("--shard", f"expected K/N (e.g. 2/4) or auto, got {text!r}")
    return _checked(int(m.group(1)), int(m.group(2)), "--shard")


def _checked(index: int, total: int, where: str) -> Shard:
    if total < 1 or not 1 <= index <= total:
        raise ConfigError(where, f"shard {index}/{total}: K must be between 1 and N, N at least 1")
    return Shard(index=index, total=total)


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(name, f"expected a whole number, got {env[name]!r}") from None


def _from_env(env: Mapping[str, str]) -> Shard:
    if "CI_NODE_INDEX" in env:  # GitLab sets it only for a job with `parallel:`
        if "CI_NODE_TOTAL" not in env:
            raise ConfigError("CI_NODE_TOTAL", "not set, though CI_NODE_INDEX is")
        return _checked(_int(env, "CI_NODE_INDEX"), _int(env, "CI_NODE_TOTAL"), "CI_NODE_INDEX")
    if "JOB_COMPLETION_INDEX" in env:
        if TOTAL_VARIABLE not in env:
            raise ConfigError(TOTAL_VARIABLE, "not set: a Kubernetes Indexed Job gives JOB_COMPLETION_INDEX "
                              "but not the number of completions", hint=f"set {TOTAL_VARIABLE} to the Job's "
                              ".spec.completions in its env (docs/ci.md)")
        return _checked(_int(env, "JOB_COMPLETION_INDEX") + 1, _int(env, TOTAL_VARIABLE), "JOB_COMPLETION_INDEX")
    if env.get("CI_NODE_TOTAL") == "1":  # GitLab without `parallel:`: one job runs it all
        return WHOLE
    raise ConfigError("--shard", "auto: none of CI_NODE_INDEX + CI_NODE_TOTAL (GitLab CI `parallel:`) or "
                      f"JOB_COMPLETION_INDEX + {TOTAL_VARIABLE} (Kubernetes Indexed Job) is set",
                      hint="give --shard K/N (GitHub Actions: --shard ${{ matrix.shard }}/N)")
