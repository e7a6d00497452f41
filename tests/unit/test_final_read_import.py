"""Jepsen's final-polls ops become logquake's marked final read on import."""

from __future__ import annotations

import textwrap
from pathlib import Path

from logquake.checker import CheckOptions, check_history
from logquake.history_import import load_edn_history

# Jepsen's Kafka workload: three sends acknowledged and read, a crash, then final-polls by a
# fresh process (debug-topic-partitions, assign with seek-to-beginning?, polls with :poll-ms).
HISTORY = """
{:index 0 :time 0 :type :invoke :process 0 :f :send :value [[:send 0 1]]}
{:index 1 :time 1 :type :ok :process 0 :f :send :value [[:send 0 [0 1]]]}
{:index 2 :time 2 :type :invoke :process 0 :f :send :value [[:send 0 2]]}
{:index 3 :time 3 :type :ok :process 0 :f :send :value [[:send 0 [1 2]]]}
{:index 4 :time 4 :type :invoke :process 1 :f :assign :value [0]}
{:index 5 :time 5 :type :ok :process 1 :f :assign :value [0]}
{:index 6 :time 6 :type :invoke :process 1 :f :poll :value [[:poll]]}
{:index 7 :time 7 :type :ok :process 1 :f :poll :value [[:poll {0 [[0 1] [1 2]]}]]}
{:index 8 :time 8 :type :info :process :nemesis :f :kill :value :all}
{:index 9 :time 9 :type :invoke :process 6 :f :debug-topic-partitions :value [0]}
{:index 10 :time 10 :type :ok :process 6 :f :debug-topic-partitions :value [0]}
{:index 11 :time 11 :type :invoke :process 6 :f :assign :value [0] :seek-to-beginning? true}
{:index 12 :time 12 :type :ok :process 6 :f :assign :value [0] :seek-to-beginning? true}
{:index 13 :time 13 :type :invoke :process 6 :f :poll :value [[:poll]] :poll-ms 1000}
{:index 14 :time 14 :type :ok :process 6 :f :poll :value [[:poll {0 [[0 1]]}]] :poll-ms 1000}
"""


def load(tmp_path: Path, text: str):
    p = tmp_path / "history.edn"
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return load_edn_history(p)


def test_final_polls_and_their_assign_are_marked_final(tmp_path: Path) -> None:
    ops = load(tmp_path, HISTORY)
    assert [op.index for op in ops if op.get("final")] == [11, 12, 13, 14]


def test_a_value_missing_from_jepsens_final_polls_is_lost_once_they_reach_the_highest_offset(tmp_path) -> None:
    # The final poll stopped at offset 0 of 1: not known complete, so unknown rather than lost.
    r = check_history(load(tmp_path, HISTORY), CheckOptions())
    assert r["valid"] == "unknown" and r["final_read"]["incomplete_keys"] == [0]
    # A log whose offset 1 now holds another value: the final read is complete and 2 is lost.
    moved = HISTORY.replace("{0 [[0 1]]}]] :poll-ms", "{0 [[0 1] [1 3]]}]] :poll-ms")
    r = check_history(load(tmp_path, moved), CheckOptions())
    assert r["valid"] is False and "lost" in r["bad_error_types"]
    [e] = r["anomalies"]["lost"]["errs"]
    assert (e["key"], e["value"], e["read"]) == (0, 2, "earlier")


def test_histories_without_final_polls_are_unchanged(tmp_path: Path) -> None:
    plain = "\n".join(line for line in HISTORY.splitlines() if ":process 6" not in line)
    ops = load(tmp_path, plain)
    assert not any(op.get("final") for op in ops)
    assert check_history(ops, CheckOptions())["final_read"]["ran"] is False
