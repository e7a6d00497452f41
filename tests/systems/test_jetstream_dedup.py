"""Msg-Id dedup against real nats-server processes: resends of a restarted producer, a resend
to a new stream leader, no Msg-Id, and a resend after the duplicate window; each history
then judged by the checker. Start servers: run under the heavy lock.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from logquake.checker import CheckOptions, check_history
from logquake.history import INVOKE, OK, Op
from logquake.systems.jetstream.client import JetStreamClient
from logquake.workloads.client import Validated
from logquake.workloads.generator import RESEND

from .jskit import local_lifecycle, running, stream_leader

DEFAULT_WINDOW = 120.0  # the stream's duplicate window when its config names none


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(local_lifecycle(tmp_path_factory.mktemp("js"))) as lc:
        yield lc


class _History:
    """Ops as the runner records them: numbered, timed from the start, both ends of each."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.t0 = time.monotonic_ns()

    def _record(self, op: Op) -> Op:
        from dataclasses import replace

        op = replace(op, index=len(self.ops), time=time.monotonic_ns() - self.t0)
        self.ops.append(op)
        return op

    def run(self, client: Validated, process: int, f: str, value: Any, **extra: Any) -> Op:
        inv = self._record(Op(process=process, type=INVOKE, f=f, value=value, extra=extra))
        return self._record(client.invoke(inv))

    def final_read(self, client: Validated, process: int, k: int) -> list[list[int]]:
        """The drain's final read of key k (assign with its end, then polls up to it)."""
        assert self.run(client, process, "assign", [k], seek_to_beginning=True, final=True).type == OK
        got: list[list[int]] = []
        for _ in range(20):
            done = self.run(client, process, "poll", [["poll"]], final=True)
            assert done.type == OK, done
            read = done.value[0][1].get(str(k), [])
            if not read:
                return got
            got.extend(read)
        raise AssertionError(f"key {k} never read to its end")

    def check(self, guarantee: str = "idempotent", window: float | None = DEFAULT_WINDOW) -> dict[str, Any]:
        return check_history(self.ops, CheckOptions(guarantee=guarantee, duplicate_window=window))


def _client(lc, *, node: str | None = None, op_timeout: float = 8.0, **kw: Any) -> Validated:
    c = Validated(JetStreamClient(replicas=3, op_timeout=op_timeout, **kw))
    c.open(lc.bootstrap() if node is None else f"nats://{lc.spec(node).address}:{lc.spec(node).client_port}")
    return c


IDEMPOTENT = {"idempotence": True}


def test_a_restarted_producer_resending_the_same_msg_id_stores_it_once(cluster):
    h = _History()
    c = _client(cluster, producer=IDEMPOTENT)
    try:
        assert h.run(c, 0, "send", [["send", 1, 1]]).type == OK
        first = h.run(c, 0, "send", [["send", 1, 2]])
    finally:
        c.close()  # the producer crashes; it comes back as a new client and process
    c = _client(cluster, producer=IDEMPOTENT)
    try:
        again = h.run(c, 1, RESEND, [["send", 1, 2]], resend_of=first.index)
        assert (first.type, again.type) == (OK, OK)
        # The server knew the Msg-Id: it acked the original sequence and stored nothing.
        assert again.value == first.value == [["send", 1, [2, 2]]] and again.get("duplicate") is True
        assert h.final_read(c, 2, 1) == [[1, 1], [2, 2]]
    finally:
        c.close()
    r = h.check()
    assert r["valid"] is True and r["error_types"] == [], r["anomalies"]


def test_without_a_msg_id_the_resend_is_stored_again_and_checked_as_a_duplicate(cluster):
    h = _History()
    c = _client(cluster, producer={"idempotence": False})
    try:
        first = h.run(c, 0, "send", [["send", 2, 1]])
    finally:
        c.close()
    c = _client(cluster, producer={"idempotence": False})
    try:
        again = h.run(c, 1, RESEND, [["send", 2, 1]], resend_of=first.index)
        assert (first.value, again.value) == ([["send", 2, [1, 1]]], [["send", 2, [2, 1]]])
        assert again.get("duplicate") is None
        assert h.final_read(c, 2, 2) == [[1, 1], [2, 1]]
    finally:
        c.close()
    r = h.check()
    assert r["bad_error_types"] == ["duplicate"], r["anomalies"]
    (e,) = r["anomalies"]["duplicate"]["errs"]
    assert (e["key"], e["value"], e["offsets"], e["copies_allowed"]) == (2, 1, [1, 2], 1)
    # What at-least-once allows.
    assert h.check("at-least-once")["valid"] is True


def test_a_resend_after_the_duplicate_window_is_stored_again_and_reported_apart(cluster):
    h = _History()
    c = _client(cluster, producer=IDEMPOTENT, duplicate_window="1s")  # the stream remembers ids for 1 s
    try:
        first = h.run(c, 0, "send", [["send", 3, 1]])
        time.sleep(3.0)  # well past the window (the server forgets ids on a timer)
        again = h.run(c, 1, RESEND, [["send", 3, 1]], resend_of=first.index)
        assert (first.value, again.value) == ([["send", 3, [1, 1]]], [["send", 3, [2, 1]]])
        assert h.final_read(c, 2, 3) == [[1, 1], [2, 1]]
    finally:
        c.close()
    r = h.check(window=1.0)
    assert r["valid"] is True and r["error_types"] == ["duplicate-after-window"], r["anomalies"]
    (e,) = r["anomalies"]["duplicate-after-window"]["errs"]
    assert (e["value"], e["offsets"], e["copies_allowed"]) == (1, [1, 2], 2) and e["attempts"][-1] - e["attempts"][0] > 1
    # Had the window been the default, that second copy would be the server's fault.
    assert h.check(window=DEFAULT_WINDOW)["bad_error_types"] == ["duplicate"]


def _new_leader(lc, stream: str, old: str, among: list[str], timeout: float = 60.0) -> str:
    """The stream's leader once one of `among` leads it (asked of `among[0]`'s monitoring)."""
    deadline = time.monotonic() + timeout
    while True:
        jsz = {}
        try:
            jsz = lc.monitoring(among[0], "jsz?streams=true")
        except (OSError, ValueError):
            pass
        for account in jsz.get("account_details") or []:
            for st in account.get("stream_detail") or []:
                leader = (st.get("cluster") or {}).get("leader")
                if st["name"] == stream and leader in among and leader != old:
                    return leader
        assert time.monotonic() < deadline, f"no new leader for {stream} within {timeout:.0f} s"
        time.sleep(0.2)


def test_a_resend_to_a_new_stream_leader_after_the_old_one_died_is_stored_once(tmp_path):
    with running(local_lifecycle(tmp_path)) as lc:
        h = _History()
        c = _client(lc, producer=IDEMPOTENT)
        try:
            assert h.run(c, 0, "send", [["send", 4, 1]]).type == OK
            first = h.run(c, 0, "send", [["send", 4, 2]])
            assert first.value == [["send", 4, [2, 2]]]
        finally:
            c.close()
        leader = stream_leader(lc, "lq-4")
        lc.kill(leader)
        survivors = [s.name for s in lc.specs if s.name != leader]
        new = _new_leader(lc, "lq-4", leader, survivors)
        # A restarted producer reaching the new leader (retrying while it starts serving).
        c = _client(lc, node=survivors[0], producer=IDEMPOTENT, op_timeout=30.0)
        try:
            again = h.run(c, 1, RESEND, [["send", 4, 2]], resend_of=first.index)
            assert again.type == OK, again
            # The new leader rebuilt the Msg-Ids from the replicated log: no second copy.
            assert again.value == first.value and again.get("duplicate") is True, (new, again)
            assert h.final_read(c, 2, 4) == [[1, 1], [2, 2]]
        finally:
            c.close()
        r = h.check()
        assert r["valid"] is True and r["error_types"] == [], r["anomalies"]


def test_a_run_is_checked_against_its_streams_window_and_resends_only_when_idempotent():
    from logquake.config import resolve_config
    from logquake.guarantees import apply_guarantee
    from logquake.systems.base import get_system
    from logquake.workloads.queue import make_generator

    def cfg(**values: Any):
        return apply_guarantee(resolve_config(None, values).with_seed())

    window = get_system("jetstream").dedup_window
    assert window is not None
    assert window(cfg(system="jetstream", jetstream={"duplicate_window": "1m30s"})) == 90.0
    assert window(cfg(system="jetstream")) == DEFAULT_WINDOW
    assert get_system("kafka").dedup_window is None  # dedup per producer session: no resends, no window
    assert make_generator(cfg(system="jetstream", guarantee="idempotent")).resend
    assert not make_generator(cfg(system="jetstream", guarantee="at-least-once")).resend
    assert make_generator(cfg(system="jetstream", guarantee="exactly-once")).resend  # a batch whole
    assert not make_generator(cfg(system="kafka", guarantee="idempotent")).resend
