"""bench_soak's growth detector and its CSV, on synthetic series (no run, no lock)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_soak", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_soak.py")
bench_soak = importlib.util.module_from_spec(_spec)
sys.modules["bench_soak"] = bench_soak  # dataclasses look their module up by name
_spec.loader.exec_module(bench_soak)
MAIN, Sample, growth, judge = bench_soak.MAIN, bench_soak.Sample, bench_soak.growth, bench_soak.judge
read_csv, write_csv = bench_soak.read_csv, bench_soak.write_csv

HOUR = 360  # samples of 10 s


def _times(n: int = HOUR) -> list[float]:
    return [10.0 * i for i in range(n)]


def test_a_leak_of_5_mb_a_minute_grows() -> None:
    rng = random.Random(1)
    values = [200 + 5 * t / 60 + rng.gauss(0, 8) for t in _times()]
    g = growth("rss", _times(), values)
    assert g is not None and g.grows
    assert g.slope_per_hour == pytest.approx(300, rel=0.1)  # MB per hour, as leaked


def test_a_slow_leak_shows_in_a_short_window_too() -> None:
    values = [100 + t / 60 for t in _times(18)]  # 3 minutes, 1 MB a minute
    g = growth("rss", _times(18), values)
    assert g is not None and g.grows and g.samples == 9


def test_a_flat_noisy_series_does_not_grow() -> None:
    rng = random.Random(2)
    values = [300 + rng.gauss(0, 15) for _ in _times()]
    g = growth("rss", _times(), values)
    assert g is not None and not g.grows
    assert abs(g.relative_per_hour) < bench_soak.THRESHOLD_PER_HOUR / 2


def test_a_sawtooth_like_a_gc_does_not_grow() -> None:
    # Fills for 2 minutes by 60 MB, then frees it all: a level, not a trend.
    rng = random.Random(3)
    values = [250 + 60 * ((t % 120) / 120) + rng.gauss(0, 3) for t in _times()]
    g = growth("rss", _times(), values)
    assert g is not None and not g.grows


def test_warm_up_in_the_first_half_is_not_growth() -> None:
    values = [50 + 150 * min(1.0, t / 900) for t in _times()]  # climbs for 15 min, then flat
    g = growth("rss", _times(), values)
    assert g is not None and not g.grows and g.slope_per_hour == pytest.approx(0)


def test_the_threshold_is_relative_to_the_median() -> None:
    values = [1000 + 100 * t / 3600 for t in _times()]  # +100 an hour on ~1,000: 0.1 per hour
    g = growth("x", _times(), values)
    assert g is not None and g.relative_per_hour == pytest.approx(100 / 1075, rel=0.01)
    assert not g.grows
    assert growth("x", _times(), values, threshold=0.05).grows


def test_a_slope_within_the_noise_of_a_short_window_does_not_grow() -> None:
    # A descriptor count that swings by +-20 over 90 s fits ~+900 an hour (2.3 x its median).
    values = [400, 400, 400, 400, 400, 400, 400, 400, 400, 402, 403, 365, 393, 398, 416, 407, 412, 407]
    g = growth("fds", _times(18), values)
    assert g is not None and g.relative_per_hour > 2 and not g.grows
    steady = growth("rss", _times(18), [130 + i for i in range(9)] + [142, 144, 145, 146, 147, 147, 147, 148, 149])
    assert steady is not None and steady.grows  # as much rise, little noise: a trend


def test_too_few_samples_are_not_judged_and_a_zero_median_rising_grows() -> None:
    assert growth("x", _times(5), [1.0] * 5) is None
    assert growth("x", _times(6), [0, 0, 0, -1, 0, 1]).grows
    with pytest.raises(ValueError, match="x: 6 times but 5 values"):
        growth("x", _times(6), [1.0] * 5)


def test_one_step_of_a_count_is_a_level_but_a_staircase_grows() -> None:
    # A broker's threads: 5 until a pool starts its last worker 40 minutes in, then 6.
    step = [5.0 if t < 2400 else 6.0 for t in _times()]
    assert growth("threads", _times(), step).grows  # a clean step fits a clean slope...
    assert not growth("threads", _times(), step, quantum=1.0).grows  # ...but it is one step
    stairs = [5.0 + t // 600 for t in _times()]  # one more every 10 minutes
    assert growth("threads", _times(), stairs, quantum=1.0).grows
    samples = [Sample(t=t, phase=MAIN, process="n5/broker", pid=9, metric=m, value=v)
               for t, v in zip(_times(), step, strict=True) for m in ("threads", "rss_mb")]
    assert [g.series for g in judge(samples) if g.grows] == ["n5/broker[9] rss_mb"]  # MB are no count


def test_a_restarted_process_sampled_as_it_starts_is_judged_by_its_level() -> None:
    # A broker killed every 10 minutes runs 5 threads, 6 once its pool is full; the sample right
    # after a restart catches it with 1. The last two lived long enough to fill their pools:
    # a rise that fits a slope, but each process is 5 then 6, as the first ones were.
    def sample(t: float, lift: float = 0.0) -> Sample:
        pid = int(t // 600)
        age = t - 600 * pid
        value = 1.0 if age < 10 else 6.0 if pid >= 4 or age > 500 else 5.0
        return Sample(t=t, phase=MAIN, process="n5/broker", pid=pid, metric="threads", value=value + lift * pid)
    assert not any(g.grows for g in judge([sample(t) for t in _times()]))
    leak = [sample(t, lift=1.0) for t in _times()]  # each new process starts one thread higher
    assert [g.series for g in judge(leak) if g.grows] == ["n5/broker[*] threads"]


def _samples() -> list[Sample]:
    rng = random.Random(4)
    out = []
    for i, t in enumerate(_times(60)):
        phase = MAIN if 5 <= i < 55 else "recovery"
        out.append(Sample(t=t, phase=phase, process="harness", pid=7, metric="rss_mb", value=80 + rng.random()))
        out.append(Sample(t=t, phase=phase, process="n1/broker", pid=11 if i < 30 else 12, metric="fds",
                          value=40.0 + i % 2))
        out.append(Sample(t=t, phase=phase, process="n2/broker", pid=13, metric="rss_mb", value=60 + t / 10))
        out.append(Sample(t=t, phase=phase, process="history", pid=0, metric="history_mb", value=t / 3))
    return out


def test_judge_takes_each_process_apart_in_the_main_phase_and_skips_the_history() -> None:
    growths = {g.series: g for g in judge(_samples())}
    # n1's broker restarted halfway: each process lived too little to be judged alone, the node is.
    assert set(growths) == {"harness[7] rss_mb", "n1/broker[*] fds", "n2/broker[13] rss_mb"}
    assert [s for s, g in growths.items() if g.grows] == ["n2/broker[13] rss_mb"]
    assert growths["harness[7] rss_mb"].samples == 25  # the last half of 50 main-phase samples


def test_a_restarted_process_warming_up_is_no_trend_unless_each_restart_starts_higher() -> None:
    def node(step: float) -> list[Sample]:
        # A broker killed every 5 minutes, each climbing 40 MB in its short life, starting `step` higher.
        return [Sample(t=t, phase=MAIN, process="n1/broker", pid=int(t // 300), metric="rss_mb",
                       value=60 + step * (t // 300) + 40 * (t % 300) / 300) for t in _times()]
    assert not any(g.grows for g in judge(node(0.0)))
    assert [g.series for g in judge(node(5.0)) if g.grows] == ["n1/broker[*] rss_mb"]


def test_the_csv_round_trips(tmp_path: Path) -> None:
    samples = _samples() + [Sample(t=0.1, phase="setup", process="n1/lazyfs", pid=5, metric="threads", value=3.0)]
    write_csv(tmp_path / "soak.csv", samples)
    assert read_csv(tmp_path / "soak.csv") == samples


def test_a_malformed_csv_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "soak.csv"
    write_csv(path, _samples()[:2])
    path.write_text(path.read_text() + "1.0,main,harness,seven,rss_mb,3\n")
    with pytest.raises(ValueError, match=r"soak.csv: line 4: invalid literal"):
        read_csv(path)
    path.write_text("t,value\n")
    with pytest.raises(ValueError, match="line 1: expected the columns"):
        read_csv(path)


def test_the_run_watch_counts_whole_lines_once_and_the_keys_sent(tmp_path: Path) -> None:
    run = tmp_path / "soak" / "20261202T000000.000Z"
    run.mkdir(parents=True)
    lines = ['{"index":0,"type":"invoke","f":"send","value":[["send",4,1]]}',
             '{"index":1,"type":"invoke","f":"txn","value":[["poll"],["send",11,1],["send",2,7]]}',
             '{"index":2,"type":"invoke","f":"assign","value":[30,31]}']
    (run / "history.jsonl").write_text(lines[0] + "\n" + lines[1][:20])  # the writer is mid-line
    (run / "harness.log").write_text("2026-12-02 00:00:01,000 INFO logquake.runner [MainThread] phase main\n")
    watch = bench_soak._RunWatch(tmp_path / "soak")
    watch.poll()
    assert (watch.phase, watch.lines, watch.keys) == (MAIN, 1, 5)
    (run / "history.jsonl").write_text("\n".join(lines) + "\n")
    watch.poll()
    assert (watch.lines, watch.keys) == (3, 12)  # an assign names keys but makes no topic


def test_the_figure_thins_each_line_but_keeps_its_spikes_and_is_svg(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    samples = [Sample(t=t, phase=MAIN, process=f"n{n}/broker", pid=n, metric="fds",
                      value=500.0 if (t, n) == (5000.0, 2) else 40.0 + n) for t in _times(1000) for n in (1, 2, 3)]
    rows = bench_soak._bands(samples, "broker", "fds")
    assert len(rows) <= bench_soak.SVG_POINTS
    assert max(r[3] for r in rows) == 500 and min(r[1] for r in rows) == 41 and {r[2] for r in rows} == {42}
    bench_soak.write_svg(tmp_path / "soak.svg", _samples() + samples, "a\nb")
    svg = ET.parse(tmp_path / "soak.svg").getroot()
    assert len(svg.findall("{http://www.w3.org/2000/svg}polyline")) == 2 * 2 + 1  # harness, broker x rss, fds; history
    assert (tmp_path / "soak.svg").stat().st_size < 50_000
