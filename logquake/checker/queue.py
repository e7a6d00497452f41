"""The queue analysis: Jepsen's Kafka checker (jepsen.tests.kafka), for logquake histories.

`check_history(ops, opts)` indexes the history once (queue_build.py), then runs one
`*_cases(ix, opts)` function per anomaly family, each in a module of its own
(queue_duplicates, queue_lost, queue_reads, queue_internal, queue_process); each returns
examples (dicts naming the ops involved by index, process and time). Cycle anomalies
come from cycles.py; the unseen count, the realtime lag and the causes of info ops are
reported beside the anomalies (queue_lost, queue_lag, queue_causes). Every
analysis runs under `run_safely`, so one that crashes makes the verdict unknown rather
than hiding the others; a figure for the report (realtime lag, causes of info ops) that
crashes is listed in `informational_errors` and leaves the verdict to the anomalies.
Pure: no I/O, no clock but the cycle search's time budget.

Where this departs from jepsen.tests.kafka, and why:
- Reads are placed in the version order by their offset (dense index of the offset), not
  by their value, so a duplicated value does not also show up as skips and reversals.
- An assign with seek_to_beginning forgets the process's positions: the rewind is asked for.
- nonmonotonic-send is not reset by assign/subscribe: a producer's order has nothing to
  do with what its consumer is assigned.
- A value in the log that no op sent is skipped by lost-write and reported as no-writer
  (no_writer.py; Jepsen throws "no writer of value").
- Failed ops are not nodes of the dependency graph (they did not happen; reading their
  writes is G1a).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from logquake.checker import final_read
from logquake.checker.cycles import cycle_cases
from logquake.checker.no_writer import no_writer_cases
from logquake.checker.options import QUEUE_TYPES, CheckOptions, allowed_types
from logquake.checker.queue_build import NotSlim, build_index
from logquake.checker.queue_causes import info_causes
from logquake.checker.queue_duplicates import duplicate_cases, inconsistent_offset_cases
from logquake.checker.queue_index import QueueIndex
from logquake.checker.queue_internal import int_poll_cases, int_send_cases
from logquake.checker.queue_lag import realtime_lag
from logquake.checker.queue_lost import lost_write_cases, unseen_analysis
from logquake.checker.queue_process import process_order_cases
from logquake.checker.queue_reads import g1a_cases, precommitted_read_cases
from logquake.checker.queue_stream import HistoryFile, indexed_ops
from logquake.checker.result import anomaly_entry, run_safely, verdict
from logquake.errors import HistoryFormatError
from logquake.gcpause import paused_gc
from logquake.history import Op


def check_history(ops: Iterable[Op] | HistoryFile, opts: CheckOptions | None = None) -> dict[str, Any]:
    """Analyse a queue history; the results.json object of docs/architecture.md's anomaly types.

    Given a HistoryFile, the ops are indexed as the file is read, in bounded memory
    (queue_stream.py); a line that is malformed then raises HistoryFormatError from here.
    """
    opts = opts or CheckOptions()
    # The analyses allocate millions of small containers while the history keeps millions
    # more alive; the cyclic GC would rescan them all again and again (it tripled the time).
    # Nothing here makes reference cycles, so it is paused for the duration.
    with paused_gc():
        return _check(ops, opts)


def _check(ops: Iterable[Op], opts: CheckOptions) -> dict[str, Any]:
    errors: dict[str, str] = {}
    streamed = isinstance(ops, HistoryFile)
    if not streamed and not isinstance(ops, list):
        ops = list(ops)
    unreadable: list[HistoryFormatError] = []

    def index() -> QueueIndex | None:
        if not streamed:
            return build_index(ops)
        try:
            try:
                return build_index(indexed_ops(ops), slim=True)
            except NotSlim:  # a read that is not pairs of integers: as the in-memory path, with dicts
                return build_index(indexed_ops(ops))
        except HistoryFormatError as e:  # the file's fault, not the analysis's: raised below
            unreadable.append(e)
            return None

    ix = run_safely("index", index, errors)
    if unreadable:
        raise unreadable[0]
    if ix is None:
        return _assemble({}, {}, opts, errors, timed_out=False, nothing=True, ix=None)
    found: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, int] = {}
    cases = [(name, lambda fn=fn: fn(ix, opts)) for name, fn in _CASES]
    # Duplicates are told apart by when their publishes were attempted: the ops' own fields.
    cases.insert(1, ("duplicate", lambda: duplicate_cases(ix, opts, ops)))
    for name, run in cases:
        got = run_safely(name, run, errors)
        for typ, errs in (got or {}).items():
            if errs:
                found.setdefault(typ, []).extend(errs)
    unseen = run_safely("unseen", lambda: unseen_analysis(ix), errors)
    if unseen and unseen["count"]:
        found["unseen"] = unseen["errs"]
        counts["unseen"] = unseen["count"]
    final = run_safely("final-read", lambda: final_read.analyse(ops), errors)
    if final is not None and final.cases:
        found[final_read.LOST] = final.cases
    cyc = run_safely("cycles", lambda: cycle_cases(ix, opts), errors)
    timed_out = False
    if cyc is not None:
        timed_out = cyc.timed_out
        found.update({t: e for t, e in cyc.cases.items() if e})
        counts.update({t: n for t, n in cyc.counts.items() if n})
    informational: dict[str, str] = {}  # failures of figures for the report: beside the verdict
    lag = run_safely("realtime-lag", lambda: realtime_lag(ix), informational)
    info = {
        "worst_realtime_lag": lag["worst"] if lag else None,
        "realtime_lag_over_time": lag["over_time"] if lag else [],
        "unseen_over_time": unseen["over_time"] if unseen else [],
        "info_txn_causes": run_safely("info-causes", lambda: info_causes(ix), informational),
        "cycle_search": cyc.stats if cyc is not None else None,
    }
    nothing = not ix.txns
    result = _assemble(found, counts, opts, errors, timed_out=timed_out, nothing=nothing, ix=ix)
    result.update(info)
    if informational:
        result["informational_errors"] = informational
    return final_read.judge(result, final)


def _assemble(found, counts, opts, errors, *, timed_out, nothing, ix) -> dict[str, Any]:
    order = {t: i for i, t in enumerate(QUEUE_TYPES)}
    anomalies = {
        t: anomaly_entry(found[t], count=counts.get(t), cap=opts.max_examples)
        for t in sorted(found, key=lambda t: order.get(t, len(order)))
    }
    out = verdict(
        anomalies, allowed_types(opts), analysis_errors=errors, timed_out=timed_out, nothing_checked=nothing
    )
    out["anomalies"] = anomalies
    if errors:
        out["analysis_errors"] = errors
    if timed_out:
        out["unknown_because"] = "the cycle search ran out of its time budget"
    elif errors:  # (before "nothing": a failed index leaves nothing to check too)
        out["unknown_because"] = "an analysis failed: " + ", ".join(sorted(errors))
    elif nothing:
        out["unknown_because"] = "the history holds no send, poll or txn ops to check"
    out["options"] = {
        "sub_via": opts.sub_via,
        "txn": opts.txn,
        "ww_deps": opts.ww_deps,
        "ignore": list(opts.ignore),
        "guarantee": opts.guarantee,
        "duplicate_window": opts.duplicate_window,
        "shared_consumer": opts.shared_consumer,
    }
    out["stats"] = {
        "client_ops": ix.client_ops if ix else 0,
        "txns": len(ix.txns) if ix else 0,
        "keys": len(ix.orders) if ix else 0,
    }
    return out


_CASES = (
    ("inconsistent-offsets", inconsistent_offset_cases),
    ("no-writer", no_writer_cases),
    ("lost-write", lost_write_cases),
    ("G1a", g1a_cases),
    ("precommitted-read", precommitted_read_cases),
    ("int-poll", int_poll_cases),
    ("int-send", int_send_cases),
    ("process-order", process_order_cases),
)

__all__ = ["check_history"]
