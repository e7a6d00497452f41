"""`logquake serve` over real HTTP on 127.0.0.1: the run index, file serving, confinement."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from results_fixtures import (
    PIPELINE_PROFILES,
    invalid_ops,
    make_run_dir,
    pipeline_run_dir,
    valid_ops,
    valid_results,
)

from logquake.results.serve import index_page, make_server, scan_runs


def get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """A raw GET: the path goes on the wire exactly as given (no client-side normalising)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    good = make_run_dir(root, valid_ops(), {"valid": True, "anomalies": {}}, name="queue", start="20261129T100000.000Z")
    (good / "report.html").write_text("<html>the report</html>")
    make_run_dir(root, invalid_ops(), {"valid": False, "bad_error_types": ["lost-write"], "anomalies": {}},
                 name="queue", start="20261129T120000.000Z")
    make_run_dir(root, valid_ops(), {"valid": "unknown", "unknown_because": "cycle search timed out"},
                 name="pipeline", start="20261129T110000.000Z")
    make_run_dir(root, valid_ops(), None, name="queue", start="20261129T130000.000Z")  # still running
    torn = make_run_dir(root, valid_ops(), None, name="queue", start="20261129T140000.000Z")
    (torn / "results.json").write_text('{"valid": tr')  # killed mid-write
    bare = root / "queue" / "20261129T150000.000Z"
    bare.mkdir()
    (bare / "test.json").write_text('{"name": "queue", "start_time": 17')  # torn test.json, nothing else
    (root / "queue" / "not-a-run").mkdir()
    os.symlink(os.path.relpath(good, root), root / "latest")
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", good / "leak.txt")
    return root


@pytest.fixture
def server(results_dir: Path) -> Iterator[int]:
    srv = make_server(results_dir, port=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=30)


def test_index_lists_runs_newest_first_with_verdicts_and_half_written_runs(server: int) -> None:
    status, headers, body = get(server, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    page = body.decode()
    rows = re.findall(r'<tr class="run" data-status="([^"]+)">.*?</tr>', page, re.S)
    dirs = re.findall(r'<tr class="run".*?<a href="/([^"]+)/">', page, re.S)
    assert dirs == [
        "queue/20261129T150000.000Z", "queue/20261129T140000.000Z", "queue/20261129T130000.000Z",
        "queue/20261129T120000.000Z", "pipeline/20261129T110000.000Z", "queue/20261129T100000.000Z",
    ]
    assert rows == ["incomplete", "unreadable", "incomplete", "invalid", "unknown", "valid"]
    assert "cycle search timed out" in page and "half-written" in page and "lost-write" in page
    assert "not-a-run" not in page
    assert 'href="/queue/20261129T100000.000Z/report.html"' in page
    assert 'href="/queue/20261129T100000.000Z/nodes/"' in page
    assert 'href="/queue/20261129T120000.000Z/report.html"' not in page  # no report there: no dead link


def test_run_files_are_served_with_useful_types(server: int) -> None:
    base = "/queue/20261129T100000.000Z"
    status, headers, body = get(server, f"{base}/report.html")
    assert (status, body) == (200, b"<html>the report</html>") and headers["content-type"].startswith("text/html")
    status, headers, body = get(server, f"{base}/results.json")
    assert status == 200 and json.loads(body)["valid"] is True and "json" in headers["content-type"]
    status, headers, body = get(server, f"{base}/history.jsonl")
    assert status == 200 and headers["content-type"].startswith("text/plain") and body.count(b"\n") == 10
    status, _, body = get(server, f"{base}/nodes/")
    assert status == 200 and b'href="n1/"' in body
    status, _, body = get(server, f"{base}/nodes/n1/broker.log")
    assert (status, body) == (200, b"broker n1 up\n")
    status, headers, _ = get(server, f"{base}/nodes")
    assert status == 301 and headers["location"].endswith("/nodes/")
    assert get(server, "/latest/results.json")[0] == 200  # the latest symlink stays inside
    assert get(server, f"{base}/nope.txt")[0] == 404


@pytest.mark.parametrize("path", [
    "/../secret.txt", "/queue/../../secret.txt", "/%2e%2e/secret.txt", "/queue/%2E%2E/%2e%2e/secret.txt",
    "/queue/20261129T100000.000Z/leak.txt", "//etc/passwd", "/..%2f..%2fetc%2fpasswd", "/queue/%00/x",
])
def test_nothing_outside_the_results_dir_is_served(server: int, path: str) -> None:
    status, _, body = get(server, path)
    assert status in (403, 404)
    assert b"outside" not in body.replace(b"outside the results directory", b"") and b"root:" not in body


def test_a_missing_results_dir_is_an_empty_index(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "never-made", port=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        status, _, body = get(srv.server_address[1], "/")
        assert status == 200 and b"No runs in" in body
    finally:
        srv.shutdown()
        srv.server_close()


def test_cli_serve_binds_loopback_and_stops_on_ctrl_c(results_dir: Path) -> None:
    # A suite started in the background by a shell without job control ignores SIGINT, and
    # so would the server it starts (Python leaves an ignored SIGINT ignored): as at a terminal.
    proc = subprocess.Popen([sys.executable, "-m", "logquake", "serve", "--port", "0", "--results", str(results_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()  # blocks until the server is listening (or the process died)
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        status, _, body = get(int(m.group(1)), "/")
        assert status == 200 and b"6 runs" in body
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_cli_serve_port_in_use_is_a_user_error(results_dir: Path) -> None:
    srv = make_server(results_dir, port=0)
    try:
        deadline = time.monotonic() + 120
        out = subprocess.run([sys.executable, "-m", "logquake", "serve", "--port", str(srv.server_address[1]),
                              "--results", str(results_dir)], capture_output=True, text=True,
                             timeout=max(deadline - time.monotonic(), 1))
        assert out.returncode == 3 and "cannot listen" in out.stderr and "Traceback" not in out.stderr
    finally:
        srv.server_close()


def test_the_index_shows_each_runs_guarantee_profile(tmp_path: Path) -> None:
    for g in PIPELINE_PROFILES:
        pipeline_run_dir(tmp_path, g)
    make_run_dir(tmp_path, valid_ops(), valid_results(), name="old")  # a test.json without a profile
    assert sorted(r.guarantee for r in scan_runs(tmp_path)) == ["", *sorted(PIPELINE_PROFILES)]
    page = index_page(tmp_path).decode()
    assert "<th>guarantee</th>" in page
    for g in PIPELINE_PROFILES:
        assert f"<td>pipeline-{g}</td><td>{g}</td>" in page
