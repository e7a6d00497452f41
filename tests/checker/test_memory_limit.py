"""--max-memory: a history is measured before it is read, refused in one line when too
large, and checked straight from its file (queue_stream.py: same verdict, bounded memory)
when only that fits."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.checker.generate import BUGS, SimConfig, simulate
from logquake.checker.memory import (
    BASE,
    CHECK_PER_BYTE,
    STREAMED_CHECK_PER_BYTE,
    history_size,
    parse_size,
    plan_check,
    refuse_report,
)
from logquake.checker.queue_build import build_index
from logquake.checker.queue_index import _RECENT
from logquake.checker.queue_pairs import Pairs, PairStore, joined
from logquake.checker.queue_stream import HistoryFile, indexed_ops
from logquake.errors import HistoryFormatError, UserError
from logquake.history import Op, load_history, write_history
from tests.checker.histories import with_bug
from tests.checker.test_duplicate_window import _resent_twice_stored
from tests.checker.test_final_read import the_issues_history

T = TypeVar("T")


def untimed(result: dict) -> dict:
    """A result without the cycle search's wall time."""
    search = result.get("cycle_search")
    return {**result, "cycle_search": {k: v for k, v in search.items() if k != "seconds"} if search else search}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logquake", *args], capture_output=True, text=True, timeout=300)


def cli_beside(work: Callable[[], T], *args: str) -> tuple[subprocess.CompletedProcess, T]:
    """`cli(*args)`, and `work()` in this process while the command runs: the two checks of
    one history are independent, and on two cores neither waits for the other."""
    cmd = [sys.executable, "-m", "logquake", *args]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        try:
            result = work()
            out, err = p.communicate(timeout=300)
        except BaseException:
            p.kill()
            raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err), result


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A 40k-op transactional history with every bug planted: a shape like bench_checker's."""
    cfg = SimConfig(ops=20_000, workers=10, active_keys=10, max_writes_per_key=256, txn=True, p_fail=0.01,
                    p_info=0.01, p_assign=0.01, bugs=frozenset(BUGS), p_bug=0.01, seed=7)
    path = tmp_path_factory.mktemp("big") / "history.jsonl"
    write_history(path, simulate(cfg)[0])
    return path


@pytest.mark.parametrize(
    ("text", "n"),
    [("8G", 8 * 2**30), ("8g", 8 * 2**30), ("8GB", 8 * 2**30), ("8GiB", 8 * 2**30), ("512M", 512 * 2**20),
     ("1.5G", 3 * 2**29), ("1000", 1000), ("64k", 65536), ("2T", 2 * 2**40), (" 3 G ", 3 * 2**30)],
)
def test_sizes(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "G", "8X", "-1G", "8 GB extra", "1e9"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_ops_are_counted_in_a_small_file_and_estimated_in_a_large_one(tmp_path, big):
    small = tmp_path / "h.jsonl"
    small.write_text('{"a":1}\n' * 10 + '{"a":1}')  # a last line with no newline counts too
    assert history_size(small).ops == 11
    lines = sum(1 for _ in open(big))
    assert abs(history_size(big).ops - lines) < 0.2 * lines


def test_a_history_too_large_is_refused_in_one_line_saying_what_fits(big):
    size = big.stat().st_size
    with pytest.raises(UserError) as e:
        plan_check(big, BASE + size)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(big) in msg and "ops" in msg and "would fit" in msg and "--max-memory" in msg
    with pytest.raises(UserError, match="nothing fits"):
        plan_check(big, BASE // 2)


def test_the_plan_checks_from_the_file_only_when_the_plain_read_does_not_fit(big):
    size = big.stat().st_size
    assert not plan_check(big, 2**40).streamed
    between = BASE + int((CHECK_PER_BYTE + STREAMED_CHECK_PER_BYTE) / 2 * size)
    assert plan_check(big, between).streamed
    with pytest.raises(UserError):  # not a queue history.jsonl: no check from the file to fall back on
        plan_check(big, between, can_stream=False)


def test_report_refusal(big):
    refuse_report(big, 2**40)
    with pytest.raises(UserError, match="a report takes"):
        refuse_report(big, BASE)


@pytest.mark.parametrize("txn", [True, False])
@pytest.mark.parametrize("bug", ["none", *BUGS])
def test_the_check_from_the_file_gives_the_in_memory_result(tmp_path, bug, txn):
    path = tmp_path / "history.jsonl"
    write_history(path, simulate(with_bug(bug, ops=400, txn=txn))[0])
    opts = CheckOptions(txn=txn)
    assert untimed(check_history(HistoryFile(path), opts)) == untimed(check_history(load_history(path), opts))


@pytest.mark.parametrize(("ops", "opts", "found"), [
    (lambda: the_issues_history().ops, CheckOptions(), "lost"),  # a final read: read again
    (lambda: _resent_twice_stored(resend_at=20.0).ops, CheckOptions(duplicate_window=5.0), "duplicate-after-window"),
])
def test_the_analyses_that_read_the_ops_again_read_the_file(tmp_path, ops, opts, found):
    path = tmp_path / "history.jsonl"
    write_history(path, ops())
    streamed, in_memory = check_history(HistoryFile(path), opts), check_history(load_history(path), opts)
    assert untimed(streamed) == untimed(in_memory)
    assert found in streamed["anomalies"]


def test_a_malformed_line_checked_from_the_file_is_the_files_error(tmp_path):
    path = tmp_path / "history.jsonl"
    write_history(path, simulate(with_bug("none", ops=50, txn=True))[0])
    path.write_text(path.read_text().replace('"type":"ok"', '"type":"okay"', 1))
    with pytest.raises(HistoryFormatError, match="unknown type"):
        check_history(HistoryFile(path), CheckOptions(txn=True))


def test_indexed_ops_keep_no_value_and_no_invocation(tmp_path):
    path = tmp_path / "history.jsonl"
    write_history(path, simulate(with_bug("none", ops=200, txn=True))[0])
    ix = build_index(indexed_ops(HistoryFile(path)), slim=True)
    assert ix.txns and all(t.op.value is None and t.op.type != "invoke" for t in ix.txns)
    assert all(type(p) is Pairs for t in ix.txns for p in t.reads.values())


def _poll(index: int, reads: dict) -> list[Op]:
    return [Op(index=2 * index, process=index, type="invoke", f="poll", value=[["poll"]]),
            Op(index=2 * index + 1, process=index, type="ok", f="poll", value=[["poll", reads]])]


def test_pairs_of_integers_are_stored_and_any_other_read_is_kept_as_read(tmp_path):
    path = tmp_path / "history.jsonl"
    odd = [[0, 1.0], [0, True], [True, 1], [0], [], "x", 5, [0, 1, 2], [1, 7]]
    write_history(path, _poll(0, {"1": [[0, 1], [1, 2]], "3": []}) + _poll(1, {"1": [[0, 1], [1, 3]], "2": [[0, 2**63]]})
                  + _poll(2, {"1": odd}))
    a, b, c = (op.value[0][1] for op in indexed_ops(HistoryFile(path)) if op.type == "ok")
    assert type(a["1"]) is Pairs and list(a["1"]) == [(0, 1), (1, 2)] and a["1"] == [[0, 1], [1, 2]]
    assert a["1"][-1] == (1, 2) and a["1"][0] == (0, 1) and len(a["3"]) == 0 and a["3"] == []
    with pytest.raises(IndexError):
        a["1"][2]
    assert type(b["1"]) is Pairs and b["1"] != a["1"]
    assert b["2"] == [[0, 2**63]] and type(b["2"]) is list  # beyond 64 bits: as read
    assert c["1"] == odd and type(c["1"]) is list  # as read: ints stay ints, floats floats, bools bools
    assert [type(x) for p in c["1"][:3] for x in p] == [int, float, int, bool, bool, int]


def test_a_store_takes_polls_in_batches_and_flushes_the_rest():
    store = PairStore()
    values = [[["poll", {str(k): [[i, 10 * i + k]]}]] for i in range(5000) for k in range(2)]
    for v in values:
        store.take_polls(v)
    assert sum(type(v[0][1][k]) is Pairs for v in values for k in v[0][1]) >= 4096
    store.flush()
    assert all(type(p) is Pairs for v in values for p in v[0][1].values())
    assert [v[0][1][k][0] for v in values[-2:] for k in v[0][1]] == [(4999, 49990), (4999, 49991)]


def test_cli_refuses_a_history_too_large_before_reading_it(big):
    p = cli("check", "--txn", "--max-memory", "1M", str(big))
    assert p.returncode == 3, p.stderr
    assert "would fit" in p.stderr or "nothing fits" in p.stderr
    assert "Traceback" not in p.stderr
    p = cli("check", "--max-memory", "lots", str(big))
    assert p.returncode == 3 and "--max-memory" in p.stderr


def test_cli_checks_from_the_file_under_a_small_limit_with_the_in_memory_verdict(big):
    """`logquake check --max-memory` with room for the check from the file only: the verdict
    check_history gives on the history read plainly (40k ops, every bug)."""
    size = big.stat().st_size
    between = BASE + int((CHECK_PER_BYTE + STREAMED_CHECK_PER_BYTE) / 2 * size)
    stored, in_memory = cli_beside(
        lambda: json.loads(json.dumps(check_history(load_history(big), CheckOptions(txn=True)), default=str)),
        "check", "--txn", "--json", "--max-memory", str(between), str(big))
    assert "straight from the file" in stored.stderr
    assert stored.returncode == 1, stored.stderr  # the planted bugs
    assert untimed(json.loads(stored.stdout)) == untimed(in_memory)


def test_cli_checks_200k_ops_from_the_file_under_a_small_limit_with_the_in_memory_verdict(tmp_path):
    """The issue's size: 200k ops with every bug planted, through `logquake check
    --max-memory` (checked from the file) and check_history on the generated ops."""
    cfg = SimConfig(ops=100_000, workers=10, active_keys=10, max_writes_per_key=512, txn=True, p_fail=0.01,
                    p_info=0.01, p_assign=0.01, bugs=frozenset(BUGS), p_bug=0.002, seed=11)
    ops = simulate(cfg)[0]
    path = tmp_path / "history.jsonl"
    write_history(path, ops)
    size = path.stat().st_size
    between = BASE + int((CHECK_PER_BYTE + STREAMED_CHECK_PER_BYTE) / 2 * size)
    stored, in_memory = cli_beside(
        lambda: json.loads(json.dumps(check_history(ops, CheckOptions(txn=True)), default=str)),
        "check", "--txn", "--json", "--max-memory", str(between), str(path))
    assert "straight from the file" in stored.stderr
    assert stored.returncode == 1, stored.stderr  # the planted bugs
    assert untimed(json.loads(stored.stdout)) == untimed(in_memory)


def test_cli_checking_a_run_from_the_file_names_a_malformed_line(tmp_path, big):
    """A run directory checked from the file: a malformed line is the file's error (exit 3,
    its line number), as when the history is read whole, not a checker crash (`unknown`)."""
    run = tmp_path / "run"
    run.mkdir()
    lines = big.read_text().splitlines(keepends=True)
    lines[100] = lines[100].replace('"type":"ok"', '"type":"okay"').replace('"type":"invoke"', '"type":"nope"')
    (run / "history.jsonl").write_text("".join(lines))
    (run / "test.json").write_text(json.dumps({"workload": "queue", "txn": True, "guarantee": "exactly-once"}))
    size = (run / "history.jsonl").stat().st_size
    between = BASE + int((CHECK_PER_BYTE + STREAMED_CHECK_PER_BYTE) / 2 * size)
    p = cli("check", "--max-memory", str(between), str(run))
    assert "straight from the file" in p.stderr
    assert p.returncode == 3 and ":101:" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_cli_report_refuses_a_history_too_large(tmp_path, big):
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").symlink_to(big)
    p = cli("report", "--max-memory", "1M", str(run))
    assert p.returncode == 3 and "a report takes" in p.stderr
    assert not (run / "report.html").exists()


def test_bench_tiles_a_history_into_copies_on_keys_and_processes_of_their_own(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_checker", Path(__file__).parents[2] / "benchmarks/bench_checker.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    src, dst = tmp_path / "h.jsonl", tmp_path / "hx3.jsonl"
    write_history(src, simulate(with_bug("duplicate", ops=300, txn=True))[0])
    bench.tile(src, dst, 3)
    one, three = load_history(src), load_history(dst)  # (validated: pairing, indices)
    assert len(three) == 3 * len(one)
    assert [op.index for op in three] == list(range(len(three)))
    opts = CheckOptions(txn=True)
    a, b = check_history(one, opts), check_history(three, opts)
    assert b["error_types"] == a["error_types"]
    assert b["stats"] == {k: 3 * v for k, v in a["stats"].items()}
    for typ, entry in a["anomalies"].items():
        assert b["anomalies"][typ]["count"] == 3 * entry["count"], typ


def test_an_ops_polls_of_one_key_lie_side_by_side_and_join_without_a_copy(tmp_path):
    path = tmp_path / "history.jsonl"
    write_history(path, [Op(index=0, process=0, type="invoke", f="txn", value=[["poll"], ["poll"]]),
                         Op(index=1, process=0, type="ok", f="txn",
                            value=[["poll", {"1": [[0, 1]], "2": [[0, 5]]}], ["poll", {"1": [[1, 2]]}]])])
    done = list(indexed_ops(HistoryFile(path)))[1]
    a, b = done.value[0][1]["1"], done.value[1][1]["1"]
    assert list(done.value[0][1]) == ["1", "2"]  # the poll's own order of keys, as read
    assert b.start == a.start + a.n
    size = len(a.data)
    assert joined(a, b) == [[0, 1], [1, 2]] and len(a.data) == size
    assert build_index(indexed_ops(HistoryFile(path)), slim=True).txns[0].reads == {1: [(0, 1), (1, 2)], 2: [(0, 5)]}


@pytest.mark.parametrize("odd", [
    [["poll", {"1": [[0, "a"]]}]],  # a read that is no pair of integers: not in the store
    [["send", 1, [0, "a"]]],  # a send whose value is no integer: the arrays refuse it
])
def test_a_history_the_store_cannot_hold_is_checked_from_the_file_as_in_memory(tmp_path, odd):
    path = tmp_path / "history.jsonl"
    ops = simulate(with_bug("none", ops=100, txn=True))[0]
    n = len(ops)
    ops += [Op(index=n, process=99, type="invoke", f="txn", value=[[m[0]] if m[0] == "poll" else m[:2] for m in odd]),
            Op(index=n + 1, process=99, type="ok", f="txn", value=odd)]
    write_history(path, ops)
    opts = CheckOptions(txn=True)
    streamed, in_memory = check_history(HistoryFile(path), opts), check_history(load_history(path), opts)
    assert untimed(streamed) == untimed(in_memory)
    assert streamed["valid"] == "unknown" and "index" in streamed["analysis_errors"]


def test_a_store_holds_int32_until_a_number_needs_more_and_its_views_follow():
    store = PairStore()
    a = store.take([[0, 1], [1, 2]])
    assert store.data.typecode == "i"
    b = store.take([[2, 2**40]])
    assert store.data.typecode == "q" and a == [[0, 1], [1, 2]] and list(b) == [(2, 2**40)]
    assert store.take([[0, 2**63]]) is None and len(store.data) == 6


def _beyond_32_bits(op: Op) -> Op:
    """op with every value sent or polled moved beyond 32 bits."""
    big = 2**40

    def mop(m: list) -> list:
        if m[0] == "send" and len(m) > 2:
            x = m[2]
            return [*m[:2], [x[0], x[1] + big] if type(x) is list else x + big]
        if m[0] == "poll" and len(m) > 1:
            return ["poll", {k: [[o, v + big] for o, v in ps] for k, ps in m[1].items()}]
        return m

    return replace(op, value=[mop(m) for m in op.value]) if op.f in ("send", "poll", "txn") and op.value else op


def test_a_history_with_values_beyond_32_bits_is_checked_from_the_file_as_in_memory(tmp_path):
    path = tmp_path / "history.jsonl"
    write_history(path, [_beyond_32_bits(op) for op in simulate(with_bug("lose-write", ops=400, txn=True))[0]])
    opts = CheckOptions(txn=True)
    streamed, in_memory = check_history(HistoryFile(path), opts), check_history(load_history(path), opts)
    assert untimed(streamed) == untimed(in_memory) and "lost-write" in streamed["anomalies"]


def test_a_slim_index_makes_each_keys_order_when_asked_as_the_plain_one_holds_it(tmp_path):
    """More keys than KeyOrders keeps (short logs: 4 writes a key), every bug planted: each
    key's KeyOrder, asked in any order and again, equals the one the in-memory index holds."""
    path = tmp_path / "history.jsonl"
    ops = simulate(SimConfig(ops=3000, workers=6, active_keys=4, max_writes_per_key=4, txn=True, p_fail=0.02,
                             p_info=0.02, bugs=frozenset(BUGS), p_bug=0.02, seed=3))[0]
    write_history(path, ops)
    slim, plain = build_index(indexed_ops(HistoryFile(path)), slim=True), build_index(ops)
    assert len(plain.orders) > 2 * _RECENT and list(slim.orders) == list(plain.orders)
    assert any(ko.conflicts for ko in plain.orders.values())  # (reuse-offset: kept, not made again)
    for k in [*plain.orders, *reversed(plain.orders)]:
        assert slim.orders[k] == plain.orders[k] and slim.orders.get(k) == plain.orders.get(k)
    assert dict(slim.orders.items()) == plain.orders and slim.orders.get("none") is None
    assert [t.sends for t in slim.txns] == [t.sends for t in plain.txns]
    assert [(t.op, t.inv_index, t.inv_time, t.comp_index) for t in slim.txns] == [
        (replace(t.op, value=None), t.inv_index, t.inv_time, t.comp_index) for t in plain.txns]
