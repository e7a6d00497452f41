"""`logquake check --model ...` on history.jsonl, history.edn and jepsen.log files, as a user runs it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

import pytest

from logquake.cli import main
from logquake.history import Op, write_history


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def logquake(*args: str) -> Run:
    """The `logquake` entry point, in this process (fast); one test runs the real script."""
    out, err = io.StringIO(), io.StringIO()
    # A wide terminal, so messages are not wrapped across lines.
    with redirect_stdout(out), redirect_stderr(err), patch.dict(os.environ, {"COLUMNS": "400"}):
        code = main(list(args))
    return Run(code, out.getvalue(), err.getvalue())


def jsonl(tmp_path: Path, last_read: int) -> Path:
    ops = [
        Op(time=0, process=0, type="invoke", f="write", value=0),
        Op(time=1, process=0, type="ok", f="write", value=0),
        Op(time=2, process=1, type="invoke", f="cas", value=[0, 1]),
        Op(time=3, process=1, type="ok", f="cas", value=[0, 1]),
        Op(time=4, process=2, type="invoke", f="read", value=None),
        Op(time=5, process=2, type="ok", f="read", value=last_read),
    ]
    path = tmp_path / "history.jsonl"
    write_history(path, ops)
    return path


def test_valid_jsonl_exits_0(tmp_path: Path) -> None:
    r = logquake("check", "--model", "cas-register", str(jsonl(tmp_path, 1)))
    assert r.returncode == 0, r.stderr
    assert "cas-register: 3 ops over 1 key(s) -> linearizable" in r.stdout


def test_invalid_jsonl_exits_1_and_explains(tmp_path: Path) -> None:
    r = logquake("check", "--model", "cas-register", str(jsonl(tmp_path, 0)))
    assert r.returncode == 1, r.stderr
    assert "NOT linearizable" in r.stdout
    assert "process 2: read -> 0 cannot be placed" in r.stdout


def test_json_output_is_the_results_object(tmp_path: Path) -> None:
    r = logquake("check", "--model", "cas-register", "--json", str(jsonl(tmp_path, 0)))
    assert r.returncode == 1
    res = json.loads(r.stdout)
    assert res["valid"] is False and res["bad_error_types"] == ["nonlinearizable"]
    assert res["anomalies"]["nonlinearizable"]["errs"][0]["op"]["invoke_index"] == 4


def test_nothing_to_check_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    write_history(path, [Op(time=0, process="nemesis", type="info", f="start-partition", value="one")])
    r = logquake("check", "--model", "register", str(path))
    assert r.returncode == 2, r.stderr
    assert "unknown: no read/write ops to check" in r.stdout


@pytest.mark.parametrize(("value", "code"), [(4, 0), (9, 1)])
def test_edn_history(tmp_path: Path, value: int, code: int) -> None:
    path = tmp_path / "history.edn"
    path.write_text(
        "{:type :invoke, :f :write, :value 4, :process 0, :time 10, :index 0}\n"
        "{:type :ok, :f :write, :value 4, :process 0, :time 20, :index 1}\n"
        "{:type :info, :f :kill, :value nil, :process :nemesis, :time 25, :index 2}\n"
        "{:type :invoke, :f :read, :value nil, :process 1, :time 30, :index 3}\n"
        f"{{:type :ok, :f :read, :value {value}, :process 1, :time 40, :index 4}}\n"
    )
    r = logquake("check", "--model", "register", str(path))
    assert r.returncode == code, r.stdout + r.stderr


def test_jepsen_log(tmp_path: Path) -> None:
    path = tmp_path / "jepsen.log"
    path.write_text(
        "INFO  jepsen.util - 3\t:invoke\t:cas\t[nil 4]\n"
        "INFO  jepsen.util - 3\t:ok\t:cas\t[nil 4]\n"
        "INFO  jepsen.util - 1 :invoke :read nil\n"
        "INFO  jepsen.util - 1 :ok :read 4\n"
    )
    r = logquake("check", "--model", "cas-register", str(path))
    assert r.returncode == 0, r.stdout + r.stderr


def test_unknown_model_is_a_user_error(tmp_path: Path) -> None:
    r = logquake("check", "--model", "queue", str(jsonl(tmp_path, 1)))
    assert r.returncode == 3
    assert "--model: unknown model 'queue'" in r.stderr and "Traceback" not in r.stderr


def test_op_the_model_does_not_know_is_a_user_error(tmp_path: Path) -> None:
    r = logquake("check", "--model", "register", str(jsonl(tmp_path, 1)))
    assert r.returncode == 3
    assert "the register model knows only read, write" in r.stderr


def test_malformed_edn_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "history.edn"
    path.write_text("{:type :invoke, :f :read, :process 0}\n{:type :ok, :f :read, :process 0, :value [1\n")
    r = logquake("check", "--model", "register", str(path))
    assert r.returncode == 3
    assert f"{path}:2: malformed EDN" in r.stderr


def test_the_installed_script_gives_the_exit_code(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("logquake")
    r = subprocess.run(
        [str(script), "check", "--model", "cas-register", str(jsonl(tmp_path, 0))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert r.returncode == 1, r.stderr
    assert "NOT linearizable" in r.stdout
