"""The checker's former blind spots, each on a literal history that fires and one beside it
that stays quiet: values no op sent (no-writer), an informational analysis that fails, and
cycles that rest on no inferred edge (G1c-wr, future-read)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logquake.checker import CheckOptions, allowed_types, check_history, queue
from logquake.checker.generate import SimConfig, simulate
from logquake.guarantees import GUARANTEES
from logquake.history import Op
from tests.checker.histories import H


def ref(op):
    return {"index": op.index, "process": op.process, "time": op.time, "type": op.type, "f": op.f}


def check(h: H, **opts):
    return check_history(h.ops, CheckOptions(**opts))


def strip(e: dict) -> dict:
    return {k: v for k, v in e.items() if k != "explanation"}


# --- no-writer -------------------------------------------------------------------------


def test_a_phantom_value_is_a_read_with_no_writer():
    h = H()
    h.send(0, 1, 1, 0)
    reader = h.poll(1, {1: [(0, 1), (1, 99)]})  # only 1 was ever sent
    r = check(h)
    assert r["valid"] is False and r["bad_error_types"] == ["no-writer"]
    [e] = r["anomalies"]["no-writer"]["errs"]
    assert strip(e) == {"key": 1, "offset": 1, "value": 99, "kind": "phantom", "sent_to": [], "reader": ref(reader)}
    assert "no op sent 99 to key 1, nor to any other key" in e["explanation"]


def test_a_value_read_from_a_key_nobody_wrote_to():
    h = H()
    h.send(0, 1, 10, 0)
    h.poll(1, {1: [(0, 10)], 5: [(0, 7)]})
    r = check(h)
    assert r["bad_error_types"] == ["no-writer"]
    [e] = r["anomalies"]["no-writer"]["errs"]
    assert (e["key"], e["offset"], e["value"], e["kind"]) == (5, 0, 7, "phantom")


def test_a_misrouted_value_names_the_key_it_was_sent_to():
    h = H()
    h.send(0, 1, 10, 0)
    to_2 = h.send(0, 2, 20, 0)
    reader = h.poll(1, {1: [(0, 10), (1, 20)], 2: [(0, 20)]})  # 20 also comes back from key 1
    r = check(h)
    assert r["bad_error_types"] == ["no-writer"]
    [e] = r["anomalies"]["no-writer"]["errs"]
    assert strip(e) == {
        "key": 1,
        "offset": 1,
        "value": 20,
        "kind": "misrouted",
        "sent_to": [{"key": 2, "writer": ref(to_2)}],
        "reader": ref(reader),
    }
    assert "it was sent to key 2 (op 3)" in e["explanation"]


def test_a_value_read_on_the_key_it_was_sent_to_is_quiet():
    h = H()
    h.send(0, 1, 10, 0)
    h.send(0, 2, 20, 0)
    h.poll(1, {1: [(0, 10)], 2: [(0, 20)]})
    r = check(h)
    assert r["valid"] is True and r["error_types"] == []


def test_a_read_of_a_failed_send_is_g1a_not_no_writer():
    h = H()
    h.send(0, 1, 10, None, type="fail")
    h.poll(1, {1: [(0, 10)]})
    r = check(h)
    assert r["error_types"] == ["G1a"]


@pytest.mark.parametrize("guarantee", [None, *GUARANTEES])
@pytest.mark.parametrize("sub_via", ["assign", "subscribe"])
@pytest.mark.parametrize("ww_deps", [True, False])
def test_no_guarantee_tolerates_what_rests_on_no_inference(guarantee, sub_via, ww_deps):
    kw = {"txn": True} if guarantee == "exactly-once" else {}
    opts = CheckOptions(guarantee=guarantee, sub_via=sub_via, ww_deps=ww_deps, **kw)
    assert not {"no-writer", "G1c-wr", "future-read"} & allowed_types(opts)


@pytest.mark.parametrize("name", list(GUARANTEES))
def test_no_profile_allows_them(name):
    assert not {"no-writer", "G1c-wr", "future-read"} & set(GUARANTEES[name].allowed)


def test_no_writer_on_a_simulated_history_names_exactly_the_planted_reads():
    cfg = SimConfig(ops=400, workers=4, active_keys=3, max_writes_per_key=20, seed=3)
    ops = simulate(cfg)[0]
    sent: dict = {}  # key -> {value: offset or None}, every send of any op
    for op in ops:
        if op.f in ("send", "txn"):
            for m in op.value:
                if m[0] == "send":
                    o, v = m[2] if isinstance(m[2], list) else (None, m[2])
                    sent.setdefault(m[1], {})[v] = o
    k1, k2 = sorted(sent)[:2]
    elsewhere = min(v for v in sent[k2] if v not in sent[k1])
    end = max(o for o in sent[k1].values() if o is not None) + 1
    # After the run: a phantom value and one sent only to k2, both read back from k1.
    reads = {str(k1): [[end, 10**9], [end + 1, elsewhere]]}
    n, t = len(ops), ops[-1].time
    ops = ops + [
        Op(index=n, time=t + 1, process=999, type="invoke", f="poll", value=[["poll"]]),
        Op(index=n + 1, time=t + 2, process=999, type="ok", f="poll", value=[["poll", reads]]),
    ]
    fast = check_history(ops, CheckOptions(txn=True))
    errs = fast["anomalies"]["no-writer"]["errs"]
    assert [(e["key"], e["value"], e["kind"]) for e in errs] == [
        (k1, 10**9, "phantom"),
        (k1, elsewhere, "misrouted"),
    ]


# --- an informational analysis that fails ----------------------------------------------


def _lost_write() -> H:
    h = H()
    for i in range(3):
        h.send(0, 1, 10 + i, i)
    h.poll(1, {1: [(0, 10), (2, 12)]})
    return h


def _boom(ix):
    raise RuntimeError("injected")


def test_a_failed_realtime_lag_leaves_the_anomaly_verdict(monkeypatch):
    monkeypatch.setattr(queue, "realtime_lag", _boom)
    r = check(_lost_write())
    assert r["valid"] is False and "lost-write" in r["bad_error_types"]
    assert "analysis_errors" not in r and "unknown_because" not in r
    assert r["informational_errors"]["realtime-lag"].startswith("RuntimeError: injected")
    assert r["worst_realtime_lag"] is None


def test_a_failed_realtime_lag_leaves_a_clean_history_valid(monkeypatch):
    monkeypatch.setattr(queue, "realtime_lag", _boom)
    h = H()
    h.send(0, 1, 10, 0)
    h.poll(1, {1: [(0, 10)]})
    r = check(h)
    assert r["valid"] is True
    assert list(r["informational_errors"]) == ["realtime-lag"]


def test_a_working_realtime_lag_reports_no_failure():
    r = check(_lost_write())
    assert "informational_errors" not in r and r["worst_realtime_lag"] is not None


# --- cycles with and without an inferred edge ------------------------------------------


def _wr_ring(h: H) -> list[Op]:
    """Three transactions, each reading the next one's send around a ring: wr edges only."""
    for p in range(3):
        h.invoke(p, [("send", p, 10 + p), ("poll",)])
    done = []
    for p in range(3):
        q = (p + 1) % 3
        done.append(h.complete(p, "ok", [("send", p, 10 + p, 0), ("poll", {q: [(0, 10 + q)]})]))
    return done


def test_a_wr_only_g1c_is_bad_with_ww_deps():
    h = H()
    ts = _wr_ring(h)
    r = check(h, txn=True)
    assert r["valid"] is False and r["bad_error_types"] == ["G1c-wr"]
    [e] = r["anomalies"]["G1c-wr"]["errs"]
    assert {c["index"] for c in e["cycle"]} == {t.index for t in ts}
    assert {s["type"] for s in e["steps"]} == {"wr"}
    assert e["inferred"] == []
    assert "No step is inferred" in e["explanation"]


def test_a_ww_wr_g1c_is_tolerated_and_names_its_inferred_edge():
    h = H()
    h.invoke(0, [("send", 1, 10), ("poll",)])
    h.invoke(1, [("send", 1, 11), ("send", 2, 20)])
    t1 = h.complete(0, "ok", [("send", 1, 10, 0), ("poll", {2: [(0, 20)]})])
    t2 = h.complete(1, "ok", [("send", 1, 11, 1), ("send", 2, 20, 0)])
    h.poll(2, {1: [(0, 10), (1, 11)]})
    r = check(h, txn=True)
    assert r["valid"] is True and r["error_types"] == ["G1c"]
    [e] = r["anomalies"]["G1c"]["errs"]
    assert {c["index"] for c in e["cycle"]} == {t1.index, t2.index}
    assert sorted(s["type"] for s in e["steps"]) == ["wr", "ww"]
    [ww] = [s for s in e["steps"] if s["type"] == "ww"]
    assert (ww["key"], ww["value"], ww["value2"]) == (1, 10, 11)
    assert e["inferred"] == [f"{ww['from']} < {ww['to']}"]
    assert f"(ww, which may be wrong): {ww['from']} < {ww['to']}." in e["explanation"]


def test_a_future_read_is_bad_with_ww_deps():
    h = H()
    reader = h.poll(1, {1: [(0, 10)]})
    writer = h.send(2, 1, 10, 0)  # invoked after the read had completed
    r = check(h)
    assert r["valid"] is False and r["bad_error_types"] == ["future-read"]
    [e] = r["anomalies"]["future-read"]["errs"]
    assert {c["index"] for c in e["cycle"]} == {reader.index, writer.index}
    assert {s["type"] for s in e["steps"]} == {"wr", "realtime"}
    assert e["inferred"] == []


def test_a_future_read_within_one_process_is_bad_with_ww_deps():
    h = H()
    h.poll(1, {1: [(0, 10)]})
    h.send(1, 1, 10, 0)
    r = check(h)
    assert r["bad_error_types"] == ["future-read"]
    [e] = r["anomalies"]["future-read"]["errs"]
    assert {s["type"] for s in e["steps"]} == {"wr", "process"}


def test_a_read_after_its_send_is_no_future_read():
    h = H()
    h.send(2, 1, 10, 0)
    h.poll(1, {1: [(0, 10)]})
    r = check(h)
    assert r["valid"] is True and r["error_types"] == []


def test_without_ww_deps_they_keep_their_g1c_names():
    h = H()
    _wr_ring(h)
    r = check(h, ww_deps=False)
    assert r["bad_error_types"] == ["G1c"]
    assert r["anomalies"]["G1c"]["errs"][0]["inferred"] == []


# --- the command line ------------------------------------------------------------------


PHANTOM = """\
{"index": 0, "time": 1000, "process": 0, "type": "invoke", "f": "send", "value": [["send", 1, 1]]}
{"index": 1, "time": 2000, "process": 0, "type": "ok", "f": "send", "value": [["send", 1, [0, 1]]]}
{"index": 2, "time": 3000, "process": 1, "type": "invoke", "f": "poll", "value": [["poll"]]}
{"index": 3, "time": 4000, "process": 1, "type": "ok", "f": "poll", "value": [["poll", {"1": [[0, 1], [1, 99]]}]]}
"""


def _check_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "logquake", "check", *args], capture_output=True, text=True, timeout=120
    )


def test_check_cli_reports_a_phantom_value(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(PHANTOM)
    p = _check_cli(str(path))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no-writer" in p.stdout and "99" in p.stdout
    p = _check_cli(str(path), "--json")
    assert p.returncode == 1
    r = json.loads(p.stdout)
    assert r["bad_error_types"] == ["no-writer"]
    assert r["anomalies"]["no-writer"]["errs"][0]["value"] == 99


def test_check_cli_names_the_line_of_a_negative_poll_offset(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text(PHANTOM.replace("[[0, 1], [1, 99]]", "[[0, 1], [-1, 99]]"))
    p = _check_cli(str(path))
    assert p.returncode == 3
    assert f"{path}:4: a poll of key 1 read offset -1" in " ".join(p.stderr.split())
    assert "Traceback" not in p.stderr
