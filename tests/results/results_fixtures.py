"""Run directories for the results tests and the report benchmark.

`synth_history` simulates a correct single-copy log (appends at invoke time, consumers
reading forward from their positions) driven by a few workers under flip-flop faults, so
the history has every shape a real run has: sends, polls, fails, infos with retired
processes, and nemesis start/stop ops. Anomalies are then planted on purpose by the
hand-written histories below, never by chance.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from logquake.history import Op, encode_op, write_history

FAULTS = ("partition", "kill", "pause")


def _latency(rng: random.Random, faulty: bool) -> int:
    base = rng.expovariate(1 / 3e6)  # ~3 ms
    return int(base * (20 if faulty else 1)) + 200_000


def synth_history(
    n_lines: int, *, seed: int = 1, keys: int = 8, workers: int = 6, fault_every: int = 4000
) -> Iterator[Op]:
    """About `n_lines` ops (invokes + completions + nemesis) of a correct queue run."""
    rng = random.Random(seed)
    logs: dict[int, list[int]] = {k: [] for k in range(keys)}
    next_value = dict.fromkeys(range(keys), 1)
    positions: list[dict[int, int]] = [dict.fromkeys(range(keys), 0) for _ in range(workers)]
    process = list(range(workers))
    next_process = workers
    free_at = [0] * workers
    ready = [(0, w) for w in range(workers)]
    events: list[tuple[int, int, dict[str, Any]]] = []  # (time, seq, op dict) in a heap
    seq = 0
    fault: str | None = None
    n_client = 0
    while n_client < n_lines:
        t, w = heapq.heappop(ready)
        if n_client % fault_every < 2 and n_client // fault_every > 0:
            if fault is None:
                fault = rng.choice(FAULTS)
                nem = {"process": "nemesis", "type": "info", "f": f"start-{fault}", "value": "n2"}
            else:
                nem = {"process": "nemesis", "type": "info", "f": f"stop-{fault}", "value": "healed"}
                fault = None
            heapq.heappush(events, (t, seq, nem))
            seq += 1
        p = process[w]
        key = rng.randrange(keys)
        end = t + _latency(rng, fault is not None)
        outcome = "ok"
        if fault is not None and rng.random() < 0.1:
            outcome = rng.choice(("fail", "info"))
        if rng.random() < 0.55:
            v = next_value[key]
            next_value[key] += 1
            inv = {"process": p, "type": "invoke", "f": "send", "value": [["send", key, v]]}
            done_value: Any = [["send", key, v]]
            if outcome != "fail":
                logs[key].append(v)
                done_value = [["send", key, [len(logs[key]) - 1, v]]]
            if outcome == "info" and rng.random() < 0.5:
                done_value = [["send", key, v]]  # the ack was lost in flight
            done = {"process": p, "type": outcome, "f": "send", "value": done_value}
        else:
            inv = {"process": p, "type": "invoke", "f": "poll", "value": [["poll"]]}
            read: dict[str, list[list[int]]] = {}
            for k in rng.sample(range(keys), 2):
                start = positions[w][k]
                got = [[o, logs[k][o]] for o in range(start, min(start + 5, len(logs[k])))]
                if got:
                    read[str(k)] = got
                    if outcome == "ok":
                        positions[w][k] = got[-1][0] + 1
            done = {"process": p, "type": outcome, "f": "poll", "value": [["poll", read if outcome == "ok" else {}]]}
            if outcome != "ok":
                done["value"] = [["poll"]]
        if outcome != "ok":
            done["error"] = "timed out" if outcome == "info" else "not leader"
        heapq.heappush(events, (t, seq, inv))
        heapq.heappush(events, (end, seq + 1, done))
        seq += 2
        n_client += 2
        if outcome == "info":
            process[w] = next_process
            next_process += 1
        free_at[w] = end + rng.randrange(100_000, 2_000_000)
        heapq.heappush(ready, (free_at[w], w))
    index = 0
    while events:
        t, _, d = heapq.heappop(events)
        yield Op(index=index, time=t, extra={k: v for k, v in d.items() if k not in Op.__dataclass_fields__}, **{
            k: v for k, v in d.items() if k in ("process", "type", "f", "value")
        })
        index += 1


def write_synth_history(path: Path, n_lines: int, **kw: Any) -> int:
    """Stream a synthetic history to `path` (fast: one buffered write per line)."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for op in synth_history(n_lines, **kw):
            fh.write(encode_op(op) + "\n")
            n += 1
    return n


def _op(process: Any, type_: str, f: str, value: Any, time_ms: float, **extra: Any) -> Op:
    return Op(process=process, type=type_, f=f, value=value, time=int(time_ms * 1e6), extra=extra)


def invalid_ops() -> list[Op]:
    """A small hand-written history with a lost write, a duplicate, an aborted read (G1a)
    and an inconsistent offset, all on keys 1 and 2, under one partition."""
    return [
        _op(0, "invoke", "send", [["send", 1, 1]], 1),
        _op(0, "ok", "send", [["send", 1, [0, 1]]], 3),
        _op(1, "invoke", "send", [["send", 1, 2]], 4),
        _op(1, "ok", "send", [["send", 1, [1, 2]]], 6),
        _op("nemesis", "info", "start-partition", "majority: n1 n2 | n3 n4 n5", 7),
        _op(0, "invoke", "send", [["send", 1, 3]], 8),
        _op(0, "ok", "send", [["send", 1, [2, 3]]], 12),  # lost: never read, yet offset 3 is
        _op(1, "invoke", "send", [["send", 1, 4]], 13),
        _op(1, "ok", "send", [["send", 1, [3, 4]]], 15),
        _op(0, "invoke", "send", [["send", 2, 1]], 16),
        _op(0, "fail", "send", [["send", 2, 1]], 18, error="producer fenced"),  # G1a below
        _op(1, "invoke", "send", [["send", 2, 2]], 19),
        _op(1, "ok", "send", [["send", 2, [0, 2]]], 21),
        _op(1, "invoke", "send", [["send", 2, 2]], 22),
        _op(1, "ok", "send", [["send", 2, [2, 2]]], 24),  # duplicate: 2 at offsets 0 and 2
        _op(2, "invoke", "poll", [["poll"]], 25),
        _op(2, "ok", "poll", [["poll", {"1": [[0, 1], [1, 2], [3, 4]], "2": [[0, 2], [1, 1], [2, 2]]}]], 28),
        _op("nemesis", "info", "stop-partition", "fully connected", 30),
        _op(3, "invoke", "poll", [["poll"]], 31),
        _op(3, "ok", "poll", [["poll", {"1": [[0, 1], [1, 5]]}]], 33),  # offset 1 holds 2 and 5
        # G0: two transactions append to keys 4 and 5 in opposite orders
        _op(4, "invoke", "txn", [["send", 4, 1], ["send", 5, 1]], 34),
        _op(5, "invoke", "txn", [["send", 4, 2], ["send", 5, 2]], 34.5),
        _op(4, "ok", "txn", [["send", 4, [0, 1]], ["send", 5, [1, 1]]], 36),
        _op(5, "ok", "txn", [["send", 4, [1, 2]], ["send", 5, [0, 2]]], 36.5),
        _op(6, "invoke", "poll", [["poll"]], 37),
        _op(6, "ok", "poll", [["poll", {"4": [[0, 1], [1, 2]], "5": [[0, 2], [1, 1]]}]], 38),
        _op(2, "invoke", "send", [["send", 3, 1]], 39),
        _op(2, "info", "send", [["send", 3, 1]], 40, error="timed out"),
    ]


def checked(ops: list[Op], **opts: Any) -> dict[str, Any]:
    """results.json for `ops` from the real checker (ops renumbered as write_history does)."""
    from logquake.checker import CheckOptions, check_history

    return check_history([replace(op, index=i) for i, op in enumerate(ops)], CheckOptions(**opts))


def invalid_results() -> dict[str, Any]:
    return checked(invalid_ops(), txn=True)


def legacy_results() -> dict[str, Any]:
    """A hand-written results.json in an older, Jepsen-like shape: the report must cope."""
    return {
        "valid": False,
        "bad_error_types": ["G1a", "duplicate", "inconsistent-offsets", "lost-write"],
        "error_types": ["G1a", "duplicate", "inconsistent-offsets", "lost-write", "unseen"],
        "anomalies": {
            "lost-write": {"count": 1, "errs": [{"key": 1, "value": 3, "offset": 2, "writer": 6,
                                                 "max-read-offset": 3}]},
            "duplicate": {"count": 1, "errs": [{"key": 2, "value": 2, "offsets": [0, 2]}]},
            "G1a": {"count": 1, "errs": [{"key": 2, "value": 1, "writer": 10, "reader": 16}]},
            "inconsistent-offsets": {"count": 1, "errs": [{"key": 1, "offset": 1, "values": [2, 5]}]},
            "G1c": {"count": 1, "errs": [{
                "cycle": [6, 16, 6],
                "steps": ["op 6 (send 1 3) wrote key 1 before op 16 polled it (ww)",
                          "op 16 read value 2 of key 2 written by op 12 (wr)",
                          "op 12 completed before op 6 began (realtime), closing the cycle"],
            }]},
            "unseen": {"count": 1, "errs": [{"key": 1, "value": 3}]},
        },
        "worst-realtime-lag": {"key": 1, "lag": 0.004},
    }


def valid_ops() -> list[Op]:
    """A small correct history under one kill."""
    return [
        _op(0, "invoke", "send", [["send", 1, 1]], 1),
        _op(0, "ok", "send", [["send", 1, [0, 1]]], 3),
        _op("nemesis", "info", "start-kill", ["n1"], 4),
        _op(1, "invoke", "send", [["send", 1, 2]], 5),
        _op(1, "ok", "send", [["send", 1, [1, 2]]], 9),
        _op(2, "invoke", "poll", [["poll"]], 10),
        _op(2, "ok", "poll", [["poll", {"1": [[0, 1], [1, 2]]}]], 12),
        _op("nemesis", "info", "stop-kill", ["n1"], 13),
        _op(0, "invoke", "send", [["send", 1, 3]], 14),
        _op(0, "fail", "send", [["send", 1, 3]], 15, error="unknown topic"),
    ]


def valid_results() -> dict[str, Any]:
    return checked(valid_ops())


def make_run_dir(
    root: Path,
    ops: list[Op] | None,
    results: dict[str, Any] | None,
    *,
    name: str = "queue",
    start: str = "20261129T160000.000Z",
    seed: int = 42,
) -> Path:
    """A run directory as the runner writes it (DESIGN §9); None leaves a file out."""
    run = root / name / start
    (run / "nodes" / "n1").mkdir(parents=True, exist_ok=True)
    test = {"name": name, "workload": "queue", "nodes": 5, "nemesis": ["partition", "kill"], "time_limit": 60,
            "rate": 100, "concurrency": 10, "seed": seed, "start_time": start}
    (run / "test.json").write_text(json.dumps(test))
    if ops is not None:
        (run / "history.jsonl").unlink(missing_ok=True)  # the writer appends
        write_history(run / "history.jsonl", ops)
    if results is not None:
        (run / "results.json").write_text(json.dumps(results))
    (run / "harness.log").write_text("harness started\n")
    (run / "nodes" / "n1" / "broker.log").write_text("broker n1 up\n")
    (run / "junit.xml").write_text("<testsuite/>\n")
    return run


# Real pipeline runs (`logquake run` with workload: pipeline, 3 lab nodes, kill+partition
# every ~3 s, 20 s, seed 21; one run per guarantee profile, 2026-11-29), kept as their
# test.json, results.json and gzipped history.jsonl. The at-least-once run processed 5 of
# its 383 input values twice (allowed there); the others processed every value once.
PIPELINE_DATA = Path(__file__).parent / "data" / "pipeline"
PIPELINE_PROFILES = ("at-most-once", "at-least-once", "exactly-once")


def pipeline_run_dir(root: Path, guarantee: str, *, results: dict[str, Any] | None = None) -> Path:
    """A run directory rebuilt from a real pipeline run's files (results.json replaced if given)."""
    import gzip

    src = PIPELINE_DATA / guarantee
    test = json.loads((src / "test.json").read_text())
    run = root / test["name"] / str(test.get("run_dir", "run")).rsplit("/", 1)[-1]
    run.mkdir(parents=True, exist_ok=True)
    (run / "test.json").write_text((src / "test.json").read_text())
    (run / "results.json").write_text(json.dumps(results) if results is not None else (src / "results.json").read_text())
    (run / "history.jsonl").write_bytes(gzip.decompress((src / "history.jsonl.gz").read_bytes()))
    return run
