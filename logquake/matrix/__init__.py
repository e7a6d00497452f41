"""`logquake test-all`: a matrix of workloads x nemeses x broker modes, and its verdicts.

- spec.py: the matrix YAML (or `DEFAULT_MATRIX`) parsed and validated into cells; pure.
- verdicts.py: a run's outcome against its cell (`judge`), the per-cell and per-profile
  rows, the exit code; pure.
- shard.py: which (cell, seed) pairs `--shard K/N` runs; `--shard auto` from CI variables; pure.
- run.py: runs every (cell, seed) of a shard through the runner, writing index.json, junit.xml
  (logquake.results.junit) and profiles.html (logquake.results.profiles) as it goes.
- merge.py: `test-all merge`: shards' index.json joined into one, shards of another matrix refused.

The terminal's live tables are logquake.matrix_display, beside the cli.
"""

from logquake.matrix.merge import merge_indexes, merge_shards
from logquake.matrix.run import index_json, run_matrix
from logquake.matrix.shard import WHOLE, Shard, parse_shard, shard_pairs
from logquake.matrix.spec import (
    DEFAULT_MATRIX,
    Cell,
    Matrix,
    expand,
    fingerprint,
    load_matrix,
    matches,
    parse_matrix,
    select,
)
from logquake.matrix.verdicts import RunResult, by_profile, exit_code, judge, summarize

__all__ = [
    "DEFAULT_MATRIX", "WHOLE", "Cell", "Matrix", "RunResult", "Shard", "by_profile", "exit_code", "expand",
    "fingerprint", "index_json", "judge", "load_matrix", "matches", "merge_indexes", "merge_shards",
    "parse_matrix", "parse_shard", "run_matrix", "select", "shard_pairs", "summarize",
]
