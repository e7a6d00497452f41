"""The pipeline workload against a real 3-node lab broker, checked by the pipeline analysis."""

from __future__ import annotations

import pytest

from logquake.checker.pipeline import check_pipeline
from logquake.config import TestConfig
from logquake.guarantees import GUARANTEES
from logquake.workloads.pipeline import run_pipeline
from tests.conftest import requires_root_or_userns

pytestmark = pytest.mark.lab


def _run(tmp_path, guarantee: str) -> dict:
    requires_root_or_userns()
    from logquake.cluster import open_cluster

    with open_cluster(TestConfig(nodes=3), tmp_path) as c:
        c.wait_ready(120)
        ops = run_pipeline(c.bootstrap_servers, GUARANTEES[guarantee], keys=4, values=120, workers=2, timeout=120)
    processed = [op for op in ops if op.f == "process" and op.type == "ok"]
    assert processed, "no worker completed a batch"
    return check_pipeline(ops, guarantee=guarantee)


def test_exactly_once_processes_every_input_once(tmp_path):
    res = _run(tmp_path, "exactly-once")
    assert res["valid"] is True, res
    assert res["processing_counts"] == {"1": res["inputs"]} and res["inputs"] == 120, res


@pytest.mark.slow
def test_at_least_once_loses_nothing(tmp_path):
    res = _run(tmp_path, "at-least-once")
    assert res["valid"] is True, res
    assert "0" not in res["processing_counts"], res
