"""The offsets workload: its pure generator, and its client against real brokers.

The client tests commit and fetch through librdkafka against a LocalCluster. The last one
shows the whole chain (real client ops -> history.jsonl -> register model) can fail: a
committed offset really lost (the only node's data wiped) makes the verdict invalid, with
the checker's explanation, in the library call and in `logquake check`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from confluent_kafka import KafkaError, TopicPartition

from logquake.broker import LocalCluster
from logquake.crew import Recorder, Stats
from logquake.history import FAIL, INFO, INVOKE, OK, HistoryWriter, Op, load_history
from logquake.workloads import DRAIN, MAIN, Context, Validated
from logquake.workloads.offsets import (
    ConfluentOffsetsClient,
    KafkaPythonOffsetsClient,
    OffsetKeys,
    OffsetsGenerator,
    analyse,
    classify_commit,
)

KEYS = OffsetKeys(groups=2, partitions=2)


# -- the generator -------------------------------------------------------------------------


def _ops(gen: OffsetsGenerator, n: int, workers: int = 3) -> list[Op]:
    out = []
    for i in range(n):
        ctx = Context(worker=i % workers, process=i % workers, phase=MAIN)
        op = gen.op(ctx)
        assert op is not None
        out.append(op)
        gen.update(ctx, replace(op, type=OK))
    return out


def test_writes_are_unique_and_increasing_per_key_and_reads_name_a_key():
    ops = _ops(OffsetsGenerator(seed=3, keys=KEYS), 400)
    assert {op.f for op in ops} == {"read", "write"}
    for k in KEYS.keys:
        written = [op.value[1] for op in ops if op.f == "write" and op.value[0] == k]
        assert written == list(range(1, len(written) + 1)), (k, written)
    assert all(op.value[1] is None and op.value[0] in KEYS.keys for op in ops if op.f == "read")


def test_the_same_seed_gives_the_same_ops():
    assert _ops(OffsetsGenerator(seed=9, keys=KEYS), 100) == _ops(OffsetsGenerator(seed=9, keys=KEYS), 100)
    assert _ops(OffsetsGenerator(seed=9, keys=KEYS), 100) != _ops(OffsetsGenerator(seed=10, keys=KEYS), 100)


def test_the_drain_reads_every_key_once_and_retries_a_read_that_did_not_succeed():
    gen = OffsetsGenerator(seed=1, keys=KEYS)
    ctx = Context(worker=0, process=0, phase=DRAIN)
    read = []
    failed_once = False
    while (op := gen.op(ctx)) is not None:
        assert op.f == "read"
        k = op.value[0]
        if k == 1 and not failed_once:
            failed_once = True
            gen.update(ctx, replace(op, type=FAIL))
            continue
        read.append(k)
        gen.update(ctx, replace(op, type=OK, value=[k, None]))
        assert len(read) <= len(KEYS.keys)
    assert sorted(read) == KEYS.keys and failed_once


def test_keys_map_to_group_and_partition():
    assert KEYS.keys == [0, 1, 2, 3]
    assert [KEYS.group(k) for k in KEYS.keys] == ["lq-offsets-0", "lq-offsets-0", "lq-offsets-1", "lq-offsets-1"]
    assert [KEYS.topic_partition(k)[1] for k in KEYS.keys] == [0, 1, 0, 1]
    assert KEYS.describe()["3"] == "lq-offsets-1 lq-offsets/1"


def test_only_rejections_before_the_append_are_fail():
    assert classify_commit(KafkaError(KafkaError.ILLEGAL_GENERATION)) == FAIL
    assert classify_commit(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)) == FAIL
    # These may come after the offsets were appended (leadership moved, no answer in time).
    for code in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                 KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
        assert classify_commit(KafkaError(code)) == INFO, code
    assert classify_commit(None) == INFO


# -- the client against real brokers ----------------------------------------------------------


class _Driver:
    """Invokes ops on a client as the runner's workers do, recording both ends."""

    def __init__(self, client, recorder: Recorder) -> None:
        self.client, self.recorder, self.process = client, recorder, 0

    def __call__(self, f: str, k: int, v: int | None = None) -> Op:
        inv = self.recorder.record(Op(process=self.process, type=INVOKE, f=f, value=[k, v]))
        done = self.recorder.record(replace(self.client.invoke(inv), process=inv.process, f=inv.f))
        if done.type == INFO:
            self.process += 1
        return done


def _await_ok(do, f: str, k: int, v: int | None = None, timeout: float = 60.0) -> Op:
    """Repeat an op until it succeeds (a fresh cluster elects coordinators first)."""
    deadline = time.monotonic() + timeout
    while (done := do(f, k, v)).type != OK:
        assert time.monotonic() < deadline, f"{f} {k} {v} never succeeded: {done}"
        time.sleep(0.2)
    return done


@pytest.mark.parametrize("make", [ConfluentOffsetsClient, KafkaPythonOffsetsClient])
def test_commits_read_back_per_group_and_partition(tmp_path, make):
    with LocalCluster(n=3, base_dir=tmp_path / "c") as c:
        c.wait_ready(60)
        client = Validated(make(keys=KEYS, replication_factor=3))
        client.open(c.bootstrap_servers)
        recorder = Recorder(HistoryWriter(tmp_path / "history.jsonl"), Stats())
        try:
            do = _Driver(client, recorder)
            _await_ok(do, "write", 0, 1)
            assert do("read", 0).value == [0, 1]
            assert do("write", 0, 2).type == OK and do("write", 3, 1).type == OK
            # Same topic-partition, another group: its own register.
            assert do("read", 2).value == [2, None]
            assert do("read", 0).value == [0, 2] and do("read", 3).value == [3, 1]
            assert do("read", 1).value == [1, None]
        finally:
            client.close()
            recorder.close()
        res = analyse(load_history(tmp_path / "history.jsonl"), KEYS)
        assert res["valid"] is True, res
        assert res["linear"]["model"] == "register" and res["linear"]["keys"] == 4
        assert res["offsets"]["keys"]["2"] == "lq-offsets-1 lq-offsets/0"


def test_a_committed_offset_lost_makes_the_verdict_invalid(tmp_path):
    """Real ops, a real loss: the only broker's data wiped after an acknowledged commit."""
    path = tmp_path / "history.jsonl"
    recorder = Recorder(HistoryWriter(path), Stats())
    with LocalCluster(n=1, base_dir=tmp_path / "c") as c:
        c.wait_ready(60)
        client = ConfluentOffsetsClient(keys=KEYS, replication_factor=1, op_timeout=5.0)
        client.open(c.bootstrap_servers)
        do = _Driver(client, recorder)
        try:
            _await_ok(do, "write", 1, 7)
            assert do("read", 1).value == [1, 7]
            c.kill(1)
            # No broker: the commit's outcome is unknown after op_timeout, not a hang. Another
            # group's answer for the same partition and offset (as librdkafka delivers a late
            # one to on_commit) must not be taken for this commit's.
            client._on_commit("lq-offsets-0", None, [TopicPartition("lq-offsets", 0, 1)])
            # With no broker this commit can only time out: a 1 s op_timeout for it alone (read
            # when the op starts) rather than the 5 s the ops against a live broker keep.
            client.op_timeout = 1.0
            unknown = do("write", 2, 1)
            client.op_timeout = 5.0
            assert unknown.type == INFO and unknown.get("error") == "timeout", unknown
            shutil.rmtree(c.node_dir(1) / "data")
            c.start(1)
            c.wait_ready(60)
            lost = _await_ok(do, "read", 1)
        finally:
            client.close()
        recorder.close()
    assert lost.value == [1, None], lost
    res = analyse(load_history(path), KEYS)
    assert res["valid"] is False and res["bad_error_types"] == ["nonlinearizable"], res
    err = res["anomalies"]["nonlinearizable"]["errs"][0]
    assert err["key"] == 1 and err["op"]["description"] == "read -> nil", err
    assert "register in state 7" in err["explanation"], err["explanation"]
    # The stored history fails `logquake check` too, with the explanation.
    p = subprocess.run([sys.executable, "-m", "logquake", "check", "--model", "register", str(path)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "NOT linearizable" in p.stdout and "read -> nil cannot be placed" in p.stdout, p.stdout



# -- the runner --------------------------------------------------------------------------


def test_the_runner_runs_offsets_and_checks_them_as_registers(tmp_path):
    """`workload: offsets` through run_test: the generator, the client, the drain, the linear check."""
    from logquake.config import resolve_config
    from logquake.runner import StaticCluster, run_test

    with LocalCluster(n=3, base_dir=tmp_path / "c") as c:
        c.wait_ready(60)
        cfg = resolve_config(None, {
            "workload": "offsets", "backend": "external", "bootstrap_servers": c.bootstrap_servers.split(","),
            "time_limit": 4, "rate": 100, "concurrency": 3, "recovery_time": 0, "drain_time": 60, "seed": 5,
            "results_dir": str(tmp_path / "results"), "nodes": 3})
        out = run_test(cfg, cluster=lambda cfg, run_dir: StaticCluster(c.bootstrap_servers))
    assert out.valid is True, out.results
    assert out.run_dir.parent.name == "offsets"
    assert out.results["linear"]["model"] == "register" and out.results["linear"]["keys"] == 8
    ops = load_history(out.run_dir / "history.jsonl")
    assert {o.f for o in ops} == {"read", "write"}
    assert sum(1 for o in ops if o.f == "write" and o.type == OK) > 10
    # The drain: after the main phase every worker read every key successfully.
    last_write = max(o.index for o in ops if o.f == "write")
    for w in range(3):
        drained = {o.value[0] for o in ops if o.index > last_write and o.type == OK and o.f == "read"
                   and o.process % 3 == w}
        assert drained == set(range(8)), (w, drained)
