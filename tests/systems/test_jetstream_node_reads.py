"""The final read from one node (System.node_reads) against real nats-server processes: what a
client connected to one node returns is that node's own store, checked by message tracing.

Start servers: run under the heavy lock.
"""

from __future__ import annotations

import time

import nats.errors
import pytest

from logquake.history import INFO, INVOKE, OK, Op
from logquake.systems.jetstream.client import JetStreamClient, node_bootstraps
from logquake.workloads.client import Validated

from .jskit import local_lifecycle, running, wait_ready

CATCH_UP_DEADLINE = 60.0  # generous: a loaded 2-core machine restarts a server slowly


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(local_lifecycle(tmp_path_factory.mktemp("js"))) as lc:
        yield lc


def _op(f, value, **extra) -> Op:
    return Op(process=0, type=INVOKE, f=f, value=value, extra=extra)


def _open(url: str, replicas: int = 3) -> Validated:
    # Msg-Id on every send: a send tried again (below) is never stored twice.
    c = Validated(JetStreamClient(replicas=replicas, op_timeout=4.0, producer={"idempotence": True}))
    c.open(url)
    return c


def _send_all(lc, k, values, replicas: int = 3) -> None:
    """Send each value until acknowledged (a killed leader's stream elects another meanwhile)."""
    c = _open(lc.bootstrap(), replicas)
    deadline = time.monotonic() + CATCH_UP_DEADLINE
    try:
        for v in values:
            while (done := c.invoke(_op("send", [["send", k, v]]))).type != OK:
                assert time.monotonic() < deadline, done
                time.sleep(0.2)
    finally:
        c.close()


def _node_read(url: str, node: str, k: int) -> tuple[Op, list[list[int]], Op]:
    """One final read of key k from `node`: the final assign, every value read, the last poll."""
    c = _open(url)
    try:
        assign = c.invoke(_op("assign", [k], seek_to_beginning=True, final=True, node=node))
        read: list[list[int]] = []
        poll = assign
        if assign.type == OK and assign.get("ends", {}).get(str(k)) is not None:
            end = assign.get("ends")[str(k)]
            while True:
                poll = c.invoke(_op("poll", [["poll"]], final=True, node=node))
                if poll.type != OK:
                    break
                read += poll.value[0][1].get(str(k), [])
                if poll.get("positions")[str(k)] >= end or not poll.value[0][1]:
                    break
        return assign, read, poll
    finally:
        c.close()


def test_the_client_names_every_node_and_reads_each_ones_store(cluster):
    nodes = node_bootstraps(cluster.bootstrap())
    assert sorted(nodes) == ["n1", "n2", "n3"]  # the names the servers give themselves
    _send_all(cluster, 40, range(1, 151))  # more than one batch
    for node, url in nodes.items():
        assign, read, poll = _node_read(url, node, 40)
        assert assign.type == OK and assign.get("ends") == {"40": 151} and assign.get("not_held") == [], assign
        assert read == [[i, i] for i in range(1, 151)], node
        assert poll.type == OK and poll.get("positions") == {"40": 151} and poll.get("node") == node


def test_a_read_meant_for_another_node_is_info_never_that_nodes_answer(cluster):
    _send_all(cluster, 41, [1])
    nodes = node_bootstraps(cluster.bootstrap())
    c = _open(nodes["n1"])
    try:
        assign = c.invoke(_op("assign", [41], seek_to_beginning=True, final=True, node="n2"))
        assert assign.get("ends") == {"41": None}  # n2's end cannot be asked through n1
        poll = c.invoke(_op("poll", [["poll"]], final=True, node="n2"))
        assert poll.type == INFO and "connected to n1, not n2" in poll.get("error"), poll
    finally:
        c.close()


def test_a_stream_without_a_replica_on_the_node_is_not_held_there(tmp_path):
    with running(local_lifecycle(tmp_path)) as lc:
        _send_all(lc, 42, [1], replicas=1)  # one replica: two nodes hold nothing of it
        nodes = node_bootstraps(lc.bootstrap())
        held = {}
        for node, url in nodes.items():
            assign, read, _ = _node_read(url, node, 42)
            held[node] = (assign.get("not_held"), assign.get("ends"), read)
        assert sorted(v for v in held.values() if v[0] == []) == [([], {"42": 2}, [[1, 1]])], held
        assert sorted(v for v in held.values() if v[0] == [42]) == [([42], {"42": 1}, [])] * 2, held


def test_a_node_stopped_during_sends_reads_a_prefix_of_the_log_and_catches_up(tmp_path):
    with running(local_lifecycle(tmp_path)) as lc:
        _send_all(lc, 43, range(1, 21))
        lc.kill("n3")
        _send_all(lc, 43, range(21, 221))  # a quorum of n1, n2 acknowledges these
        lc.start("n3")
        url = f"nats://{lc.spec('n3').address}:{lc.spec('n3').client_port}"
        seen, deadline = [], time.monotonic() + CATCH_UP_DEADLINE
        while time.monotonic() < deadline:
            try:
                assign, read, poll = _node_read(url, "n3", 43)
            except (OSError, TimeoutError, nats.errors.Error):  # not listening yet
                time.sleep(0.2)
                continue
            end = (assign.get("ends") or {}).get("43")
            if end is not None and poll.type == OK:
                seen.append(end)
                # Whatever n3 holds is a prefix of the log, at least up to the end it gave
                # (it may catch up further between its assign and its polls): never a hole.
                assert read == [[i, i] for i in range(1, len(read) + 1)] and len(read) >= end - 1, (end, len(read))
                if end == 221:
                    break
            time.sleep(0.2)
        assert seen and seen[-1] == 221, seen
        wait_ready(lc)
