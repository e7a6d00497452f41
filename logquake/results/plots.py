"""Plotly figures of a digested history: latency, throughput, unseen, realtime lag, timeline.

Each function takes a `Digest` and returns a `plotly.graph_objects.Figure` small enough to
embed: scatter plots keep at most `max_points` points (every non-ok op first, since those
are the interesting ones, then an even stride through the ok ops), and step series are
reduced to one point per pixel-sized time bin keeping each bin's maximum, so spikes
survive downsampling. Nemesis intervals are shaded on every time axis, one colour per
fault kind, with one legend entry per kind.

Figures are plain plotly JSON dicts, rendered with validation off: plotly's object model
validates every point and re-validates all shapes on each `add_vrect`, which took minutes
for a million-op history. The template is expanded once from plotly's own.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Collection
from functools import cache
from typing import Any

import plotly.io as pio

from logquake.results.digest import Digest, Interval, Series, TimelineOp

NS = 1e9
MS = 1e6
MAX_SCATTER_POINTS = 15_000
MAX_STEP_POINTS = 1_500
MAX_BINS = 400

OUTCOME_COLOURS = {"ok": "#2b8a3e", "fail": "#c92a2a", "info": "#e8890c", "incomplete": "#868e96"}
F_SYMBOLS = ["circle", "x", "diamond", "triangle-up", "square", "cross", "star"]
FAULT_COLOURS = ["#d0a8ff", "#ffc078", "#74c0fc", "#ffa8a8", "#8ce99a", "#ffe066", "#99e9f2", "#eebefa"]


def fault_colours(intervals: list[Interval]) -> dict[str, str]:
    kinds = sorted({iv.kind for iv in intervals})
    return {k: FAULT_COLOURS[i % len(FAULT_COLOURS)] for i, k in enumerate(kinds)}


Figure = dict[str, Any]  # {"data": [trace, ...], "layout": {...}}, plotly's JSON


@cache
def _template() -> dict[str, Any]:
    return pio.templates["plotly_white"].to_plotly_json()


def _shade(fig: Figure, d: Digest, *, within: tuple[int, int] | None = None) -> None:
    """Shade each fault interval (clipped to `within`, ns); one legend entry per kind."""
    colours = fault_colours(d.intervals)
    shown: set[str] = set()
    lo, hi = within or (0, d.end_time)
    shapes = fig["layout"].setdefault("shapes", [])
    for iv in d.intervals:
        start, stop = max(iv.start, lo), min(iv.stop if iv.stop is not None else d.end_time, hi)
        if start > stop:
            continue
        shapes.append({
            "type": "rect", "xref": "x", "yref": "paper", "x0": start / NS, "x1": max(stop, start + 1) / NS,
            "y0": 0, "y1": 1, "fillcolor": colours[iv.kind], "opacity": 0.35, "line": {"width": 0},
            "layer": "below", "name": iv.kind, "legendgroup": f"fault-{iv.kind}",
            "showlegend": iv.kind not in shown,
        })
        shown.add(iv.kind)


def _figure(traces: list[dict[str, Any]], title: str, y_title: str, **extra: Any) -> Figure:
    layout: dict[str, Any] = {
        "template": _template(), "title": {"text": title}, "height": 420,
        "xaxis": {"title": {"text": "time since test start (s)"}}, "yaxis": {"title": {"text": y_title}},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "legend": {"groupclick": "toggleitem"},
    }
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(layout.get(k), dict):
            layout[k] = layout[k] | v
        else:
            layout[k] = v
    return {"data": traces, "layout": layout}


def _stride(n: int, budget: int) -> range:
    return range(n) if n <= budget else range(0, n, -(-n // budget))


def _budgets(series: dict[tuple[str, str], Series], total: int) -> dict[tuple[str, str], int]:
    """Points per series: non-ok series keep theirs (up to a share), ok ones split the rest."""
    budgets: dict[tuple[str, str], int] = {}
    left = total
    for key, s in series.items():
        if key[1] != "ok":
            budgets[key] = min(len(s.start), total // 4)
            left -= budgets[key]
    ok = [k for k in series if k[1] == "ok"]
    for key in ok:
        budgets[key] = max(left // max(len(ok), 1), 500)
    return budgets


DASHES = ["solid", "dot", "dash", "dashdot", "longdash", "longdashdot"]


def _dashes(d: Digest) -> dict[str, str]:
    fs = sorted({f for f, _ in d.series})
    return {f: DASHES[i % len(DASHES)] for i, f in enumerate(fs)}


def _symbols(d: Digest) -> dict[str, str]:
    fs = sorted({f for f, _ in d.series})
    return {f: F_SYMBOLS[i % len(F_SYMBOLS)] for i, f in enumerate(fs)}


def latency_figure(d: Digest, *, max_points: int | None = None) -> Figure:
    """Latency of each op against its invocation time, by op kind (marker) and outcome (colour)."""
    traces = []
    budgets = _budgets(d.series, max_points or MAX_SCATTER_POINTS)
    symbols = _symbols(d)
    sampled = False
    for (f, outcome), s in sorted(d.series.items()):
        idx = _stride(len(s.start), budgets[(f, outcome)])
        sampled |= len(idx) < len(s.start)
        traces.append({
            "type": "scatter", "x": [s.start[i] / NS for i in idx], "y": [max(s.latency[i], 1) / MS for i in idx],
            "customdata": [s.index[i] for i in idx], "mode": "markers", "name": f"{f} {outcome} ({len(s.start):,})",
            "marker": {"color": OUTCOME_COLOURS.get(outcome, "#495057"), "symbol": symbols[f], "size": 5,
                       "opacity": 0.6},
            "hovertemplate": f"op %{{customdata}} {f} {outcome}<br>invoked %{{x:.3f}} s<br>latency %{{y:.2f}} ms"
                             "<extra></extra>",
        })
    title = "Latency by op kind and outcome" + (" (downsampled; counts in legend are exact)" if sampled else "")
    fig = _figure(traces, title, "latency (ms)", yaxis={"type": "log"})
    _shade(fig, d)
    return fig


def _bin_width(end_ns: int) -> int:
    """A round bin width (1, 2 or 5 x 10^k ns) giving at most MAX_BINS bins."""
    raw = max(end_ns / MAX_BINS, 1e6)
    scale = 10 ** len(str(int(raw))) // 10
    for m in (1, 2, 5, 10):
        if m * scale >= raw:
            return m * scale
    return 10 * scale  # pragma: no cover


def throughput_figure(d: Digest) -> Figure:
    """Completions per second over time, one line per (f, outcome)."""
    width = _bin_width(d.end_time)
    n_bins = d.end_time // width + 1
    traces = []
    dashes = _dashes(d)
    x = [round((i + 0.5) * width / NS, 6) for i in range(n_bins)]
    for (f, outcome), s in sorted(d.series.items()):
        counts = [0] * n_bins
        for start, lat in zip(s.start, s.latency, strict=True):
            counts[(start + lat) // width] += 1
        traces.append({
            "type": "scatter", "x": x, "y": [c * NS / width for c in counts],
            "mode": "lines+markers" if n_bins < 60 else "lines", "name": f"{f} {outcome}",
            "line": {"color": OUTCOME_COLOURS.get(outcome, "#495057"), "shape": "hvh",
                     "dash": dashes[f]},
            "hovertemplate": f"{f} {outcome}: %{{y:.1f}} ops/s<extra></extra>",
        })
    fig = _figure(traces, f"Throughput (completions per second, {width / MS:g} ms bins)", "ops/s")
    _shade(fig, d)
    return fig


def _max_per_bin(t: array, y: array, end: int) -> tuple[list[float], list[float]]:
    """Each bin's maximum (so spikes survive), as (seconds, value) points."""
    if len(t) <= MAX_STEP_POINTS:
        return [x / NS for x in t], list(y)
    width = max(end // MAX_STEP_POINTS, 1)
    best: dict[int, int] = {}
    for ti, yi in zip(t, y, strict=True):
        b = ti // width
        if yi > best.get(b, -1):
            best[b] = yi
    bins = sorted(best)
    return [b * width / NS for b in bins], [best[b] for b in bins]


def checker_series(points: Any, y_key: str) -> tuple[array, array] | None:
    """A checker's [{"time": seconds, y_key: n}, ...] series as (ns, values) arrays, if well formed."""
    if not isinstance(points, list) or not points:
        return None
    try:
        t = array("q", (int(p["time"] * NS) for p in points))
        y = array("q", (int(p[y_key]) for p in points))
    except (TypeError, KeyError, ValueError):
        return None
    return t, y


def unseen_figure(d: Digest, checker_points: Any = None) -> Figure:
    """Acknowledged values not yet read by any ok poll, over time.

    The checker's own series (results.json `unseen_over_time`) wins when present, so the
    plot agrees with the verdict; otherwise the digest's recomputation is used.
    """
    series = checker_series(checker_points, "unseen") or (d.unseen_t, d.unseen_n)
    x, y = _max_per_bin(series[0], series[1], d.end_time)
    final = series[1][-1] if len(series[1]) else 0
    fig = _figure([{"type": "scatter", "x": x, "y": y, "mode": "lines", "line": {"shape": "hv", "color": "#1c7ed6"},
                    "name": "unseen", "hovertemplate": "%{x:.3f} s: %{y} unseen<extra></extra>"}],
                  f"Unseen acknowledged values over time (at the end: {final:,})", "values")
    _shade(fig, d)
    return fig


def lost_figure(d: Digest, checker_points: Any = None) -> Figure:
    """Acknowledged values absent from the final read, counted by when they were acknowledged.

    The series is the checker's (results.json `final_read.lost_over_time`); a run whose
    values all survived, or that had no final read, shows a flat line at 0.
    """
    series = checker_series(checker_points, "lost")
    t, n = series if series is not None else ([], [])
    total = n[-1] if len(n) else 0
    x = [0.0, *(v / NS for v in t), d.end_time / NS]
    y = [0, *n, total]
    fig = _figure([{"type": "scatter", "x": x, "y": y, "mode": "lines", "line": {"shape": "hv", "color": "#c92a2a"},
                    "name": "lost", "hovertemplate": "acknowledged by %{x:.3f} s: %{y} lost<extra></extra>"}],
                  f"Lost values by time acknowledged (in all: {total:,})",
                  "values")
    _shade(fig, d)
    return fig


def lag_figure(d: Digest, checker_worst: Any = None, checker_points: Any = None) -> Figure:
    """The checker's realtime lag: each run's peak (results.json `realtime_lag_over_time`),
    the worst in each time bin; the title names its worst. A results.json from before the
    series plots no line."""
    t, lag = array("q"), array("q")
    for p in checker_points if isinstance(checker_points, list) else ():
        try:
            t.append(int(p["time"] * NS))
            lag.append(int(round(p["lag"] * NS)))
        except (TypeError, KeyError, ValueError):
            continue
    x, y = _max_per_bin(t, lag, d.end_time)
    worst = max(lag) / NS if len(lag) else 0.0
    if isinstance(checker_worst, dict) and isinstance(checker_worst.get("lag"), int | float):
        worst = checker_worst["lag"]
    fig = _figure([{"type": "scatter", "x": x, "y": [v / NS for v in y], "mode": "lines",
                    "line": {"shape": "hv", "color": "#ae3ec9"}, "name": "lag",
                    "hovertemplate": "%{x:.3f} s: lag %{y:.3f} s<extra></extra>"}],
                  f"Realtime lag of polls (worst: {worst:.3f} s)", "lag (s)")
    _shade(fig, d)
    return fig


def _short(value: Any, limit: int = 160) -> str:
    """Compact JSON of `value` (strings as they are), cut at `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _hover(op: TimelineOp) -> str:
    lines = [f"op {op.index} · process {op.process} · {op.f} {op.type}",
             f"invoked {op.start / NS:.4f} s" + (f", took {(op.end - op.start) / MS:.2f} ms" if op.end else ""),
             f"invoke: {_short(op.invoke_value)}"]
    if op.value is not None:
        lines.append(f"result: {_short(op.value)}")
    if op.error:
        lines.append(f"error: {_short(op.error, 120)}")
    return "<br>".join(lines).replace("<br>", "\n").replace("<", "&lt;").replace("\n", "<br>")


def timeline_figure(d: Digest) -> Figure:
    """Ops per process as bars from invocation to completion, hover for details."""
    ops = d.timeline
    procs = sorted({op.process for op in ops}, key=lambda p: (isinstance(p, str), p))
    begin = min((op.start for op in ops), default=0)
    end = max((op.end or op.start for op in ops), default=0)
    traces = []
    for outcome in ("ok", "fail", "info", "incomplete"):
        group = [op for op in ops if op.type == outcome]
        if not group:
            continue
        traces.append({
            "type": "bar", "orientation": "h", "name": outcome,
            "base": [op.start / NS for op in group],
            "x": [max((op.end if op.end is not None else end) - op.start, 1) / NS for op in group],
            "y": [f"p{op.process}" for op in group],
            "marker": {"color": OUTCOME_COLOURS[outcome], "line": {"width": 0.5, "color": "#fff"}},
            "text": [op.f for op in group], "textposition": "inside", "insidetextanchor": "middle", "textangle": 0,
            "hovertext": [_hover(op) for op in group], "hoverinfo": "text",
        })
    pad = max((end - begin) / 50, 1)
    fig = _figure(
        traces, "Ops per process", "process", barmode="overlay", bargap=0.25,
        uniformtext={"minsize": 9, "mode": "hide"},  # labels only where they fit
        xaxis={"range": [(begin - pad) / NS, (end + pad) / NS]},
        yaxis={"categoryorder": "array", "categoryarray": [f"p{p}" for p in procs], "autorange": "reversed"},
        height=min(max(300, 26 * len(procs) + 120), 1600),
    )
    _shade(fig, d, within=(begin, end))
    return fig


# The verdict's colours for a processing count: 1 is the promise; 0 and >1 are bad unless the
# guarantee allows them (at-most-once may lose, at-least-once may repeat).
PROFILE_COLOURS = {"at-most-once": "#e8890c", "at-least-once": "#1c7ed6", "idempotent": "#ae3ec9",
                   "exactly-once": "#2b8a3e"}


_PROCESSING_ANOMALIES = (("lost", "lost-processing"), ("repeated", "double-processing"))


def processing_allowed(guarantee: str) -> frozenset[str]:
    """What a guarantee tolerates of a value's processing count: "lost" (0), "repeated" (> 1).

    Read from the guarantee's record (logquake.guarantees), so a new guarantee needs no table
    here; an unknown name (an old run, a typo) tolerates nothing.
    """
    from logquake.guarantees import GUARANTEES

    g = GUARANTEES.get(guarantee)
    if g is None:
        return frozenset()
    return frozenset(word for word, anomaly in _PROCESSING_ANOMALIES if anomaly in g.allowed)


def processing_verdict(times: int, inputs: int, guarantee: str, bad: Collection[str]) -> str:
    """"promise" (processed once), "bad", "allowed", or "none" (no input value was processed
    `times` times, and the guarantee would not have allowed one).

    A count that happened is judged as the checker judged it, by results.json's `bad`
    anomaly types, so the report never disagrees with the verdict; one that did not happen
    is described from the guarantee's record.
    """
    if times == 1:
        return "promise"
    word, anomaly = _PROCESSING_ANOMALIES[0 if times == 0 else 1]
    if inputs:
        return "bad" if anomaly in bad else "allowed"
    return "allowed" if word in processing_allowed(guarantee) else "none"


def processing_counts(raw: Any) -> dict[int, int] | None:
    """results.json's `processing_counts` ({"times": inputs}) as ints, if well formed and non-empty."""
    if not isinstance(raw, dict) or not raw:
        return None
    try:
        out = {int(k): int(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        return None
    return dict(sorted(out.items())) if all(k >= 0 and v >= 0 for k, v in out.items()) else None


_VERDICT_COLOURS = {"promise": OUTCOME_COLOURS["ok"], "allowed": OUTCOME_COLOURS["info"],
                    "bad": OUTCOME_COLOURS["fail"], "none": OUTCOME_COLOURS["fail"]}


def processing_figure(counts: dict[int, int], guarantee: str, *, bad: Collection[str]) -> Figure:
    """How many input values were processed 0, 1, 2, ... times, coloured by processing_verdict
    (`bad`: results.json's bad anomaly types).

    Every count from 0 to the highest is a bar (zero-height where no value was), so a missing
    0 bar reads as "nothing lost" rather than as an axis that starts at 1.
    """
    xs = list(range(0, max(max(counts), 1) + 1))
    total = sum(counts.values()) or 1
    ys = [counts.get(x, 0) for x in xs]
    trace = {
        "type": "bar", "x": xs, "y": ys, "name": guarantee,
        "marker": {"color": [_VERDICT_COLOURS[processing_verdict(x, y, guarantee, bad)] for x, y in zip(xs, ys)]},
        "text": [f"{y:,}" if y else "" for y in ys], "textposition": "outside",
        "customdata": [round(100 * y / total, 2) for y in ys],
        "hovertemplate": "processed %{x} times: %{y:,} input values (%{customdata}%)<extra></extra>",
    }
    return _figure([trace], f"Processing counts per input value · guarantee {guarantee}",
                   "input values", height=360, showlegend=False,
                   xaxis={"title": {"text": "times processed into the output"}, "tickmode": "linear", "dtick": 1},
                   yaxis={"rangemode": "tozero"})


def profiles_figure(by_profile: dict[str, dict[int, int]]) -> Figure:
    """Processing-count distributions of several guarantee profiles side by side, as shares
    of each profile's input values (runs differ in length); hover gives the counts."""
    highest = max((max(c) for c in by_profile.values() if c), default=1)
    xs = list(range(0, max(highest, 1) + 1))
    traces = []
    for i, (guarantee, counts) in enumerate(by_profile.items()):
        total = sum(counts.values()) or 1
        ys = [counts.get(x, 0) for x in xs]
        traces.append({
            "type": "bar", "x": xs, "y": [100 * y / total for y in ys], "name": f"{guarantee} ({total:,} inputs)",
            "customdata": ys, "marker": {"color": PROFILE_COLOURS.get(guarantee, FAULT_COLOURS[i % len(FAULT_COLOURS)])},
            "text": [f"{y:,}" if y else "" for y in ys], "textposition": "outside",  # small bars stay readable
            "hovertemplate": f"{guarantee}: processed %{{x}} times: %{{customdata:,}} values (%{{y:.2f}}%)"
                             "<extra></extra>",
        })
    return _figure(traces, "Processing counts per input value, by guarantee profile", "share of input values (%)",
                   barmode="group", height=400,
                   xaxis={"title": {"text": "times processed into the output"}, "tickmode": "linear", "dtick": 1})
