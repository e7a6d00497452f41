"""`logquake serve`: browse the runs of a results directory over HTTP.

The index lists every run directory (results/<test name>/<start time>/) newest first, with
its verdict in colour and links to report.html, results.json, history.jsonl, harness.log,
junit.xml and nodes/. Everything under the results directory is served read-only; paths
are resolved (symlinks included, so results/latest works) and anything that lands outside
the results directory is refused, so `..` and stray symlinks cannot leak other files.

A run that is still running or was killed half-way (no results.json, a torn one, no
history) is listed with what it lacks; reading a run never raises into the server. Built
on the standard library's ThreadingHTTPServer: one thread per request, no dependencies.
"""

from __future__ import annotations

import html
import json
import mimetypes
import os
import posixpath
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RUN_FILES = ("report.html", "results.json", "history.jsonl", "harness.log", "junit.xml")
TEXT_TYPES = {".jsonl": "text/plain", ".log": "text/plain", ".json": "application/json", ".xml": "text/plain",
              ".edn": "text/plain", ".txt": "text/plain", ".yaml": "text/plain"}
STATUS_COLOURS = {"valid": "#2b8a3e", "invalid": "#c92a2a", "unknown": "#e8590c", "not analysed": "#868e96",
                  "incomplete": "#868e96", "broken": "#862e9c"}


@dataclass(frozen=True, kw_only=True)
class RunEntry:
    """One run directory as the index shows it."""

    name: str
    rel: str  # path under the results directory, "/"-separated
    started: float  # epoch seconds, for ordering
    started_text: str
    status: str  # a STATUS_COLOURS key
    detail: str
    files: tuple[str, ...]
    has_nodes: bool
    guarantee: str = ""  # the delivery guarantee profile test.json records ("" for older runs)


def _read_json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except FileNotFoundError:
        return None, "missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"unreadable ({type(e).__name__})"


def _status(run: Path) -> tuple[str, str]:
    results, problem = _read_json(run / "results.json")
    if problem == "missing":
        if not (run / "history.jsonl").exists():
            return "incomplete", "no history.jsonl: the run stopped before recording (or never started)"
        return "incomplete", "no results.json: still running, or stopped before analysis"
    if problem:
        return "broken", f"results.json is {problem}: half-written?"
    if not isinstance(results, dict):
        return "broken", "results.json is not an object"
    valid = results.get("valid")
    status = {True: "valid", False: "invalid"}.get(valid, "unknown") if not isinstance(valid, str) else "unknown"
    types = results.get("bad_error_types") or results.get("error_types") or []
    detail = ", ".join(map(str, types)) if isinstance(types, list) else ""
    if status == "unknown" and results.get("unknown_because"):
        detail = str(results["unknown_because"])
    return status, detail


def _started(run: Path, test: Any) -> tuple[float, str]:
    v = test.get("start_time") if isinstance(test, dict) else None
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v), datetime.fromtimestamp(v, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    try:
        mtime = run.stat().st_mtime
    except OSError:
        mtime = 0.0
    try:  # the run store names directories 20261129T160000.123Z
        t = datetime.strptime(run.name.split("-")[0], "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)
        return t.timestamp(), t.strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return mtime, datetime.fromtimestamp(mtime, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _looks_like_run(d: Path) -> bool:
    return any((d / f).exists() for f in ("test.json", "history.jsonl", "results.json"))


def scan_runs(root: Path) -> list[RunEntry]:
    """Every run directory under `root` (two levels: test name / start time), newest first."""
    runs: list[RunEntry] = []
    try:
        tests = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
    for test_dir in tests:
        try:
            candidates = [p for p in test_dir.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            continue
        runs.extend(_entry(root, run) for run in candidates if _looks_like_run(run))
    runs.sort(key=lambda r: (r.started, r.rel), reverse=True)
    return runs


def _entry(root: Path, run: Path) -> RunEntry:
    test, _ = _read_json(run / "test.json")
    test = test if isinstance(test, dict) else {}
    started, started_text = _started(run, test)
    status, detail = _status(run)
    return RunEntry(
        name=str(test.get("name") or run.parent.name), rel=run.relative_to(root).as_posix(), started=started,
        started_text=started_text, status=status, detail=detail,
        files=tuple(f for f in RUN_FILES if (run / f).is_file()), has_nodes=(run / "nodes").is_dir(),
        guarantee=str(test.get("guarantee") or ""),
    )


def _page(title: str, body: str) -> bytes:
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#212529}}table{{border-collapse:collapse}}
td,th{{border:1px solid #dee2e6;padding:4px 10px;text-align:left}}th{{background:#f1f3f5}}a{{color:#1c7ed6}}
.st{{color:#fff;border-radius:10px;padding:1px 9px;font-weight:600}}.detail{{color:#495057;font-size:12px}}</style>
</head><body>{body}</body></html>""".encode()


def index_page(root: Path) -> bytes:
    runs = scan_runs(root)
    if not runs:
        body = (f"<h1>logquake runs</h1><p>No runs in <code>{html.escape(str(root))}</code> yet. "
                "Start one with <code>logquake run</code>.</p>")
        return _page("logquake runs", body)
    rows = []
    for r in runs:
        q = urllib.parse.quote(r.rel)
        links = [f'<a href="/{q}/{f}">{f}</a>' for f in r.files]
        if r.has_nodes:
            links.append(f'<a href="/{q}/nodes/">nodes/</a>')
        colour = STATUS_COLOURS[r.status]
        rows.append(
            f'<tr class="run" data-status="{r.status}"><td><span class="st" style="background:{colour}">'
            f'{r.status}</span><div class="detail">{html.escape(r.detail)}</div></td>'
            f"<td>{html.escape(r.name)}</td><td>{html.escape(r.guarantee)}</td><td>{html.escape(r.started_text)}</td>"
            f'<td><a href="/{q}/">{html.escape(r.rel)}</a></td><td>{" · ".join(links)}</td></tr>'
        )
    body = (f"<h1>logquake runs</h1><p>{len(runs)} runs in <code>{html.escape(str(root))}</code>, newest first.</p>"
            "<table><tr><th>verdict</th><th>test</th><th>guarantee</th><th>started</th><th>run directory</th>"
            "<th>files</th></tr>"
            + "".join(rows) + "</table>")
    return _page("logquake runs", body)


def listing_page(root: Path, directory: Path, url_path: str) -> bytes:
    try:
        entries = sorted(directory.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    except OSError as e:
        return _page("unreadable", f"<p>cannot list {html.escape(url_path)}: {html.escape(str(e))}</p>")
    items = ['<li><a href="../">../</a></li>'] if directory != root else []
    for p in entries:
        name = p.name + ("/" if p.is_dir() else "")
        items.append(f'<li><a href="{urllib.parse.quote(name)}">{html.escape(name)}</a></li>')
    return _page(url_path, f'<p><a href="/">all runs</a></p><h1>{html.escape(url_path)}</h1><ul>{"".join(items)}</ul>')


def resolve_inside(root: Path, url_path: str) -> Path | None:
    """The file a URL path names under `root`, or None if it would leave `root`."""
    path = posixpath.normpath(urllib.parse.unquote(urllib.parse.urlsplit(url_path).path))
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    if any("\x00" in p for p in parts):
        return None
    target = Path(os.path.realpath(root.joinpath(*parts)))
    real_root = Path(os.path.realpath(root))
    if target != real_root and real_root not in target.parents:
        return None
    return target


class RunsHandler(BaseHTTPRequestHandler):
    """GET / lists runs; GET /<path> serves a file or lists a directory under the root."""

    server_version = "logquake-serve"

    def __init__(self, *args: Any, root: Path, **kw: Any) -> None:
        self.root = root
        super().__init__(*args, **kw)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:  # noqa: N802
        url = urllib.parse.urlsplit(self.path).path
        if url in ("/", "/index.html"):
            return self._send(HTTPStatus.OK, "text/html; charset=utf-8", index_page(self.root), head)
        target = resolve_inside(self.root, url)
        if target is None:
            return self._send(HTTPStatus.FORBIDDEN, "text/plain; charset=utf-8", b"outside the results directory\n",
                              head)
        if target.is_dir():
            if not url.endswith("/"):
                return self._redirect(url + "/")
            return self._send(HTTPStatus.OK, "text/html; charset=utf-8", listing_page(self.root, target, url), head)
        if not target.is_file():
            return self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"no such file\n", head)
        self._send_file(target, head)

    def _send_file(self, target: Path, head: bool) -> None:
        ctype = TEXT_TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype == "application/json":
            ctype += "; charset=utf-8"
        try:
            fh = open(target, "rb")  # noqa: SIM115 - streamed below
        except OSError:
            return self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"unreadable\n", head)
        with fh:
            size = os.fstat(fh.fileno()).st_size
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if not head:
                while chunk := fh.read(1 << 20):
                    self.wfile.write(chunk)

    def _send(self, status: HTTPStatus, ctype: str, body: bytes, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(HTTPStatus.MOVED_PERMANENTLY)
        self.send_header("Location", urllib.parse.quote(location))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass  # quiet: the CLI prints the URL; access logs would drown it


def make_server(results: Path, *, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    """A server for `results` (not started; call serve_forever). Port 0 picks a free port."""
    server = ThreadingHTTPServer((host, port), partial(RunsHandler, root=Path(results).absolute()))
    server.daemon_threads = True
    return server
