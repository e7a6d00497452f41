"""The flip-flop schedule, simulated under fixed seeds, and the scheduler thread over a real in-memory nemesis."""

from __future__ import annotations

import random
import statistics
import threading

from logquake.history import Op
from logquake.nemesis import FlipFlop, NemesisScheduler, simulate


def test_simulation_alternates_start_stop_of_the_same_fault():
    actions = simulate(["partition", "kill", "pause"], interval=10, seed=42, until=3600)
    assert len(actions) > 100
    for i, a in enumerate(actions):
        assert a.kind == ("start" if i % 2 == 0 else "stop")
        if a.kind == "stop":
            assert a.fault == actions[i - 1].fault
    assert [a.at for a in actions] == sorted(a.at for a in actions)
    assert {a.fault for a in actions} == {"partition", "kill", "pause"}


def test_mean_interval_is_the_configured_one():
    actions = simulate(["partition"], interval=10, seed=1, until=100_000)
    times = [0.0] + [a.at for a in actions]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert 9.0 < statistics.mean(gaps) < 11.0
    assert all(0 <= g < 20 for g in gaps)


def test_same_seed_same_schedule_other_seed_other_schedule():
    a = simulate(["partition", "kill"], interval=5, seed=3, until=600)
    assert a == simulate(["partition", "kill"], interval=5, seed=3, until=600)
    assert a != simulate(["partition", "kill"], interval=5, seed=4, until=600)


def test_no_faults_means_no_actions():
    assert simulate([], interval=5, seed=3, until=600) == []
    assert FlipFlop([], interval=1, rng=random.Random(0)).next_action() is None


class RecordingNemesis:
    """A real (in-memory) Nemesis: keeps which fault is on, fails where told to."""

    def __init__(self, faults=("partition", "kill"), *, fail_heal=False, fail_start=()):
        self.faults = faults
        self.calls: list[str] = []
        self.on: str | None = None
        self.fail_heal, self.fail_start = fail_heal, set(fail_start)

    def setup(self):
        pass

    def start(self, spec):
        self.calls.append(f"start {spec}")
        if spec in self.fail_start:
            raise RuntimeError(f"cannot start {spec}")
        self.on = spec
        return f"{spec} on"

    def stop(self):
        self.calls.append("stop")
        was, self.on = self.on, None
        return f"{was} off"

    def heal(self):
        self.calls.append("heal")
        self.on = None
        if self.fail_heal:
            raise RuntimeError("iptables vanished")
        return "healed"

    def teardown(self):
        pass


def _recorder():
    ops: list[Op] = []
    lock = threading.Lock()

    def record(op: Op) -> Op:
        with lock:
            op = Op(index=len(ops), time=len(ops), process=op.process, type=op.type, f=op.f, value=op.value,
                    extra=op.extra)
            ops.append(op)
        return op

    return ops, record


def _wait(cond, timeout=30.0):
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")


def test_scheduler_records_every_start_and_stop_and_heals():
    nem = RecordingNemesis()
    ops, record = _recorder()
    s = NemesisScheduler(nem, interval=0.005, rng=random.Random(9), record=record)
    s.start()
    _wait(lambda: len(ops) >= 6)
    assert s.stop_and_heal() is True
    assert all(o.process == "nemesis" and o.type == "info" for o in ops)
    fs = [o.f for o in ops]
    assert fs[-1] == "heal" and ops[-1].value == "healed"
    body = fs[:-1]
    if body[-1].startswith("start"):
        raise AssertionError("a running fault must be stopped before the final heal")
    for i, f in enumerate(body):
        assert f.startswith("start-" if i % 2 == 0 else "stop-")
        if i % 2:
            assert f[len("stop-"):] == body[i - 1][len("start-"):]
    assert nem.on is None and nem.calls[-1] == "heal"


def test_failed_heal_is_recorded_and_never_raises():
    nem = RecordingNemesis(fail_heal=True)
    ops, record = _recorder()
    s = NemesisScheduler(nem, interval=1000, rng=random.Random(1), record=record)
    s.start()
    assert s.stop_and_heal() is False
    assert ops[-1].f == "heal" and "iptables vanished" in ops[-1].get("error")
    assert any("heal" in e for e in s.errors)


def test_failed_start_is_history_not_a_crash():
    nem = RecordingNemesis(faults=("kill",), fail_start={"kill"})
    ops, record = _recorder()
    s = NemesisScheduler(nem, interval=0.005, rng=random.Random(2), record=record)
    s.start()
    _wait(lambda: len(ops) >= 3)
    s.stop_and_heal()
    assert ops[0].f == "start-kill" and "cannot start kill" in ops[0].get("error")


def test_no_fault_starts_after_the_time_limit():
    # A 20 s main phase: the schedule used to go on while the workers' last calls returned.
    for seed in range(50):
        actions = simulate(["partition", "kill"], interval=10, seed=seed, until=600, time_limit=20)
        assert all(a.at < 20 for a in actions if a.kind == "start"), seed
        assert not actions or actions[-1].kind == "stop"  # the one running at the limit still ends
    assert simulate(["partition"], interval=10, seed=1, until=600) != simulate(
        ["partition"], interval=10, seed=1, until=600, time_limit=20)


def test_the_scheduler_thread_ends_at_its_time_limit():
    nem = RecordingNemesis()
    ops, record = _recorder()
    s = NemesisScheduler(nem, interval=0.01, rng=random.Random(9), record=record, until=0.2)
    s.start()
    assert s._thread is not None
    s._thread.join(5.0)
    assert not s._thread.is_alive() and nem.on is None
    assert ops and ops[-1].f.startswith("stop-")
