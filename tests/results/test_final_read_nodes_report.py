"""The report's table of the final read from each node, from results.json."""

from __future__ import annotations

import re

from results_fixtures import checked, make_run_dir
from test_results_report import section

from logquake.results.report import write_report
from tests.checker.test_final_read_nodes import ALL, final_read, three_sends


def _rows(html: str) -> list[list[str]]:
    sec = section(html, "final-read")
    table = sec[sec.index('id="final-read-nodes"'):]
    table = table[:table.index("</table>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table) if "<td" in row]


def test_each_node_gets_a_row_with_what_it_did_not_return(tmp_path) -> None:
    h = three_sends()
    final_read(h, 5, {0: 4}, ALL)
    final_read(h, 6, {0: 4}, ALL, node="n1")
    final_read(h, 7, {0: 2}, {0: [(1, 1)]}, node="n2")
    results = checked(h.ops)
    results["drain"] = {"complete": True, "workers_short": [], "node_reads": {"n1": True, "n2": True, "n3": False}}
    html = write_report(make_run_dir(tmp_path, h.ops, results)).read_text()
    rows = _rows(html)
    assert [r[:6] for r in rows] == [["n1", "complete", "0", "0", "0", "none"],
                                     ["n2", "behind", "2", "0", "2", "none"],
                                     ["n3", "unknown", "", "", "", "not read"]]
    assert rows[1][6] == "key 0 value 2 at offset 2 (behind; the node&#39;s log ends at 2)"


def test_a_run_without_node_reads_has_no_such_table(tmp_path) -> None:
    h = three_sends()
    final_read(h, 5, {0: 4}, ALL)
    html = write_report(make_run_dir(tmp_path, h.ops, checked(h.ops))).read_text()
    assert 'id="final-read-nodes"' not in html
