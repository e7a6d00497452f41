from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logquake.errors import HistoryFormatError
from logquake.history import HistoryWriter, Op, load_history, pairs, write_history

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
json_values = st.recursive(  # small: the shape matters, not the size
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=6,
)


@st.composite
def histories(draw: st.DrawFn) -> list[Op]:
    """Well-formed histories: processes alternate invoke/complete, info retires a process."""
    ops: list[Op] = []
    next_process = 0
    free: list[int] = []
    in_flight: dict[int, str] = {}
    t = 0
    for _ in range(draw(st.integers(0, 40))):
        t += draw(st.integers(0, 10**6))
        if in_flight and draw(st.booleans()):
            p = draw(st.sampled_from(sorted(in_flight)))
            f = in_flight.pop(p)
            typ = draw(st.sampled_from(["ok", "fail", "info"]))
            extra = {"error": draw(st.text(max_size=6))} if typ != "ok" else {}
            ops.append(Op(time=t, process=p, type=typ, f=f, value=draw(json_values), extra=extra))
            if typ != "info":
                free.append(p)
        elif draw(st.integers(0, 9)) == 0:
            ops.append(Op(time=t, process="nemesis", type="info", f="start-partition", value="majority"))
        else:
            if free:
                p = free.pop()
            else:
                p, next_process = next_process, next_process + 1
            f = draw(st.sampled_from(["send", "poll", "txn", "assign"]))
            in_flight[p] = f
            ops.append(Op(time=t, process=p, type="invoke", f=f, value=draw(json_values)))
    return [Op(**{**_fields(op), "index": i}) for i, op in enumerate(ops)]


def _fields(op: Op) -> dict:
    return {k: getattr(op, k) for k in ("index", "time", "process", "type", "f", "value", "extra")}


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(histories())
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, ops: list[Op]) -> None:
    path = tmp_path_factory.mktemp("h") / "history.jsonl"
    write_history(path, ops)
    assert load_history(path) == ops


def test_writer_assigns_dense_indices(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        a = w.write(Op(process=0, type="invoke", f="poll", value=[["poll"]]))
        b = w.write(Op(process=0, type="ok", f="poll", value=[["poll", {}]]))
    assert (a.index, b.index) == (0, 1)
    assert [op.index for op in load_history(path)] == [0, 1]


def _write_lines(tmp_path, lines: list[str]) -> str:
    path = tmp_path / "history.jsonl"
    path.write_bytes("".join(line + "\n" for line in lines).encode(errors="surrogateescape"))
    return str(path)


GOOD = [
    '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "send", "value": [["send", 1, 1]]}',
    '{"index": 1, "time": 2, "process": 0, "type": "ok", "f": "send", "value": [["send", 1, [0, 1]]]}',
    '{"index": 2, "time": 3, "process": 1, "type": "invoke", "f": "poll", "value": [["poll"]]}',
    '{"index": 3, "time": 4, "process": 1, "type": "ok", "f": "poll", "value": [["poll", {"1": [[0, 1]]}]]}',
    '{"index": 4, "time": 5, "process": "nemesis", "type": "info", "f": "start-partition", "value": "one"}',
    '{"index": 5, "time": 6, "process": 2, "type": "invoke", "f": "send", "value": [["send", 1, 2]]}',
]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"index": 6, "time": 7, "process": 2, "type": "ok", "f": "send"', "not valid JSON"),
        ('{"index": 6, "time": 7, "process": 2, "f": "send", "value": null}', "missing field 'type'"),
        ('{"index": 6, "time": 7, "process": 2, "type": "done", "f": "send"}', "unknown type 'done'"),
        ('{"index": 6, "time": 7, "process": 2, "type": "invoke", "f": "send"}', "still in flight"),
        ('{"index": 6, "time": 7, "process": 9, "type": "ok", "f": "send"}', "never invoked"),
        ('{"index": 6, "time": 7, "process": 2, "type": "ok", "f": "poll"}', "completed 'poll'"),
        ('{"index": 6, "time": 7.5, "process": 2, "type": "ok", "f": "send"}', "time must be an integer"),
        ('{"index": 6, "time": 7, "process": "p2", "type": "ok", "f": "send"}', "process must be"),
        ("[1, 2, 3]", "expected a JSON object"),
        ('{"index": 6, "time": 7, "process": 2, "type": ["ok"], "f": "send"}', "unknown type ['ok']"),
        ('{"index": 6, "time": 7, "process": 2, "type": "ok", "f": "send", "value": "\udcff"}', "not valid JSON"),
    ],
)
def test_malformed_line_7_is_named(tmp_path, bad_line: str, message: str) -> None:
    path = _write_lines(tmp_path, GOOD + [bad_line])
    with pytest.raises(HistoryFormatError) as e:
        load_history(path)
    assert e.value.line == 7
    assert f"{path}:7:" in str(e.value)
    assert message in str(e.value)


def test_process_reused_after_info_is_an_error(tmp_path) -> None:
    lines = GOOD + [
        '{"index": 6, "time": 7, "process": 2, "type": "info", "f": "send", "value": null}',
        '{"index": 7, "time": 8, "process": 2, "type": "invoke", "f": "poll", "value": [["poll"]]}',
    ]
    with pytest.raises(HistoryFormatError, match=r":8: process 2 is used again"):
        load_history(_write_lines(tmp_path, lines))


def test_torn_last_line_is_dropped_with_a_warning(tmp_path, caplog) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(GOOD) + '\n{"index": 6, "time": 7, "proc')
    with caplog.at_level("WARNING", logger="logquake.history"):
        ops = load_history(path)
    assert len(ops) == len(GOOD)
    assert [r.getMessage() for r in caplog.records] == [f"{path}:{len(GOOD) + 1}: dropping a torn last line "
                                                        "(a write cut short)"]


def test_check_says_a_torn_line_in_one_clean_line_and_a_missing_file_does_not_exist(tmp_path) -> None:
    import subprocess
    import sys

    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(GOOD) + '\n{"index": 6, "time": 7, "proc')
    torn = subprocess.run([sys.executable, "-m", "logquake", "check", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert "UserWarning" not in torn.stderr and "warnings.warn" not in torn.stderr
    assert f"{path}:{len(GOOD) + 1}: dropping a torn last line" in torn.stderr
    missing = subprocess.run([sys.executable, "-m", "logquake", "check", str(tmp_path / "nope.jsonl")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 3 and "Traceback" not in missing.stderr
    assert f"{tmp_path / 'nope.jsonl'}: " in missing.stderr and ":0:" not in missing.stderr
    assert "does not exist" in missing.stderr


def test_pairs_matches_invocations_and_completions(tmp_path) -> None:
    ops = load_history(_write_lines(tmp_path, GOOD))
    got = [(inv.index, comp.index if comp else None) for inv, comp in pairs(ops)]
    assert got == [(0, 1), (2, 3), (5, None)]


def _writer_process(path, script_body: str) -> subprocess.Popen:
    script = textwrap.dedent(
        f"""
        import os, sys
        from logquake.history import HistoryWriter, Op
        w = HistoryWriter({str(path)!r})
        """
    ) + textwrap.dedent(script_body)
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _wait_for_lines(path, n: int, timeout: float = 30.0) -> None:
    """Until the file holds n whole lines (the writer's thread appended them): no fixed sleep."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_bytes().count(b"\n") >= n):
        assert time.monotonic() < deadline, f"fewer than {n} lines in {path} after {timeout} s"
        time.sleep(0.01)


def test_sigkilled_writer_leaves_every_op_written_a_flush_interval_ago(tmp_path) -> None:
    path = tmp_path / "history.jsonl"
    proc = _writer_process(
        path,
        """
        for i in range(1000):
            w.write(Op(process=i, type="invoke", f="poll", value=[["poll"]]))
        print("ready", flush=True)
        sys.stdin.read()
        """,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    # The writer never closes (no final flush, no fsync): its thread must append the lines.
    _wait_for_lines(path, 1000)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ops = load_history(path)
    assert len(ops) == 1000
    assert json.loads(path.read_text().splitlines()[-1])["index"] == 999


def test_writer_sigkilled_mid_stream_leaves_a_dense_prefix(tmp_path) -> None:
    """Killed while ops pour in: whatever reached the file is ops 0..n-1, each whole."""
    path = tmp_path / "history.jsonl"
    proc = _writer_process(
        path,
        """
        print("ready", flush=True)
        i = 0
        while True:
            w.write(Op(process=i % 20, type="invoke", f="txn", value=[["send", i, i], ["poll"]]))
            w.write(Op(process=i % 20, type="ok", f="txn", value=[["send", i, [i, i]], ["poll", {}]]))
            i += 1
        """,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    _wait_for_lines(path, 200)  # then killed mid-stream, whatever it is writing
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ops = load_history(path)
    assert len(ops) >= 200
    assert [op.index for op in ops] == list(range(len(ops)))
    assert [op.type for op in ops[:2]] == ["invoke", "ok"]


def test_writer_refuses_ops_after_close(tmp_path) -> None:
    w = HistoryWriter(tmp_path / "h.jsonl")
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write(Op(process=0, type="invoke", f="poll", value=[["poll"]]))


def test_writer_encodes_what_orjson_refuses_with_the_stdlib(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        w.write(Op(process=0, type="invoke", f="poll", value=[["poll"]], extra={"big": 2**70, "m": {1: "x"}}))
    (op,) = load_history(path)
    assert op.extra == {"big": 2**70, "m": {"1": "x"}}


def test_read_ops_share_their_names_and_an_empty_extra_that_no_one_can_fill(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    write_history(path, [Op(index=i, process=0, type=t, f="txn", value=[]) for i, t in enumerate(["invoke", "ok"])]
                  + [Op(index=2, process=1, type="invoke", f="poll", extra={"final": True})])
    a, b, c = load_history(path)
    assert a.f is b.f and a.extra is b.extra and a.extra == {} and a.to_dict()["f"] == "txn"
    assert c.extra == {"final": True} and c.extra is not a.extra
    with pytest.raises(TypeError):
        a.extra["final"] = True  # type: ignore[index]
