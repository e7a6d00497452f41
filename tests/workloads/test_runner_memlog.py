"""The runner's phases end to end over an in-memory log (no broker, no cluster)."""

from __future__ import annotations

import json
import threading

from logquake.config import resolve_config
from logquake.history import load_history
from logquake.runner import StaticCluster
from logquake.runner import run_test as _run_test

from .memlog import MemClient, MemLog


def run_test(cfg, **kw):
    """The runner over an in-memory log: no cluster to open."""
    return _run_test(cfg, cluster=lambda cfg, run_dir: StaticCluster("memory:0"), **kw)


def _cfg(tmp_path, **kw):
    base = {"backend": "external", "bootstrap_servers": ["memory:0"], "time_limit": 2, "rate": 200,
            "concurrency": 4, "recovery_time": 0, "drain_time": 10, "seed": 42,
            "results_dir": str(tmp_path / "results"), "nodes": 3}
    base.update(kw)
    return resolve_config(None, base)


def test_a_run_writes_a_complete_run_directory(tmp_path):
    log = MemLog()
    out = run_test(_cfg(tmp_path), make=lambda cfg: MemClient(log))
    d = out.run_dir
    assert out.valid is True and out.exit_code == 0
    for name in ("test.json", "history.jsonl", "results.json", "junit.xml", "harness.log"):
        assert (d / name).is_file(), name
    assert (tmp_path / "results" / "latest").resolve() == d.resolve()
    assert json.loads((d / "test.json").read_text())["seed"] == 42
    ops = load_history(d / "history.jsonl")  # validates pairing: one op in flight per process
    fs = {o.f for o in ops}
    assert {"assign", "send", "poll"} <= fs
    # about rate * time_limit ops in the main phase (generous bounds: shared CPUs)
    sends = [o for o in ops if o.f == "send" and o.type == "ok"]
    assert 20 < len(sends) < 400
    # the drain read every key from the beginning up to its last offset, in every worker
    drains = [o for o in ops if o.f == "assign" and o.get("seek_to_beginning")]
    assert len({o.process % 4 for o in drains}) == 4
    last = {k: len(v) - 1 for k, v in log.logs.items()}
    for w in range(4):
        seen: dict[int, int] = {}
        for o in ops:
            if o.type == "ok" and o.f == "poll" and o.process % 4 == w and o.index > drains[0].index:
                for k, pairs in o.value[0][1].items():
                    seen[int(k)] = max(seen.get(int(k), -1), pairs[-1][0])
        assert seen == last


def test_info_retires_the_process_and_the_worker_goes_on(tmp_path, monkeypatch):
    from logquake.workloads import generator

    # At the default 1 in 256, seed 5's first crash is each worker's 333rd op or later: over
    # 600 ops in the 3 s, which a loaded machine may not reach. At 1 in 16 it is worker 1's
    # 2nd op and worker 0's 13th, whatever the machine's speed.
    monkeypatch.setattr(generator, "CRASH_ONE_IN", 16)
    log = MemLog()
    out = run_test(_cfg(tmp_path, time_limit=3, rate=500, concurrency=2, seed=5), make=lambda cfg: MemClient(log))
    ops = load_history(out.run_dir / "history.jsonl")
    crashes = [o for o in ops if o.f == "crash" and o.type == "info"]
    assert crashes, "seed 5 crashes in each worker's first 13 ops"
    for c in crashes:
        assert not [o for o in ops if o.process == c.process and o.index > c.index]
        assert [o for o in ops if o.process == c.process + 2 and o.index > c.index]


def test_stop_ends_the_run_early_and_still_stores_everything(tmp_path):
    stop = threading.Event()
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    out = run_test(_cfg(tmp_path, time_limit=600), make=lambda cfg: MemClient(MemLog()), stop=stop)
    timer.cancel()
    for name in ("history.jsonl", "results.json", "junit.xml"):
        assert (out.run_dir / name).is_file()
    assert out.interrupted is False  # only SIGINT counts as an interruption
    assert load_history(out.run_dir / "history.jsonl")


def test_a_log_that_loses_acknowledged_writes_is_invalid(tmp_path):
    log = MemLog(lose_every=25)
    out = run_test(_cfg(tmp_path, drain_time=3), make=lambda cfg: MemClient(log))
    assert out.valid is False and out.exit_code == 1
    assert {"lost-write", "inconsistent-offsets"} & set(out.results["bad_error_types"])
    assert "<failure" in (out.run_dir / "junit.xml").read_text()


class _HangOnce(MemClient):
    """Hangs on its first send until released: a client call that never returns in time."""

    hung = threading.Event()
    release = threading.Event()

    def invoke(self, op):
        if op.f == "send" and not self.hung.is_set():
            self.hung.set()
            self.release.wait(60)
        return super().invoke(op)


def test_a_hung_call_becomes_info_and_a_fresh_worker_takes_over(tmp_path, monkeypatch):
    from logquake import runner

    monkeypatch.setattr(runner, "CALL_TIMEOUT", 1.0)
    log = MemLog()
    try:
        out = run_test(_cfg(tmp_path, time_limit=3, concurrency=2), make=lambda cfg: _HangOnce(log))
    finally:
        _HangOnce.release.set()
    ops = load_history(out.run_dir / "history.jsonl")
    timeouts = [o for o in ops if o.get("error") == "timeout"]
    assert len(timeouts) == 1 and timeouts[0].type == "info" and timeouts[0].f == "send"
    p = timeouts[0].process
    assert not [o for o in ops if o.process == p and o.index > timeouts[0].index]
    assert [o for o in ops if o.process == p + 2 and o.type == "ok"]  # the successor went on
    assert out.valid is True


def test_sigusr1_appends_every_threads_stack_to_harness_log(tmp_path):
    """A run that seems stuck can be asked where it is: `kill -USR1 <pid>`."""
    import os
    import signal
    import time

    log = MemLog()
    sent = threading.Event()

    def poke() -> None:
        while not list((tmp_path / "results").glob("*/*/harness.log")):
            time.sleep(0.05)
        time.sleep(0.5)  # inside the main phase: the workers are running
        os.kill(os.getpid(), signal.SIGUSR1)
        sent.set()

    threading.Thread(target=poke, daemon=True).start()
    out = run_test(_cfg(tmp_path, time_limit=3), make=lambda cfg: MemClient(log))
    assert sent.is_set() and out.valid is True
    text = (out.run_dir / "harness.log").read_text()
    assert "Thread 0x" in text  # faulthandler's dump of each thread
    assert "runner.py" in text  # the workers' frames are in the runner
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # the run gave the signal back
