"""`logquake serve`: browse the runs of a results directory over HTTP, and their trends.

The front page lists each test name with its latest verdict and when that verdict last
changed, then every run directory newest first: verdict in colour, nemesis, client, txn
and seed (so runs of one night can be told apart), and links to report.html, results.json,
history.jsonl, harness.log, junit.xml and nodes/. `/?trend=<test name>` is a test's trend
over nights: each run a mark in time order, coloured by verdict, at its main phase's ok
ops/s, linking to its report, with a table of anomaly types, nemesis and seed. Everything
is rendered here as HTML and inline SVG: the pages fetch nothing.

Run directories are found up to six levels down (results/<test>/<start>/, or the shards'
artifacts of several nights downloaded side by side), never through symlinks. Everything
under the results directory is served read-only; paths are resolved (symlinks included, so
results/latest works) and anything that lands outside the results directory is refused,
so `..` and stray symlinks cannot leak other files.

A run that is still running or was killed half-way (no results.json, a torn or corrupt
one, no history) is listed with what it lacks; reading a run never raises into the
server. Built on the standard library's ThreadingHTTPServer: one thread per request.
"""

from __future__ import annotations

import html
import json
import math
import mimetypes
import os
import posixpath
import threading
import urllib.parse
import warnings
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
                  "incomplete": "#868e96", "unreadable": "#862e9c"}
VERDICTS = ("valid", "invalid", "unknown")  # the statuses a trend follows; the others are runs without one
SCAN_DEPTH = 6  # results/<night>/<shard>/results/<test>/<start>: downloaded CI artifacts side by side


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
    nemesis: str = ""
    client: str = ""
    txn: str = ""  # "txn" or "" (plain sends and polls)
    seed: str = ""
    anomalies: tuple[str, ...] = ()  # the bad anomaly types of an invalid run
    time_limit: float | None = None  # s of main phase, for ops/s

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
        return "unreadable", f"results.json is {problem}: half-written?"
    if not isinstance(results, dict):
        return "unreadable", "results.json is not an object"
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


def _run_dirs(d: Path, depth: int) -> list[Path]:
    """Run directories under d, `depth` levels down at most; a run's own subdirectories are
    not searched (nodes/ holds no runs), nor symlinks (results/latest is one run again)."""
    if depth == 0:
        return []
    try:
        subs = [p for p in d.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
    out = []
    for p in subs:
        out.extend([p] if _looks_like_run(p) else _run_dirs(p, depth - 1))
    return out


def scan_runs(root: Path) -> list[RunEntry]:
    """Every run directory under `root` (results/<test name>/<start time>/, or deeper), newest first."""
    runs = [_entry(root, run) for run in _run_dirs(root, SCAN_DEPTH)]
    runs.sort(key=lambda r: (r.started, r.rel), reverse=True)
    return runs


def _text(v: Any) -> str:
    """A test.json value as the index shows it: lists joined, nothing for null."""
    if isinstance(v, list):
        return ",".join(map(str, v))
    return "" if v is None else str(v)


def _entry(root: Path, run: Path) -> RunEntry:
    test, _ = _read_json(run / "test.json")
    test = test if isinstance(test, dict) else {}
    started, started_text = _started(run, test)
    status, detail = _status(run)
    results, _ = _read_json(run / "results.json") if status in VERDICTS else (None, None)
    bad = results.get("bad_error_types") if isinstance(results, dict) else None
    limit = test.get("time_limit")
    return RunEntry(
        name=str(test.get("name") or run.parent.name), rel=run.relative_to(root).as_posix(), started=started,
        started_text=started_text, status=status, detail=detail,
        files=tuple(f for f in RUN_FILES if (run / f).is_file()), has_nodes=(run / "nodes").is_dir(),
        guarantee=_text(test.get("guarantee")), nemesis=_text(test.get("nemesis")) or ("none" if test else ""),
        client=_text(test.get("client")), txn="txn" if test.get("txn") is True else "",
        seed=_text(test.get("seed")), anomalies=tuple(map(str, bad)) if isinstance(bad, list) else (),
        time_limit=float(limit) if isinstance(limit, int | float) and not isinstance(limit, bool) and limit > 0
        else None,
    )


# ops/s of a history, by (path, mtime, size): a trend page reads each history once per server.
_OPS_CACHE: dict[tuple[str, int, int], float | None] = {}
_OPS_LOCK = threading.Lock()
_NOT_WORK = frozenset({"assign", "subscribe", "crash"})  # client bookkeeping, not the workload's ops


def ops_per_s(run: Path, time_limit: float | None) -> float | None:
    """The main phase's ok client ops per second: ok completions of ops invoked in the first
    `time_limit` s after the first client invoke (the whole history without a limit). None
    when the history is missing or unreadable."""
    from logquake.errors import HistoryFormatError
    from logquake.history import INVOKE, OK, read_history

    path = run / "history.jsonl"
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_mtime_ns, st.st_size)
    with _OPS_LOCK:
        if key in _OPS_CACHE:
            return _OPS_CACHE[key]
    first = last = None
    invoked: dict[Any, int] = {}  # process -> invoke time of its op in flight
    ok_times: list[int] = []
    try:
        with warnings.catch_warnings():  # a torn last line is dropped: that is all a trend needs
            warnings.simplefilter("ignore")
            for op in read_history(path, validate=False):
                if not op.is_client or op.f in _NOT_WORK:
                    continue
                if op.type == INVOKE:
                    invoked[op.process] = op.time
                    first = op.time if first is None else first
                    continue
                last = op.time
                t = invoked.pop(op.process, None)
                if op.type == OK and t is not None:
                    ok_times.append(t)
    except (HistoryFormatError, OSError, ValueError, TypeError, AttributeError, KeyError):
        result = None
    else:
        if first is None or last is None:
            result = None
        else:
            span = time_limit * 1e9 if time_limit else max(last - first, 1)
            result = sum(1 for t in ok_times if t - first <= span) / (span / 1e9)
    with _OPS_LOCK:
        _OPS_CACHE[key] = result
    return result


def _page(title: str, body: str) -> bytes:
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<link rel="icon" href="data:,">
<style>body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#212529}}table{{border-collapse:collapse}}
td,th{{border:1px solid #dee2e6;padding:4px 10px;text-align:left}}th{{background:#f1f3f5}}a{{color:#1c7ed6}}
.st{{color:#fff;border-radius:10px;padding:1px 9px;font-weight:600}}.detail{{color:#495057;font-size:12px}}
td.num{{text-align:right}}svg text{{font:12px system-ui,sans-serif;fill:#495057}}</style>
</head><body>{body}</body></html>""".encode()


def _badge(status: str) -> str:
    return f'<span class="st" style="background:{STATUS_COLOURS[status]}">{status}</span>'


def _trend_href(name: str) -> str:
    return "/?trend=" + urllib.parse.quote(name, safe="")


@dataclass(frozen=True, kw_only=True)
class TestTrend:
    """One test name over its runs: the latest verdict and when it became that."""

    __test__ = False  # not a pytest test class, despite the name

    name: str
    runs: tuple[RunEntry, ...]  # oldest first
    latest: str  # a VERDICTS status, or the newest run's status when none has a verdict
    since: RunEntry | None  # the first run of the latest verdict's streak; None: no verdict yet
    before: str  # the verdict before that streak, "" when it never changed


def trends(runs: list[RunEntry]) -> list[TestTrend]:
    """Per test name (alphabetical): its runs oldest first, latest verdict, when it last changed."""
    by_name: dict[str, list[RunEntry]] = {}
    for r in sorted(runs, key=lambda r: (r.started, r.rel)):
        by_name.setdefault(r.name, []).append(r)
    out = []
    for name in sorted(by_name):
        rs = by_name[name]
        judged = [r for r in rs if r.status in VERDICTS]
        if not judged:
            out.append(TestTrend(name=name, runs=tuple(rs), latest=rs[-1].status, since=None, before=""))
            continue
        k = len(judged) - 1
        while k > 0 and judged[k - 1].status == judged[-1].status:
            k -= 1
        out.append(TestTrend(name=name, runs=tuple(rs), latest=judged[-1].status, since=judged[k],
                             before=judged[k - 1].status if k > 0 else ""))
    return out


def _changed(t: TestTrend) -> str:
    if t.since is None:
        return "no verdict yet"
    n = sum(1 for r in t.runs if r.status in VERDICTS)
    if not t.before:
        return f"never: {t.latest} in all {n} runs with a verdict since {t.since.started_text}"
    return f"{t.since.started_text} (was {t.before})"


def index_page(root: Path) -> bytes:
    runs = scan_runs(root)
    if not runs:
        body = (f"<h1>logquake runs</h1><p>No runs in <code>{html.escape(str(root))}</code> yet. "
                "Start one with <code>logquake run</code>.</p>")
        return _page("logquake runs", body)
    tests = []
    for t in trends(runs):
        tests.append(
            f'<tr class="test" data-latest="{t.latest}"><td><a href="{_trend_href(t.name)}">{html.escape(t.name)}</a>'
            f"</td><td>{_badge(t.latest)}</td><td>{html.escape(_changed(t))}</td><td class=\"num\">{len(t.runs)}</td>"
            f"<td>{html.escape(t.runs[-1].started_text)}</td></tr>")
    rows = []
    for r in runs:
        q = urllib.parse.quote(r.rel)
        links = [f'<a href="/{q}/{f}">{f}</a>' for f in r.files]
        if r.has_nodes:
            links.append(f'<a href="/{q}/nodes/">nodes/</a>')
        rows.append(
            f'<tr class="run" data-status="{r.status}"><td>{_badge(r.status)}'
            f'<div class="detail">{html.escape(r.detail)}</div></td>'
            f"<td>{html.escape(r.name)}</td><td>{html.escape(r.guarantee)}</td><td>{html.escape(r.nemesis)}</td>"
            f"<td>{html.escape(r.client)}</td><td>{html.escape(r.txn)}</td><td class=\"num\">{html.escape(r.seed)}</td>"
            f"<td>{html.escape(r.started_text)}</td>"
            f'<td><a href="/{q}/">{html.escape(r.rel)}</a></td><td>{" · ".join(links)}</td></tr>'
        )
    body = ("<h1>logquake runs</h1><h2>Tests</h2><p>Each test name's latest verdict and when it last changed; "
            "the name opens its trend over time.</p><table id=\"tests\"><tr><th>test</th><th>latest verdict</th>"
            "<th>last changed</th><th>runs</th><th>latest run</th></tr>" + "".join(tests) + "</table>"
            f"<h2>Runs</h2><p>{len(runs)} runs in <code>{html.escape(str(root))}</code>, newest first.</p>"
            "<table id=\"runs\"><tr><th>verdict</th><th>test</th><th>guarantee</th><th>nemesis</th><th>client</th>"
            "<th>txn</th><th>seed</th><th>started</th><th>run directory</th><th>files</th></tr>"
            + "".join(rows) + "</table>")
    return _page("logquake runs", body)


# The trend plot's geometry (px).
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 900, 260, 60, 20, 20, 40


def _ticks(top: float) -> list[float]:
    """Four or five round y ticks from 0 to at least `top`."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / 4
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = int(top // step) + (top % step > 0)
    return [i * step for i in range(n + 1)]


def trend_svg(runs: list[RunEntry], rates: list[float | None]) -> str:
    """The runs (oldest first) as marks left to right in time order, at their ops/s; a run
    with no ops/s (no readable history) sits on the baseline as a hollow mark."""
    ticks = _ticks(max((r for r in rates if r is not None), default=0.0))
    top = ticks[-1]
    t0, t1 = runs[0].started, runs[-1].started
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    parts = [f'<svg id="trend" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
             f'viewBox="0 0 {_W} {_H}" role="img" aria-label="verdicts over time">']
    for t in ticks:
        y = _TOP + plot_h - plot_h * t / top
        parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e9ecef"/>'
                     f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{round(t, 6):g}</text>')
    parts.append(f'<text x="14" y="{_TOP + plot_h / 2:.0f}" transform="rotate(-90 14 {_TOP + plot_h / 2:.0f})" '
                 'text-anchor="middle">ok ops/s</text>')
    # spread by time; runs at equal or close start times keep their order, `gap` px apart
    gap = min(8.0, (plot_w - 20) / max(len(runs) - 1, 1))
    xs: list[float] = []
    for r in runs:
        frac = (r.started - t0) / (t1 - t0) if t1 > t0 else 0.5
        x = _LEFT + 10 + (plot_w - 20) * (frac if len(runs) > 1 else 0.5)
        xs.append(max(x, xs[-1] + gap) if xs else x)
    shift = max(xs[-1] - (_W - _RIGHT - 10), 0.0)  # a crowded right end pushed back inside
    for r, rate, x in zip(runs, rates, xs, strict=True):
        x -= shift * (x - xs[0]) / (xs[-1] - xs[0]) if xs[-1] > xs[0] else 0.0
        y = _TOP + plot_h - (plot_h * rate / top if rate is not None else 0)
        colour = STATUS_COLOURS[r.status]
        fill = colour if rate is not None else "#fff"
        ops = f"{rate:.1f} ok ops/s" if rate is not None else "no ops/s (history unreadable or missing)"
        tip = f"{r.started_text}: {r.status}" + (f" ({r.detail})" if r.detail else "") + f"; {ops}; seed {r.seed}"
        target = f"/{urllib.parse.quote(r.rel)}/" + ("report.html" if "report.html" in r.files else "")
        parts.append(f'<a href="{target}"><circle class="mark" data-status="{r.status}" data-run="{html.escape(r.rel)}" '
                     f'cx="{x:.1f}" cy="{y:.1f}" r="7" fill="{fill}" stroke="{colour}" stroke-width="2.5">'
                     f"<title>{html.escape(tip)}</title></circle></a>")
    parts.append(f'<text x="{_LEFT}" y="{_H - 12}">{html.escape(runs[0].started_text)}</text>')
    if len(runs) > 1:
        parts.append(f'<text x="{_W - _RIGHT}" y="{_H - 12}" text-anchor="end">{html.escape(runs[-1].started_text)}'
                     "</text>")
    parts.append("</svg>")
    return "".join(parts)


def trend_page(root: Path, name: str) -> tuple[int, bytes]:
    """`/?trend=<name>`: the test's runs over time, or 404 when no run has that name."""
    found = [t for t in trends(scan_runs(root)) if t.name == name]
    if not found:
        return 404, _page(f"no test {name}", f'<p><a href="/">all runs</a></p><h1>No runs of test '
                                             f"<code>{html.escape(name)}</code></h1>")
    t = found[0]
    runs = list(t.runs)
    rates = [ops_per_s(root / r.rel, r.time_limit) for r in runs]
    legend = " ".join(_badge(s) for s in dict.fromkeys(r.status for r in runs))
    rows = []
    for r, rate in zip(reversed(runs), reversed(rates), strict=True):
        q = urllib.parse.quote(r.rel)
        report = (f'<a href="/{q}/report.html">report</a>' if "report.html" in r.files
                  else f'<a href="/{q}/">run directory</a>')
        rows.append(
            f'<tr class="trend-run" data-status="{r.status}"><td>{html.escape(r.started_text)}</td>'
            f'<td>{_badge(r.status)}<div class="detail">{html.escape(r.detail)}</div></td>'
            f'<td class="num">{"-" if rate is None else f"{rate:.1f}"}</td>'
            f"<td>{html.escape(', '.join(r.anomalies)) or '-'}</td><td>{html.escape(r.nemesis)}</td>"
            f'<td class="num">{html.escape(r.seed)}</td><td>{html.escape(r.guarantee)}</td><td>{report}</td></tr>')
    body = (f'<p><a href="/">all runs</a></p><h1>{html.escape(name)}</h1>'
            f"<p>Latest verdict {_badge(t.latest)}; last changed: {html.escape(_changed(t))}. "
            f"{len(runs)} runs, oldest on the left; each mark opens its report. {legend}</p>"
            + trend_svg(runs, rates)
            + "<table id=\"trend-runs\"><tr><th>started</th><th>verdict</th><th>ok ops/s (main phase)</th>"
              "<th>bad anomaly types</th><th>nemesis</th><th>seed</th><th>guarantee</th><th>report</th></tr>"
            + "".join(rows) + "</table>")
    return 200, _page(f"{name}: trend", body)


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
    """GET / lists tests and runs, GET /?trend=<test> is a test's trend; GET /<path> serves a
    file or lists a directory under the root."""

    server_version = "logquake-serve"

    def __init__(self, *args: Any, root: Path, **kw: Any) -> None:
        self.root = root
        super().__init__(*args, **kw)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:  # noqa: N802
        split = urllib.parse.urlsplit(self.path)
        url = split.path
        if url in ("/", "/index.html"):
            trend = urllib.parse.parse_qs(split.query).get("trend")
            if trend:
                status, page = trend_page(self.root, trend[0])
                return self._send(HTTPStatus(status), "text/html; charset=utf-8", page, head)
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
