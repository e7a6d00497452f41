"""Linearizability checking: Wing & Gong's search with Lowe's cache, as Knossos and Porcupine do.

Every op is an interval [call, ret] of real time. A history is linearizable when each op can be
given one instant inside its interval so that, taken in that order, the ops are a legal run of
the model. The search walks the history's call and return events in time order, tries to
linearize each pending op next, and backtracks when it reaches the return of an op it has not
placed. A cache of (set of linearized ops, model state) pairs prunes configurations already
explored; that is what makes the search practical (Lowe, "Testing for linearizability", 2016).

Decisions:

- Closed intervals. An op whose invocation time equals another's completion time is treated
  as concurrent with it: the clock cannot tell which came first, and reporting a violation
  that depends on an order nobody observed would be a false alarm. In the event list, calls
  sort before returns at equal times.
- Indeterminate ops (info, or never completed) have no return event: they may take effect at
  any time after their invocation, or never. The search succeeds once every ok op is placed.
  Failed ops certainly did not happen and are dropped.
- P-compositionality: linearizability is local, so the model's `partition` (by key by
  default, as with jepsen.independent's `[k v]` values) splits the history and each part is
  searched alone, each with its own time budget.
- Bounded: the search gives "unknown" when a part's time budget or the cache bound is
  exhausted, never a hang or an out-of-memory crash.
- Two prunes beyond Porcupine's, each dropping only paths that another explored path
  dominates (the brute-force property tests hold them to it): a read-only op (model
  `read_only`) is placed as soon as it is allowed and never reconsidered, and an
  indeterminate op is never followed at once by a blind write (model `overwrites`), since
  never placing it reaches the same configuration.

On failure, the explanation is the furthest the search got: the ok op whose completion could
not be passed, the longest linearizable prefix before it, and the model states it reached.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from logquake.checker.models import Model, Operation, identity
from logquake.errors import UserError
from logquake.history import FAIL, OK, Op, pairs

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_TIME_BUDGET",
    "KeyResult",
    "check_linearizable",
    "check_operations",
    "operations_from_history",
    "summary_lines",
]

DEFAULT_TIME_BUDGET = 60.0  # seconds per key
DEFAULT_CACHE_BYTES = 512 << 20  # per key; the entry bound follows from the key's op count
ANOMALY = "nonlinearizable"
MAX_ERRS = 5  # examples kept in results.json
MAX_STATES = 8
MAX_PREFIX_SHOWN = 8
_CLOCK_EVERY = 2048  # search steps between two looks at the clock
_MASKS_UP_TO = 20_000  # ops; the masks then take up to 25 MB


@dataclass(frozen=True, kw_only=True)
class KeyResult:
    """The verdict for one independent part of the history."""

    key: Any
    valid: bool | str  # True, False or "unknown"
    ops: int
    elapsed: float
    cache_size: int
    reason: str | None = None  # why unknown
    failure: dict[str, Any] | None = field(default=None)  # why invalid, see _explain


# --- from a history to operations --------------------------------------------------------------


def _freeze(v: Any) -> Any:
    """Lists to tuples, so values can live in hashable model states."""
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    return v


def _is_keyed(completed: list[tuple[Op, Op | None]]) -> bool:
    """jepsen.independent histories carry `[k v]` values; plain ones carry bare values."""
    for inv, _ in completed:
        if inv.f in ("read", "write") and isinstance(inv.value, list | tuple):
            return True
        if inv.f == "cas" and isinstance(inv.value, list | tuple) and len(inv.value) == 2:
            return isinstance(inv.value[1], list | tuple)
    return False


def _bad_op(inv: Op, message: str) -> UserError:
    return UserError(
        f"op {inv.index} (process {inv.process}, {inv.f} {inv.value!r}): {message}",
        hint="the register models take read (invoked with value nil), write v and cas with a pair "
        "(old, new), each optionally wrapped as a jepsen.independent (key, value) pair",
    )


def operations_from_history(ops: Iterable[Op], model: Model) -> list[Operation]:
    """The model's ops of a history as intervals; fails are dropped, info ops kept as unknown.

    Ops whose f the model does not know raise UserError, as does a malformed value.
    """
    completed = [(inv, c) for inv, c in pairs(ops) if c is None or c.type != FAIL]
    keyed = _is_keyed(completed)
    out: list[Operation] = []
    for inv, comp in completed:
        if inv.f not in model.fs:
            raise _bad_op(inv, f"the {model.name} model knows only {', '.join(sorted(model.fs))}")
        known = comp is not None and comp.type == OK
        value = comp.value if known else inv.value
        key = None
        if keyed:
            if not (isinstance(value, list | tuple) and len(value) == 2):
                raise _bad_op(inv, "expected a [key value] pair, as in the rest of this history")
            key, value = _freeze(value[0]), value[1]
        if inv.f == "cas" and not (isinstance(value, list | tuple) and len(value) == 2):
            raise _bad_op(inv, "cas needs a value [old new]")
        op = Operation(
            id=len(out),
            process=inv.process,
            f=inv.f,
            value=_freeze(value),
            known=known,
            call=inv.time,
            ret=comp.time if known and comp is not None else None,
            key=key,
            invoke_index=inv.index,
            complete_index=comp.index if comp is not None else None,
        )
        if model.keep(op):
            out.append(op)
    return out


# --- the search --------------------------------------------------------------------------------


class _Stop(Exception):
    """The budget ran out; carries the reason."""


@dataclass
class _Furthest:
    """The failure furthest into the history, kept to explain an invalid verdict."""

    node: int = -1
    depth: int = -1
    stack: list[tuple[int, Any, bool]] = field(default_factory=list)  # as in _search
    states: list[Any] = field(default_factory=list)

    def record(self, node: int, stack: list[tuple[int, Any, bool]], state: Any, model: Model) -> None:
        if node > self.node or (node == self.node and len(stack) > self.depth):
            self.node, self.depth = node, len(stack)
            self.stack = stack.copy()  # C speed; the ops are looked up only to explain
            self.states = [state]
        elif node == self.node and len(self.states) < MAX_STATES:
            if not any(model.equal(state, s) for s in self.states):
                self.states.append(state)


def _events(ops: Sequence[Operation]) -> list[tuple[int, int, int]]:
    """(time, kind, op) in time order; kind 0 = call, 1 = return, so calls win ties."""
    ev = [(op.call, 0, i) for i, op in enumerate(ops)]
    ev += [(op.ret, 1, i) for i, op in enumerate(ops) if op.ret is not None]
    ev.sort()
    return ev


def _search(
    ops: Sequence[Operation], model: Model, *, deadline: float, max_cache: int
) -> tuple[bool, _Furthest | None, int]:
    """(linearizable, furthest failure if not, cache size). Raises _Stop out of budget.

    The history is a doubly linked list of events (arrays, node 0 the head, E+1 the end);
    linearizing an op lifts its call and return out of the list, backtracking puts them back.
    """
    events = _events(ops)
    end = len(events) + 1
    kind = [0] * (end + 1)
    opof = [0] * (end + 1)
    ret_node = [0] * len(ops)
    for node, (_, k, i) in enumerate(events, 1):
        kind[node], opof[node] = k, i
        if k:
            ret_node[i] = node
    nxt = list(range(1, end + 2))
    prv = list(range(-1, end))
    step, hash_ = model.step, model.hash
    exact = model.hash is identity  # the state is its own key: no collisions to resolve
    cache: set[tuple[int, Any]] = set()
    collisions: dict[tuple[int, Any], list[Any]] = {}
    furthest = _Furthest()
    remaining = sum(1 for op in ops if op.ret is not None)
    state = model.init()
    bits = 0
    read_only = [model.read_only(op) for op in ops]
    overwrites = [model.overwrites(op) for op in ops]
    after_info = False  # the op placed last is indeterminate
    stack: list[tuple[int, Any, bool]] = []  # (call node, state before it, forced)
    # Precomputed bits save an allocation per step, while their memory stays small.
    masks = [1 << i for i in range(len(ops))] if len(ops) <= _MASKS_UP_TO else None
    entry = nxt[0]
    steps = 0
    countdown = _CLOCK_EVERY
    while remaining:
        countdown -= 1
        if not countdown:
            countdown = _CLOCK_EVERY
            steps += _CLOCK_EVERY
            if time.monotonic() > deadline:
                raise _Stop(f"time budget exhausted after {steps} steps")
            if len(cache) > max_cache:
                raise _Stop(f"cache bound of {max_cache} configurations reached")
        if kind[entry]:  # the return of an op not yet placed: a dead end
            furthest.record(entry, stack, state, model)
        else:
            i = opof[entry]
            if after_info and overwrites[i]:
                # An indeterminate op followed at once by a blind write has no effect: the
                # same configuration is reached by never placing it, a path also searched.
                entry = nxt[entry]
                continue
            allowed, new = step(state, ops[i])
            if not allowed:
                entry = nxt[entry]
                continue
            nbits = bits | (masks[i] if masks else 1 << i)
            key = (nbits, hash_(new))
            size = len(cache)
            cache.add(key)  # one hash of the key, where `in` then `add` would take two
            fresh = len(cache) != size
            if fresh:
                if not exact:
                    collisions[key] = [new]
            elif not exact and not any(model.equal(new, s) for s in collisions[key]):
                collisions[key].append(new)
                fresh = True
            if fresh:
                stack.append((entry, state, read_only[i]))
                state, bits = new, nbits
                after_info = not ret_node[i]
                nxt[prv[entry]] = nxt[entry]
                prv[nxt[entry]] = prv[entry]
                r = ret_node[i]
                if r:
                    remaining -= 1
                    nxt[prv[r]] = nxt[r]
                    prv[nxt[r]] = prv[r]
                entry = nxt[0]
                continue
            if not read_only[i]:
                entry = nxt[entry]
                continue
            # A read-only op allowed here dominates every alternative, and that branch
            # was explored already: this configuration is a dead end too.
        # Back up past the last free choice. A read-only op that was allowed when placed is
        # never retried later: placing it first loses nothing (it changes no state, and every
        # op that had to precede it is placed already), so its alternatives are dead ends.
        while True:
            if not stack:
                return False, furthest, len(cache)
            entry, state, forced = stack.pop()
            i = opof[entry]
            bits ^= masks[i] if masks else 1 << i
            r = ret_node[i]
            if r:
                remaining += 1
                nxt[prv[r]] = r
                prv[nxt[r]] = r
            nxt[prv[entry]] = entry
            prv[nxt[entry]] = entry
            if not forced:
                break
        after_info = bool(stack) and not ret_node[opof[stack[-1][0]]]
        entry = nxt[entry]
    return True, None, len(cache)


# --- explanations and results ------------------------------------------------------------------


def _thaw(v: Any) -> Any:
    """Tuples back to lists, as the history had them."""
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v


def _op_json(op: Operation, model: Model) -> dict[str, Any]:
    return {
        "process": op.process,
        "f": op.f,
        "value": _thaw(op.value),
        "type": "ok" if op.known else "info",
        "invoke_index": op.invoke_index,
        "complete_index": op.complete_index,
        "call": op.call,
        "ret": op.ret,
        "description": model.describe(op),
    }


def _explain(ops: Sequence[Operation], model: Model, f: _Furthest, key: Any) -> dict[str, Any]:
    """The furthest failure in plain words."""
    # Node numbers follow time order, so the stuck op is the one whose return is that node.
    events = _events(ops)
    _, _, stuck_i = events[f.node - 1]
    stuck = ops[stuck_i]
    prefix = [events[e[0] - 1][2] for e in f.stack]
    placed = set(prefix)
    pending = [
        op for i, op in enumerate(ops) if i not in placed and op.call <= (stuck.ret or 0) and i != stuck_i
    ]
    states = [model.describe_state(s) for s in f.states]
    where = "" if key is None else f" of key {key!r}"
    others = (
        f", nor does placing first any of the {len(pending)} unplaced ops invoked before it completed"
        if pending
        else ""
    )
    words = (
        f"No order of the ops{where} explains op {stuck.invoke_index}"
        f" (process {stuck.process}: {model.describe(stuck)}, completed at index {stuck.complete_index})."
        f" The longest linearizable prefix before it places {len(prefix)} ops; the orders tried leave"
        f" the {model.name} in state {', '.join(states)} there, and none of these allows"
        f" {model.describe(stuck)}{others}."
    )
    shown = prefix[-MAX_PREFIX_SHOWN:]
    return {
        "key": _json_key(key),
        "op": _op_json(stuck, model),
        "prefix_length": len(prefix),
        "prefix_tail": [_op_json(ops[i], model) for i in shown],
        "states": states,
        "pending": [_op_json(op, model) for op in pending[:MAX_PREFIX_SHOWN]],
        "pending_count": len(pending),
        "explanation": words,
    }


def _check_part(
    ops: Sequence[Operation], model: Model, key: Any, *, time_budget: float, max_cache: int | None
) -> KeyResult:
    local = list(ops)  # the search numbers ops by position, so bitsets stay as small as the part
    t0 = time.monotonic()
    try:
        limit = max_cache if max_cache is not None else _cache_entries(len(local))
        ok, furthest, size = _search(local, model, deadline=t0 + time_budget, max_cache=limit)
    except _Stop as e:
        return KeyResult(
            key=key,
            valid="unknown",
            ops=len(local),
            elapsed=time.monotonic() - t0,
            cache_size=0,
            reason=str(e),
        )
    elapsed = time.monotonic() - t0
    failure = None if ok else _explain(local, model, furthest, key)  # type: ignore[arg-type]
    return KeyResult(key=key, valid=ok, ops=len(local), elapsed=elapsed, cache_size=size, failure=failure)


def _cache_entries(n_ops: int) -> int:
    """Entries that fit the byte budget: a key is a tuple, an n-bit int and a set slot."""
    return DEFAULT_CACHE_BYTES // (160 + n_ops // 8)


def check_operations(
    ops: Sequence[Operation],
    model: Model,
    *,
    time_budget: float = DEFAULT_TIME_BUDGET,
    max_cache: int | None = None,
) -> list[KeyResult]:
    """Search each independent part of `ops` (see `Model.partition`); one result per part."""
    results = []
    for part in model.partition(ops):
        part = model.simplify(part)
        if part:
            results.append(
                _check_part(part, model, part[0].key, time_budget=time_budget, max_cache=max_cache)
            )
    return results


def _json_key(key: Any) -> Any:
    return key if key is None or isinstance(key, int | str) else repr(_thaw(key))


def check_linearizable(
    history: Iterable[Op],
    model: Model,
    *,
    time_budget: float = DEFAULT_TIME_BUDGET,
    max_cache: int | None = None,
) -> dict[str, Any]:
    """Check a history against `model`; the results.json object of docs/architecture.md's anomaly types.

    `valid` is False when some key is not linearizable, else "unknown" when some key ran out
    of budget (or the history has no client ops), else True. Under "linear": the model, per-key
    counts, and for invalid keys the explanation (anomalies.nonlinearizable.errs).

    Args:
        time_budget: seconds of search per key before that key is "unknown".
        max_cache: configurations cached per key before that key is "unknown"; by default
            as many as fit in DEFAULT_CACHE_BYTES.
    """
    t0 = time.monotonic()
    history = list(history)
    invoked = sum(1 for op in history if op.is_client and op.is_invoke)
    ops = operations_from_history(history, model)
    results = check_operations(ops, model, time_budget=time_budget, max_cache=max_cache)
    bad = [r for r in results if r.valid is False]
    unknown = [r for r in results if r.valid == "unknown"]
    if bad:
        valid: bool | str = False
    elif unknown or not invoked:
        # No client ops at all: probably the wrong file or model. Ops that all failed or
        # stayed indeterminate are vacuously linearizable, as Knossos says.
        valid = "unknown"
    else:
        valid = True
    out: dict[str, Any] = {
        "valid": valid,
        "bad_error_types": [ANOMALY] if bad else [],
        "error_types": [ANOMALY] if bad else [],
        "anomalies": {},
        "linear": {
            "model": model.name,
            "ops": len(ops),
            "keys": len(results),
            "invalid_keys": len(bad),
            "unknown_keys": [{"key": _json_key(r.key), "reason": r.reason} for r in unknown[:MAX_ERRS]],
            "unknown_key_count": len(unknown),
            "max_cache_size": max((r.cache_size for r in results), default=0),
            "elapsed_s": round(time.monotonic() - t0, 6),
        },
    }
    if bad:
        errs = [{**r.failure, "key": _json_key(r.key)} for r in bad[:MAX_ERRS] if r.failure]
        out["anomalies"][ANOMALY] = {"count": len(bad), "errs": errs}
    if not invoked:
        out["linear"]["reason"] = f"no {'/'.join(sorted(model.fs))} ops to check"
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A linearizability result in a few plain lines, for a terminal."""
    lin = result["linear"]
    verdict = {True: "linearizable", False: "NOT linearizable"}.get(result["valid"], "unknown")
    lines = [
        f"{lin['model']}: {lin['ops']} ops over {lin['keys']} key(s) -> {verdict} ({lin['elapsed_s']:.3f} s)"
    ]
    for err in result["anomalies"].get(ANOMALY, {}).get("errs", []):
        lines.append(err["explanation"])
        for op in err["prefix_tail"]:
            lines.append(f"  ... process {op['process']}: {op['description']} (index {op['invoke_index']})")
        lines.append(f"  !!! process {err['op']['process']}: {err['op']['description']} cannot be placed")
    for u in lin["unknown_keys"]:
        lines.append(f"unknown for key {u['key']!r}: {u['reason']}")
    if lin.get("reason"):
        lines.append(f"unknown: {lin['reason']}")
    return lines
