"""The report's final-read section and its plot of lost values, from results.json."""

from __future__ import annotations

import re

from results_fixtures import checked, make_run_dir, valid_ops, valid_results
from test_results_report import plot_data, section

from logquake.results.report import write_report
from tests.checker.test_final_read import the_issues_history


def test_a_run_that_lost_acknowledged_writes_shows_them_and_plots_them(tmp_path) -> None:
    ops = the_issues_history().ops
    results = checked(ops)
    run = make_run_dir(tmp_path, ops, results)
    html = write_report(run).read_text()
    sec = section(html, "final-read")
    rows = dict(re.findall(r"<tr><th>(.*?)</th><td[^>]*>(.*?)</td></tr>", sec))
    assert rows["lost"] == "3" and rows["… read earlier, gone now"] == "3" and rows["… never read"] == "0"
    assert rows["… suffix of their key's values"] == "3"
    assert rows["keys not read to the end (unknown)"] == "none"
    [trace] = plot_data(html, "plot-lost")
    assert trace["y"][-1] == 3 and trace["y"][0] == 0
    assert [p["lost"] for p in results["final_read"]["lost_over_time"]] == trace["y"][1:-1]
    assert 'id="anomaly-lost"' in html


def test_a_run_without_a_final_read_says_it_could_not_be_checked(tmp_path) -> None:
    run = make_run_dir(tmp_path, valid_ops(), valid_results())
    html = write_report(run).read_text()
    assert "no final read" in section(html, "final-read")
    assert 'id="plot-lost"' not in html


def test_results_from_before_the_final_read_have_no_such_section(tmp_path) -> None:
    results = valid_results()
    results.pop("final_read")
    html = write_report(make_run_dir(tmp_path, valid_ops(), results)).read_text()
    assert 'id="final-read"' not in html
