"""`logquake check` as a user runs it: a real subprocess on history files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from logquake.history import write_history
from tests.checker.histories import H, shared_consumer_polls


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "logquake", "check", *args], capture_output=True, text=True, timeout=120
    )


def write(tmp_path: Path, h: H, name: str = "history.jsonl") -> Path:
    path = tmp_path / name
    write_history(path, h.ops)
    return path


def lost_and_unseen() -> H:
    h = H()
    for i in range(3):
        h.send(0, 1, 10 + i, i)
    h.poll(1, {1: [(0, 10)]})
    h.poll(2, {1: [(2, 12)]})
    return h


def only_unseen() -> H:
    h = H()
    h.send(0, 1, 10, 0)
    h.send(0, 1, 11, 1)
    h.poll(1, {1: [(0, 10)]})
    return h


def test_valid_history_exits_0(tmp_path):
    h = H()
    h.send(0, 1, 10, 0)
    h.poll(1, {1: [(0, 10)]})
    p = run(str(write(tmp_path, h)))
    assert p.returncode == 0, p.stderr
    assert "valid" in p.stdout


def test_invalid_history_exits_1_with_a_table(tmp_path):
    p = run(str(write(tmp_path, lost_and_unseen())))
    assert p.returncode == 1, p.stderr
    assert "INVALID" in p.stdout and "lost-write" in p.stdout and "unseen" in p.stdout


def test_json_output_and_run_directory(tmp_path):
    write(tmp_path, lost_and_unseen())
    p = run(str(tmp_path), "--json")
    assert p.returncode == 1, p.stderr
    r = json.loads(p.stdout)
    assert r["valid"] is False
    assert r["bad_error_types"] == ["lost-write", "unseen"]
    assert r["anomalies"]["lost-write"]["errs"][0]["value"] == 11


def test_ignore_unseen(tmp_path):
    path = str(write(tmp_path, only_unseen()))
    assert run(path).returncode == 1
    p = run(path, "--ignore", "unseen")
    assert p.returncode == 0, p.stdout


def test_sub_via_subscribe_allows_poll_skip(tmp_path):
    h = H()
    for i in range(3):
        h.send(0, 1, 10 + i, i)
    h.poll(1, {1: [(0, 10)]})
    h.poll(1, {1: [(2, 12)]})
    h.poll(2, {1: [(0, 10), (1, 11), (2, 12)]})
    path = str(write(tmp_path, h))
    assert run(path).returncode == 1
    assert run(path, "--sub-via", "subscribe", "--txn").returncode == 0


def test_no_ww_deps_makes_g1c_bad(tmp_path):
    h = H()
    h.invoke(0, [("send", 1, 10), ("poll",)])
    h.invoke(1, [("send", 2, 20), ("poll",)])
    h.complete(0, "ok", [("send", 1, 10, 0), ("poll", {2: [(0, 20)]})])
    h.complete(1, "ok", [("send", 2, 20, 0), ("poll", {1: [(0, 10)]})])
    path = str(write(tmp_path, h))
    p = run(path)  # a cycle of wr edges only rests on no inference: bad with ww-deps too
    assert p.returncode == 1
    assert "G1c-wr" in p.stdout
    p = run(path, "--no-ww-deps")
    assert p.returncode == 1
    assert "G1c" in p.stdout


def test_nothing_to_check_exits_2(tmp_path):
    h = H()
    h.nemesis()
    p = run(str(write(tmp_path, h)))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "unknown" in p.stdout


def test_malformed_history_names_the_line(tmp_path):
    path = write(tmp_path, only_unseen())
    lines = path.read_text().splitlines()
    lines[2] = '{"index": 2, "time": "soon"}'
    path.write_text("\n".join(lines) + "\n")
    p = run(str(path))
    assert p.returncode == 3
    assert f"{path}:3:" in p.stderr
    assert "Traceback" not in p.stderr


def test_bad_option_is_a_clear_error(tmp_path):
    p = run(str(write(tmp_path, only_unseen())), "--sub-via", "telepathy")
    assert p.returncode == 3
    assert "sub_via must be one of assign, subscribe" in p.stderr


def test_a_bare_history_of_a_shared_consumer_is_checked_as_one(tmp_path):
    marked = str(write(tmp_path, shared_consumer_polls(redelivered={"1": [0]}), "marked.jsonl"))
    unmarked = str(write(tmp_path, shared_consumer_polls(), "unmarked.jsonl"))
    # Without the flag a subscriber owns its key: the gap and the step back are bad.
    assert run(marked, "--sub-via", "subscribe").returncode == 1
    # With it (subscribe implied) the gap went to another consumer and 10 was redelivered...
    p = run(marked, "--shared-consumer")
    assert p.returncode == 0, p.stdout + p.stderr
    # ...but a step back to a message the poll does not mark redelivered is still bad.
    p = run(unmarked, "--shared-consumer", "--json")
    assert p.returncode == 1 and json.loads(p.stdout)["bad_error_types"] == ["int-nonmonotonic-poll"]


def test_shared_consumer_with_assign_is_a_usage_error(tmp_path):
    path = write(tmp_path, only_unseen())
    p = run(str(path), "--shared-consumer", "--sub-via", "assign")
    assert p.returncode == 3 and "--shared-consumer" in p.stderr and "Traceback" not in p.stderr
