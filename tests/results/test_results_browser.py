"""report.html opened in headless Chromium: no console errors, no network, plots and sections render.

Uses Debian's chromium (scripts/bootstrap.sh installs it) driven by Playwright with
executable_path, never `playwright install`'s downloaded browsers. Screenshots land in the
test's tmp dir (printed on failure) for a person to judge the layout.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
from results_fixtures import (
    PIPELINE_PROFILES,
    checked,
    invalid_ops,
    invalid_results,
    make_run_dir,
    pipeline_run_dir,
    write_synth_history,
)

from logquake.history import load_history
from logquake.results.report import write_report

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
PLOTS = ("latency", "throughput", "unseen", "lag", "timeline")

sync_api = pytest.importorskip("playwright.sync_api", reason="pip package playwright is not installed")
if not Path(CHROMIUM).exists():
    pytest.skip("Debian chromium is not installed (scripts/bootstrap.sh installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=120_000)
        try:
            yield b
        finally:
            b.close()


def open_report(browser, report: Path, plots=PLOTS):
    """The loaded page, plus the console errors and non-file requests seen while loading."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:", "blob:")) else None)
    page.goto(report.as_uri(), wait_until="load", timeout=120_000)
    for plot in plots:
        page.wait_for_selector(f"#plot-{plot} .main-svg", timeout=120_000)
    page.add_style_tag(content="nav { position: static !important; }")  # keep it out of element shots
    return page, problems, requests


def shot(page, selector: str, path: Path) -> None:
    """A screenshot of one element, by clipping the full page (no wait for 'stable' under load)."""
    box = page.locator(selector).bounding_box(timeout=120_000)
    page.screenshot(path=str(path), full_page=True, clip=box, timeout=120_000)


def test_invalid_report_renders_in_chromium(browser, tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, invalid_ops(), invalid_results())
    page, problems, requests = open_report(browser, write_report(run))
    try:
        # The full page only: a shot of one element renders the whole page again (2-3 s each).
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True, timeout=120_000)
        print(f"screenshot in {tmp_path}")
        assert problems == [] and requests == []
        for part in ("summary", "anomalies", "keylogs", "timeline"):
            assert page.locator(f"#{part}").is_visible(), part
        assert page.locator("#verdict").inner_text().strip().startswith("INVALID")
        for name in invalid_results()["anomalies"]:
            assert page.locator(f"#anomaly-{name}").is_visible()
        # every plot drew its data: traces in the SVG, and the shaded nemesis interval
        for plot in ("latency", "throughput", "unseen", "lag"):
            assert page.locator(f"#plot-{plot} .scatterlayer .trace").count() >= 1, plot
            assert page.locator(f"#plot-{plot} .shapelayer path").count() >= 1, plot
        assert page.locator("#plot-timeline .barlayer .trace").count() >= 3  # ok, fail, info
        assert page.locator(".keylog td.flag").count() >= 6
        # hover details on the timeline come from the history
        texts = page.evaluate("() => document.getElementById('plot-timeline').data.flatMap(t => t.hovertext)")
        assert any("op 16 · process 2 · poll ok" in t for t in texts)
    finally:
        page.close()


@pytest.mark.slow
def test_large_report_renders_in_chromium(browser, tmp_path: Path) -> None:
    run = make_run_dir(tmp_path, None, None)
    write_synth_history(run / "history.jsonl", 30_000, seed=9, fault_every=2500)
    (run / "results.json").write_text(json.dumps(checked(load_history(run / "history.jsonl"))))
    page, problems, requests = open_report(browser, write_report(run))
    try:
        shot(page, "#plots", tmp_path / "plots.png")
        shot(page, "#timeline", tmp_path / "timeline.png")
        print(f"screenshots in {tmp_path}")
        assert problems == [] and requests == []
        assert page.locator("#timeline-cap").is_visible()
        n_points = page.evaluate(
            "() => document.getElementById('plot-latency').data.reduce((n, t) => n + t.x.length, 0)")
        assert 1000 < n_points <= 15_000
    finally:
        page.close()


def test_pipeline_report_draws_the_processing_counts_in_chromium(browser, tmp_path: Path) -> None:
    run = pipeline_run_dir(tmp_path, "at-least-once")
    counts = json.loads((run / "results.json").read_text())["processing_counts"]
    page, problems, requests = open_report(browser, write_report(run), plots=(*PLOTS, "processing"))
    try:
        shot(page, "#processing", tmp_path / "processing.png")
        print(f"screenshots in {tmp_path}")
        assert problems == [] and requests == []
        assert page.locator("#processing h2").inner_text() == "Processing counts · guarantee at-least-once"
        # one bar per count from 0 to the highest; the drawn heights follow the counts
        bars = page.locator("#plot-processing .barlayer .point")
        assert bars.count() == max(int(k) for k in counts) + 1
        heights = [bars.nth(i).bounding_box()["height"] for i in range(bars.count())]
        assert heights[1] > heights[2] > 0 and int(counts["1"]) > int(counts["2"])
        assert "at-least-once" in page.locator("#plot-processing .gtitle").text_content()
    finally:
        page.close()


def test_profiles_page_compares_the_profiles_in_chromium(browser, tmp_path: Path) -> None:
    from logquake.matrix import Cell, by_profile, judge
    from logquake.results.profiles import write_profiles_report

    runs = []
    for g in PIPELINE_PROFILES:
        run = pipeline_run_dir(tmp_path / "runs", g)
        results = json.loads((run / "results.json").read_text())
        runs.append(judge(Cell(name=f"safe/pipeline/kill+partition/{g}", config={}, guarantee=g), 21, results,
                          run_dir=str(run)))
    out = write_profiles_report(tmp_path, {"done": True, "profiles": by_profile(runs)})
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        page.goto(out.as_uri(), wait_until="load", timeout=120_000)
        page.wait_for_selector("#plot-profiles .main-svg", timeout=120_000)
        page.screenshot(path=str(tmp_path / "profiles.png"), full_page=True, timeout=120_000)
        print(f"screenshot in {tmp_path}")
        assert problems == []
        assert page.locator("#plot-profiles .barlayer .trace").count() == 3
        assert page.locator("#profiles-table tr[data-guarantee]").count() == 3
        legend = page.locator("#plot-profiles .legend").text_content()
        assert all(g in legend for g in PIPELINE_PROFILES)
    finally:
        page.close()


def test_trend_page_draws_three_runs_as_marks_in_order_in_chromium(browser, tmp_path: Path) -> None:
    """`logquake serve`'s trend of one test over three nights (valid, invalid, valid), served
    over HTTP: three marks left to right in that order, each a link to its run; nothing fetched."""
    import threading

    from results_fixtures import valid_ops, valid_results

    from logquake.results.serve import make_server

    root = tmp_path / "results"
    for day, ops, results in (("28", valid_ops(), valid_results()), ("29", invalid_ops(), invalid_results()),
                              ("30", valid_ops(), valid_results())):
        make_run_dir(root, ops, results, name="queue", start=f"202611{day}T031700.000Z")
    srv = make_server(root, port=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    problems: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(f"{base}/", wait_until="load", timeout=120_000)
        page.click("#tests a:text('queue')", timeout=120_000)
        page.wait_for_selector("svg#trend circle.mark", timeout=120_000)
        page.screenshot(path=str(tmp_path / "trend.png"), full_page=True, timeout=120_000)
        print(f"screenshot in {tmp_path}")
        assert problems == [] and requests == [f"{base}/", f"{base}/?trend=queue"]
        marks = page.locator("svg#trend circle.mark")
        assert marks.count() == 3
        statuses = [marks.nth(i).get_attribute("data-status") for i in range(3)]
        assert statuses == ["valid", "invalid", "valid"]
        boxes = [marks.nth(i).bounding_box() for i in range(3)]
        assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"] and all(b["width"] > 5 for b in boxes)
        fills = [marks.nth(i).evaluate("e => getComputedStyle(e).fill") for i in range(3)]
        assert fills[0] == fills[2] != fills[1]
        assert marks.nth(1).evaluate("e => e.parentElement.getAttribute('href')") == "/queue/20261129T031700.000Z/"
    finally:
        page.close()
        srv.shutdown()
        srv.server_close()


def test_report_layout_keeps_tables_and_plots_in_their_columns_in_chromium(browser, tmp_path: Path) -> None:
    # A real run's test.json (its profile's client configs are long values), a 1400 px window.
    from logquake.config import resolve_config, save_config
    from logquake.guarantees import apply_guarantee
    from logquake.workloads.registry import describe

    run = make_run_dir(tmp_path, invalid_ops(), invalid_results())
    cfg = apply_guarantee(resolve_config(None, {"txn": True, "sub_via": "subscribe", "seed": 42,
                                                "nemesis": "partition:leader,kill,packet-loss"}))
    save_config(cfg, run / "test.json", run_dir=str(run), start_time=0.0, profile=describe(cfg))
    page, problems, _ = open_report(browser, write_report(run))
    try:
        page.set_viewport_size({"width": 1000, "height": 1000})  # a laptop's window: columns narrow
        # The responsive plots redraw (0.1-0.2 s here, later on a loaded machine): until each
        # plot's svg fits its own box, at most 30 s; what still does not fit, the checks below name.
        with contextlib.suppress(sync_api.TimeoutError):
            page.wait_for_function("""(plots) => plots.every(p => {
                const box = document.querySelector('#plot-' + p).getBoundingClientRect();
                const svg = document.querySelector('#plot-' + p + ' .main-svg').getBoundingClientRect();
                return svg.right <= box.right + 1 && svg.left >= box.left - 1;
            })""", arg=list(PLOTS), timeout=30_000)
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True, timeout=120_000)
        print(f"screenshots in {tmp_path}")
        overflow = page.evaluate("""() => [...document.querySelectorAll('#summary .grid > div')].map(col => {
            const c = col.getBoundingClientRect();
            return [...col.querySelectorAll('table')].filter(t => t.getBoundingClientRect().right > c.right + 1)
                .map(t => t.id || t.previousElementSibling?.textContent);
        }).flat()""")
        assert overflow == [], f"tables wider than their column: {overflow}"
        clipped = page.evaluate("""() => ['unseen', 'lag'].filter(p => {
            const wrap = document.querySelector('#wrap-' + p).getBoundingClientRect();
            const svg = document.querySelector('#plot-' + p + ' .main-svg').getBoundingClientRect();
            return svg.right > wrap.right + 1 || svg.left < wrap.left - 1;
        })""")
        assert clipped == [], f"plots wider than their box: {clipped}"
        for plot in PLOTS:
            page.hover(f"#plot-{plot} .main-svg")
            covered = page.evaluate("""(p) => {
                const bar = document.querySelector('#plot-' + p + ' .modebar');
                const title = document.querySelector('#plot-' + p + ' .gtitle');
                if (!bar || !title) return false;
                const a = bar.getBoundingClientRect(), b = title.getBoundingClientRect();
                return a.width > 0 && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
            }""", plot)
            assert not covered, f"the plot toolbar covers the title of {plot}"
        assert problems == []
    finally:
        page.close()
