"""The run directory (docs/architecture.md): create it, write its files, point results/latest at it.

    results/<test name>/<start time>/
        test.json       the resolved config, the seed, client settings (config.save_config)
        history.jsonl   written by the runner as ops complete (history.HistoryWriter)
        results.json    the checker's verdict
        junit.xml       one test case per bad anomaly type, for CI
        harness.log     this process's log
        nodes/<node>/   broker logs (collected by the cluster)
    results/latest -> <test name>/<start time>

Every name a run, test-all or merge gives a directory or file goes through `portable_name`:
test names come from users and matrix cells (`partition:leader`), and CI artifact stores
(GitHub's upload-artifact) and other file systems refuse `:`, `*`, `?`, `"`, `<`, `>`, `|`
and `\\`. The name in test.json and index.json stays the one the user or cell gave.
"""

from __future__ import annotations

import json
import logging
import os
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HISTORY = "history.jsonl"
RESULTS = "results.json"
TEST = "test.json"
JUNIT = "junit.xml"
HARNESS_LOG = "harness.log"
NODES = "nodes"

# Characters some file system or artifact store refuses in a path component, and control
# characters (a newline in a directory name breaks more tools than it pleases).
_NOT_PORTABLE = re.compile(r'[:*?"<>|\\/\x00-\x1f\x7f]')


def portable_name(name: str) -> str:
    """`name` as one path component every file system and CI artifact store accepts: each
    character of `:*?"<>|\\/` or a control character becomes `-` (`partition:leader` ->
    `partition-leader`); `.`, `..` and "" (no name of their own) become `-`."""
    name = _NOT_PORTABLE.sub("-", name)
    return "-" if name in ("", ".", "..") else name


def create_run_dir(results_dir: str | Path, name: str, *, start: datetime | None = None) -> Path:
    """A new, empty results/<name>/<start time>/ directory (never an existing one); the name
    made portable."""
    start = start or datetime.now(UTC)
    base = Path(results_dir) / portable_name(name)
    stamp = start.strftime("%Y%m%dT%H%M%S.%f")[:-3] + "Z"
    for n in range(1000):
        d = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            d.mkdir(parents=True)
            return d
        except FileExistsError:
            continue
    raise FileExistsError(f"could not make a fresh run directory under {base}")


def update_latest(results_dir: str | Path, run_dir: Path) -> Path:
    """Point results/latest at run_dir (a relative symlink, replaced atomically)."""
    root = Path(results_dir)
    link = root / "latest"
    target = os.path.relpath(run_dir.resolve(), root.resolve())
    tmp = root / f".latest-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return link


def write_results(run_dir: Path, results: dict[str, Any]) -> Path:
    path = run_dir / RESULTS
    path.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path


def write_junit(run_dir: Path, results: dict[str, Any], *, name: str, duration: float) -> Path:
    """junit.xml: a case `valid` plus one per anomaly type; bad ones fail, unknown is an error."""
    anomalies: dict[str, Any] = results.get("anomalies") or {}
    bad = set(results.get("bad_error_types") or [])
    suite = ET.Element("testsuite", name=f"logquake.{name}", time=f"{duration:.3f}")
    verdict = ET.SubElement(suite, "testcase", classname=f"logquake.{name}", name="valid")
    valid = results.get("valid")
    if valid is False:
        ET.SubElement(verdict, "failure", message="invalid: " + ", ".join(sorted(bad)) or "invalid")
    elif valid != True:  # noqa: E712 - "unknown" or anything unexpected
        ET.SubElement(verdict, "error", message=str(results.get("error") or "the verdict is unknown"))
    for kind in sorted(anomalies):
        case = ET.SubElement(suite, "testcase", classname=f"logquake.{name}", name=kind)
        entry = anomalies[kind] or {}
        count = entry.get("count", 0) if isinstance(entry, dict) else 0
        text = json.dumps((entry.get("errs") or [])[:3] if isinstance(entry, dict) else entry, default=str)
        if kind in bad:
            f = ET.SubElement(case, "failure", message=f"{count} {kind}")
            f.text = text
        else:
            ET.SubElement(case, "system-out").text = f"{count} {kind} (allowed)"
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    path = run_dir / JUNIT
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    return path


def attach_harness_log(run_dir: Path) -> logging.Handler:
    """Send the `logquake` loggers to run_dir/harness.log; detach with detach_harness_log."""
    handler = logging.FileHandler(run_dir / HARNESS_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"))
    handler.setLevel(logging.INFO)
    root = logging.getLogger("logquake")
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.INFO:
        root.setLevel(logging.INFO)
    return handler


def detach_harness_log(handler: logging.Handler) -> None:
    logging.getLogger("logquake").removeHandler(handler)
    handler.close()
