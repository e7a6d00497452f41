"""The run directory: names, latest symlink, junit.xml."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from logquake.results import store


def test_run_dirs_are_fresh_and_latest_follows(tmp_path):
    t = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    a = store.create_run_dir(tmp_path, "queue", start=t)
    b = store.create_run_dir(tmp_path, "queue", start=t)
    assert a != b and a.parent == b.parent == tmp_path / "queue"
    store.update_latest(tmp_path, a)
    store.update_latest(tmp_path, b)
    assert (tmp_path / "latest").resolve() == b.resolve()
    assert not (tmp_path / "latest").readlink().is_absolute()


def test_junit_fails_bad_anomalies_and_lists_allowed_ones(tmp_path):
    results = {
        "valid": False,
        "bad_error_types": ["lost-write"],
        "anomalies": {"lost-write": {"count": 2, "errs": [{"key": 1}]}, "G0": {"count": 1, "errs": []}},
    }
    root = ET.parse(store.write_junit(tmp_path, results, name="q", duration=1.5)).getroot()
    assert root.get("tests") == "3" and root.get("failures") == "2"
    names = {c.get("name"): c for c in root.iter("testcase")}
    assert names["lost-write"].find("failure") is not None
    assert names["G0"].find("failure") is None
    ok = ET.parse(store.write_junit(tmp_path, {"valid": True, "anomalies": {}}, name="q", duration=1)).getroot()
    assert ok.get("failures") == "0" and ok.get("errors") == "0"
    unk = ET.parse(store.write_junit(tmp_path, {"valid": "unknown"}, name="q", duration=1)).getroot()
    assert unk.get("errors") == "1"
