"""junit.xml of a test-all matrix: one test case per run, for CI to show.

A cell becomes the class name (`logquake.safe.queue.kill`), a seed the case name; a run not
as expected is a `failure`, a known gap's miss `skipped` (xfail), a run without a verdict an
`error`. Each case carries its run's verdict, bad anomalies, counts and run directory as
JSON, and its guarantee profile as a property.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from logquake.matrix.verdicts import ERROR, FAIL, XFAIL, RunResult

__all__ = ["render_junit"]


def render_junit(runs: list[RunResult], *, suite: str = "logquake.test-all") -> bytes:
    """junit.xml: one test case per run; a failure message names the anomalies."""
    root = ET.Element("testsuite", name=suite, tests=str(len(runs)),
                      failures=str(sum(r.outcome == FAIL for r in runs)),
                      errors=str(sum(r.outcome == ERROR for r in runs)),
                      skipped=str(sum(r.outcome == XFAIL for r in runs)),
                      time=f"{sum(r.duration for r in runs):.3f}")
    for r in runs:
        case = ET.SubElement(root, "testcase", classname=f"logquake.{r.cell.replace('/', '.')}",
                             name=f"seed-{r.seed}", time=f"{r.duration:.3f}")
        if r.guarantee:
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", name="guarantee", value=r.guarantee)
        detail = json.dumps({"valid": r.valid, "guarantee": r.guarantee, "bad": list(r.bad), "counts": r.counts,
                             "run_dir": r.run_dir})
        if r.outcome == FAIL:
            ET.SubElement(case, "failure", message=r.message).text = detail
        elif r.outcome == XFAIL:
            ET.SubElement(case, "skipped", message=f"xfail: {r.message}").text = detail
        elif r.outcome == ERROR:
            ET.SubElement(case, "error", message=r.message).text = detail
        else:
            ET.SubElement(case, "system-out").text = f"{r.message} {detail}"
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
