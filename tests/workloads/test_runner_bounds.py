"""A run ends, with its verdict, whatever its clients do: bounded phases over an in-memory log.

A hung run must also say where it hangs: past a phase's bound every thread's stack goes to
harness.log, written by faulthandler without the GIL, so even a library call that holds the
GIL (confluent-kafka's assign waits on librdkafka holding it) cannot keep it out.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest

from logquake import diagnostics, runner
from logquake.crew import Watchdog, Worker
from logquake.history import Op, load_history
from logquake.runner import StaticCluster
from logquake.runner import run_test as _run_test

from .memlog import MemClient, MemLog
from .test_runner_memlog import _cfg, run_test


def _hold_the_gil() -> None:
    # One regex match with catastrophic backtracking: seconds inside C (4.5 s on a quiet
    # machine, longer under load), GIL held throughout.
    re.match(r"(a+)+$", "a" * 27 + "b")


class _DrainReadsNothing(MemClient):
    """Reads nothing once the drain has begun (as behind a last stable offset that never moves)."""

    def invoke(self, op):
        done = super().invoke(op)
        if op.f == "assign" and op.get("seek_to_beginning"):
            self.assigned = []  # its polls from here on find nothing
        return done


class _DrainHoldsTheGil(_DrainReadsNothing):
    """Its first drain poll holds the GIL for seconds, as a stuck C-library call would, and
    reads nothing: were it to read everything once the GIL is back, whether the drain counts
    as complete would depend on how long the regex took against the runner's join timeout."""

    def __init__(self, log: MemLog) -> None:
        super().__init__(log)
        self.draining = False

    def invoke(self, op):
        if op.f == "assign" and op.get("seek_to_beginning"):
            self.draining = True
        elif self.draining and op.f == "poll":
            self.draining = False
            _hold_the_gil()
        return super().invoke(op)


@pytest.mark.timeout(120)
def test_a_drain_past_its_bound_dumps_every_stack_even_while_the_gil_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "CALL_TIMEOUT", 2.0)
    monkeypatch.setattr(runner, "BOUND_SLACK", -2.0)  # drain bound: 1 + 2 - 2.0 = 1 s
    monkeypatch.setattr(diagnostics, "DUMP_GRACE", 0.5)  # the C dump 1.5 s into the drain
    log = MemLog()
    out = run_test(_cfg(tmp_path, time_limit=1, drain_time=1, concurrency=1), make=lambda cfg: _DrainHoldsTheGil(log))
    text = (out.run_dir / "harness.log").read_text()
    assert "drain bounded at" in text
    dump = text[text.index("phase drain"):]
    # The Python dump could not run (the GIL was held): faulthandler's took over from C,
    # written while the worker was still inside the call that held the GIL, naming it.
    assert "Timeout (0:00:01.5" in dump and "Thread 0x" in dump, dump[:3000]
    assert "in _hold_the_gil" in dump, dump[:3000]
    # And the run still ended with its verdict: the stuck drain read nothing, so unknown.
    assert out.results["drain"]["complete"] is False and out.valid == "unknown"


class _CloseNeverReturns(MemClient):
    release = threading.Event()

    def close(self) -> None:
        self.release.wait()


@pytest.mark.timeout(120)
def test_a_client_close_that_never_returns_does_not_hang_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "CLOSE_TIMEOUT", 1.0)
    log = MemLog()
    try:
        out = run_test(_cfg(tmp_path, time_limit=1, drain_time=3), make=lambda cfg: _CloseNeverReturns(log))
    finally:
        _CloseNeverReturns.release.set()
    assert out.valid is True
    text = (out.run_dir / "harness.log").read_text()
    assert "still closing after 1 s: left behind" in text
    assert (out.run_dir / "results.json").is_file()


def test_a_drain_that_cannot_read_everything_gives_unknown_not_a_verdict_on_unread_values(tmp_path):
    log = MemLog()
    out = run_test(_cfg(tmp_path, time_limit=1, drain_time=1, concurrency=2), make=lambda cfg: _DrainReadsNothing(log))
    assert out.results["drain"] == {"complete": False, "workers_short": [0, 1]}
    assert out.valid == "unknown" and out.exit_code == runner.EXIT_UNKNOWN
    assert "drain did not read" in out.results["error"]
    assert "did not read every key to the end of its log" in (out.run_dir / "harness.log").read_text()
    assert any(o.f == "poll" and o.type == "ok" for o in load_history(out.run_dir / "history.jsonl"))


def test_a_complete_drain_is_noted_and_leaves_the_verdict_alone(tmp_path):
    log = MemLog()
    out = run_test(_cfg(tmp_path, time_limit=1), make=lambda cfg: MemClient(log))
    assert out.results["drain"] == {"complete": True, "workers_short": []}
    assert out.valid is True


class _OnlyWorkerZeroDrains(_DrainReadsNothing):
    """Worker 0's clients read the drain through; the other workers' read nothing."""

    def open(self, bootstrap_servers: str) -> None:
        self.worker = threading.current_thread().name  # the runner opens it on the worker's thread

    def invoke(self, op):
        return MemClient.invoke(self, op) if self.worker == "worker-0" else super().invoke(op)


def test_one_worker_that_read_everything_makes_the_drain_complete(tmp_path):
    log = MemLog()
    out = run_test(_cfg(tmp_path, time_limit=1, drain_time=2, concurrency=2),
                   make=lambda cfg: _OnlyWorkerZeroDrains(log))
    assert out.results["drain"] == {"complete": True, "workers_short": [1]}
    assert out.valid is True


def test_lost_writes_after_a_drain_no_worker_got_through_are_unknown(tmp_path):
    # lost-write needs a final read from the beginning: a value a failed op polled is skipped
    # by every later ok poll of that consumer (runner.NEEDS_COMPLETE_RUN).
    results = runner.with_drain({"valid": False, "bad_error_types": ["lost-write", "unseen"]},
                                 {"complete": False, "workers_short": [0]})
    assert results["valid"] == "unknown" and "lost values may only be unread" in results["error"]


class _Lifecycle:
    """The lab lifecycle's view the runner asks: is a broker's process up, where is its output."""

    def __init__(self, tmp_path, dead: str) -> None:
        self.dir, self.dead = tmp_path, dead
        (tmp_path / dead).mkdir()
        (tmp_path / dead / "broker.out").write_text("Traceback ...\nTypeError: 'type' object is not iterable\n")

    def is_up(self, node: str) -> bool:
        return node != self.dead

    def kill(self, node: str) -> bool:
        return False

    def logs(self, node: str) -> list[str]:
        return [str(self.dir / node / "broker.out")]

    def spec(self, node: str):
        return SimpleNamespace(path=lambda leaf: str(self.dir / node / leaf))


def test_a_broker_dead_after_the_heal_makes_the_verdict_unknown_naming_it(tmp_path):
    # A drain against a dead cluster reads nothing and passes for a verdict (seen: brokers that
    # died at restart on a half-saved source file).
    log = MemLog()
    lab = StaticCluster("memory:0", nodes=["n1", "n2", "n3"])
    lab.lifecycle = _Lifecycle(tmp_path, dead="n2")
    out = _run_test(_cfg(tmp_path, time_limit=1), make=lambda cfg: MemClient(log), cluster=lambda cfg, run_dir: lab)
    assert out.results["drain"]["brokers_down"] == {"n2": "TypeError: 'type' object is not iterable"}
    assert out.valid == "unknown" and out.exit_code == runner.EXIT_UNKNOWN
    assert "n2 (TypeError" in out.results["error"]
    assert "brokers down after the heal" in (out.run_dir / "harness.log").read_text()


class _SlowCall:
    """A client whose calls outlast the watchdog's timeout."""

    def __init__(self) -> None:
        self.invoked: list[int] = []

    def invoke(self, op):
        self.invoked.append(op.process)
        time.sleep(0.5)
        return runner.complete(op, "ok", op.value)


def test_a_call_that_returns_while_the_watchdog_takes_it_ends_its_worker(tmp_path):
    # The watchdog has taken the expired call but not yet marked the worker abandoned (its
    # hand-over is held open here): the worker must still stop, not invoke another op under
    # the same process while the timed-out one is in flight (an unreadable history).
    handing_over = threading.Event()
    release = threading.Event()

    def on_expire(w, ctx, inv):
        handing_over.set()
        release.wait(10)

    client = _SlowCall()
    gen = SimpleNamespace(op=lambda ctx: Op(process=ctx.process, type="invoke", f="poll", value=[["poll"]]),
                          update=lambda ctx, op: None, fresh_client=lambda i: None)
    crew = SimpleNamespace(watchdog=Watchdog(0.05, on_expire), recorder=SimpleNamespace(record=lambda op: op),
                           gen=gen, gen_lock=threading.Lock(), cfg=SimpleNamespace(concurrency=1))
    w = Worker(0, 0, crew)
    w.client = client
    try:
        t = threading.Thread(target=w.run, args=("main", threading.Event(), None), daemon=True)
        t.start()
        assert handing_over.wait(10)
        t.join(5)
        assert not t.is_alive() and w.abandoned
        assert client.invoked == [0]
    finally:
        release.set()
        crew.watchdog.close()


class _DrainSleeps(_DrainReadsNothing):
    """Its first drain poll sleeps past the drain's bound, the GIL free meanwhile."""

    def invoke(self, op):
        if op.f == "poll" and not self.assigned and self.pos:
            self.pos = {}
            time.sleep(2.5)
        return super().invoke(op)


@pytest.mark.timeout(120)
def test_a_drain_past_its_bound_with_the_gil_free_is_dumped_from_python(tmp_path, monkeypatch):
    # The safe dump (under the GIL, threads cannot change their frames while it reads them);
    # faulthandler's C dump, which can crash the process while threads run, is not made.
    monkeypatch.setattr(runner, "CALL_TIMEOUT", 2.0)
    monkeypatch.setattr(runner, "BOUND_SLACK", -2.0)  # drain bound: 1 s
    monkeypatch.setattr(diagnostics, "DUMP_GRACE", 0.5)
    out = run_test(_cfg(tmp_path, time_limit=1, drain_time=1, concurrency=1), make=lambda cfg: _DrainSleeps(MemLog()))
    dump = (out.run_dir / "harness.log").read_text()
    dump = dump[dump.index("phase drain"):]
    assert "Timeout (drain still running after its bound of 1.0 s)!" in dump, dump[:3000]
    assert "[worker-0]" in dump and "in invoke" in dump, dump[:3000]  # the sleeping poll, named
    assert "Timeout (0:00:" not in dump, dump[:3000]


class _PollHoldsTheGilWhileUsr2Arrives(MemClient):
    """Its first poll asks a shell to send SIGUSR2 in 1 s, then holds the GIL for seconds."""

    def __init__(self, log: MemLog) -> None:
        super().__init__(log)
        self.killer: subprocess.Popen | None = None

    def invoke(self, op):
        if op.f == "poll" and self.killer is None:
            self.killer = subprocess.Popen(["sh", "-c", f"sleep 1; kill -USR2 {os.getpid()}"])
            _hold_the_gil()
        return super().invoke(op)


@pytest.mark.timeout(120)
def test_sigusr2_writes_the_c_dump_while_a_call_holds_the_gil(tmp_path):
    # What `kill -USR1` cannot do then (its Python handler waits for the GIL).
    client = _PollHoldsTheGilWhileUsr2Arrives(MemLog())
    out = run_test(_cfg(tmp_path, time_limit=2, concurrency=1), make=lambda cfg: client)
    client.killer.wait(10)
    dump = (out.run_dir / "harness.log").read_text()
    assert "in _hold_the_gil" in dump and "Thread 0x" in dump, dump[:3000]
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL  # the run gave the signal back
