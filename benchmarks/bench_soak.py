"""Soak: one long `logquake run` under every fault, watched for growth that has no bound.

One run of the queue workload with transactions, on `--key-count` keys that never retire read
by subscribed consumers (see MAX_WRITES_PER_KEY), against the lab's embedded brokers, under
partition, kill, pause, clock and disk faults; or (`--system jetstream`) against nats-server,
whose transactions are atomic batches, under the same faults but the clock (which JetStream
refuses). Every `--interval` s (10) this script samples, with psutil, the harness process and
every process named by a pid file in a node's directory (broker or nats-server, and LazyFS
with disk faults): resident memory, open file descriptors and threads; and the history's size
(bytes, lines, keys written) and the run's phase (harness.log's last `phase` line). It writes
DIR/soak.csv (one row per sample and metric, as it samples), DIR/soak.html (plotly,
self-contained), DIR/soak.svg (a small static figure) and the run's own directory, DIR/run/.

Growth without bound, judged per process and metric over the samples of the main phase (a
process that lived less than half of it alone, a restarted node across its processes: see
`judge`), is a least-squares slope over the last half of them above THRESHOLD_PER_HOUR times
their median per hour by more than two standard errors: the first half is the warm-up
(connections, caches, the interpreter's arenas), the last half is where a leak shows as a trend
rather than a level, and a slope within the series' noise is no trend. A count (descriptors,
threads) must also span more than one unit in that half: a single step of one is a level it
settled at, however clean the slope it fits. A sawtooth (a GC, a buffer that fills and flushes)
fits a slope near zero once the window spans a few of its teeth. The history itself is
recorded, not judged: it grows with the ops by design, and the harness's memory is what must
not follow it.
A short run judges a short window: a single extra thread over 90 s extrapolates to dozens an
hour, so read a `--quick` run's failures as leads, the hour-long one as the verdict.

Exits 1, naming each series that grows and its slope, when anything grows or the verdict is
not valid; 3 when the run could not run. `--judge CSV` judges (and plots) a CSV again.

    .venv/bin/python benchmarks/bench_soak.py [--system jetstream] [--minutes 60] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
INTERVAL = 10.0
THRESHOLD_PER_HOUR = 0.2  # growth by a fifth of the series' median each hour counts as unbounded
MIN_SAMPLES = 6  # fewer main-phase samples (a broker killed soon after it started) are not judged
# Counts move in whole units: a series of these whose last half spans one unit (threads 5 -> 6,
# a pool starting its last worker) took one step, and one step is a level, not a trend.
COUNTED = {"fds", "threads"}
# JetStream refuses clock faults: nats-server reads the clock through the vDSO (systems/jetstream).
NEMESIS = {"kafka": "partition,kill,pause,clock,disk", "jetstream": "partition,kill,pause,disk"}
HARNESS, HISTORY = "harness", "history"
# The workload must hold still for growth to mean a leak. Keys never retire: every node hosts
# the same topics all hour (Elle's rotation, the run's default, makes ~6 new topics a minute,
# each ~45 KiB of a broker's heap: soak 65's stats lines). And consumers subscribe, in one
# group whose committed offsets carry each topic's position from client to client, as a
# long-lived consumer does: with assign, every fresh client reads its keys from offset 0, so
# on logs that never retire each read grows with the hour (soak 66: history 0.2 -> 0.7 KB a
# line and harness RSS 0.14 -> 0.55 GB in 27 minutes, librdkafka's prefetch filling up).
MAX_WRITES_PER_KEY = 10**9
SUB_VIA = "subscribe"
MAIN = "main"  # the runner's phase with workload and faults (logquake.workloads.generator.MAIN)
METRICS = {"rss_mb": "resident memory (MB)", "fds": "open file descriptors", "threads": "threads",
           "history_mb": "history (MB)", "history_lines": "history (lines: invocations and completions)",
           "keys": "keys written (a topic or stream each)"}


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One metric of one process (or of the history) at one moment."""

    t: float  # s since the soak started
    phase: str
    process: str  # "harness", "<node>/<pid file stem>" (n1/broker, n1/lazyfs) or "history"
    pid: int  # 0 for the history
    metric: str
    value: float


@dataclass(frozen=True, kw_only=True)
class Growth:
    """The detector's reading of one series."""

    series: str
    samples: int  # in the judged last half
    median: float
    slope_per_hour: float  # the series' units per hour
    stderr_per_hour: float  # the slope's standard error, same units
    relative_per_hour: float  # slope_per_hour / median
    grows: bool


def growth(series: str, times: Sequence[float], values: Sequence[float], *,
           threshold: float = THRESHOLD_PER_HOUR, quantum: float = 0.0) -> Growth | None:
    """Least-squares slope over the last half of the samples, per hour and relative to their
    median. It grows when the slope exceeds `threshold` x median per hour by more than two
    standard errors: a slope the series' own noise explains is not a trend (a 90 s window of
    a descriptor count that swings by 20 fits +900 an hour either way). A series that moves in
    steps of `quantum` (1 for a count) must also span more than one step in that half: a single
    step fits a slope as clean as any trend, yet two levels cannot tell a leak from a pool that
    started its last worker (a leak of one a quarter-hour still spans two steps in half an hour).
    None when too few samples to judge."""
    if len(times) != len(values):
        raise ValueError(f"{series}: {len(times)} times but {len(values)} values")
    if len(times) < MIN_SAMPLES:
        return None
    half = len(times) // 2
    ts, vs = times[half:], values[half:]
    t_mean, v_mean = statistics.fmean(ts), statistics.fmean(vs)
    spread = sum((t - t_mean) ** 2 for t in ts)
    slope = sum((t - t_mean) * (v - v_mean) for t, v in zip(ts, vs, strict=True)) / spread if spread else 0.0
    residuals = sum((v - v_mean - slope * (t - t_mean)) ** 2 for t, v in zip(ts, vs, strict=True))
    stderr = math.sqrt(residuals / (len(ts) - 2) / spread) if spread and len(ts) > 2 else math.inf
    per_hour, err_per_hour, median = slope * 3600.0, stderr * 3600.0, statistics.median(vs)
    if median > 0:
        relative = per_hour / median
    else:
        relative = math.inf if per_hour > 0 else 0.0
    grows = per_hour - 2 * err_per_hour > threshold * median and max(vs) - min(vs) > quantum
    return Growth(series=series, samples=len(vs), median=median, slope_per_hour=per_hour,
                  stderr_per_hour=err_per_hour, relative_per_hour=relative, grows=grows)


def judge(samples: Iterable[Sample], *, threshold: float = THRESHOLD_PER_HOUR) -> list[Growth]:
    """The detector over every process's every metric in the main phase (not the history's).

    A process is judged alone only when it lived through at least half of the main phase: a
    broker the kill fault restarts every few minutes spends its short life warming up (reading
    its logs back, clients reconnecting), and that climb extrapolated to an hour is no trend.
    A node whose process was restarted is judged as well across its processes (pid `*`), a
    sawtooth whose teeth rise only when what each new process must hold keeps growing; each
    process's first sample is left out of that series, taken within one interval of its start
    (a broker sampled with 1 thread of its 5), not of the level its teeth are judged by."""
    main = sorted((s for s in samples if s.phase == MAIN and s.process != HISTORY), key=lambda s: s.t)
    if not main:
        return []
    span = main[-1].t - main[0].t
    series: dict[tuple[str, str, str], list[Sample]] = {}
    pids: dict[str, set[int]] = {}
    for s in main:
        series.setdefault((s.process, str(s.pid), s.metric), []).append(s)
        pids.setdefault(s.process, set()).add(s.pid)
    seen: set[tuple[str, int, str]] = set()
    for s in main:
        first = (s.process, s.pid, s.metric) not in seen  # sampled as it started: threads 1, no heap yet
        seen.add((s.process, s.pid, s.metric))
        if len(pids[s.process]) > 1 and not first:
            series.setdefault((s.process, "*", s.metric), []).append(s)
    out = []
    for (process, pid, metric), got in sorted(series.items()):
        if got[-1].t - got[0].t < span / 2:
            continue
        g = growth(f"{process}[{pid}] {metric}", [s.t for s in got], [s.value for s in got], threshold=threshold,
                   quantum=1.0 if metric in COUNTED else 0.0)
        if g is not None:
            out.append(g)
    return out


# --- the CSV ------------------------------------------------------------------------------------

_COLUMNS = [f.name for f in fields(Sample)]


def _row(s: Sample) -> list:
    return [getattr(s, c) for c in _COLUMNS]


def write_csv(path: Path, samples: Iterable[Sample]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(_COLUMNS)
        w.writerows(map(_row, samples))


def read_csv(path: Path) -> list[Sample]:
    """The samples of a CSV write_csv wrote; a malformed line is a ValueError naming it."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header != _COLUMNS:
            raise ValueError(f"{path}: line 1: expected the columns {','.join(_COLUMNS)}, got {header}")
        out = []
        for n, row in enumerate(rows, start=2):
            try:
                t, phase, process, pid, metric, value = row
                out.append(Sample(t=float(t), phase=phase, process=process, pid=int(pid), metric=metric,
                                  value=float(value)))
            except ValueError as e:
                raise ValueError(f"{path}: line {n}: {e}") from None
    return out


# --- sampling -----------------------------------------------------------------------------------


class _Tail:
    """A growing file read from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def read(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                got = f.read()
        except OSError:
            return b""
        # Keep a partial last line for the next read: a line is counted once, whole.
        cut = got.rfind(b"\n") + 1
        self.offset += cut
        return got[:cut]


# The runner's Stats.enter logs each phase it enters; harness.log's layout is results/store.py's.
_SENT_KEY = re.compile(rb'\["send",(\d+),')
_PHASE = re.compile(r" logquake\.runner \[[^\]]*\] phase (\w+)$")


class _RunWatch:
    """The run's directory once the harness made it: its phase and its history's size."""

    def __init__(self, results: Path) -> None:
        self.results, self.dir = results, None
        self.phase, self.lines, self.keys = "setup", 0, 0
        self._log: _Tail | None = None
        self._history: _Tail | None = None

    def poll(self) -> None:
        if self.dir is None:
            dirs = sorted(p for p in self.results.glob("*") if p.is_dir() and not p.is_symlink())
            if not dirs:
                return
            self.dir = dirs[-1]
            self._log, self._history = _Tail(self.dir / "harness.log"), _Tail(self.dir / "history.jsonl")
        for line in self._log.read().decode(errors="replace").splitlines():
            if m := _PHASE.search(line):
                self.phase = m[1]
        got = self._history.read()
        self.lines += got.count(b"\n")
        # Keys are fresh integers (workloads/generator.py): the highest one sent counts them, and
        # every key is a topic (a stream) that stays, so the nodes' descriptors follow it.
        self.keys = max([self.keys, *(int(k) + 1 for k in _SENT_KEY.findall(got))])

    def history_bytes(self) -> int:
        try:
            return (self.dir / "history.jsonl").stat().st_size if self.dir else 0
        except OSError:
            return 0

    def processes(self) -> dict[str, int]:
        """"<node>/<stem>" -> pid for every pid file in the nodes' directories."""
        out = {}
        if self.dir is not None:
            for pidfile in sorted(self.dir.glob("nodes/*/*.pid")):
                try:
                    out[f"{pidfile.parent.name}/{pidfile.stem}"] = int(pidfile.read_text().strip())
                except (OSError, ValueError):
                    continue
        return out


def _measure(pid: int) -> dict[str, float] | None:
    """RSS (MB), open fds and threads of a live process; None once it is gone (or a zombie)."""
    import psutil

    try:
        p = psutil.Process(pid)
        with p.oneshot():
            if p.status() == psutil.STATUS_ZOMBIE:
                return None
            return {"rss_mb": p.memory_info().rss / 2**20, "fds": float(p.num_fds()),
                    "threads": float(p.num_threads())}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def sample_once(t: float, harness: int, watch: _RunWatch) -> list[Sample]:
    watch.poll()
    out = []
    for process, pid in [(HARNESS, harness), *watch.processes().items()]:
        for metric, value in (_measure(pid) or {}).items():
            out.append(Sample(t=t, phase=watch.phase, process=process, pid=pid, metric=metric, value=round(value, 3)))
    out.append(Sample(t=t, phase=watch.phase, process=HISTORY, pid=0, metric="history_mb",
                      value=round(watch.history_bytes() / 2**20, 3)))
    out.append(Sample(t=t, phase=watch.phase, process=HISTORY, pid=0, metric="history_lines", value=float(watch.lines)))
    out.append(Sample(t=t, phase=watch.phase, process=HISTORY, pid=0, metric="keys", value=float(watch.keys)))
    return out


def soak(a: argparse.Namespace, out: Path) -> tuple[list[Sample], dict | None, int]:
    """Run the test, sampling while it lasts: (samples, results.json or None, its exit code).
    soak.csv grows as it samples, so an hour cut short still leaves what it measured."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    seconds = a.minutes * 60.0
    argv = [sys.executable, "-m", "logquake", "run", "--system", a.system, "--workload", "queue", "--txn",
            "--nemesis", a.nemesis,
            "--time-limit", f"{seconds:g}", "--rate", f"{a.rate:g}", "--concurrency", str(a.concurrency),
            "--nodes", str(a.nodes), "--backend", "lab", "--name", "soak", "--results-dir", str(out / "run"),
            "--key-count", str(a.key_count), "--max-writes-per-key", str(a.max_writes_per_key),
            "--sub-via", a.sub_via]
    if a.nemesis_interval is not None:
        argv += ["--nemesis-interval", f"{a.nemesis_interval:g}"]
    if a.seed is not None:
        argv += ["--seed", str(a.seed)]
    (out / "command.txt").write_text(" ".join(argv) + "\n")
    watch, samples = _RunWatch(out / "run" / "soak"), []
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with open(out / "run.log", "wb") as log, open(out / "soak.csv", "w", newline="", encoding="utf-8") as table, \
            bar as progress:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # Stopped with kill: the run stops as it does on SIGTERM (heal, teardown, analysis),
        # sampled to its end, rather than outliving this script.
        signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
        rows = csv.writer(table)
        rows.writerow(_COLUMNS)
        task = progress.add_task("soak", total=seconds)
        t0 = time.monotonic()
        due = t0
        while proc.poll() is None:
            now = time.monotonic()
            if now >= due:
                got = sample_once(round(now - t0, 3), proc.pid, watch)
                samples += got
                rows.writerows(map(_row, got))
                table.flush()
                rss = next((s.value for s in got if s.process == HARNESS and s.metric == "rss_mb"), 0.0)
                progress.update(task, completed=min(seconds, now - t0), description=(
                    f"{watch.phase}: {watch.lines:,} history lines, harness {rss:.0f} MB, "
                    f"{len(watch.processes())} node processes"))
                due += a.interval
            try:
                proc.wait(timeout=max(0.05, due - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    watch.poll()
    results = None
    if watch.dir is not None and (watch.dir / "results.json").exists():
        results = json.loads((watch.dir / "results.json").read_text())
    return samples, results, proc.returncode


# --- the plot and the table ---------------------------------------------------------------------


def write_plot(path: Path, samples: Sequence[Sample], threshold: float) -> None:
    """One panel per metric, one line per process (a restarted broker's line drops and goes on);
    the main phase shaded."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    metrics = [m for m in METRICS if any(s.metric == m for s in samples)]
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[METRICS[m] for m in metrics])
    for row, metric in enumerate(metrics, start=1):
        lines: dict[str, list[Sample]] = {}
        for s in samples:
            if s.metric == metric:
                lines.setdefault(s.process, []).append(s)
        for process, got in sorted(lines.items()):
            fig.add_trace(go.Scatter(x=[s.t / 60 for s in got], y=[s.value for s in got], mode="lines+markers",
                                     marker={"size": 3}, name=process, legendgroup=process, showlegend=row == 1,
                                     hovertext=[f"pid {s.pid}, {s.phase}" for s in got]), row=row, col=1)
    main = [s.t / 60 for s in samples if s.phase == MAIN]
    if main:
        fig.add_vrect(x0=min(main), x1=max(main), fillcolor="grey", opacity=0.08, line_width=0)
    fig.update_xaxes(title_text="minutes", row=len(metrics), col=1)
    fig.update_layout(height=260 * len(metrics), title=(
        f"logquake soak: main phase shaded; a series grows when its slope over the last half of the main "
        f"phase exceeds {threshold:g} x its median per hour by two standard errors"))
    fig.write_html(path, include_plotlyjs=True)


_COLOURS = {HARNESS: "#1f77b4", "broker": "#d62728", "nats-server": "#9467bd", "lazyfs": "#2ca02c",
            HISTORY: "#555555"}
SVG_POINTS = 120  # per line: enough to see a trend or a sawtooth, small enough to commit


def _kind(process: str) -> str:
    return process.split("/", 1)[-1]


def _bands(samples: Sequence[Sample], kind: str, metric: str) -> list[tuple[float, float, float, float]]:
    """[(t, min, median, max) over the kind's processes at each sample time], thinned to
    SVG_POINTS by taking each bucket's extremes and middle median (so a spike or a tooth stays)."""
    by_t: dict[float, list[float]] = {}
    for s in samples:
        if s.metric == metric and _kind(s.process) == kind:
            by_t.setdefault(s.t, []).append(s.value)
    rows = [(t, min(v), statistics.median(v), max(v)) for t, v in sorted(by_t.items())]
    step = max(1, math.ceil(len(rows) / SVG_POINTS))
    return [(b[len(b) // 2][0], min(r[1] for r in b), b[len(b) // 2][2], max(r[3] for r in b))
            for b in (rows[i:i + step] for i in range(0, len(rows), step))]


def _panel(rows: Sequence[tuple[float, float, float, float]], *, x0: int, y0: int, w: int, h: int,
           t_max: float, main: tuple[float, float] | None, label: str, colour: str) -> list[str]:
    """One kind's one metric on its own scale: the median line, the nodes' min-max band."""
    hi = max((r[3] for r in rows), default=1.0) * 1.05 or 1.0

    def xy(t: float, v: float) -> str:
        return f"{x0 + w * t / t_max:.1f},{y0 + h - h * v / hi:.1f}"

    out = [f'<text x="{x0}" y="{y0 - 4}">{label}</text>']
    if main:
        out.append(f'<rect x="{x0 + w * main[0] / t_max:.1f}" y="{y0}" width="{w * (main[1] - main[0]) / t_max:.1f}" '
                   f'height="{h}" fill="#000" fill-opacity="0.05"/>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{x0 - 3}" y="{y0 + 9}" text-anchor="end">{hi:,.{0 if hi >= 10 else 1}f}</text>'
               f'<text x="{x0 - 3}" y="{y0 + h}" text-anchor="end">0</text>')
    if any(r[1] != r[3] for r in rows):
        edge = [xy(r[0], r[3]) for r in rows] + [xy(r[0], r[1]) for r in reversed(rows)]
        out.append(f'<polygon points="{" ".join(edge)}" fill="{colour}" fill-opacity="0.2"/>')
    out.append(f'<polyline points="{" ".join(xy(r[0], r[2]) for r in rows)}" fill="none" stroke="{colour}" '
               'stroke-width="1.2"/>')
    return out


def write_svg(path: Path, samples: Sequence[Sample], title: str) -> None:
    """A small static figure for the README (plotly's HTML carries megabytes of JS and no PNG
    export offline): a column per kind of process, each on its own scale (the harness's
    hundreds of descriptors would flatten a broker's tens), a row per metric; the line is the
    median over the nodes, the band their min-max; the main phase shaded."""
    kinds = [HARNESS, *sorted({_kind(s.process) for s in samples} - {HARNESS, HISTORY}, key=lambda k: (k == "lazyfs", k))]
    metrics = [m for m in ("rss_mb", "fds", "threads") if any(s.metric == m for s in samples)]
    w, h, left, top, gap_x, gap_y = 230, 100, 45, 58, 50, 30
    t_max = max((s.t for s in samples), default=1.0) or 1.0
    main_t = [s.t for s in samples if s.phase == MAIN]
    main = (min(main_t), max(main_t)) if main_t else None
    rows = len(metrics) + 1  # and the history, in the first column
    width, height = left + len(kinds) * (w + gap_x), top + rows * (h + gap_y) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="#fff"/>',
           *(f'<text x="{left}" y="{16 + 15 * i}" font-size="12">{t}</text>' for i, t in enumerate(title.split("\n")))]
    for c, kind in enumerate(kinds):
        for r, metric in enumerate(metrics):
            out += _panel(_bands(samples, kind, metric), x0=left + c * (w + gap_x), y0=top + r * (h + gap_y), w=w,
                          h=h, t_max=t_max, main=main, label=f"{kind}: {METRICS[metric]}", colour=_COLOURS.get(kind, "#ff7f0e"))
    for c, metric in enumerate(m for m in ("history_mb", "keys") if any(s.metric == m for s in samples)):
        out += _panel(_bands(samples, HISTORY, metric), x0=left + c * (w + gap_x), y0=top + len(metrics) * (h + gap_y),
                      w=w, h=h, t_max=t_max, main=main, label=METRICS[metric], colour=_COLOURS[HISTORY])
    step = 10 if t_max > 1200 else 1
    bottom = top + rows * (h + gap_y) - gap_y
    out += [f'<text x="{left + w * m * 60 / t_max:.1f}" y="{bottom + 13}" text-anchor="middle">{m}</text>'
            for m in range(0, int(t_max / 60) + 1, step)]
    out.append(f'<text x="{left + w}" y="{bottom + 26}" text-anchor="end">minutes</text></svg>')
    path.write_text("\n".join(out) + "\n")


def _title(out: Path) -> str:
    """The figure's title, from the run's command.txt: which system, how long, which faults."""
    try:
        argv = (out / "command.txt").read_text().split()
    except OSError:
        return "logquake soak"
    opt = {k: v for k, v in zip(argv, argv[1:], strict=False) if k.startswith("--")}
    return (f"logquake soak: {opt.get('--system', 'kafka')}, queue --txn, {float(opt.get('--time-limit', 0)) / 60:g} min "
            f"under {opt.get('--nemesis', '?')}\nmain phase shaded; each panel on its own scale; line: median over "
            "the nodes, band: their min-max")


def show(console, growths: Sequence[Growth], threshold: float) -> None:
    from rich.table import Table

    table = Table(title=f"growth over the last half of the main phase (threshold {threshold:g} x median per hour)")
    for col in ("series", "samples", "median", "slope / h", "+- 2 se", "x median / h", ""):
        table.add_column(col, justify="left" if col == "series" else "right")
    for g in growths:
        table.add_row(g.series, str(g.samples), f"{g.median:,.1f}", f"{g.slope_per_hour:+,.1f}",
                      f"{2 * g.stderr_per_hour:,.1f}", f"{g.relative_per_hour:+.3f}", "[red]GROWS[/]" if g.grows else "flat")
    console.print(table)


def summary(samples: Sequence[Sample]) -> dict[str, float]:
    """Figures for the README: the history at the end and each metric's range over the main phase."""
    out: dict[str, float] = {}
    last = max((s.t for s in samples), default=0.0)
    for s in samples:
        if s.process == HISTORY and s.t == last:
            out[s.metric] = s.value
    for s in samples:
        if s.phase == MAIN and s.process != HISTORY:
            kind = HARNESS if s.process == HARNESS else s.process.split("/", 1)[1]
            lo, hi = f"{kind} {s.metric} min", f"{kind} {s.metric} max"
            out[lo], out[hi] = min(out.get(lo, s.value), s.value), max(out.get(hi, s.value), s.value)
    main = [s.t for s in samples if s.phase == MAIN]
    out["main phase s"] = (max(main) - min(main)) if main else 0.0
    return out


def main() -> int:
    from rich.console import Console

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="length of the main phase (default 60)")
    ap.add_argument("--quick", action="store_true", help="a 3-minute main phase")
    ap.add_argument("--interval", type=float, default=INTERVAL, help="seconds between samples (default 10)")
    ap.add_argument("--threshold", type=float, default=THRESHOLD_PER_HOUR,
                    help=f"growth per hour, as a fraction of the median, that fails (default {THRESHOLD_PER_HOUR:g})")
    ap.add_argument("--rate", type=float, default=100.0, help="target ops/s (default 100, the run's default)")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--key-count", type=int, default=10, help="keys (topics) written at a time (default 10)")
    ap.add_argument("--sub-via", choices=("assign", "subscribe"), default=SUB_VIA,
                    help="how consumers read (default subscribe: positions carry over; see SUB_VIA)")
    ap.add_argument("--max-writes-per-key", type=int, default=MAX_WRITES_PER_KEY,
                    help="retire a key after a random 1..this many writes (default: never; 1024 is the run's "
                         "rotation, which adds topics all hour)")
    ap.add_argument("--system", choices=sorted(NEMESIS), default="kafka",
                    help="kafka (the embedded brokers, default) or jetstream (nats-server; txns are atomic batches)")
    ap.add_argument("--nemesis", help="faults (default every one the system takes: "
                    + "; ".join(f"{k} {v}" for k, v in NEMESIS.items()) + ")")
    ap.add_argument("--nemesis-interval", type=float, help="mean s between fault flips (default the run's)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--out", type=Path, help="output directory (default benchmarks/results/soak-<UTC time>)")
    ap.add_argument("--judge", type=Path, metavar="CSV", help="judge and plot a soak.csv again; no run")
    a = ap.parse_args()
    if a.quick:
        a.minutes = 3.0
    a.nemesis = a.nemesis or NEMESIS[a.system]
    for name in ("minutes", "interval", "rate"):
        if not getattr(a, name) > 0:
            ap.error(f"--{name} must be positive, got {getattr(a, name):g}")
    console = Console() if Console().is_terminal else Console(width=160)
    if a.judge:
        try:
            samples = read_csv(a.judge)
        except (OSError, ValueError) as e:
            ap.error(str(e))
        out, results, rc = a.judge.parent, None, None
    else:
        out = a.out or HERE / "results" / datetime.now(UTC).strftime("soak-%Y-%m-%dT%H%M%S")
        out.mkdir(parents=True, exist_ok=True)
        samples, results, rc = soak(a, out)
    write_plot(out / "soak.html", samples, a.threshold)
    write_svg(out / "soak.svg", samples, _title(out))
    growths = judge(samples, threshold=a.threshold)
    show(console, growths, a.threshold)
    for k, v in summary(samples).items():
        console.print(f"{k}: {v:,.1f}")
    console.print(f"wrote {out / 'soak.csv'}, {out / 'soak.html'} and {out / 'soak.svg'}")
    failed = False
    for g in growths:
        if g.grows:
            console.print(f"[red]grows[/]: {g.series}: {g.slope_per_hour:+,.1f} (+-{2 * g.stderr_per_hour:,.1f}) "
                          f"per hour = {g.relative_per_hour:+.3f} x median {g.median:,.1f} per hour > {a.threshold:g}")
            failed = True
    if not a.judge:
        valid = None if results is None else results.get("valid")
        console.print(f"verdict: valid={valid} (logquake run exit {rc}; its output in {out / 'run.log'})")
        if results is None:
            return 3
        failed = failed or valid is not True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
