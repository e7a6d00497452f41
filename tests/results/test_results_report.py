"""report.html from run directories: sections, numbers, robustness, the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from results_fixtures import (
    PIPELINE_PROFILES,
    checked,
    invalid_ops,
    invalid_results,
    legacy_results,
    make_run_dir,
    pipeline_run_dir,
    synth_history,
    valid_ops,
    valid_results,
    write_synth_history,
)

from logquake.errors import UserError
from logquake.history import load_history
from logquake.results import plots
from logquake.results.digest import digest_history
from logquake.results.report import fault_rows, write_report


def logquake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logquake", *args], capture_output=True, text=True, timeout=180)


def section(html: str, ident: str) -> str:
    """The text of one <section id=...> (or div) of the report."""
    start = html.index(f'id="{ident}"')
    end = html.find("</section>", start)
    return html[start:end]


def cell(html: str, header: str) -> str:
    """The text after a <th>header</th> up to the end of that row."""
    m = re.search(rf"<th>{re.escape(header)}</th>(.*?)</tr>", html, re.S)
    assert m, f"no row {header!r}"
    return re.sub(r"<[^>]+>", " ", m.group(1))


@pytest.fixture(scope="module")
def invalid_report(tmp_path_factory) -> str:
    run = make_run_dir(tmp_path_factory.mktemp("inv"), invalid_ops(), invalid_results())
    return write_report(run).read_text()


def test_invalid_report_header_shows_verdict_seed_and_counts_from_the_history(invalid_report) -> None:
    html = invalid_report
    assert 'class="top invalid"' in html and 'data-verdict="invalid"' in html
    assert re.search(r"<th>seed</th><td>42</td>", html)
    ops = invalid_ops()
    counts = section(html, "op-counts")
    for f in ("send", "poll", "txn"):
        want = [sum(1 for op in ops if op.f == f and op.type == t) for t in ("invoke", "ok", "fail", "info")]
        assert re.findall(r"\d+", cell(counts, f)) == [str(n) for n in want] + ["0"]
    assert cell(counts, "send").split() == ["8", "6", "1", "1", "0"]  # and by hand
    # one partition interval, 7 ms -> 30 ms
    faults = re.sub(r"<[^>]+>", " ", html[html.index('id="faults"'):html.index("</table>", html.index('id="faults"'))])
    assert re.search(r"partition\s+1\s+23\.0 ms", faults)
    assert "0.040 s" in cell(html, "duration (history)")


def test_invalid_report_has_a_section_per_anomaly_with_ops_and_cycle_steps(invalid_report) -> None:
    html = invalid_report
    results = invalid_results()
    assert set(results["anomalies"]) >= {"lost-write", "duplicate", "G1a", "inconsistent-offsets", "G0"}
    for name, entry in results["anomalies"].items():
        sec = html[html.index(f'id="anomaly-{name}"'):]
        sec = sec[: sec.index('<div class="anomaly', 10) if '<div class="anomaly' in sec[10:] else len(sec)]
        assert f"{name} · {entry['count']}" in sec
    lost = html[html.index('id="anomaly-lost-write"'):]
    assert "op 6: process 0 ok send" in lost  # the writer, named as an op from the history
    assert "A committed value below the highest offset read" in lost
    g0 = html[html.index('id="anomaly-G0"'):]
    g0 = g0[: g0.index("</div>\n</div>")]
    assert "Step by step" in g0
    assert "T1 → T2 (ww): T1 sent 1 to key 4 just before T2 sent 2 to it in the log" in g0
    assert "op 22: process 4 ok txn" in g0 and "op 23: process 5 ok txn" in g0
    assert "(bad)" in html[html.index('id="anomaly-lost-write"'):][:400]


def test_key_logs_cover_every_key_an_anomaly_names_and_flag_conflicts(invalid_report) -> None:
    html = section(invalid_report, "keylogs")
    for key in (1, 2, 4, 5):
        assert f'id="key-{key}"' in html
    assert 'id="key-3"' not in html  # key 3 is in no anomaly
    key1 = html[html.index('id="key-1"'):html.index('id="key-2"')]
    assert "offset 1, value 2: offset 1 holds 2 values" in key1
    assert "offset 1, value 5: offset 1 holds 2 values" in key1
    assert "offset 2, value 3: acknowledged, below the highest read offset, never read" in key1
    assert "offset 3, value 4: named by int-poll-skip" in key1
    assert key1.count('class="flag"') == 9  # offsets 1, 2 and 3, three rows each; offset 0 is clean
    key2 = html[html.index('id="key-2"'):html.index('id="key-4"')]
    assert "value also at offsets 2" in key2
    assert "read, but its only writers failed" in key2
    assert "op 10 (fail)" in key2


def test_report_is_self_contained_with_plotly_inlined_once(invalid_report) -> None:
    html = invalid_report
    assert len(re.findall(r"plotly\.js v\d", html)) == 1
    assert not re.search(r"<script[^>]+src=", html)
    assert not re.search(r"<link[^>]+href=\"?https?:", html)
    for plot in ("latency", "throughput", "unseen", "lag", "timeline"):
        assert f'id="plot-{plot}"' in html


def test_plots_take_their_numbers_from_the_history_and_results(invalid_report) -> None:
    html = invalid_report
    results = invalid_results()
    final_unseen = results["unseen_over_time"][-1]["unseen"]
    assert f"Unseen acknowledged values over time (at the end: {final_unseen})" in html
    assert f"worst: {results['worst_realtime_lag']['lag']:.3f} s" in html
    sends_ok = sum(1 for op in invalid_ops() if op.f == "send" and op.type == "ok")
    assert f"send ok ({sends_ok})" in html  # exact counts in the legend


def test_valid_report(tmp_path) -> None:
    run = make_run_dir(tmp_path, valid_ops(), valid_results())
    html = write_report(run).read_text()
    assert 'data-verdict="valid"' in html
    assert "The checker found no anomalies." in html
    assert "No anomaly names a key." in html
    assert re.search(r"kill\s*</th>\s*<td class=\"n\">1</td>", html)


def test_report_without_results_is_marked_not_analysed(tmp_path) -> None:
    run = make_run_dir(tmp_path, valid_ops(), None)
    html = write_report(run).read_text()
    assert 'data-verdict="not analysed"' in html
    assert "was not analysed" in html


def test_report_copes_with_hand_written_and_odd_results(tmp_path) -> None:
    results = legacy_results()
    results["anomalies"]["weird-list"] = [{"key": 1, "value": 1}]
    results["anomalies"]["weird-count"] = 3
    results["anomalies"]["mystery"] = {"errs": "not a list"}
    del results["error_types"]
    run = make_run_dir(tmp_path, invalid_ops(), results)
    html = write_report(run).read_text()
    for name in ("weird-list", "weird-count", "mystery", "G1c", "lost-write"):
        assert f'id="anomaly-{name}"' in html
    assert "op 12 (send 1 3) wrote key 1" not in html or "Step by step" in html


def test_unknown_verdict(tmp_path) -> None:
    results = {"valid": "unknown", "unknown_because": "cycle search timed out", "anomalies": {}}
    html = write_report(make_run_dir(tmp_path, valid_ops(), results)).read_text()
    assert 'class="top unknown"' in html and "cycle search timed out" in html


def test_missing_and_half_written_run_dirs_are_user_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="not a directory"):
        write_report(tmp_path / "nope")
    run = make_run_dir(tmp_path, None, None)
    with pytest.raises(UserError, match="no history.jsonl"):
        write_report(run)
    run = make_run_dir(tmp_path, valid_ops(), None, start="b")
    (run / "results.json").write_text('{"valid": fal')
    with pytest.raises(UserError, match="results.json is not valid JSON"):
        write_report(run)


def test_cli_report(tmp_path) -> None:
    run = make_run_dir(tmp_path, invalid_ops(), invalid_results())
    out = logquake("report", str(run))
    assert out.returncode == 0, out.stderr
    assert (run / "report.html").stat().st_size > 1_000_000
    assert "wrote" in out.stdout
    for bad in (tmp_path / "missing", run.parent):
        out = logquake("report", str(bad))
        assert out.returncode == 3
        assert "Traceback" not in out.stderr and "UserError" in out.stderr
    (run / "history.jsonl").write_text('{"index": 0, "time": 0, "process": 0, "type": "ok"\n')
    out = logquake("report", str(run))
    assert out.returncode == 3 and "HistoryFormatError" in out.stderr and "Traceback" not in out.stderr


def test_large_history_is_downsampled_and_the_timeline_capped(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(plots, "MAX_SCATTER_POINTS", 2000)  # a small history stands in for a big one
    run = make_run_dir(tmp_path, None, None)
    write_synth_history(run / "history.jsonl", 12_000, seed=3, fault_every=3000)
    ops = load_history(run / "history.jsonl")
    (run / "results.json").write_text(json.dumps(checked(ops)))
    html = write_report(run).read_text()
    assert "downsampled; counts in legend are exact" in html
    latency = html[html.index('id="plot-latency"'):html.index('id="wrap-throughput"')]
    n_points = sum(len(x.split(",")) for x in re.findall(r'"customdata":\[([^\]]*)\]', latency))
    assert 1500 <= n_points <= 2000
    invoked = sum(1 for op in ops if op.type == "invoke" and op.process != "nemesis")
    cap = re.sub(r"\s+", " ", html[html.index('id="timeline-cap"'):][:300])
    assert "Capped: showing 1,50" in cap and f"of {invoked:,} ops" in cap
    sends_ok = sum(1 for op in ops if op.f == "send" and op.type == "ok")
    assert f"send ok ({sends_ok:,})" in html


def test_digest_agrees_with_the_checker_on_unseen() -> None:
    ops = [replace(op, index=i) for i, op in enumerate(synth_history(6000, seed=5, fault_every=1000))]
    results = checked(ops)
    d = digest_history(ops)
    assert d.unseen_n[-1] == results["unseen_over_time"][-1]["unseen"]
    assert (d.unseen_n[-1] > 0) == ("unseen" in results["anomalies"])
    assert len(d.intervals) == sum(1 for op in ops if op.f.startswith("start-"))


def test_the_lag_plot_shows_the_checkers_series_and_an_old_results_json_still_renders(tmp_path: Path) -> None:
    ops = [replace(op, index=i) for i, op in enumerate(synth_history(6000, seed=5, fault_every=1000))]
    results = checked(ops)
    points = results["realtime_lag_over_time"]
    assert points and max(p["lag"] for p in points) == results["worst_realtime_lag"]["lag"]
    d = digest_history(ops)
    fig = plots.lag_figure(d, results["worst_realtime_lag"], points)
    assert max(fig["data"][0]["y"]) == pytest.approx(results["worst_realtime_lag"]["lag"], abs=1e-9)
    del results["realtime_lag_over_time"]  # as written before the checker kept the series
    html = write_report(make_run_dir(tmp_path, ops, results)).read_text()
    assert f"worst: {results['worst_realtime_lag']['lag']:.3f} s" in html


def test_nemesis_intervals_pair_per_kind_and_stay_open_when_never_stopped() -> None:
    from logquake.history import Op

    def nem(f: str, t: int) -> Op:
        return Op(process="nemesis", type="info", f=f, time=t, value=f)

    d = digest_history([nem("start-kill", 1), nem("start-partition", 2), nem("stop-kill", 5),
                        nem("start-kill", 7), nem("stop-partition", 9), nem("start-clock", 10)])
    got = [(iv.kind, iv.start, iv.stop) for iv in d.intervals]
    assert got == [("kill", 1, 5), ("partition", 2, 9), ("kill", 7, None), ("clock", 10, None)]


def test_a_fault_the_final_heal_ended_ends_there_in_the_report() -> None:
    from logquake.history import Op

    def nem(f: str, t: int) -> Op:
        return Op(process="nemesis", type="info", f=f, time=t, value=f)

    poll = [Op(process=0, type=t, f="poll", time=at, value=[["poll"]]) for t, at in (("invoke", 8), ("ok", 9))]
    d = digest_history([nem("start-partition", 1), nem("start-kill", 2), nem("stop-kill", 3), nem("heal", 4),
                        nem("start-clock", 5), *poll])
    got = [(iv.kind, iv.start, iv.stop, iv.stop_value) for iv in d.intervals]
    assert got == [("partition", 1, 4, "heal"), ("kill", 2, 3, "stop-kill"), ("clock", 5, None, None)]
    rows = {r["kind"]: (r["seconds"], r["open"]) for r in fault_rows(d)}  # clock: on to the end, 9
    assert rows == {"partition": (3 / plots.NS, 0), "kill": (1 / plots.NS, 0), "clock": (4 / plots.NS, 1)}


def test_write_report_replaces_the_file_atomically(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, valid_ops(), valid_results())
    (run / "report.html").write_text("old")
    write_report(run)
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert not list(run.glob("*.tmp"))


# --- pipeline runs: the processing-count distribution, per guarantee profile ---------------


def plot_data(html: str, div_id: str) -> list[dict]:
    """The traces plotly is given for one figure (the JSON after the div's newPlot call)."""
    call = re.compile(rf'Plotly\.newPlot\(\s*"{re.escape(div_id)}",\s*')
    m = call.search(html, html.index(f'id="{div_id}"'))
    return json.JSONDecoder().raw_decode(html, m.end())[0]


@pytest.mark.parametrize("guarantee", PIPELINE_PROFILES)
def test_pipeline_report_plots_the_processing_counts_labelled_with_the_profile(tmp_path, guarantee) -> None:
    run = pipeline_run_dir(tmp_path, guarantee)
    results = json.loads((run / "results.json").read_text())
    assert json.loads((run / "test.json").read_text())["guarantee"] == guarantee == results["guarantee"]
    html = write_report(run).read_text()
    sec = section(html, "processing")
    assert f'data-guarantee="{guarantee}"' in sec and f"Processing counts · guarantee {guarantee}" in sec
    assert 'href="#processing"' in html
    table = sec[sec.index('id="processing-counts"'):sec.index("</table>")]
    for times, n in results["processing_counts"].items():
        assert re.findall(r"[\d,]+", cell(table, times).replace(",", ""))[0] == str(n)
    assert re.findall(r"\d+", cell(table, "all"))[0] == str(results["inputs"])
    [trace] = plot_data(html, "plot-processing")
    highest = max(int(k) for k in results["processing_counts"])
    assert trace["x"] == list(range(max(highest, 1) + 1))
    assert trace["y"] == [results["processing_counts"].get(str(x), 0) for x in trace["x"]]
    assert trace["marker"]["color"][1] == plots.OUTCOME_COLOURS["ok"]
    assert f"guarantee {guarantee}" in html[html.index('id="plot-processing"'):][:20_000]


def test_at_least_once_repeats_are_allowed_there_and_bad_under_exactly_once(tmp_path) -> None:
    from logquake.checker.pipeline import check_pipeline

    run = pipeline_run_dir(tmp_path / "alo", "at-least-once")
    stored = json.loads((run / "results.json").read_text())
    assert stored["processing_counts"].get("2", 0) > 0, "the recorded run processed some values twice"
    html = write_report(run).read_text()
    row = cell(section(html, "processing"), "2")
    assert "allowed by at-least-once" in row and "bad" not in row
    assert plot_data(html, "plot-processing")[0]["marker"]["color"][2] == plots.OUTCOME_COLOURS["info"]

    # The same history, checked as if the user had asked for exactly-once: the repeats break it.
    strict = check_pipeline(load_history(run / "history.jsonl"), guarantee="exactly-once")
    assert strict["valid"] is False and strict["processing_counts"] == stored["processing_counts"]
    run = pipeline_run_dir(tmp_path / "eo", "at-least-once", results=strict)
    html = write_report(run).read_text()
    sec = section(html, "processing")
    assert 'data-guarantee="exactly-once"' in sec and cell(sec, "2").split()[-1] == "bad"
    assert re.search(r"<th>2</th>.*?<span class=\"pill bad\">bad</span>", sec, re.S)
    assert plot_data(html, "plot-processing")[0]["marker"]["color"][2] == plots.OUTCOME_COLOURS["fail"]
    assert 'data-verdict="invalid"' in html and 'id="anomaly-double-processing"' in html


def test_stored_pipeline_results_agree_with_the_checker_on_the_stored_history(tmp_path) -> None:
    from logquake.checker.pipeline import check_pipeline

    for guarantee in PIPELINE_PROFILES:
        run = pipeline_run_dir(tmp_path, guarantee)
        again = check_pipeline(load_history(run / "history.jsonl"), guarantee=guarantee)
        assert again == json.loads((run / "results.json").read_text()), guarantee


def test_runs_without_processing_counts_have_no_processing_section(tmp_path, invalid_report) -> None:
    assert 'id="processing"' not in invalid_report and 'href="#processing"' not in invalid_report
    for odd in ({}, {"1": "many"}, {"-1": 3}, ["1", 2], None):
        results = {**valid_results(), "processing_counts": odd}
        html = write_report(make_run_dir(tmp_path, valid_ops(), results, start=f"odd-{len(str(odd))}")).read_text()
        assert 'id="processing"' not in html, odd
    # not analysed: no results, so no distribution, whatever the workload
    run = pipeline_run_dir(tmp_path / "na", "exactly-once")
    (run / "results.json").unlink()
    assert 'id="processing"' not in write_report(run).read_text()


def test_the_profile_label_falls_back_to_test_json(tmp_path) -> None:
    run = pipeline_run_dir(tmp_path, "at-most-once")
    results = json.loads((run / "results.json").read_text())
    del results["guarantee"]
    (run / "results.json").write_text(json.dumps(results))
    assert 'data-guarantee="at-most-once"' in write_report(run).read_text()


def test_profiles_page_of_queue_runs_has_no_processing_plot_and_lists_what_was_left_out(tmp_path) -> None:
    from logquake.matrix import Cell, by_profile, judge
    from logquake.results.profiles import write_profiles_report

    runs = [judge(Cell(name=f"safe/queue/none/{g}", config={}, guarantee=g), 1, valid_results())
            for g in ("at-least-once", "exactly-once")]
    index = {"done": False, "profiles": by_profile(runs), "runs": [],
             "skipped": ["safe/txn/none/at-most-once: transactions make the producer idempotent"]}
    html = write_profiles_report(tmp_path, index).read_text()
    assert 'id="plot-profiles"' not in html and "No run of this matrix used the pipeline workload" in html
    assert "matrix still running: partial" in html and "safe/txn/none/at-most-once: transactions" in html
    assert html.count("<tr data-guarantee=") == 2 and not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("guarantee, repeats, words", [
    ("idempotent", "allowed by idempotent", "allows more than 1 (repeated), never 0"),
    ("exactly-once", "bad", "allows nothing else"),
    ("at-most-once", "bad", "allows 0 (lost), never more than 1"),
])
def test_what_each_profile_tolerates_comes_from_the_profile(tmp_path, guarantee, repeats, words) -> None:
    from logquake.checker.pipeline import check_pipeline
    from logquake.guarantees import GUARANTEES

    src = pipeline_run_dir(tmp_path / "src", "at-least-once")  # a real run with values processed twice
    results = check_pipeline(load_history(src / "history.jsonl"), guarantee=guarantee)
    run = pipeline_run_dir(tmp_path / guarantee, "at-least-once", results=results)
    sec = section(write_report(run).read_text(), "processing")
    assert f"{guarantee} {words}." in sec
    assert cell(sec, "2").split()[-1] == ("bad" if repeats == "bad" else guarantee)
    assert ("double-processing" in GUARANTEES[guarantee].allowed) == (repeats != "bad")


def test_an_unknown_profile_name_shows_every_other_count_as_bad(tmp_path) -> None:
    from logquake.checker.pipeline import check_pipeline

    src = pipeline_run_dir(tmp_path / "src", "at-least-once")  # a real run with values processed twice
    results = check_pipeline(load_history(src / "history.jsonl"), guarantee="exactly-twice")
    run = pipeline_run_dir(tmp_path, "at-least-once", results=results)
    html = write_report(run).read_text()
    assert "exactly-twice is not a known profile" in section(html, "processing")
    assert plot_data(html, "plot-processing")[0]["marker"]["color"][2] == plots.OUTCOME_COLOURS["fail"]
