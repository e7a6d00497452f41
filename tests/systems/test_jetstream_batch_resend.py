"""A restarted producer resending an atomic batch it was unsure of, against real nats-server
processes (the pinned 2.15.1): the commit timed out and the batch was stored (the resend is
held: the stream knows its Msg-Ids), the leader died before reading the commit (the resend
reaches a new leader and stores the batch), and a resend after the duplicate window. Each history is then
judged by the checker. Start servers: run under the heavy lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from logquake.history import INFO, OK, Op
from logquake.systems.jetstream.client import JetStreamClient
from logquake.workloads.client import Validated
from logquake.workloads.generator import RESEND

from .jskit import local_lifecycle, running, stream_leader
from .test_jetstream_dedup import DEFAULT_WINDOW, _History, _new_leader

EXACTLY_ONCE = {"idempotence": True}  # a transactional producer is idempotent (guarantees.py)
SETTLE_S = 60.0  # a generous deadline for a cluster to answer again after a fault


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(local_lifecycle(tmp_path_factory.mktemp("jsr"))) as lc:
        yield lc


def _client(lc, node: str | None = None, *, op_timeout: float = 8.0, **kw: Any) -> Validated:
    c = Validated(JetStreamClient(replicas=3, op_timeout=op_timeout, txn=True, producer=EXACTLY_ONCE, **kw))
    c.open(lc.bootstrap() if node is None else f"nats://{lc.spec(node).address}:{lc.spec(node).client_port}")
    return c


def _sends(k: int, *values: int) -> list[list[Any]]:
    return [["send", k, v] for v in values]


def _until_ok(h: _History, c: Validated, process: int, f: str, value: Any, **extra: Any) -> Op:
    """The op run again (as a new process each time, as the runner does after info) until
    ok: a cluster just out of a fault answers 503 or nothing for a while."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        done = h.run(c, process, f, value, **extra)
        if done.type == OK:
            return done
        assert done.type != INFO or f != RESEND, done  # a resend ending info would be resent: not here
        assert time.monotonic() < deadline, f"{f} {value} never ok: {done}"
        process += 100
        time.sleep(0.5)


def _final_read(h: _History, c: Validated, process: int, k: int) -> list[list[int]]:
    """The drain's final read of key k, tried again while the cluster settles."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        try:
            return h.final_read(c, process, k)
        except AssertionError:
            assert time.monotonic() < deadline, f"key {k} could not be read to its end"
            process += 100
            time.sleep(0.5)


def _stream_and_its_leader(lc, h: _History, k: int) -> tuple[str, list[str]]:
    """Key k's stream made by an ok send of value 1 (allowing atomic publish): its leader and followers."""
    c = _client(lc)
    try:
        _until_ok(h, c, 0, "send", _sends(k, 1))
    finally:
        c.close()
    leader = stream_leader(lc, f"lq-{k}")
    return leader, [s.name for s in lc.specs if s.name != leader]


def _batch_left_unanswered(lc, h: _History, leader: str, k: int, values: tuple[int, ...], *, paused: list[str],
                           after: Callable[[str], Any]) -> Op:
    """The batch of `values` sent to key k's leader (process 1) while `paused` are paused, each
    then given to `after` (resume or kill). Its commit is unanswered: info. The producer then
    crashes (its client closed); it comes back as a new client and process.

    The batch goes to servers that have stopped: `pause` returns once every thread has (a
    leader still running a few ms after its SIGSTOP read the commit and proposed it, and the
    resend met its Msg-Id, in a loaded suite run)."""
    c = _client(lc, leader)
    try:
        try:
            for n in paused:
                lc.pause(n)
            orig = h.run(c, 1, "send", _sends(k, *values))
        finally:
            for n in paused:
                after(n)
        assert orig.type == INFO and "commit" in orig.get("error"), orig
        return orig
    finally:
        c.close()


def test_a_batch_whose_commit_timed_out_but_was_stored_is_held_when_resent(cluster):
    h = _History()
    leader, followers = _stream_and_its_leader(cluster, h, 1)
    # The leader stages a batch alone, but commits it only with a follower: with both
    # paused the commit gets no answer in time. Then they come back and it replicates.
    orig = _batch_left_unanswered(cluster, h, leader, 1, (2, 3), paused=followers, after=cluster.resume)
    c = _client(cluster)
    try:
        again = _until_ok(h, c, 2, RESEND, _sends(1, 2, 3), resend_of=orig.index)
        # The stream held the batch's Msg-Ids: nothing stored again, the offsets unknown.
        assert again.value == [["send", 1, [None, 2]], ["send", 1, [None, 3]]] and again.get("duplicate"), again
        assert _final_read(h, c, 3, 1) == [[1, 1], [2, 2], [3, 3]]
    finally:
        c.close()
    r = h.check("exactly-once")
    assert r["valid"] is True and r["error_types"] == [], r["anomalies"]
    assert r["final_read"]["acknowledged"] == 3


def test_a_batch_whose_leader_died_before_reading_its_commit_is_stored_by_the_resend(tmp_path):
    with running(local_lifecycle(tmp_path)) as lc:
        h = _History()
        leader, followers = _stream_and_its_leader(lc, h, 2)
        # A batch of one is its own commit; the paused leader never reads it, and dies.
        orig = _batch_left_unanswered(lc, h, leader, 2, (2,), paused=[leader], after=lc.kill)
        _new_leader(lc, "lq-2", leader, followers, timeout=SETTLE_S)
        c = _client(lc, followers[0], op_timeout=30.0)
        try:
            # The new leader never heard of the batch: the resend stores it, once.
            again = _until_ok(h, c, 2, RESEND, _sends(2, 2), resend_of=orig.index)
            assert again.value == [["send", 2, [2, 2]]] and not again.get("duplicate"), again
            assert _final_read(h, c, 3, 2) == [[1, 1], [2, 2]]
        finally:
            c.close()
        r = h.check("exactly-once")
        assert r["valid"] is True and r["error_types"] == [], r["anomalies"]


def test_a_batch_resent_after_the_duplicate_window_is_stored_again_and_reported_apart(cluster):
    h = _History()
    c = _client(cluster, duplicate_window="1s")  # the stream remembers ids for 1 s
    try:
        first = _until_ok(h, c, 0, "send", _sends(3, 1, 2))
        time.sleep(3.0)  # well past the window (the server forgets ids on a timer)
        again = _until_ok(h, c, 1, RESEND, _sends(3, 1, 2), resend_of=first.index)
        assert (first.value, again.value) == ([["send", 3, [1, 1]], ["send", 3, [2, 2]]],
                                              [["send", 3, [3, 1]], ["send", 3, [4, 2]]])
        assert _final_read(h, c, 2, 3) == [[1, 1], [2, 2], [3, 1], [4, 2]]
    finally:
        c.close()
    r = h.check("exactly-once", window=1.0)
    assert r["valid"] is True and r["error_types"] == ["duplicate-after-window"], r["anomalies"]
    assert sorted(e["value"] for e in r["anomalies"]["duplicate-after-window"]["errs"]) == [1, 2]
    # Had the window been the default, both second copies would be the server's fault.
    assert h.check("exactly-once", window=DEFAULT_WINDOW)["bad_error_types"] == ["duplicate"]
