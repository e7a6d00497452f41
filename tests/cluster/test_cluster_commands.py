"""Which node directories `cluster down` removes: only those `cluster up` made for itself."""

from __future__ import annotations

import tempfile
from pathlib import Path

from logquake.cluster.commands import SCRATCH_PREFIX, scratch_dir
from logquake.cluster.state import LabState


def _state(run_dir: Path) -> LabState:
    return LabState(cluster_id="c1", subnet=77, mode="root", run_dir=str(run_dir), harness_veth="lqh0",
                    harness_addr="10.77.77.1")


def test_the_scratch_directory_cluster_up_made_is_removed():
    d = Path(tempfile.gettempdir()) / f"{SCRATCH_PREFIX}abc123"
    assert scratch_dir(_state(d)) == d


def test_a_directory_given_with_dir_or_a_runs_results_is_kept(tmp_path):
    assert scratch_dir(_state(tmp_path / "c")) is None
    assert scratch_dir(_state(Path("results/queue/20261202T040000Z"))) is None
    assert scratch_dir(_state(Path(tempfile.gettempdir()) / "other-dir")) is None
