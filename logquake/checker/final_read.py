"""Durability of the final state: every acknowledged write must be in the final read.

The queue analysis counts a value as seen once any poll returned it, so a log that loses
values after they were read (or loses its tail once the workload stops writing) reveals
nothing to it. Jepsen's checkers for queue-like systems (its NATS test) judge instead what
a final read returns; this module does that for logquake histories.

The final read is the drain's: ops marked `"final": true` (README.md's History format). Each process that
drains assigns every key from the beginning (an ok final `assign`, whose `ends` field gives
each key's end of the log as the system reported it: the high watermark, or the last
stable offset under read_committed) and then polls (ok final `poll`s, whose `positions`
field gives the consumer's position per key after the poll). A process's final read of a
key is complete when its position, or the offset after the last record it read, reached
that end. Where no end was recorded (an imported history, or a leader that did not
answer), the highest offset any ok op sent or read for the key stands in.

`lost`: an acknowledged write (a send of an ok op) absent from every complete final read
of its key. Each example says whether an earlier ok poll had read the value (`read`:
"earlier", durability lost after the value was served; or "never") and where it sits among
its key's acknowledged values in log order (`position`): "suffix" when no acknowledged value
after it survived (a truncated tail, the usual shape of lost unsynced writes; also a key
that lost everything), "prefix" when none before it did, else "middle". It names the ops
that acknowledged it, last read it and made the final read, the end of the log that read
reached, and the faults (nemesis ops) between the value's last read (or its
acknowledgement) and the final read, after any begun before it and still in effect.

The final read from every node (ops also marked `"node"`, README.md's History format) is
judged per node and apart from the combined one above: a node's final assign records as
`ends` the node's own end of each key's log and as `not_held` the keys it holds no replica
of. For each node, `nodes` in the summary says which acknowledged values its complete
reads did not return, in two kinds, and which keys it never read to its own end (unknown
for that node: never a pass):
- `lost-on-node`: absent below the node's own end. The node says its log goes past the
  value and it does not have it: a hole, a replica that diverged (a split brain's other
  side, a follower that lost data and caught up around the gap).
- `behind`: absent at or past the node's own end: its log stops short of the value. A
  follower still catching up looks so, and so does a node that lost its tail; no read can
  tell them apart, which is why a loss is only judged where a quorum's answer is seen.
Neither is an anomaly of the verdict by itself: the promise of an acknowledged write is
that it survives on a quorum, not on every replica, and a value gone for good is absent
from the combined read through the leader too (`lost`). The per-node figures say where
values are missing, so a loss is traced to a node instead of averaged away. The node
reads are reads like any other for the queue analysis, though: a node that returns the
values around a hole has its reader skip one (`poll-skip`, `int-poll-skip`).

A key with acknowledged writes and no complete final read makes the verdict unknown (it
is never valid); a history without final reads makes this analysis say it could not run
and changes nothing else. `lost` is tolerated where the guarantee allows it (at-most-once,
logquake/guarantees.py).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from logquake.checker.result import op_ref
from logquake.faults import Faults
from logquake.history import INVOKE, NEMESIS, OK, Op

__all__ = ["BEHIND", "FINAL", "LOST", "LOST_ON_NODE", "NODE", "FinalRead", "analyse", "judge"]

#: The extra field that marks the final read's ops.
FINAL = "final"
#: The extra field naming the node a final op read from: the final read from every node.
NODE = "node"
#: Per node: an acknowledged value absent below the node's own end of its key's log.
LOST_ON_NODE = "lost-on-node"
#: Per node: an acknowledged value absent at or past the node's own end (its log stops short).
BEHIND = "behind"
NODE_EXAMPLES = 8  # examples of missing values per node
#: The anomaly type: an acknowledged write absent from the final read (Jepsen NATS's `lost`).
LOST = "lost"

FAULTS_CAP = 8  # faults named in one example
OVER_TIME_POINTS = 200

_NOT_RUN = ("the history has no final read (ops marked \"final\": true, which the drain of a run "
            "records): whether acknowledged writes survived to the end could not be checked")


@dataclass(frozen=True, kw_only=True)
class FinalRead:
    """What the final read shows: lost values (examples, all of them) and the summary."""

    ran: bool
    cases: list[dict[str, Any]] = field(default_factory=list)
    incomplete_keys: list[Any] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Session:
    """One process's final read: its assign's ends, then what its polls read and reached."""

    process: Any
    assign: Op
    ends: dict[Any, int | None]
    node: Any = None  # the node it read from alone; None: the combined final read
    not_held: frozenset = frozenset()  # keys the node holds no replica of
    values: dict[Any, set] = field(default_factory=dict)
    read_to: dict[Any, int] = field(default_factory=dict)  # offset after the last record read
    position: dict[Any, int] = field(default_factory=dict)


def _key(k: Any) -> Any:
    """Poll maps key by decimal strings, sends by integers: one spelling for both."""
    if isinstance(k, str) and k.lstrip("-").isdigit():
        return int(k)
    return k


def _sends(op: Op) -> Iterator[tuple[Any, Any, int | None]]:
    """(key, value, offset) of each completed send micro-op of `op` (offset None if unknown)."""
    if isinstance(op.value, list):
        for m in op.value:
            if (isinstance(m, list | tuple) and len(m) == 3 and m[0] == "send" and isinstance(m[2], list | tuple)
                    and len(m[2]) == 2):
                off = m[2][0]
                yield _key(m[1]), m[2][1], off if isinstance(off, int) and not isinstance(off, bool) else None


def _poll_maps(op: Op) -> Iterator[dict]:
    """The {"k": [[offset, value], ...]} map of each completed poll micro-op of `op`."""
    if isinstance(op.value, list):
        for m in op.value:
            if isinstance(m, list | tuple) and len(m) > 1 and m[0] == "poll" and isinstance(m[1], dict):
                yield m[1]


def _pairs(pairs: Any) -> Iterator[tuple[int | None, Any]]:
    """(offset, value) of each read; an offset that is not an integer is None, and a read
    that is no pair is left out (the queue index names it)."""
    for p in pairs or ():
        if isinstance(p, list | tuple) and len(p) == 2:
            yield (p[0] if isinstance(p[0], int) and not isinstance(p[0], bool) else None), p[1]


def analyse(ops: Iterable[Op]) -> FinalRead:
    """Acknowledged writes against the final read; see the module docstring.

    One pass over the history takes the acknowledged sends, the faults and the final read;
    the reads before it are looked at again only where they are needed (the stand-in end of
    a key whose end was not recorded, and the last read of a lost value).
    """
    known = getattr(ops, "has_final", None)  # (a queue_stream.HistoryFile, once indexed)
    if not (known if known is not None else any(op.extra.get(FINAL) for op in ops)):
        return FinalRead(ran=False, summary={"ran": False, "why": _NOT_RUN})
    # An op read anew from the file (not a list's) is kept by its name alone: not its value.
    named = (lambda op: op) if isinstance(ops, list) else _named
    acked: dict[Any, dict[Any, tuple[int | None, Op]]] = {}  # key -> value -> (offset, first ok op)
    sessions: list[_Session] = []
    current: dict[Any, _Session] = {}
    faults = Faults()
    for op in ops:
        if op.process == NEMESIS:
            if op.type != INVOKE:
                faults.add(op)
            continue
        if op.type != OK:
            continue
        if not op.extra.get(FINAL):
            ref = None
            for k, v, off in _sends(op):
                got = acked.setdefault(k, {})
                if v not in got:
                    ref = ref or named(op)
                    got[v] = (off, ref)
            continue
        if op.f == "assign":
            ends = {_key(k): e for k, e in (op.get("ends") or {}).items()}
            s = _Session(process=op.process, assign=op,
                         ends={_key(k): ends.get(_key(k)) for k in op.value or ()}, node=op.get(NODE),
                         not_held=frozenset(_key(k) for k in op.get("not_held") or ()))
            sessions.append(s)
            current[op.process] = s
            continue
        s = current.get(op.process)
        if s is None:
            continue
        for read in _poll_maps(op):
            for key, pairs in read.items():
                k = _key(key)
                if k in s.ends:
                    vals = s.values.setdefault(k, set())
                    for off, v in _pairs(pairs):
                        vals.add(v)
                        if off is not None and off >= s.read_to.get(k, 0):
                            s.read_to[k] = off + 1
        for key, pos in (op.get("positions") or {}).items():
            k = _key(key)
            if k in s.ends and isinstance(pos, int):
                s.position[k] = max(s.position.get(k, 0), pos)
    by_node = [s for s in sessions if s.node is not None]
    sessions = [s for s in sessions if s.node is None]
    if not sessions:
        return FinalRead(ran=False, summary={"ran": False, "why": _NOT_RUN})

    unknown_ends = {k for s in sessions for k, e in s.ends.items() if e is None}
    highest = _highest(ops, unknown_ends) if unknown_ends else {}
    survived: dict[Any, set] = {}
    final_at: dict[Any, Op] = {}  # key -> the assign of its first complete final read
    ends: dict[Any, int] = {}
    for s in sessions:
        for k, end in s.ends.items():
            target = end if end is not None else highest.get(k, -1) + 1
            reached = max(s.position.get(k, 0), s.read_to.get(k, 0))
            if reached >= target:
                survived.setdefault(k, set()).update(s.values.get(k, ()))
                final_at.setdefault(k, s.assign)
                if end is not None:
                    ends[k] = max(end, ends.get(k, end))
    incomplete = sorted((k for k in acked if k not in survived), key=str)
    lost = {k: [v for v in vals if v not in survived[k]] for k, vals in acked.items() if k in survived}
    lost = {k: vs for k, vs in lost.items() if vs}
    last_read = _last_reads(ops, lost)
    cases = []
    for k in sorted(lost, key=str):
        cases.extend(_cases(k, acked[k], set(lost[k]), last_read, final_at[k], ends.get(k), faults))
    summary = {
        "ran": True,
        "keys": len(acked),
        "complete_keys": len(acked) - len(incomplete),
        "incomplete_keys": incomplete,
        "acknowledged": sum(len(v) for v in acked.values()),
        "lost": len(cases),
        "lost_read_earlier": sum(1 for c in cases if c["read"] == "earlier"),
        "lost_never_read": sum(1 for c in cases if c["read"] == "never"),
        "lost_by_position": {p: sum(1 for c in cases if c["position"] == p) for p in ("prefix", "middle", "suffix")},
        "lost_over_time": _over_time(cases),
    }
    if by_node:
        summary["nodes"] = _per_node(acked, by_node)
    return FinalRead(ran=True, cases=cases, incomplete_keys=incomplete, summary=summary)


def _named(op: Op) -> Op:
    """The op without its value: what op_ref and the examples' words read of it."""
    return replace(op, value=None)


def _per_node(acked: dict[Any, dict[Any, tuple[int | None, Op]]], sessions: list[_Session]) -> dict[str, Any]:
    """For each node, the acknowledged values its complete reads did not return (see the
    module docstring): counts by kind, examples, and the keys it never read to its own end."""
    out: dict[str, Any] = {}
    for node in sorted({s.node for s in sessions}, key=str):
        mine = [s for s in sessions if s.node == node]
        not_held = {k for k in acked if all(k in s.not_held for s in mine)}
        survived: dict[Any, set] = {}
        ends: dict[Any, int] = {}
        for s in mine:
            for k, end in s.ends.items():
                if k in s.not_held or end is None:
                    continue
                if max(s.position.get(k, 0), s.read_to.get(k, 0)) >= end:
                    survived.setdefault(k, set()).update(s.values.get(k, ()))
                    ends[k] = max(end, ends.get(k, end))
        incomplete = sorted((k for k in acked if k not in not_held and k not in survived), key=str)
        missing = []
        for k in sorted(survived, key=str):
            for v, (off, acker) in sorted(acked.get(k, {}).items(), key=lambda kv: (kv[1][0] is None, kv[1][0] or 0)):
                if v not in survived[k]:
                    kind = LOST_ON_NODE if off is not None and off < ends[k] else BEHIND
                    missing.append({"key": k, "value": v, "offset": off, "end": ends[k], "kind": kind,
                                    "acknowledged": op_ref(acker)})
        holes = sum(1 for m in missing if m["kind"] == LOST_ON_NODE)
        status = (LOST_ON_NODE if holes else BEHIND if missing else "unknown" if incomplete else "complete")
        out[str(node)] = {
            "status": status,
            "keys": len(acked) - len(not_held),
            "complete_keys": sum(1 for k in survived if k in acked),
            "incomplete_keys": incomplete,
            "not_held_keys": len(not_held),
            "missing": len(missing),
            LOST_ON_NODE: holes,
            BEHIND: len(missing) - holes,
            "examples": sorted(missing, key=lambda m: m["kind"] != LOST_ON_NODE)[:NODE_EXAMPLES],
        }
    return out


def _highest(ops: list[Op], keys: set) -> dict[Any, int]:
    """The highest offset any ok op sent or read, for each of `keys`: the stand-in end of a
    final read that recorded none."""
    out: dict[Any, int] = {}
    for op in ops:
        if op.type != OK or op.process == NEMESIS:
            continue
        for k, _v, off in _sends(op):
            if k in keys and off is not None and off > out.get(k, -1):
                out[k] = off
        for read in _poll_maps(op):
            for key, pairs in read.items():
                k = _key(key)
                if k in keys:
                    for off, _v in _pairs(pairs):
                        if off is not None and off > out.get(k, -1):
                            out[k] = off
    return out


def _last_reads(ops: list[Op], lost: dict[Any, list]) -> dict[tuple, Op]:
    """(key, value) -> the last ok op before the final read that polled it, for lost values."""
    wanted = {k: set(vs) for k, vs in lost.items()}
    out: dict[tuple, Op] = {}
    if not wanted:
        return out
    for op in ops:
        if op.type != OK or op.process == NEMESIS or op.extra.get(FINAL):
            continue
        for read in _poll_maps(op):
            for key, pairs in read.items():
                k = _key(key)
                w = wanted.get(k)
                if w:
                    for _off, v in _pairs(pairs):
                        if v in w:
                            out[(k, v)] = op
    return out


def _cases(k: Any, acked: dict[Any, tuple[int | None, Op]], lost: set,
           last_read: dict[tuple, Op], final: Op, end: int | None, faults: Faults) -> list[dict[str, Any]]:
    """One example per lost value of key k, in log order."""
    order = sorted(acked, key=lambda v: (acked[v][0] is None, acked[v][0] if acked[v][0] is not None else 0, str(v)))
    alive = [v not in lost for v in order]
    after = [False] * len(order)  # does an acknowledged value after position i survive?
    for i in range(len(order) - 2, -1, -1):
        after[i] = after[i + 1] or alive[i + 1]
    before = False
    out = []
    for i, v in enumerate(order):
        if v not in lost:
            before = before or alive[i]
            continue
        off, acker = acked[v]
        position = "suffix" if not after[i] else ("prefix" if not before else "middle")
        seen = last_read.get((k, v))
        since = seen or acker
        between = _faults_between(faults, since.time, final.time)
        out.append({
            "key": k,
            "value": v,
            "offset": off,
            "read": "earlier" if seen is not None else "never",
            "position": position,
            "acknowledged": op_ref(acker),
            "last_read": op_ref(seen) if seen is not None else None,
            "final_read": op_ref(final),
            "end": end,
            "faults": [{**op_ref(f), "value": f.value} for f in between[:FAULTS_CAP]],
            "explanation": _words(k, v, off, acker, seen, end, between),
        })
    return out


def _faults_between(faults: Faults, since: int, until: int) -> list[Op]:
    """The nemesis ops from `since` to `until`, after the faults begun earlier and still in
    effect at `since`: a poll in flight when a power loss began returns after the fault's
    start is recorded, and the value it read is lost to that fault all the same. (A window
    that ends before it begins, a read completed after the final one began, names what was
    in effect at its end.)"""
    return [*faults.in_effect_before(min(since, until + 1)), *faults.between(since, until)]


def _words(k: Any, v: Any, off: int | None, acker: Op, seen: Op | None, end: int | None, between: list[Op]) -> str:
    at = f" at offset {off}" if off is not None else ""
    said = (f"value {v} of key {k}{at} was acknowledged by op {acker.index} ({acker.time / 1e9:.3f} s)")
    read = (f", read by op {seen.index} ({seen.time / 1e9:.3f} s)" if seen is not None else ", never read")
    tail = f"; the log ends at offset {end}" if end is not None else ""
    why = (f"; faults in between: {', '.join(f'{f.f} {f.value}'.strip() for f in between[:3])}"
           f"{' ...' if len(between) > 3 else ''}" if between else "")
    return f"{said}{read}, and is absent from the final read{tail}{why}"


def _over_time(cases: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Lost values by when they were acknowledged: a cumulative count, at most
    OVER_TIME_POINTS points (the last one kept)."""
    times = sorted(c["acknowledged"]["time"] for c in cases)
    points = [(t, i + 1) for i, t in enumerate(times)]
    if len(points) > OVER_TIME_POINTS:
        step = len(points) / OVER_TIME_POINTS
        keep = {int(i * step) for i in range(OVER_TIME_POINTS)} | {len(points) - 1}
        points = [points[i] for i in sorted(keep)]
    return [{"time": t / 1e9, "lost": n} for t, n in points]


def judge(result: dict[str, Any], final: FinalRead | None) -> dict[str, Any]:
    """Put the final read's summary into `result`; a valid verdict with a key whose final
    read is incomplete becomes unknown (never valid)."""
    if final is None:  # the analysis crashed: run_safely already made the verdict unknown
        return result
    result["final_read"] = final.summary
    if final.incomplete_keys and result.get("valid") is True:
        keys = ", ".join(str(k) for k in final.incomplete_keys[:16])
        more = " ..." if len(final.incomplete_keys) > 16 else ""
        result["valid"] = "unknown"
        result["unknown_because"] = (f"the final read of key(s) {keys}{more} did not reach the end of the log: "
                                     "whether their acknowledged writes survived is unknown")
    return result
