"""profiles.html: a test-all matrix's guarantee profiles side by side.

`write_profiles_report(out_dir, index)` renders the `profiles` rows of a matrix's index.json
(logquake.matrix.verdicts.by_profile): per profile its runs and outcomes, the bad anomaly types its
runs showed, and, where it ran the pipeline workload, the processing-count distribution
added up over those runs, drawn as grouped bars (shares of each profile's input values,
since runs differ in length). Written only for a matrix of several profiles; one file,
plotly inlined, like report.html.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import plotly.io as pio
from plotly.offline import get_plotlyjs

from logquake.results import plots
from logquake.results.report import template

PROFILES_FILE = "profiles.html"




def _row(p: dict[str, Any]) -> dict[str, Any]:
    counts = plots.processing_counts(p.get("processing_counts")) or {}
    total = sum(counts.values())
    anomalies = p.get("anomalies") if isinstance(p.get("anomalies"), dict) else {}
    return {
        "guarantee": str(p.get("guarantee") or "not recorded"), "runs": p.get("runs", 0),
        "as_expected": p.get("pass", 0), "fail": p.get("fail", 0), "xfail": p.get("xfail", 0),
        "error": p.get("error", 0), "anomalies": sorted(anomalies.items()),
        "pipeline_runs": p.get("pipeline_runs", 0), "inputs": total,
        "shares": [(k, n, 100 * n / total) for k, n in counts.items()] if total else [],
        "zero": counts.get(0, 0), "once": counts.get(1, 0), "more": sum(n for k, n in counts.items() if k > 1),
    }


def _runs(index: dict[str, Any], out_dir: Path | None) -> list[dict[str, Any]]:
    """Each run's row, with a link to its report relative to the page (when it has one)."""
    out = []
    for r in index.get("runs") or []:
        if not isinstance(r, dict):
            continue
        report = Path(str(r.get("run_dir") or "")) / "report.html"
        link = ""
        if r.get("run_dir") and out_dir is not None and report.is_file():
            link = os.path.relpath(report, out_dir)
        out.append({"cell": r.get("cell", ""), "guarantee": r.get("guarantee") or "", "seed": r.get("seed", ""),
                    "outcome": r.get("outcome", ""), "message": r.get("message", ""), "report": link})
    return out


def render_profiles(index: dict[str, Any], *, title: str = "test-all", out_dir: Path | None = None) -> str:
    rows = [_row(p) for p in index.get("profiles") or [] if isinstance(p, dict)]
    counts = {r["guarantee"]: dict((k, n) for k, n, _ in r["shares"]) for r in rows if r["shares"]}
    figure = None
    if counts:
        figure = pio.to_html(plots.profiles_figure(counts), full_html=False, include_plotlyjs=False,
                             div_id="plot-profiles", validate=False,
                             config={"displaylogo": False, "responsive": True})
    return template("profiles.html.j2").render(title=title, rows=rows, figure=figure, done=bool(index.get("done")),
                              skipped=index.get("skipped") or [], runs=_runs(index, out_dir),
                              plotly_js=get_plotlyjs())


def write_profiles_report(out_dir: Path, index: dict[str, Any]) -> Path:
    """Write out_dir/profiles.html (atomically) and return its path."""
    target = Path(out_dir) / PROFILES_FILE
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(render_profiles(index, title=f"test-all {Path(out_dir).name}", out_dir=Path(out_dir)),
                   encoding="utf-8")
    tmp.replace(target)
    return target
