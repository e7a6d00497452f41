"""The self-contained HTML report of a run directory (docs/architecture.md).

`write_report(run_dir)` reads test.json, results.json and history.jsonl (through
`read_history`, once, streaming) and writes report.html: one file with plotly's JavaScript
inlined once, so it opens offline and can be mailed or attached to a CI job. Every number
in it comes from results.json or the history; the template only lays them out.

What the checker names drives what the report keeps from the history: the keys of its
anomaly examples get full per-key logs, the op indices it cites are looked up so examples
read as ops rather than numbers, and the timeline window is centred on the first op it
cites. That keeps a million-op history report small without hiding the interesting part.

A run directory without history.jsonl, or with a results.json or test.json that is not
valid JSON (a run killed mid-write), is a `UserError` naming the file; a run without
results.json (not analysed yet) still gets a report, marked "not analysed".
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import plotly.io as pio
from plotly.offline import get_plotlyjs

from logquake.errors import UserError
from logquake.faults import START, STOP
from logquake.guarantees import GUARANTEES
from logquake.history import read_history
from logquake.results import plots
from logquake.results.digest import Digest, digest_history
from logquake.results.keylog import KeyLogView, key_log_view

REPORT_FILE = "report.html"
MAX_EXAMPLES = 10  # per anomaly type; results.json is capped already, this keeps the page short
MAX_KEY_LOGS = 12
TIMELINE_OPS = 1500
OP_REF_FIELDS = frozenset({"op", "ops", "writer", "writers", "reader", "readers", "cycle", "op-index"})

# Plain-words meanings (docs/architecture.md's anomaly types, Jepsen's names); types not listed show their name only.
MEANINGS = {
    "inconsistent-offsets": "One offset of a key holds two different values: replicas disagree about the log.",
    "duplicate": "One value appears at more than one offset of a key: a send was appended twice.",
    "duplicate-after-window": "One value appears at more than one offset of a key, and its publishes were "
                              "attempted further apart than the stream's dedup window: outside the promise.",
    "no-writer": "A poll returned a value that no op sent to that key: a phantom (sent nowhere) or misrouted "
                 "(sent to another key) record.",
    "lost-write": "A committed value below the highest offset read was never read by any ok op: "
                  "the log lost an acknowledged write.",
    "G1a": "An ok op read a value written by an op that failed (an aborted read).",
    "precommitted-read": "An op read its own send before that send had committed.",
    "int-poll-skip": "Inside one op, consecutive reads of a key skip over offsets that exist.",
    "int-nonmonotonic-poll": "Inside one op, a read of a key goes backwards.",
    "int-send-skip": "The sends of one op did not land at contiguous offsets.",
    "int-nonmonotonic-send": "Inside one op, a later send landed at or before an earlier one.",
    "poll-skip": "A process's next read of a key skipped over offsets that exist.",
    "nonmonotonic-poll": "A process's next read of a key went backwards.",
    "nonmonotonic-send": "A process's later send landed at or before its earlier one.",
    "unseen": "Acknowledged values that no consumer had read by the end of the test.",
    "lost": "Acknowledged values absent from the final read, which read every key from the beginning to the end "
            "of the log the system reported: the log lost them, whether or not they had been read before.",
    "G0": "A write cycle: ops' writes are ordered in contradictory ways across keys.",
    "G1c": "Circular information flow: following write and read dependencies leads back to the start.",
    "G1c-wr": "A cycle of read dependencies only (each op read a send of the next): impossible under "
              "read_committed, and it rests on no inferred edge.",
    "future-read": "A read returned information sent only after it had completed (read dependencies closed by "
                   "process or real-time order).",
    "lost-processing": "An input value was never processed into the output.",
    "double-processing": "An input value was processed into the output more than once.",
    "output-reorder": "Values of one input partition first reached the output out of their input order.",
}
for _base in ("G0", "G1c"):
    for _suffix, _words in (("process", "process order"), ("realtime", "real-time order")):
        MEANINGS[f"{_base}-{_suffix}"] = MEANINGS[_base] + f" The cycle also uses {_words} edges."

VERDICTS = {True: "valid", False: "invalid", "unknown": "unknown", None: "not analysed"}


@dataclass(frozen=True, kw_only=True)
class RunFiles:
    """The parsed small files of a run directory."""

    path: Path
    test: dict[str, Any]
    results: dict[str, Any] | None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        hint = ("re-check the history (`logquake check`), or delete results.json to get a report marked "
                "'not analysed'" if path.name == "results.json" else f"fix or delete {path.name}")
        raise UserError(f"{path} is not valid JSON ({e}): the run may have been killed while writing it",
                        hint=hint) from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None


def load_run(run_dir: Path) -> RunFiles:
    """test.json and results.json of a run directory, checking it is one."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory", hint="pass a run directory such as results/queue/<time>/")
    if not (run_dir / "history.jsonl").is_file():
        raise UserError(
            f"{run_dir} has no history.jsonl: it is not a run directory, or the run stopped before recording",
            hint="a run directory holds test.json, history.jsonl and results.json (docs/architecture.md)",
        )
    test = _read_json(run_dir / "test.json") if (run_dir / "test.json").is_file() else {}
    results = _read_json(run_dir / "results.json") if (run_dir / "results.json").is_file() else None
    if results is not None and not isinstance(results, dict):
        raise UserError(f"{run_dir / 'results.json'} holds a {type(results).__name__}, not a results object")
    return RunFiles(path=run_dir, test=test if isinstance(test, dict) else {}, results=results)


# --- what the checker names --------------------------------------------------------------


def anomalies_of(results: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{type: {"count", "errs"}} tolerating missing or odd-shaped entries."""
    raw = (results or {}).get("anomalies") or {}
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(raw, dict):
        return out
    for name, a in raw.items():
        if isinstance(a, dict):
            errs = a.get("errs") or []
            errs = errs if isinstance(errs, list) else [errs]
            out[str(name)] = {"count": a.get("count", len(errs)), "errs": errs}
        elif isinstance(a, list):
            out[str(name)] = {"count": len(a), "errs": a}
        else:
            out[str(name)] = {"count": a, "errs": []}
    return out


def _walk(value: Any, parent: str | None = None):
    """(field name, value) for every scalar under `value`, recursively."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, parent)
    else:
        yield parent, value


def named_keys(anomalies: dict[str, dict[str, Any]]) -> list[Any]:
    keys: dict[Any, None] = {}
    for a in anomalies.values():
        for err in a["errs"][:MAX_EXAMPLES]:
            for name, v in _walk(err):
                if name in ("key", "keys") and isinstance(v, int | str) and not isinstance(v, bool):
                    keys.setdefault(v)
    return list(keys)[:MAX_KEY_LOGS]


def _is_op_ref(v: Any) -> bool:
    """The checker names an op as {"index", "process", "time", "type", "f"}."""
    return isinstance(v, dict) and isinstance(v.get("index"), int) and "f" in v and "type" in v


def op_refs(value: Any, parent: str | None = None) -> list[int]:
    """Indices of the ops an example names: op-ref dicts anywhere, ints under op fields."""
    if _is_op_ref(value):
        return [value["index"]]
    if isinstance(value, dict):
        return [i for k, v in value.items() for i in op_refs(v, str(k))]
    if isinstance(value, list):
        return [i for v in value for i in op_refs(v, parent)]
    if parent in OP_REF_FIELDS and isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return []


def named_ops(anomalies: dict[str, dict[str, Any]]) -> list[int]:
    found = (i for a in anomalies.values() for err in a["errs"][:MAX_EXAMPLES] for i in op_refs(err))
    return list(dict.fromkeys(found))


def timeline_window(anomalies: dict[str, dict[str, Any]]) -> tuple[int, int]:
    """History indices around the first op an anomaly cites (else the start)."""
    cited = named_ops(anomalies)
    centre = min(cited) if cited else 0
    lo = max(0, centre - TIMELINE_OPS)  # ~2 history lines per op: TIMELINE_OPS ops either side
    return lo, lo + 2 * TIMELINE_OPS


# --- rendering helpers ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Example:
    fields: list[tuple[str, str]]
    explanation: str = ""
    steps: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)


def describe_op(index: int, d: Digest) -> str:
    op = d.named_ops.get(index)
    if op is None:
        return f"op {index}"
    inv = d.named_invokes.get(index)
    text = f"op {index}: process {op.process} {op.type} {op.f} {plots._short(op.value, 200)}"
    if inv is not None and inv.value != op.value:
        text += f" (invoked as {plots._short(inv.value, 120)})"
    if op.get("error"):
        text += f", error {plots._short(op.get('error'), 80)}"
    return text


def _field_text(v: Any) -> str:
    if _is_op_ref(v):
        return f"op {v['index']} ({v.get('type')} {v.get('f')} by process {v.get('process')})"
    if isinstance(v, list) and v and all(_is_op_ref(x) for x in v):
        return ", ".join(f"op {x['index']}" for x in v)
    return plots._short(v, 300)


def _step_text(step: Any) -> str:
    if isinstance(step, dict):
        lead = f"{step.get('from', '?')} → {step.get('to', '?')} ({step.get('type', '?')}): "
        return lead + str(step.get("text") or plots._short(step, 200))
    return str(step)


def _example(err: Any, d: Digest) -> Example:
    if not isinstance(err, dict):
        return Example(fields=[("", plots._short(err, 400))])
    steps = err.get("steps") if isinstance(err.get("steps"), list) else []
    explanation = err.get("explanation")
    if isinstance(explanation, list):
        explanation = "\n".join(map(str, explanation))
    fields_ = [(str(k), _field_text(v)) for k, v in err.items() if k not in ("steps", "explanation")]
    return Example(fields=fields_, explanation=str(explanation or ""), steps=[_step_text(s) for s in steps],
                   ops=[describe_op(i, d) for i in dict.fromkeys(op_refs(err))])


@dataclass(frozen=True, kw_only=True)
class AnomalySection:
    name: str
    count: Any
    bad: bool
    meaning: str
    examples: list[Example]
    shown: int
    total_examples: int


def anomaly_sections(anomalies: dict[str, dict[str, Any]], results: dict[str, Any] | None,
                     d: Digest) -> list[AnomalySection]:
    bad = set((results or {}).get("bad_error_types") or [])
    out = []
    for name, a in sorted(anomalies.items(), key=lambda kv: (kv[0] not in bad, kv[0])):
        errs = a["errs"]
        out.append(AnomalySection(
            name=name, count=a["count"], bad=name in bad, meaning=MEANINGS.get(name, ""),
            examples=[_example(e, d) for e in errs[:MAX_EXAMPLES]], shown=min(len(errs), MAX_EXAMPLES),
            total_examples=len(errs),
        ))
    return out


def _err_marks(anomalies: dict[str, dict[str, Any]]) -> dict[Any, tuple[set[Any], set[Any], dict[Any, str]]]:
    """Per key: offsets and values the checker's examples name, and why (for highlighting)."""
    marks: dict[Any, tuple[set[Any], set[Any], dict[Any, str]]] = {}
    for name, a in anomalies.items():
        for err in a["errs"][:MAX_EXAMPLES]:
            if not isinstance(err, dict) or not isinstance(err.get("key"), int | str):
                continue
            offsets, values, why = marks.setdefault(err["key"], (set(), set(), {}))
            for f in ("offset", "offsets"):
                offsets.update(v for _, v in _walk(err.get(f)) if isinstance(v, int))
            for f in ("value", "values"):
                for v in (x for _, x in _walk(err.get(f)) if x is not None):
                    values.add(v)
                    why.setdefault(v, name)
    return marks


@dataclass(frozen=True, kw_only=True)
class Processing:
    """The pipeline checker's processing-count distribution, labelled with the run's profile."""

    guarantee: str
    inputs: int
    rows: list[tuple[int, int, float, str]]  # times processed, input values, % of inputs, verdict
    tolerates: str  # in words: what the profile allows besides processing once


def run_guarantee(files: RunFiles) -> str:
    """The guarantee profile the run was checked under: results.json's, else test.json's."""
    profile = files.test.get("profile") if isinstance(files.test.get("profile"), dict) else {}
    for src in ((files.results or {}).get("guarantee"), files.test.get("guarantee"), profile.get("guarantee")):
        if isinstance(src, str) and src:
            return src
    return "not recorded"


def processing_bad(files: RunFiles) -> frozenset[str]:
    """The anomaly types results.json calls bad: the checker's word, never recomputed here."""
    bad = (files.results or {}).get("bad_error_types")
    return frozenset(t for t in bad if isinstance(t, str)) if isinstance(bad, list) else frozenset()


def processing_of(files: RunFiles) -> Processing | None:
    """None unless results.json holds a pipeline run's `processing_counts`."""
    counts = plots.processing_counts((files.results or {}).get("processing_counts"))
    if counts is None:
        return None
    guarantee = run_guarantee(files)
    total = sum(counts.values())
    bad = processing_bad(files)
    words_of = {"promise": "the promise", "allowed": f"allowed by {guarantee}", "bad": "bad", "none": "-"}
    rows = [(times, n, 100 * n / total if total else 0.0, words_of[plots.processing_verdict(times, n, guarantee, bad)])
            for times, n in counts.items()]
    allowed = plots.processing_allowed(guarantee)
    words = {frozenset(): "allows nothing else", frozenset({"lost"}): "allows 0 (lost), never more than 1",
             frozenset({"repeated"}): "allows more than 1 (repeated), never 0",
             frozenset({"lost", "repeated"}): "allows 0 and more than 1"}
    tolerates = (words[allowed] if guarantee in GUARANTEES
                 else "is not a known profile: each count is shown as the checker judged it")
    return Processing(guarantee=guarantee, inputs=total, rows=rows, tolerates=tolerates)


def final_read_of(results: dict[str, Any]) -> dict[str, Any] | None:
    """results.json's `final_read` summary (checker/final_read.py), if well formed."""
    fr = results.get("final_read")
    return fr if isinstance(fr, dict) and isinstance(fr.get("ran"), bool) else None


def node_reads_skipped(results: dict[str, Any]) -> str | None:
    """Why the drain made no read from each node (results.json `drain.node_reads_skipped`:
    the servers cannot serve one), None when it made them or had none to make."""
    drain = results.get("drain") if isinstance(results.get("drain"), dict) else {}
    why = drain.get("node_reads_skipped")
    return why if isinstance(why, str) else None


def node_read_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per node the drain read from alone (checker/final_read.py `nodes`), with the
    nodes whose reader recorded nothing (results.json `drain.node_reads`) as not read."""
    fr = final_read_of(results) or {}
    nodes = fr.get("nodes") if isinstance(fr.get("nodes"), dict) else {}
    drain = results.get("drain") if isinstance(results.get("drain"), dict) else {}
    asked = drain.get("node_reads") if isinstance(drain.get("node_reads"), dict) else {}
    rows = []
    for node in sorted(set(nodes) | set(asked), key=str):
        e = nodes.get(node)
        if not isinstance(e, dict):
            rows.append({"node": node, "status": "unknown", "missing": "", "lost_on_node": "", "behind": "",
                         "unknown": "not read", "example": ""})
            continue
        ex = next((x for x in e.get("examples") or [] if isinstance(x, dict)), None)
        rows.append({
            "node": node, "status": e.get("status", "?"), "missing": e.get("missing", 0),
            "lost_on_node": e.get("lost-on-node", 0), "behind": e.get("behind", 0),
            "unknown": ", ".join(str(k) for k in (e.get("incomplete_keys") or [])[:16]) or "none",
            "example": (f"key {ex.get('key')} value {ex.get('value')} at offset {ex.get('offset')} "
                        f"({ex.get('kind')}; the node's log ends at {ex.get('end')})") if ex else "",
        })
    return rows


HIDDEN_PARAMS = ("seed", "start_time", "run_dir", "config")


def test_params(test: dict[str, Any]) -> list[tuple[str, str]]:
    config = test.get("config") if isinstance(test.get("config"), dict) else test
    return [(str(k), plots._short(v, 200)) for k, v in config.items() if k not in HIDDEN_PARAMS]


def op_count_rows(d: Digest) -> tuple[list[str], list[list[Any]]]:
    fs = sorted({f for f, _ in d.counts})
    incomplete = d.incomplete
    cols = ["ok", "fail", "info"]
    rows = []
    for f in fs:
        row = [d.counts.get((f, c), 0) for c in cols]
        rows.append([f, d.counts.get((f, "invoke"), 0), *row, incomplete.get(f, 0)])
    return ["op", "invoked", *cols, "never completed"], rows


def fault_rows(d: Digest) -> list[dict[str, Any]]:
    kinds: dict[str, dict[str, Any]] = {}
    for iv in d.intervals:
        row = kinds.setdefault(iv.kind, {"kind": iv.kind, "count": 0, "seconds": 0.0, "open": 0})
        row["count"] += 1
        row["seconds"] += ((iv.stop if iv.stop is not None else d.end_time) - iv.start) / plots.NS
        row["open"] += iv.stop is None
    return sorted(kinds.values(), key=lambda r: r["kind"])


def other_nemesis_ops(d: Digest) -> list[tuple[str, int]]:
    """Nemesis ops that are not start-X/stop-X (a custom nemesis): f and how often."""
    counts: dict[str, int] = {}
    for op in d.nemesis_ops:
        if not op.f.startswith((START, STOP)):
            counts[op.f] = counts.get(op.f, 0) + 1
    return sorted(counts.items())


def _seed(files: RunFiles) -> Any:
    test = files.test
    for src in (test, test.get("config") if isinstance(test.get("config"), dict) else {}):
        if src.get("seed") is not None:
            return src["seed"]
    return None


def _start_time(files: RunFiles) -> str:
    """test.json's start time (epoch seconds or text), else the run directory's name."""
    for k in ("start_time", "start-time", "started", "start"):
        v = files.test.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return datetime.fromtimestamp(v, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if v:
            return str(v)
    return files.path.name


@cache
def template(name: str) -> jinja2.Template:
    """A page template of results/templates/ with the filters every page uses (num, secs)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("logquake.results", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["num"] = lambda n: f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else n
    env.filters["secs"] = lambda x: f"{x:,.1f} s" if x >= 1 else f"{x * 1e3:.1f} ms"
    return env.get_template(name)


def _figure_html(fig: Any, div_id: str) -> str:
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id, validate=False,
                       config={"displaylogo": False, "responsive": True})


def render_report(files: RunFiles, d: Digest) -> str:
    """The report page for an already digested history."""
    anomalies = anomalies_of(files.results)
    results = files.results or {}
    verdict = VERDICTS.get(results.get("valid") if files.results is not None else None, "unknown")
    marks = _err_marks(anomalies)
    key_logs: list[KeyLogView] = [key_log_view(k, d.keys[k], *marks.get(k, (set(), set(), {})))
                                  for k in d.keys]
    figures = {
        "latency": plots.latency_figure(d), "throughput": plots.throughput_figure(d),
        "unseen": plots.unseen_figure(d, results.get("unseen_over_time")),
        "lag": plots.lag_figure(d, results.get("worst_realtime_lag"), results.get("realtime_lag_over_time")),
    }
    final_read = final_read_of(results)
    if final_read is not None and final_read.get("ran"):
        figures["lost"] = plots.lost_figure(d, final_read.get("lost_over_time"))
    if d.timeline:
        figures["timeline"] = plots.timeline_figure(d)
    processing = processing_of(files)
    if processing is not None:
        figures["processing"] = plots.processing_figure(
            plots.processing_counts(results["processing_counts"]) or {}, processing.guarantee,
            bad=processing_bad(files))
    informational = {k: v for k, v in results.items()
                     if k not in ("valid", "bad_error_types", "error_types", "anomalies", "unseen_over_time",
                                  "realtime_lag_over_time", "final_read")}
    headers, rows = op_count_rows(d)
    return template("report.html.j2").render(
        name=files.test.get("name") or files.path.parent.name, run_dir=str(files.path), verdict=verdict,
        results_present=files.results is not None, seed=_seed(files), start_time=_start_time(files),
        duration=d.end_time / plots.NS, params=test_params(files.test), op_headers=headers, op_rows=rows,
        n_ops=d.n_ops, n_client_ops=d.n_client_ops, faults=fault_rows(d), intervals=d.intervals[:200],
        n_intervals=len(d.intervals), fault_colours=plots.fault_colours(d.intervals),
        other_nemesis=other_nemesis_ops(d),
        error_types=results.get("error_types") or sorted(anomalies),
        bad_error_types=results.get("bad_error_types") or [], anomalies=anomaly_sections(anomalies, files.results, d),
        figures={k: _figure_html(f, f"plot-{k}") for k, f in figures.items()}, key_logs=key_logs,
        timeline_count=len(d.timeline), timeline_cap=TIMELINE_OPS, window=d.timeline_window,
        informational=json.dumps(informational, indent=2, default=str)[:20_000],
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"), plotly_js=get_plotlyjs(),
        ns=plots.NS, processing=processing, final_read=final_read, node_reads=node_read_rows(results),
        node_reads_skipped=node_reads_skipped(results),
    )


def write_report(run_dir: Path, *, out: Path | None = None) -> Path:
    """Write run_dir/report.html (or `out`) and return its path; see the module docstring."""
    files = load_run(Path(run_dir))
    anomalies = anomalies_of(files.results)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a torn last line is expected after a killed run
        d = digest_history(read_history(files.path / "history.jsonl", validate=False),
                           keys=named_keys(anomalies), named=named_ops(anomalies),
                           window=timeline_window(anomalies))
    html = render_report(files, d)
    target = out or files.path / REPORT_FILE
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(target)  # never leave a half-written report behind
    return target
