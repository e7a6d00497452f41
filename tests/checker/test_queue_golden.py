"""The queue analysis's results on simulated histories, as readable expectations.

Each case is a simulated history with one planted bug (or none), checked with and without
ww-deps. For each the expectation names the verdict, the worst realtime lag (seconds,
process, key) and every anomaly type found with its count and its first example (the
explanation; for a cycle its ops and the types of its edges), so a failure says what
changed. tests/checker/test_queue_oracles.py checks the ordering and lag analyses against
plain loops on random histories; a deliberate change of output updates these (run this
module as a script to print them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.checker.generate import BUGS, simulate
from tests.checker.histories import with_bug


def history(name: str):
    bug, txn, ww = name.split("/")
    cfg = with_bug(bug, ops=500, workers=4, max_writes_per_key=25, txn=txn == "txn", poll_max=4, p_bug=0.2,
                   seed=len(name))
    ops, _ = simulate(cfg)
    opts = CheckOptions(txn=cfg.txn, ww_deps=ww == "ww", sub_via="assign" if ww == "ww" else "subscribe")
    return ops, opts


@dataclass(frozen=True, kw_only=True)
class Expect:
    valid: Any
    lag: tuple  # worst realtime lag: (seconds, process, key)
    anomalies: dict[str, tuple[int, str]] = field(default_factory=dict)  # type -> (count, first example)


def example(errs: list[dict]) -> str:
    """The first example, in words: its explanation, or a cycle's ops and edge types."""
    e = errs[0]
    if "cycle" in e:
        ops = " ".join(str(c["index"]) for c in e["cycle"])
        return f"ops {ops} by " + " ".join(s["type"] for s in e["steps"])
    return e["explanation"]


def observed(result: dict) -> Expect:
    w = result["worst_realtime_lag"]
    return Expect(
        valid=result["valid"],
        lag=(w["lag"], w["process"], w["key"]),
        anomalies={t: (e["count"], example(e["errs"])) for t, e in result["anomalies"].items()},
    )


CASES = [f"{bug}/{txn}/{ww}" for bug in ("none", *BUGS) for txn in ("txn", "plain") for ww in ("ww", "noww")]

EXPECTED = {
    "none/txn/ww": Expect(
        valid=True,
        lag=(0.000984, 23, 2),
        anomalies={
            "int-send-skip": (20, "op 238 (ok txn by process 6) sent 7 then 8 of key 10, skipping over values between them"),
            "G0": (21, "ops 46 48 by ww ww"),
            "G1c": (1, "ops 46 56 by wr ww"),
        },
    ),
    "none/txn/noww": Expect(
        valid=True,
        lag=(0.000982, 22, 1),
        anomalies={
            "int-send-skip": (20, "op 146 (ok txn by process 4) sent 3 then 4 of key 8, skipping over values between them"),
        },
    ),
    "none/plain/ww": Expect(
        valid=True,
        lag=(0.000956, 26, 1),
    ),
    "none/plain/noww": Expect(
        valid=True,
        lag=(0.000927, 31, 3),
    ),
    "lose-write/txn/ww": Expect(
        valid=False,
        lag=(0.000979, 28, 2),
        anomalies={
            "lost-write": (71, "op 7 (ok send by process 2) sent 0 to key 0 (index 0), and ok ops read key 0 up to index 15 (value 17), yet no ok op ever read 0"),
            "int-poll-skip": (73, "op 1007 (ok poll by process 28) read 4 then 9 of key 44, skipping over values between them"),
            "int-send-skip": (27, "op 266 (ok send by process 4) sent 10 then 11 of key 16, skipping over values between them"),
            "poll-skip": (48, "process 3 read 2 of key 2 in op 15 (ok poll by process 3), then 3 in its next op 40 (ok txn by process 3), skipping over values between them"),
            "unseen": (71, "2 acknowledged values of key 0 were never polled"),
            "G0": (29, "ops 25 29 by ww ww"),
            "G0-realtime": (3, "ops 615 620 624 by realtime ww ww"),
            "G1c": (3, "ops 84 86 by wr ww"),
        },
    ),
    "lose-write/txn/noww": Expect(
        valid=False,
        lag=(0.000988, 38, 2),
        anomalies={
            "lost-write": (71, "op 57 (ok txn by process 7) sent 13 to key 0 (index 13), and ok ops read key 0 up to index 22 (value 22), yet no ok op ever read 13"),
            "int-poll-skip": (75, "op 184 (ok txn by process 9) read 2 then 6 of key 4, skipping over values between them"),
            "int-send-skip": (12, "op 26 (ok send by process 1) sent 4 then 5 of key 2, skipping over values between them"),
            "poll-skip": (22, "process 38 read 3 of key 16 in op 1005 (ok poll by process 38), then 7 in its next op 1007 (ok poll by process 38), skipping over values between them"),
            "unseen": (71, "2 acknowledged values of key 0 were never polled"),
        },
    ),
    "lose-write/plain/ww": Expect(
        valid=False,
        lag=(0.000971, 26, 2),
        anomalies={
            "lost-write": (39, "op 70 (ok send by process 3) sent 3 to key 0 (index 3), and ok ops read key 0 up to index 18 (value 22), yet no ok op ever read 3"),
            "int-poll-skip": (47, "op 543 (ok poll by process 12) read 1 then 6 of key 9, skipping over values between them"),
            "poll-skip": (28, "process 5 read 1 of key 9 in op 523 (ok poll by process 5), then 6 in its next op 551 (ok poll by process 5), skipping over values between them"),
            "unseen": (39, "3 acknowledged values of key 0 were never polled"),
        },
    ),
    "lose-write/plain/noww": Expect(
        valid=False,
        lag=(0.000932, 27, 2),
        anomalies={
            "lost-write": (30, "op 2 (ok send by process 3) sent 0 to key 0 (index 0), and ok ops read key 0 up to index 5 (value 6), yet no ok op ever read 0"),
            "int-poll-skip": (37, "op 76 (ok poll by process 1) read 3 then 5 of key 2, skipping over values between them"),
            "poll-skip": (25, "process 1 read 2 of key 0 in op 23 (ok poll by process 1), then 4 in its next op 50 (fail poll by process 1), skipping over values between them"),
            "unseen": (30, "2 acknowledged values of key 0 were never polled"),
        },
    ),
    "duplicate/txn/ww": Expect(
        valid=False,
        lag=(0.00099, 33, 2),
        anomalies={
            "duplicate": (127, "value 3 of key 2 appears at 2 offsets: [4, 5]"),
            "int-send-skip": (47, "op 22 (ok send by process 2) sent 2 then 3 of key 1, skipping over values between them"),
            "G0": (30, "ops 3 8 by ww ww"),
            "G0-process": (2, "ops 15 27 22 by process ww ww"),
            "G0-realtime": (3, "ops 14 27 22 by realtime ww ww"),
            "G1c": (2, "ops 936 937 by wr ww"),
            "G1c-process": (1, "ops 14 27 22 15 27 22 by wr ww ww process ww ww"),
            "G1c-realtime": (1, "ops 14 27 22 15 27 22 by wr ww ww realtime ww ww"),
        },
    ),
    "duplicate/txn/noww": Expect(
        valid=False,
        lag=(0.000996, 32, 2),
        anomalies={
            "duplicate": (95, "value 5 of key 2 appears at 2 offsets: [4, 5]"),
            "int-send-skip": (26, "op 821 (ok txn by process 20) sent 12 then 13 of key 37, skipping over values between them"),
        },
    ),
    "duplicate/plain/ww": Expect(
        valid=False,
        lag=(0.000988, 30, 1),
        anomalies={
            "duplicate": (49, "value 1 of key 1 appears at 2 offsets: [0, 1]"),
        },
    ),
    "duplicate/plain/noww": Expect(
        valid=False,
        lag=(0.000974, 33, 0),
        anomalies={
            "duplicate": (36, "value 2 of key 1 appears at 2 offsets: [1, 2]"),
        },
    ),
    "reuse-offset/txn/ww": Expect(
        valid=False,
        lag=(0.000987, 40, 2),
        anomalies={
            "inconsistent-offsets": (95, "offset 15 of key 2 was seen holding each of [8, 9]"),
            "duplicate": (101, "value 9 of key 2 appears at 2 offsets: [15, 17]"),
            "int-send-skip": (21, "op 39 (ok txn by process 2) sent 12 then 13 of key 0, skipping over values between them"),
            "int-nonmonotonic-send": (9, "op 43 (ok send by process 1) sent 1 then 2 of key 3, going backwards in the log"),
            "nonmonotonic-send": (13, "process 7 sent 2 of key 6 in op 106 (ok txn by process 7), then 3 in its next op 116 (ok txn by process 7), going backwards in the log"),
            "G0": (34, "ops 17 23 by ww ww"),
            "G0-process": (3, "ops 17 24 23 by process ww ww"),
            "G0-realtime": (8, "ops 17 24 23 by realtime ww ww"),
            "G1c": (6, "ops 54 57 by wr ww"),
            "G1c-process": (2, "ops 47 50 57 60 by wr process ww ww"),
            "G1c-realtime": (3, "ops 47 50 57 60 by wr realtime ww ww"),
        },
    ),
    "reuse-offset/txn/noww": Expect(
        valid=False,
        lag=(0.000982, 34, 0),
        anomalies={
            "inconsistent-offsets": (85, "offset 19 of key 2 was seen holding each of [11, 12]"),
            "duplicate": (90, "value 12 of key 2 appears at 2 offsets: [19, 21]"),
            "int-send-skip": (26, "op 108 (ok send by process 3) sent 10 then 11 of key 3, skipping over values between them"),
            "int-nonmonotonic-send": (8, "op 594 (ok send by process 17) sent 12 then 13 of key 27, going backwards in the log"),
            "nonmonotonic-send": (11, "process 1 sent 4 of key 3 in op 48 (ok send by process 1), then 5 in its next op 55 (ok txn by process 1), going backwards in the log"),
        },
    ),
    "reuse-offset/plain/ww": Expect(
        valid=False,
        lag=(0.000928, 38, 2),
        anomalies={
            "inconsistent-offsets": (37, "offset 1 of key 0 was seen holding each of [2, 3]"),
            "duplicate": (37, "value 3 of key 0 appears at 2 offsets: [1, 2]"),
            "nonmonotonic-send": (6, "process 3 sent 2 of key 0 in op 15 (ok send by process 3), then 3 in its next op 36 (ok send by process 3), going backwards in the log"),
        },
    ),
    "reuse-offset/plain/noww": Expect(
        valid=False,
        lag=(0.000973, 31, 0),
        anomalies={
            "inconsistent-offsets": (38, "offset 4 of key 0 was seen holding each of [4, 5]"),
            "duplicate": (38, "value 5 of key 0 appears at 2 offsets: [4, 5]"),
            "nonmonotonic-send": (5, "process 5 sent 9 of key 3 in op 147 (ok send by process 5), then 10 in its next op 156 (ok send by process 5), going backwards in the log"),
        },
    ),
    "read-aborted/txn/ww": Expect(
        valid=False,
        lag=(0.000988, 34, 0),
        anomalies={
            "G1a": (55, "op 43 (ok poll by process 2) read 10 from key 2, but op 32 (fail txn by process 0) that sent it failed"),
            "int-send-skip": (17, "op 113 (ok txn by process 1) sent 6 then 7 of key 4, skipping over values between them"),
            "G0": (16, "ops 14 17 by ww ww"),
            "G0-process": (2, "ops 927 930 936 932 by process ww ww ww"),
            "G0-realtime": (4, "ops 499 506 503 by realtime ww ww"),
        },
    ),
    "read-aborted/txn/noww": Expect(
        valid=False,
        lag=(0.000985, 36, 0),
        anomalies={
            "G1a": (89, "op 52 (ok txn by process 1) read 5 from key 1, but op 48 (fail send by process 0) that sent it failed"),
            "int-send-skip": (25, "op 165 (ok txn by process 0) sent 0 then 1 of key 10, skipping over values between them"),
        },
    ),
    "read-aborted/plain/ww": Expect(
        valid=True,
        lag=(0.000964, 32, 1),
    ),
    "read-aborted/plain/noww": Expect(
        valid=True,
        lag=(0.000956, 25, 1),
    ),
    "read-uncommitted/txn/ww": Expect(
        valid=False,
        lag=(0.000998, 26, 0),
        anomalies={
            "G1a": (6, "op 34 (ok txn by process 1) read 8 from key 0, but op 30 (fail txn by process 0) that sent it failed"),
            "precommitted-read": (32, "op 6 (ok txn by process 1) sent 4 to key 0 and polled it back within the same transaction"),
            "int-poll-skip": (16, "op 35 (ok poll by process 2) read 7 then 10 of key 0, skipping over values between them"),
            "int-send-skip": (17, "op 328 (ok txn by process 0) sent 8 then 9 of key 14, skipping over values between them"),
            "poll-skip": (10, "process 2 read 6 of key 0 in op 20 (ok txn by process 2), then 7 in its next op 35 (ok poll by process 2), skipping over values between them"),
            "G0": (19, "ops 172 173 by ww ww"),
            "G0-process": (2, "ops 541 546 549 by process ww ww"),
            "G0-realtime": (3, "ops 541 546 549 by realtime ww ww"),
            "G1c": (8, "ops 6 7 by wr ww"),
            "G1c-process": (2, "ops 7 13 12 by process wr wr"),
            "G1c-realtime": (3, "ops 6 13 12 by realtime wr wr"),
            "G1c-wr": (1, "ops 6 7 by wr wr"),
            "future-read": (1, "ops 7 13 12 by process wr wr"),
        },
    ),
    "read-uncommitted/txn/noww": Expect(
        valid=False,
        lag=(0.000984, 35, 0),
        anomalies={
            "G1a": (3, "op 45 (ok poll by process 5) read 9 from key 1, but op 50 (fail txn by process 3) that sent it failed"),
            "precommitted-read": (24, "op 5 (info txn by process 0) sent 0 to key 0 and polled it back within the same transaction"),
            "int-poll-skip": (8, "op 66 (ok poll by process 6) read 9 then 12 of key 0, skipping over values between them"),
            "int-send-skip": (20, "op 55 (ok send by process 6) sent 9 then 10 of key 0, skipping over values between them"),
            "poll-skip": (3, "process 11 read 18 of key 13 in op 321 (ok txn by process 11), then 20 in its next op 350 (ok txn by process 11), skipping over values between them"),
            "G1c": (2, "ops 51 52 by wr wr"),
            "G1c-realtime": (1, "ops 92 96 97 by realtime wr wr"),
        },
    ),
    "read-uncommitted/plain/ww": Expect(
        valid=True,
        lag=(0.000956, 31, 0),
    ),
    "read-uncommitted/plain/noww": Expect(
        valid=True,
        lag=(0.000963, 25, 0),
    ),
    "tear-txn/txn/ww": Expect(
        valid=False,
        lag=(0.000982, 26, 2),
        anomalies={
            "lost-write": (31, "op 157 (ok txn by process 5) sent 16 to key 8 (index 16), and ok ops read key 8 up to index 23 (value 23), yet no ok op ever read 16"),
            "int-poll-skip": (24, "op 198 (ok txn by process 0) read 15 then 19 of key 8, skipping over values between them"),
            "int-send-skip": (21, "op 595 (ok txn by process 16) sent 13 then 14 of key 27, skipping over values between them"),
            "poll-skip": (19, "process 26 read 15 of key 8 in op 1011 (ok poll by process 26), then 19 in its next op 1013 (ok poll by process 26), skipping over values between them"),
            "unseen": (31, "1 acknowledged values of key 11 were never polled"),
            "G0": (26, "ops 4 8 by ww ww"),
            "G0-realtime": (2, "ops 211 216 218 by realtime ww ww"),
            "G1c-realtime": (1, "ops 874 882 883 by realtime wr ww"),
        },
    ),
    "tear-txn/txn/noww": Expect(
        valid=False,
        lag=(0.000981, 30, 1),
        anomalies={
            "lost-write": (37, "op 35 (ok txn by process 4) sent 3 to key 0 (index 4), and ok ops read key 0 up to index 17 (value 17), yet no ok op ever read 3"),
            "int-poll-skip": (31, "op 1009 (ok poll by process 30) read 13 then 14 of key 22, skipping over values between them"),
            "int-send-skip": (15, "op 500 (ok txn by process 12) sent 5 then 6 of key 22, skipping over values between them"),
            "poll-skip": (27, "process 13 read 13 of key 22 in op 521 (ok poll by process 13), then 14 in its next op 544 (ok txn by process 13), skipping over values between them"),
            "unseen": (37, "5 acknowledged values of key 0 were never polled"),
        },
    ),
    "tear-txn/plain/ww": Expect(
        valid=True,
        lag=(0.000951, 29, 0),
    ),
    "tear-txn/plain/noww": Expect(
        valid=True,
        lag=(0.000962, 29, 2),
    ),
    "reorder/txn/ww": Expect(
        valid=False,
        lag=(0.000988, 34, 2),
        anomalies={
            "int-send-skip": (16, "op 12 (ok send by process 0) sent 2 then 3 of key 1, skipping over values between them"),
            "int-nonmonotonic-send": (15, "op 198 (ok send by process 8) sent 10 then 11 of key 8, going backwards in the log"),
            "G0": (23, "ops 4 12 by ww ww"),
            "G0-process": (1, "ops 651 654 656 by process ww ww"),
            "G0-realtime": (2, "ops 68 75 77 by realtime ww ww"),
            "G1c": (2, "ops 617 619 by wr ww"),
        },
    ),
    "reorder/txn/noww": Expect(
        valid=False,
        lag=(0.000987, 28, 0),
        anomalies={
            "int-send-skip": (11, "op 12 (ok txn by process 1) sent 1 then 2 of key 0, skipping over values between them"),
            "int-nonmonotonic-send": (11, "op 776 (ok txn by process 20) sent 8 then 9 of key 33, going backwards in the log"),
        },
    ),
    "reorder/plain/ww": Expect(
        valid=True,
        lag=(0.00096, 28, 1),
    ),
    "reorder/plain/noww": Expect(
        valid=True,
        lag=(0.00096, 22, 3),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_results_match_the_expectation(name: str) -> None:
    ops, opts = history(name)
    assert observed(check_history(ops, opts)) == EXPECTED[name]


if __name__ == "__main__":  # print what each case gives now, to review and paste above
    for name in CASES:
        got = observed(check_history(*history(name)))
        print(f"    {json.dumps(name)}: {got!r},")
