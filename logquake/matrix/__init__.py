"""`logquake test-all`: a matrix of workloads x nemeses x broker modes, and its verdicts.

- spec.py: the matrix YAML (or `DEFAULT_MATRIX`) parsed and validated into cells; pure.
- verdicts.py: a run's outcome against its cell (`judge`), the per-cell and per-profile
  rows, the exit code; pure.
- run.py: runs every (cell, seed) through the runner, writing index.json, junit.xml
  (logquake.results.junit) and profiles.html (logquake.results.profiles) as it goes.

The terminal's live tables are logquake.matrix_display, beside the cli.
"""

from logquake.matrix.run import index_json, run_matrix
from logquake.matrix.spec import DEFAULT_MATRIX, Cell, Matrix, expand, load_matrix, parse_matrix
from logquake.matrix.verdicts import RunResult, by_profile, exit_code, judge, summarize

__all__ = [
    "DEFAULT_MATRIX", "Cell", "Matrix", "RunResult", "by_profile", "exit_code", "expand", "index_json", "judge",
    "load_matrix", "parse_matrix", "run_matrix", "summarize",
]
