"""The command line's view of a run: the guarantee before it, a live display, the verdict after."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from logquake.config import TestConfig
from logquake.crew import Stats
from logquake.errors import LogquakeError
from logquake.guarantees import apply_guarantee
from logquake.results import store
from logquake.runner import RunOutcome, run_test
from logquake.workloads import get_workload
from logquake.workloads.registry import describe


class _Rate:
    """Ops/s over the last few seconds (the display's, not the history's)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []

    def __call__(self, now: float, done: int) -> float:
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > 3.0:
            self.samples.pop(0)
        (t0, n0) = self.samples[0]
        return (done - n0) / (now - t0) if now > t0 else 0.0


def _live_view(stats: Stats, run_dir: list[Path], rate: _Rate) -> Any:
    from rich.table import Table

    now = time.monotonic()
    elapsed = now - stats.started
    done = stats.ok + stats.info + stats.fail
    t = Table.grid(padding=(0, 2))
    t.add_row("phase", f"[bold]{stats.phase}[/]", "elapsed", f"{elapsed:6.1f} s")
    mean = stats.main_rate()  # once the main phase is over, its mean: not the drain's last sample
    t.add_row("ops/s" if mean is None else "ops/s (main, mean)", f"{rate(now, done) if mean is None else mean:7.1f}",
              "ok/info/fail", f"[green]{stats.ok}[/]/[yellow]{stats.info}[/]/[red]{stats.fail}[/]")
    faults = ", ".join(f"{k} ({v})" for k, v in stats.faults.items()) or "none"
    t.add_row("faults", faults, "run", str(run_dir[0]) if run_dir else "")
    return t


def verdict_table(results: dict[str, Any]) -> Any:
    """The anomaly table printed at the end of a run."""
    from rich.table import Table

    valid = results.get("valid")
    colour = "green" if valid is True else "red" if valid is False else "yellow"
    t = Table(title=f"valid: [bold {colour}]{str(valid).lower()}[/]", title_justify="left")
    t.add_column("anomaly")
    t.add_column("count", justify="right")
    t.add_column("bad")
    bad = set(results.get("bad_error_types") or [])
    for kind, entry in sorted((results.get("anomalies") or {}).items()):
        count = entry.get("count", "") if isinstance(entry, dict) else ""
        t.add_row(kind, str(count), "[red]yes[/]" if kind in bad else "no")
    if not t.rows:
        t.add_row("[dim]none[/]", "0", "")
    if results.get("error"):
        t.caption = str(results["error"])
    counts = results.get("processing_counts")
    if not isinstance(counts, dict):
        return t
    from rich.console import Group
    from rich.text import Text

    # The pipeline's own figures: how many times each acknowledged input was processed.
    times = {0: "never", 1: "once", 2: "twice"}
    spread = ", ".join(f"{n} {times.get(int(k), f'{k} times')}" for k, n in sorted(counts.items(), key=lambda i: int(i[0])))
    return Group(t, Text(f"processing: {results.get('inputs', sum(counts.values()))} acknowledged inputs; "
                         f"{spread or 'none'}"))


def run_summary(stats: Stats, seed: int | None) -> list[str]:
    """The run in figures, as it ended: the main phase's mean rate, the ops' outcomes, the
    faults by kind with how long they were on, the seed, and how long each phase took."""
    rate = stats.main_rate()
    main = (f"main phase {stats.main_seconds:.1f} s, {rate:.1f} ops/s mean" if rate is not None and stats.main_seconds
            else "no main phase completed")
    lines = [f"seed {seed} (again: --seed {seed})" if seed is not None else "seed: none",
             f"{main}; ops ok/info/fail {stats.ok}/{stats.info}/{stats.fail}"]
    faults = ", ".join(f"{kind} x{n} ({stats.fault_seconds.get(kind, 0.0):.1f} s on)"
                       for kind, n in sorted(stats.fault_starts.items()))
    lines.append(f"faults: {faults or 'none'}")
    lines.append("phases: " + ", ".join(f"{phase} {secs:.1f} s" for phase, secs in stats.durations()
                                         if phase != "done"))
    return lines


def _print_profile(cfg: TestConfig, console: Any) -> None:
    """The guarantee under test and the client configs it gives, before anything starts."""
    workload = get_workload(cfg.workload)
    if not workload.guarantee_applies:
        assert workload.banner is not None
        console.print(f"[bold]{workload.name}[/]: {workload.banner(cfg)}")
        return
    prof = describe(apply_guarantee(cfg))
    console.print(f"[bold]guarantee[/] {prof['guarantee']} (offsets committed {prof['offset_commit']};"
                  f" allowed: {', '.join(prof['allowed_anomalies'])})")
    for side in ("producer_config", "consumer_config"):
        conf = prof[side]
        console.print(f"  {side.split('_')[0]}: " + ", ".join(f"{k}={conf[k]}" for k in sorted(conf)))


def run_with_display(cfg: TestConfig, console: Any) -> int:
    """Run a test under a live rich display; print the verdict and the run path; the exit code."""
    from rich.live import Live

    stats = Stats()
    run_dir: list[Path] = []
    outcome: RunOutcome | None = None
    cfg = cfg.with_seed()  # printed before anything starts: a run cut short can still be repeated
    _print_profile(cfg, console)
    console.print(f"[bold]seed[/] {cfg.seed}; faults: {', '.join(cfg.nemesis) or 'none (--nemesis none)'}",
                  highlight=False)
    try:
        rate = _Rate()
        with Live(get_renderable=lambda: _live_view(stats, run_dir, rate), console=console,
                  refresh_per_second=4, transient=False):
            outcome = run_test(cfg, stats=stats, on_run_dir=run_dir.append)
    except KeyboardInterrupt:
        console.print("[red]aborted[/]: in-flight ops were abandoned; history.jsonl is on disk")
        if run_dir:
            console.print(f"run: {run_dir[0]}")
        return 130
    except LogquakeError as e:
        if run_dir:
            e.hint = ((e.hint + "; ") if e.hint else "") + f"see {run_dir[0] / store.HARNESS_LOG}"
        raise
    assert outcome is not None
    console.print()
    console.print(verdict_table(outcome.results))
    if "linear" in outcome.results:  # the linearizability checker's explanation, in words
        from logquake.checker.linear import summary_lines

        console.print("\n".join(summary_lines(outcome.results)), highlight=False, markup=False)
    if outcome.interrupted:
        console.print("[yellow]interrupted[/]: analysed what was recorded")
    console.print("\n".join(run_summary(stats, cfg.seed)), highlight=False, markup=False)
    console.print(f"run: {outcome.run_dir}")
    return outcome.exit_code
