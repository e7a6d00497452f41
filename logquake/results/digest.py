"""One streaming pass over a history, keeping only what the report shows.

A report of a 1,000,000-op history must be built in seconds and memory, so the history is
read exactly once and reduced on the fly: per-series arrays of (invoke time, latency) for
the latency and throughput plots, a step series for unseen values, the nemesis intervals, the per-key logs of the keys the checker named, the ops the checker
named, and one capped window of ops for the timeline. Everything else is dropped as it
streams past. Downsampling happens later, in plots.py.

unseen(t), values acknowledged by an ok send and not yet read by any ok poll, is kept for
runs whose results.json predates the checker's own `unseen_over_time`. The realtime lag is
not recomputed here: the checker reports it (`worst_realtime_lag`, and each run's peak in
`realtime_lag_over_time`), and the report plots that.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from logquake.faults import Faults
from logquake.gcpause import paused_gc
from logquake.history import INVOKE, NEMESIS, OK, Op


@dataclass(kw_only=True)
class Series:
    """The completed ops of one (f, outcome): invoke times, latencies, completion indices."""

    start: array = field(default_factory=lambda: array("q"))
    latency: array = field(default_factory=lambda: array("q"))
    index: array = field(default_factory=lambda: array("q"))


@dataclass(frozen=True, kw_only=True)
class Interval:
    """A fault (logquake.faults) as the report draws it: the times and values of the start-X
    that began it and of the stop-X or heal that ended it (stop None: never ended)."""

    kind: str
    start: int
    stop: int | None
    start_value: Any = None
    stop_value: Any = None


@dataclass(kw_only=True)
class Write:
    op: int
    type: str
    offset: int | None


@dataclass(kw_only=True)
class KeyTrace:
    """Everything the history says about one key: who wrote which value where, who read it."""

    writes: dict[Any, list[Write]] = field(default_factory=dict)  # value -> writes
    reads: dict[int, dict[Any, list[int]]] = field(default_factory=dict)  # offset -> value -> reader ops


@dataclass(kw_only=True)
class TimelineOp:
    process: Any
    f: str
    type: str  # ok / fail / info / "incomplete"
    start: int
    end: int | None
    index: int
    invoke_value: Any
    value: Any
    error: Any


@dataclass(kw_only=True)
class Digest:
    """What the report needs from a history (see the module docstring)."""

    n_ops: int = 0
    end_time: int = 0
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (f, type) -> n; type "invoke" too
    series: dict[tuple[str, str], Series] = field(default_factory=dict)
    intervals: list[Interval] = field(default_factory=list)
    nemesis_ops: list[Op] = field(default_factory=list)
    unseen_t: array = field(default_factory=lambda: array("q"))
    unseen_n: array = field(default_factory=lambda: array("q"))
    keys: dict[Any, KeyTrace] = field(default_factory=dict)
    named_ops: dict[int, Op] = field(default_factory=dict)
    named_invokes: dict[int, Op] = field(default_factory=dict)  # completion index -> its invocation
    timeline: list[TimelineOp] = field(default_factory=list)
    timeline_window: tuple[int, int] = (0, 0)
    n_client_ops: int = 0  # invocations

    @property
    def incomplete(self) -> dict[str, int]:
        """Per f: invocations that never completed."""
        out: dict[str, int] = {}
        for (f, t), n in self.counts.items():
            if t == INVOKE:
                done = sum(self.counts.get((f, x), 0) for x in ("ok", "fail", "info"))
                if n > done:
                    out[f] = n - done
        return out


def _key(k: Any) -> Any:
    """Poll results key by decimal string, sends by integer: one spelling for both."""
    if isinstance(k, str):
        try:
            return int(k)
        except ValueError:
            return k
    return k


class _Digester:
    """The pass itself; `run` is the hot loop, so it avoids per-op allocation where it can."""

    def __init__(self, *, keys: Iterable[Any], named: Iterable[int], window: tuple[int, int]) -> None:
        self.d = Digest(timeline_window=window)
        self.d.keys = {_key(k): KeyTrace() for k in keys}
        self.named = set(named)
        self.window = window
        self.in_flight: dict[Any, Op] = {}
        self.acked: dict[Any, set[Any]] = {}  # key -> values acknowledged by an ok send
        self.seen: dict[Any, set[Any]] = {}  # key -> values read by an ok poll
        self.key_of: dict[Any, Any] = {}  # poll-result spelling -> key (saves an int() per key per poll)
        self.unseen = 0

    def run(self, ops: Iterable[Op]) -> None:
        """The hot loop: one iteration per history line, so state lives in locals."""
        d = self.d
        named, in_flight, counts, series = self.named, self.in_flight, d.counts, d.series
        lo, hi = self.window
        micro_ops = self._micro_ops
        n_ops = n_client = 0
        end = d.end_time
        for op in ops:
            n_ops += 1
            t = op.time
            if t > end:
                end = t
            index = op.index
            if index in named:
                d.named_ops[index] = op
            p = op.process
            if p == NEMESIS:
                d.nemesis_ops.append(op)
                continue
            ck = (op.f, op.type)
            counts[ck] = counts.get(ck, 0) + 1
            if ck[1] == INVOKE:
                in_flight[p] = op
                n_client += 1
                continue
            inv = in_flight.pop(p, None)
            if inv is None:
                continue
            s = series.get(ck)
            if s is None:
                s = series[ck] = Series()
            s.start.append(inv.time)
            s.latency.append(t - inv.time)
            s.index.append(index)
            if index in named:
                d.named_invokes[index] = inv
            if lo <= inv.index < hi:
                d.timeline.append(_timeline_op(inv, op))
            micro_ops(op)
        d.n_ops += n_ops
        d.n_client_ops += n_client
        d.end_time = end

    def _micro_ops(self, op: Op) -> None:
        value = op.value
        if not isinstance(value, list):
            return
        for mop in value:
            if not isinstance(mop, list) or not mop:
                continue
            if mop[0] == "send" and len(mop) == 3:
                self._send(op, _key(mop[1]), mop[2])
            elif mop[0] == "poll" and len(mop) == 2 and op.type == OK and type(mop[1]) is dict:
                key_of = self.key_of
                for k, pairs in mop[1].items():
                    key = key_of.get(k)
                    if key is None:
                        key = key_of[k] = _key(k)
                    self._poll(op, key, pairs)

    def _send(self, op: Op, k: Any, result: Any) -> None:
        if isinstance(result, list) and len(result) == 2:
            offset, v = result
        else:
            offset, v = None, result
        trace = self.d.keys.get(k)
        if trace is not None:
            trace.writes.setdefault(v, []).append(Write(op=op.index, type=op.type, offset=offset))
        if op.type != OK:
            return
        acked = self.acked.get(k)
        if acked is None:
            acked = self.acked[k] = set()
        try:
            if v not in acked and v not in self.seen.get(k, ()):
                self.unseen += 1
                self._unseen_point(op.time)
            acked.add(v)
        except TypeError:  # an unhashable value: the checker reports the history; skip it here
            pass

    def _poll(self, op: Op, k: Any, pairs: Any) -> None:
        if type(pairs) is not list:
            return
        trace = self.d.keys.get(k)
        seen = self.seen.get(k)
        if seen is None:
            seen = self.seen[k] = set()
        acked = self.acked.get(k, ())
        newly_seen = 0
        for pair in pairs:
            try:
                offset, v = pair
                if v not in seen:
                    seen.add(v)
                    if v in acked:
                        newly_seen += 1
            except (TypeError, ValueError):  # not an [offset, value] pair of hashables
                continue
            if trace is not None:
                trace.reads.setdefault(offset, {}).setdefault(v, []).append(op.index)
        if newly_seen:
            self.unseen -= newly_seen
            self._unseen_point(op.time)

    def _unseen_point(self, t: int) -> None:
        self.d.unseen_t.append(t)
        self.d.unseen_n.append(self.unseen)

    def finish(self) -> Digest:
        d = self.d
        d.intervals = [
            Interval(kind=f.kind, start=f.start.time, stop=f.end.time if f.end else None,
                     start_value=f.start.value, stop_value=f.end.value if f.end else None)
            for f in Faults(d.nemesis_ops).intervals()
        ]
        lo, hi = self.window
        for inv in self.in_flight.values():
            if lo <= inv.index < hi:
                d.timeline.append(_timeline_op(inv, None))
        d.timeline.sort(key=lambda t: t.start)
        return d


def _timeline_op(inv: Op, op: Op | None) -> TimelineOp:
    return TimelineOp(
        process=inv.process, f=inv.f, type=op.type if op is not None else "incomplete", start=inv.time,
        end=op.time if op is not None else None, index=(op or inv).index, invoke_value=inv.value,
        value=op.value if op is not None else None, error=op.get("error") if op is not None else None,
    )


def digest_history(
    ops: Iterable[Op], *, keys: Iterable[Any] = (), named: Iterable[int] = (), window: tuple[int, int] = (0, 0)
) -> Digest:
    """Reduce `ops` in one pass.

    Args:
        keys: the keys whose full logs to keep (those an anomaly names).
        named: op indices whose ops (and invocations) to keep, to describe anomaly examples.
        window: history indices [lo, hi) of the invocations to keep for the timeline.
    """
    digester = _Digester(keys=keys, named=named, window=window)
    # The pass makes no reference cycles but keeps many small containers alive (sets, key
    # traces), which makes the cyclic GC rescan them over and over: half the pass's time.
    with paused_gc():
        digester.run(ops)
    return digester.finish()


__all__ = ["Digest", "Interval", "KeyTrace", "Series", "TimelineOp", "Write", "digest_history"]
