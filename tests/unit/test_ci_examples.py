"""The CI examples: .github/workflows/nightly.yml and docs/ci.md's GitLab and Kubernetes files
are valid YAML that shard the matrix, keep portable artifacts and merge the shards."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from logquake.matrix import parse_shard

ROOT = Path(__file__).resolve().parents[2]


def _blocks(lang: str = "yaml") -> list[dict]:
    text = (ROOT / "docs" / "ci.md").read_text()
    return [yaml.safe_load(b) for b in re.findall(rf"```{lang}\n(.*?)```", text, re.S)]


def _steps_text(job: dict) -> str:
    return "\n".join(str(s.get("run", "")) for s in job["steps"])


def test_the_nightly_workflow_runs_shards_and_a_merge_job_whose_uploads_work():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    shards, merge = wf["jobs"]["test-all"], wf["jobs"]["merge"]
    n = len(shards["strategy"]["matrix"]["shard"])
    assert shards["strategy"]["matrix"]["shard"] == list(range(1, n + 1)) and n > 1
    assert shards["strategy"]["fail-fast"] is False
    run = _steps_text(shards)
    assert '--shard "${{ matrix.shard }}/${{ strategy.job-total }}"' in run
    # each shard uploads results/ under its own portable name, without the latest symlink
    [up] = [s for s in shards["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert up["with"]["name"] == "logquake-shard-${{ matrix.shard }}" and up["if"] == "always()"
    assert up["with"]["path"].split() == ["results/", "!results/latest"]
    # the merge job runs even when a shard failed, downloads every shard into one results/
    assert merge["needs"] == "test-all" and merge["if"] == "always()"
    [down] = [s for s in merge["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact")]
    assert down["with"] == {"pattern": "logquake-shard-*", "path": "results", "merge-multiple": True}
    assert "logquake test-all merge results --out merged" in _steps_text(merge)
    uploads = [s["with"] for s in merge["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert {u["path"] for u in uploads} == {"merged/", "merged/junit.xml"}
    for name in [up["with"]["name"]] + [u["name"] for u in uploads]:
        assert not set(name) & set(':*?"<>|\\/'), name  # upload-artifact refuses these in names


def test_docs_ci_gitlab_example_shards_with_parallel_and_merges():
    docs = _blocks()
    [gitlab] = [d for d in docs if isinstance(d, dict) and "stages" in d]
    job, merge = gitlab["test-all"], gitlab["merge"]
    assert isinstance(job["parallel"], int) and job["parallel"] > 1
    assert any("--shard auto" in line for line in job["script"])
    assert job["artifacts"]["paths"] == ["results/"] and job["artifacts"]["exclude"] == ["results/latest"]
    assert merge["needs"] == ["test-all"] and "when" not in merge  # `when` beside `rules` is refused
    assert any(line.startswith("logquake test-all merge results") for line in merge["script"])
    assert merge["artifacts"]["reports"]["junit"] == "merged/junit.xml"
    # what --shard auto makes of the variables GitLab sets in job k of N
    n = job["parallel"]
    assert [str(parse_shard("auto", {"CI_NODE_INDEX": str(k), "CI_NODE_TOTAL": str(n)})) for k in range(1, n + 1)] \
        == [f"{k}/{n}" for k in range(1, n + 1)]


def test_docs_ci_kubernetes_example_is_an_indexed_job_with_its_total():
    docs = _blocks()
    [job] = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Job"
             and d["spec"].get("completionMode") == "Indexed"]
    spec = job["spec"]
    [c] = spec["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LOGQUAKE_SHARD_TOTAL"] == str(spec["completions"])
    assert c["command"][1:4] == ["test-all", "--shard", "auto"]
    total = spec["completions"]
    got = [str(parse_shard("auto", {"JOB_COMPLETION_INDEX": str(i), "LOGQUAKE_SHARD_TOTAL": env["LOGQUAKE_SHARD_TOTAL"]}))
           for i in range(total)]
    assert got == [f"{k}/{total}" for k in range(1, total + 1)]
    [merge] = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Job" and d is not job]
    [m] = merge["spec"]["template"]["spec"]["containers"]
    assert m["command"][1:3] == ["test-all", "merge"]

