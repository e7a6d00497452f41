"""The results object (docs/architecture.md's anomaly types) and the rules that combine analyses into it.

`valid` is tri-state, as in Jepsen: True, False or "unknown", merged false > unknown >
true. An analysis that raises does not sink the others: it becomes unknown, with its
error attached, because a checker crash must never read as a pass.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from typing import Any

from logquake.history import Op

UNKNOWN = "unknown"
Valid = bool | str

_RANK = {False: 0, UNKNOWN: 1, True: 2}


def merge_valid(values: Iterable[Valid]) -> Valid:
    """The worst of several verdicts: False beats "unknown" beats True (True if none)."""
    worst: Valid = True
    for v in values:
        if _RANK[v] < _RANK[worst]:
            worst = v
    return worst


def op_ref(op: Op) -> dict[str, Any]:
    """How an example names an op so a person can find it in history.jsonl."""
    return {"index": op.index, "process": op.process, "time": op.time, "type": op.type, "f": op.f}


def run_safely(name: str, fn: Callable[[], Any], errors: dict[str, str]) -> Any:
    """Run one analysis; on an exception record it under `name` and return None."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a crashing analysis must become "unknown"
        tb = traceback.format_exception(type(e), e, e.__traceback__, limit=-3)
        errors[name] = f"{type(e).__name__}: {e}\n" + "".join(tb[-2:]).rstrip()
        return None


def anomaly_entry(errs: list[dict[str, Any]], *, count: int | None = None, cap: int) -> dict[str, Any]:
    """{"count": n, "errs": first `cap` examples}; `count` overrides len(errs)."""
    return {"count": len(errs) if count is None else count, "errs": errs[:cap]}


def verdict(
    anomalies: dict[str, dict[str, Any]],
    allowed: frozenset[str],
    *,
    analysis_errors: dict[str, str],
    timed_out: bool,
    nothing_checked: bool,
) -> dict[str, Any]:
    """The top of results.json: valid, bad_error_types, error_types."""
    error_types = sorted(anomalies)
    bad = [t for t in error_types if t not in allowed]
    parts: list[Valid] = [not bad]
    if analysis_errors or timed_out or nothing_checked:
        parts.append(UNKNOWN)
    return {"valid": merge_valid(parts), "bad_error_types": bad, "error_types": error_types}
