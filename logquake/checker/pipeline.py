"""The `pipeline` analysis: how often each input value was processed into the output.

History shape (docs/architecture.md `pipeline`): acknowledged input values are `send` micro-ops
(`["send", k, [offset, v]]`) of ops with `f` = `input`; the final read of the output topics
is `poll` micro-ops by read_committed consumers whose records carry the input they came from,
`[offset, [k_in, v_in]]`. Worker ops (`f` = `process`) record what each worker consumed,
produced and committed; they explain anomalies but the verdict rests on the output as read.

An output record is counted once per (output key, offset), however many polls read it.
lost-processing: an acknowledged input never in the output; double-processing: in it more
than once; output-reorder: an input partition's values first reach the output out of
their order. Which of them is bad follows the guarantee (logquake.guarantees: at-most-once
tolerates loss, at-least-once and idempotent repeats, exactly-once neither).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from logquake.guarantees import allowed_types
from logquake.history import OK, Op

PIPELINE_TYPES = ("lost-processing", "double-processing", "output-reorder")


def acknowledged_inputs(ops: list[Op]) -> set[tuple[int, Any]]:
    """(input key, value) of every input send an ok op acknowledged."""
    out = set()
    for op in ops:
        if op.f == "input" and op.type == OK:
            for m in op.value:
                if m[0] == "send" and isinstance(m[2], list):
                    out.add((int(m[1]), m[2][1]))
    return out


def output_records(ops: list[Op]) -> dict[tuple[int, int], tuple[int, Any]]:
    """(output key, offset) -> (input key, input value), from the ok polls of the output."""
    seen: dict[tuple[int, int], tuple[int, Any]] = {}
    for op in ops:
        if op.type != OK or op.f != "poll" or not isinstance(op.value, list):
            continue
        for m in op.value:
            if m[0] != "poll" or len(m) < 2:
                continue
            for key, pairs in m[1].items():
                for offset, v in pairs:
                    if isinstance(v, list) and len(v) == 2:
                        seen[(int(key), int(offset))] = (int(v[0]), v[1])
    return seen


def output_reorders(records: dict[tuple[int, int], tuple[int, Any]]) -> list[dict[str, Any]]:
    """Output keys where an input value first appears after a later value of the same input key.

    Inputs of one partition are processed in offset order (values rise with offsets), so
    their first appearances in an output partition must rise too; replays after a failure
    repeat earlier values, which is allowed (counted as double-processing instead).
    """
    errs = []
    by_out: dict[int, list[tuple[int, tuple[int, Any]]]] = {}
    for (out_key, offset), src in records.items():
        by_out.setdefault(out_key, []).append((offset, src))
    for out_key, recs in sorted(by_out.items()):
        seen: set[tuple[int, Any]] = set()
        top: dict[int, tuple[int, Any]] = {}  # input key -> (offset, highest value so far)
        for offset, (k, v) in sorted(recs):
            if (k, v) in seen:
                continue
            seen.add((k, v))
            if k in top and v < top[k][1]:
                errs.append({"key": out_key, "offset": offset, "value": [k, v],
                             "explanation": f"output key {out_key}: input {v} of key {k} first appears at offset "
                                            f"{offset}, after input {top[k][1]} (offset {top[k][0]})"})
            else:
                top[k] = (offset, v)
    return errs


def check_pipeline(ops: list[Op], *, guarantee: str = "exactly-once", shared_consumer: bool = False,
                   max_examples: int = 8) -> dict[str, Any]:
    """Results in the checker's format plus `processing_counts` ({times: inputs}).

    `shared_consumer`: the workers shared one consumer, so one input key's values were
    processed by several at once and output-reorder is no fault (logquake.guarantees)."""
    inputs = acknowledged_inputs(ops)
    records = output_records(ops)
    counts = Counter(records.values())
    lost = sorted(i for i in inputs if counts[i] == 0)
    double = sorted((i, n) for i, n in counts.items() if n > 1)
    reorders = output_reorders(records)
    anomalies: dict[str, Any] = {}
    if lost:
        anomalies["lost-processing"] = {"count": len(lost), "errs": [
            {"key": k, "value": v, "explanation": f"input {v} of key {k} was acknowledged but never processed"}
            for k, v in lost[:max_examples]]}
    if double:
        anomalies["double-processing"] = {"count": len(double), "errs": [
            {"key": k, "value": v, "times": n, "explanation": f"input {v} of key {k} was processed {n} times"}
            for (k, v), n in double[:max_examples]]}
    if reorders:
        anomalies["output-reorder"] = {"count": len(reorders), "errs": reorders[:max_examples]}
    distribution = Counter(counts[i] for i in inputs)
    # No subscribe or cycle rules here: the pipeline's types are the guarantee's alone.
    allowed = allowed_types(reported=PIPELINE_TYPES, guarantee=guarantee, shared_consumer=shared_consumer)
    bad = sorted(t for t in anomalies if t not in allowed)
    valid: bool | str = not bad if inputs else "unknown"
    return {
        "valid": valid,
        "bad_error_types": bad,
        "error_types": sorted(anomalies),
        "anomalies": anomalies,
        "processing_counts": {str(n): c for n, c in sorted(distribution.items())},
        "inputs": len(inputs),
        "guarantee": guarantee,
    }
