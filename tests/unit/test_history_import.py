"""Import of Jepsen history.edn and jepsen.log files, from small literal snippets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from logquake.checker.linear import check_linearizable
from logquake.checker.models import cas_register
from logquake.errors import HistoryFormatError
from logquake.history import Op, write_history
from logquake.history_import import (
    EdnError,
    Keyword,
    detect_format,
    load_any_history,
    load_edn_history,
    load_jepsen_log,
    parse_edn,
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


# --- EDN reader -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nil", None),
        ("true", True),
        ("-42", -42),
        ("7N", 7),
        ("1.5", 1.5),
        (":cas", "cas"),
        ('"a \\"q\\"\\n"', 'a "q"\n'),
        ("[1 [2 3] ()]", [1, [2, 3], []]),
        ("(1, 2)", [1, 2]),
        ("#{1}", [1]),
        ("{:a 1 [0 1] 2}", {"a": 1, (0, 1): 2}),
        ("#jepsen.history.Op{:f :read}", {"f": "read"}),
        ("[1 #_ 2 3] ; comment", [1, 3]),
        ("\\a", "a"),
        ("some/symbol", "some/symbol"),
    ],
)
def test_edn_values(text: str, expected: object) -> None:
    assert parse_edn(text) == expected


def test_keywords_are_strings_that_print_as_keywords() -> None:
    k = parse_edn(":nemesis")
    assert isinstance(k, Keyword) and k == "nemesis" and repr(k) == ":nemesis"


@pytest.mark.parametrize("text", ["[1 2", "{:a}", '"open', "]", "1 2", "#?(:clj 1)"])
def test_malformed_edn_raises(text: str) -> None:
    with pytest.raises(EdnError):
        parse_edn(text)


# --- history.edn ------------------------------------------------------------------------------

EDN = """
{:type :invoke, :f :write, :value 1, :process 0, :time 100, :index 0}
{:type :ok, :f :write, :value 1, :process 0, :time 200, :index 1}
{:type :info, :f :start, :value nil, :process :nemesis, :time 250, :index 2}
{:type :invoke, :f :cas, :value [1 4], :process 3, :time 300, :index 3}
{:type :info, :f :cas, :value [1 4], :process 3, :time 400, :index 4, :error [:timeout "x"]}
{:type :invoke, :f :read, :value nil, :process 1, :time 500, :index 5}
{:type :ok, :f :read, :value 4, :process 1, :time 600, :index 6}
"""


def test_edn_history_maps_fields(tmp_path: Path) -> None:
    ops = load_edn_history(write(tmp_path, "history.edn", EDN))
    assert [o.type for o in ops] == ["invoke", "ok", "info", "invoke", "info", "invoke", "ok"]
    assert ops[1] == Op(index=1, time=200, process=0, type="ok", f="write", value=1)
    assert ops[2].process == "nemesis" and ops[2].f == "start"
    assert ops[3].value == [1, 4]
    assert ops[4].get("error") == ["timeout", "x"]
    assert all(type(o.f) is str for o in ops)


def test_edn_history_checks_end_to_end(tmp_path: Path) -> None:
    ops = load_edn_history(write(tmp_path, "history.edn", EDN))
    assert check_linearizable(ops, cas_register)["valid"] is True
    bad = EDN.replace(":value 4, :process 1, :time 600", ":value 9, :process 1, :time 600")
    assert (
        check_linearizable(load_edn_history(write(tmp_path, "bad.edn", bad)), cas_register)["valid"] is False
    )


def test_edn_history_in_one_vector_with_records_and_no_time(tmp_path: Path) -> None:
    text = """
    [#jepsen.history.Op{:index 0, :type :invoke, :process 2, :f :read, :value nil}
     #jepsen.history.Op{:index 1, :type :ok, :process 2, :f :read, :value 3}]
    """
    ops = load_edn_history(write(tmp_path, "history.edn", text))
    assert [(o.index, o.time, o.value) for o in ops] == [(0, 0, None), (1, 1, 3)]


def test_edn_history_odd_processes_are_kept_as_non_client(tmp_path: Path) -> None:
    text = "{:type :info, :f :kill, :process :clock, :time 1}\n"
    (op,) = load_edn_history(write(tmp_path, "history.edn", text))
    assert op.process == "nemesis" and op.get("jepsen_process") == "clock"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("{:type :ok, :f :read, :process 1}\n{:type :ok :f :read}\n", 2, "missing :process"),
        ("{:type :ok, :f :read, :process 1}\n\n{:type :bogus, :f :read, :process 1}\n", 3, "unknown :type"),
        ("{:type :ok, :f :read, :process 1}\n{:type :ok, :f :read,\n :process [1\n", 3, "malformed EDN"),
        ("{:type :ok, :f :read, :process 1, :time 1.5}\n", 1, ":time and :index must be integers"),
        ("[1 2]\n", 1, "expected an op map"),
    ],
)
def test_edn_errors_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    p = write(tmp_path, "h.edn", text)
    with pytest.raises(HistoryFormatError, match=message) as e:
        load_edn_history(p)
    assert e.value.line == line and e.value.path == str(p)
    assert str(e.value).startswith(f"{p}:{line}: ")


# --- jepsen.log -------------------------------------------------------------------------------

LOG = (
    "2017-01-01 10:00:00,001{GMT}\tINFO\t[main] jepsen.core: Running test\n"
    "INFO  jepsen.util - 0\t:invoke\t:write\t1\n"
    "INFO  jepsen.util - 3 :invoke :cas [1 4]\n"
    "INFO  jepsen.util - 0\t:ok\t:write\t1\n"
    "INFO  jepsen.util - :nemesis\t:info\t:start\tnil\n"
    "INFO  jepsen.util - 3 :ok :cas [1 4]\n"
    "INFO  jepsen.util - 1\t:invoke\t:read\tnil\n"
    "INFO  jepsen.util - 1\t:fail\t:read\t:timed-out\n"
    "INFO  jepsen.util - 2\t:invoke\t:read\tnil\n"
    "INFO  jepsen.util - 2\t:info\t:read\tnil\tindeterminate: socket timeout\n"
    "INFO [2024-05-01 10:00:00,123] jepsen worker 4 - jepsen.util 4\t:invoke\t:read\tnil\n"
    "INFO [2024-05-01 10:00:00,456] jepsen worker 4 - jepsen.util 4\t:ok\t:read\t4\n"
)


def test_jepsen_log_lines(tmp_path: Path) -> None:
    ops = load_jepsen_log(write(tmp_path, "jepsen.log", LOG))
    assert [(o.process, o.type, o.f, o.value) for o in ops] == [
        (0, "invoke", "write", 1),
        (3, "invoke", "cas", [1, 4]),
        (0, "ok", "write", 1),
        ("nemesis", "info", "start", None),
        (3, "ok", "cas", [1, 4]),
        (1, "invoke", "read", None),
        (1, "fail", "read", "timed-out"),
        (2, "invoke", "read", None),
        (2, "info", "read", None),
        (4, "invoke", "read", None),
        (4, "ok", "read", 4),
    ]
    assert ops[8].get("error") == "indeterminate: socket timeout"
    assert [o.time for o in ops[:3]] == [2, 3, 4]  # line numbers keep the log's order
    assert check_linearizable(ops, cas_register)["valid"] is True


def test_jepsen_log_non_linearizable(tmp_path: Path) -> None:
    text = LOG.replace("jepsen.util 4\t:ok\t:read\t4", "jepsen.util 4\t:ok\t:read\t1")
    res = check_linearizable(load_jepsen_log(write(tmp_path, "jepsen.log", text)), cas_register)
    assert res["valid"] is False


def test_jepsen_log_errors_name_file_and_line(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "jepsen.log",
        "INFO  jepsen.util - 0\t:invoke\t:write\t1\nINFO  jepsen.util - 0\t:ok\t:write\t[1\n",
    )
    with pytest.raises(HistoryFormatError, match="malformed value") as e:
        load_jepsen_log(p)
    assert e.value.line == 2
    p = write(tmp_path, "j2.log", "INFO  jepsen.util - 0\t:weird\t:write\t1\n")
    with pytest.raises(HistoryFormatError, match="unknown op type :weird"):
        load_jepsen_log(p)


def test_jepsen_log_without_ops_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(HistoryFormatError, match="no Jepsen op lines"):
        load_jepsen_log(write(tmp_path, "jepsen.log", "INFO jepsen.core: nothing here\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HistoryFormatError, match="no such file"):
        load_edn_history(tmp_path / "nope.edn")


# --- format detection -------------------------------------------------------------------------


def test_detect_format_by_name_then_content(tmp_path: Path) -> None:
    assert detect_format(tmp_path / "history.jsonl") == "jsonl"
    assert detect_format(tmp_path / "history.edn") == "edn"
    assert detect_format(tmp_path / "jepsen.log") == "jepsen-log"
    assert detect_format(write(tmp_path, "a", "\nINFO  jepsen.util - 0 :invoke :read nil\n")) == "jepsen-log"
    assert detect_format(write(tmp_path, "b", '{"index": 0}\n')) == "jsonl"
    assert detect_format(write(tmp_path, "c", "{:type :ok}\n")) == "edn"


def test_load_any_history_reads_all_three(tmp_path: Path) -> None:
    edn_ops = load_any_history(write(tmp_path, "history.edn", EDN))
    jsonl = tmp_path / "history.jsonl"
    write_history(jsonl, edn_ops)
    assert [(o.type, o.f, o.value) for o in load_any_history(jsonl)] == [
        (o.type, o.f, o.value) for o in edn_ops
    ]
    assert len(load_any_history(write(tmp_path, "jepsen.log", LOG))) == 11
