"""The final summary says what ran: the main phase's mean rate, ops, faults, seed, phases."""

from __future__ import annotations

from rich.console import Console

from logquake.crew import Stats
from logquake.display import _live_view, _Rate, run_summary
from logquake.history import Op, load_history

from .memlog import MemClient, MemLog
from .test_runner_memlog import _cfg, run_test


def _text(renderable) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_summary_of_a_run_is_its_main_phase_not_the_drains_last_sample(tmp_path):
    log, stats = MemLog(), Stats()
    out = run_test(_cfg(tmp_path, time_limit=2, rate=100), stats=stats, make=lambda cfg: MemClient(log))
    assert stats.main_seconds is not None and 1.9 < stats.main_seconds < 10
    main_ops = [o for o in load_history(out.run_dir / "history.jsonl") if o.type != "invoke" and o.process != "nemesis"]
    assert stats.main_ops is not None and 0 < stats.main_ops < len(main_ops)  # the drain's are not in it
    lines = run_summary(stats, 42)
    assert lines[0] == "seed 42 (again: --seed 42)"
    assert f"{stats.main_ops / stats.main_seconds:.1f} ops/s mean" in lines[1]
    assert f"ok/info/fail {stats.ok}/{stats.info}/{stats.fail}" in lines[1]
    assert lines[2] == "faults: none"
    phases = [p.split()[0] for p in lines[3].removeprefix("phases: ").split(", ")]
    assert phases[0] == "setup" and {"main", "drain", "analyse"} <= set(phases)
    panel = _text(_live_view(stats, [out.run_dir], _Rate()))
    assert f"ops/s (main, mean)  {stats.main_rate():7.1f}" in panel


def test_faults_are_counted_by_kind_with_the_time_they_were_on():
    """By the history's clock (the ops' times, as the Recorder stamps them), as the report counts."""
    stats = Stats()
    stats.count(Op(process="nemesis", type="info", f="start-partition", value="majority", time=1_000_000_000))
    assert stats.faults == {"partition": "majority"}
    stats.count(Op(process="nemesis", type="info", f="stop-partition", value=None, time=1_200_000_000))
    stats.count(Op(process="nemesis", type="info", f="start-kill", value=["n1"], time=2_000_000_000))
    assert stats.faults == {"kill": "['n1']"}
    stats.count(Op(process="nemesis", type="info", f="heal", value="healed", time=2_100_000_000))
    assert stats.faults == {}
    assert stats.fault_starts == {"partition": 1, "kill": 1}
    assert stats.fault_seconds == {"partition": 0.2, "kill": 0.1}
    line = run_summary(stats, 7)[2]
    assert line == "faults: kill x1 (0.1 s on), partition x1 (0.2 s on)"


def test_the_pipelines_verdict_shows_its_processing_counts():
    import json
    from pathlib import Path

    from logquake.display import verdict_table

    data = Path(__file__).resolve().parents[1] / "results" / "data" / "pipeline" / "at-least-once" / "results.json"
    results = json.loads(data.read_text())
    text = _text(verdict_table(results))
    assert "double-processing" in text
    assert "processing: 383 acknowledged inputs; 378 once, 5 twice" in " ".join(text.split())


def test_the_command_lines_run_ends_with_the_verdict_and_the_summary(tmp_path, monkeypatch):
    import functools

    from logquake import display

    log = MemLog()
    monkeypatch.setattr(display, "run_test", functools.partial(run_test, make=lambda cfg: MemClient(log)))
    console = Console(width=200, record=True)
    code = display.run_with_display(_cfg(tmp_path, time_limit=1, seed=11), console)
    text = console.export_text()
    assert code == 0
    assert "seed 11; faults: none" in text and "seed 11 (again: --seed 11)" in text
    assert "ops/s mean; ops ok/info/fail" in text and "phases: setup" in text
