"""Every directory and file name a run or test-all creates is portable: no `:`, `*`, `?`, `"`,
`<`, `>`, `|` or `\\`, which GitHub's upload-artifact (and Windows) refuse."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from logquake.matrix import load_matrix, run_matrix
from logquake.results import store

NOT_PORTABLE = set(':*?"<>|\\')


def unportable(root: Path) -> list[str]:
    """Every path under root with a character an artifact store refuses."""
    bad = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            if NOT_PORTABLE & set(name) or any(ord(c) < 32 for c in name):
                bad.append(os.path.relpath(os.path.join(dirpath, name), root))
    return bad


@pytest.mark.parametrize("name, portable", [
    ("unsafe-ack-early-partition:leader", "unsafe-ack-early-partition-leader"),
    ('a*b?c"d<e>f|g\\h', "a-b-c-d-e-f-g-h"),
    ("line\nbreak", "line-break"),
    ("..", "-"),
    ("queue", "queue"),
])
def test_portable_name(name, portable):
    assert store.portable_name(name) == portable


def test_a_run_directory_of_a_cell_with_a_fault_variant_is_portable(tmp_path):
    run = store.create_run_dir(tmp_path, "unsafe-ack-early-partition:leader")
    assert run.parent == tmp_path / "unsafe-ack-early-partition-leader"
    assert unportable(tmp_path) == []


def test_no_path_test_all_creates_for_the_default_matrix_is_unportable(tmp_path):
    """The matrix through the run store as the runner uses it: each cell's run directory,
    test.json, and test-all's index.json, junit.xml and profiles.html."""
    matrix = load_matrix(None, guarantees=["at-least-once", "exactly-once"])  # two: profiles.html too
    assert any(":" in c.name for c in matrix.cells)  # the cells this is about

    def run(config):
        run_dir = store.create_run_dir(config["results_dir"], config["name"])
        (run_dir / store.TEST).write_text(json.dumps(config))
        store.write_results(run_dir, {"valid": True, "anomalies": {}})
        return {"valid": True, "anomalies": {}}, str(run_dir)

    runs = run_matrix(matrix, tmp_path / "test-all" / "20261201T031700Z", results_dir=str(tmp_path), run=run)
    assert len(runs) == len(matrix.cells) and (tmp_path / "test-all" / "20261201T031700Z" / "profiles.html").is_file()
    assert unportable(tmp_path) == []
    # the index keeps the cells' real names
    index = json.loads((tmp_path / "test-all" / "20261201T031700Z" / "index.json").read_text())
    assert {r["cell"] for r in index["runs"]} == {c.name for c in matrix.cells}
