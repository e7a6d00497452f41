"""`logquake run --system jetstream --guarantee idempotent --nemesis kill` end to end on a 3-node lab.

Kills of stream leaders make publishes time out and be tried again under their Msg-Id; the
server must store each value once, so the run must be valid with no duplicate at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_run import _run

pytestmark = [pytest.mark.lab, pytest.mark.slow]  # ~40 s; tests/systems/test_jetstream_dedup.py covers the server side


def test_idempotent_publishes_under_leader_kills_store_every_value_once(tmp_path: Path) -> None:
    code, run_dir, res, out = _run(tmp_path, "--system", "jetstream", "--guarantee", "idempotent",
                                   "--nemesis", "kill", "--nemesis-interval", "3", "--time-limit", "20",
                                   "--seed", "5")
    assert "Traceback" not in out, out
    assert (code, res["valid"]) == (0, True), (res.get("anomalies"), out)
    assert "duplicate" not in res["error_types"] and "duplicate-after-window" not in res["error_types"]
    assert res["options"]["duplicate_window"] == 120.0  # the server's default, from test.json
    final = res["final_read"]
    assert final["ran"] and final["lost"] == 0 and final["acknowledged"] > 0 and not final["incomplete_keys"]
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert any(op["f"] == "start-kill" for op in history)
    # The kills made sends try again (each attempt under the send's one Msg-Id): the dedup
    # was exercised, not just present.
    retried = [op for op in history if op["f"] in ("send", "resend") and op["type"] != "invoke"
               and len(op.get("attempts", ())) > 1]
    assert retried, "no send was retried: the kills never hit a publish"
    # Every resend names the info send it repeats, with the same key and value.
    by_index = {op["index"]: op for op in history}
    for op in history:
        if op["f"] == "resend" and op["type"] == "invoke":
            orig = by_index[op["resend_of"]]
            assert (orig["type"], orig["value"]) == ("info", op["value"]), (orig, op)
