"""The nats-py adapter against real nats-server processes: offsets, dedup, fail/info, reads.

Start servers: run under the heavy lock.
"""

from __future__ import annotations

import asyncio
import contextlib

import nats
import pytest

from logquake.history import FAIL, INFO, INVOKE, OK, Op
from logquake.systems.jetstream.client import GROUP, JetStreamClient, stream_name
from logquake.workloads.client import Validated

from .jskit import local_lifecycle, running, stream_leader


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(local_lifecycle(tmp_path_factory.mktemp("js"))) as lc:
        yield lc


def _client(lc, *, node: str | None = None, **kw) -> Validated:
    """A client of the cluster, or of `node` alone."""
    c = Validated(JetStreamClient(replicas=3, op_timeout=4.0, **kw))
    if node is None:
        c.open(lc.bootstrap())
    else:
        c.open(f"nats://{lc.spec(node).address}:{lc.spec(node).client_port}")
    return c


def _op(f, value, **extra) -> Op:
    return Op(process=0, type=INVOKE, f=f, value=value, extra=extra)


def _send(c, k, v) -> Op:
    return c.invoke(_op("send", [["send", k, v]]))


def _read_all(c, k) -> list[list[int]]:
    assert c.invoke(_op("assign", [k], seek_to_beginning=True)).type == OK
    done = c.invoke(_op("poll", [["poll"]]))
    assert done.type == OK, done
    return done.value[0][1].get(str(k), [])


def test_offsets_are_stream_sequences_and_polls_read_them_in_order(cluster):
    c = _client(cluster)
    try:
        sent = [_send(c, 1, v) for v in (10, 11, 12)]
        assert [(d.type, d.value) for d in sent] == [(OK, [["send", 1, [i, v]]]) for i, v in ((1, 10), (2, 11), (3, 12))]
        assert _read_all(c, 1) == [[1, 10], [2, 11], [3, 12]]
        # The position moved past what was read: the next poll reads only what is new.
        _send(c, 1, 13)
        assert c.invoke(_op("poll", [["poll"]])).value == [["poll", {"1": [[4, 13]]}]]
        assert c.invoke(_op("poll", [["poll"]])).value == [["poll", {}]]
    finally:
        c.close()


def test_a_poll_out_of_time_returns_what_it_read_and_the_next_goes_on(cluster):
    # A loaded machine cannot read a whole batch within the op: the poll returns the part it
    # read (here, with no budget at all, one message per key) rather than time out with none.
    c = _client(cluster)
    try:
        for k in (5, 6):
            assert all(_send(c, k, v).type == OK for v in (1, 2, 3))
        c.client.read_budget = 0.0
        assert c.invoke(_op("assign", [5, 6], seek_to_beginning=True)).type == OK
        polls = [c.invoke(_op("poll", [["poll"]], final=True)) for _ in range(4)]
        assert [p.type for p in polls] == [OK] * 4, polls
        assert [p.value[0][1] for p in polls] == [
            {"5": [[i, i]], "6": [[i, i]]} for i in (1, 2, 3)] + [{}]
        assert [p.get("positions") for p in polls] == [{"5": i, "6": i} for i in (2, 3, 4, 4)]
    finally:
        c.close()


def test_the_same_msg_id_twice_is_stored_once_and_acked_with_the_original_sequence(cluster):
    c = _client(cluster, producer={"idempotence": True})
    try:
        _send(c, 2, 1)
        first, again = _send(c, 2, 2), _send(c, 2, 2)  # a retry: same key, same value, same Msg-Id
        assert first.value == again.value == [["send", 2, [2, 2]]]
        assert _read_all(c, 2) == [[1, 1], [2, 2]]
    finally:
        c.close()


def test_without_idempotence_a_retried_value_is_stored_twice(cluster):
    c = _client(cluster, producer={"idempotence": False})
    try:
        assert [_send(c, 3, 7).value for _ in range(2)] == [[["send", 3, [1, 7]]], [["send", 3, [2, 7]]]]
        assert _read_all(c, 3) == [[1, 7], [2, 7]]
    finally:
        c.close()


def test_subscribers_share_a_durable_consumer(cluster):
    c = _client(cluster)
    try:
        _send(c, 4, 1)
        _send(c, 4, 2)
        assert c.invoke(_op("subscribe", [4])).type == OK
        done = c.invoke(_op("poll", [["poll"]]))
        assert done.type == OK and done.value == [["poll", {"4": [[1, 1], [2, 2]]}]]
        # Acked after the ok poll: the group does not deliver them again.
        assert c.invoke(_op("poll", [["poll"]])).value == [["poll", {}]]
        # And assign leaves the group for reads by position.
        assert _read_all(c, 4) == [[1, 1], [2, 2]]
    finally:
        c.close()


def test_a_subscribers_poll_marks_the_messages_the_group_delivered_again(cluster):
    # Another member of the group (a raw nats-py pull subscriber) is handed 1 and does not
    # ack it: the client's poll gets 2 alone, a first delivery, and nothing is marked. Once
    # the member gives 1 back (nak), the group delivers it again and the poll says so: the
    # queue check lets a poll step back only to such a message.
    c = _client(cluster)
    try:
        _send(c, 8, 1)
        assert c.invoke(_op("subscribe", [8])).type == OK
        member = _GroupMember(cluster.bootstrap(), 8)
        try:
            held = member.take_one()
            _send(c, 8, 2)
            first = c.invoke(_op("poll", [["poll"]]))
            assert first.type == OK and first.value == [["poll", {"8": [[2, 2]]}]]
            assert first.get("redelivered") is None
            member.give_back(held)
            again = c.invoke(_op("poll", [["poll"]]))
            assert again.type == OK and again.value == [["poll", {"8": [[1, 1]]}]]
            assert again.get("redelivered") == {"8": [1]}
        finally:
            member.close()
    finally:
        c.close()


class _GroupMember:
    """A raw nats-py pull subscriber bound to the group's durable consumer of key k's stream."""

    def __init__(self, urls: str, k: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(urls.split(",")))
        self.sub = self.loop.run_until_complete(
            self.nc.jetstream().pull_subscribe_bind(durable=GROUP, stream=stream_name(k)))

    def take_one(self):
        (msg,) = self.loop.run_until_complete(self.sub.fetch(batch=1, timeout=5))
        return msg

    def give_back(self, msg) -> None:
        self.loop.run_until_complete(msg.nak())

    def close(self) -> None:
        self.loop.run_until_complete(self.nc.close())
        self.loop.close()


@contextlib.contextmanager
def _stream_on_three(tmp_path, k):
    """A fresh 3-node cluster holding stream lq-<k> with one message; yields it and the stream's leader."""
    with running(local_lifecycle(tmp_path)) as lc:
        c = _client(lc)
        try:
            assert _send(c, k, 1).type == OK
        finally:
            c.close()
        yield lc, stream_leader(lc, f"lq-{k}")


def _send_alone(lc, node, k, v) -> Op:
    c = _client(lc, node=node)
    try:
        return _send(c, k, v)
    finally:
        c.close()


def test_a_send_in_flight_when_its_followers_die_is_info_not_fail(tmp_path):
    with _stream_on_three(tmp_path, 5) as (lc, leader):
        for s in lc.specs:
            if s.name != leader:
                lc.kill(s.name)
        # The leader takes the message but can never get it replicated: whether it stored
        # it is unknown, and that is what the history must say.
        done = _send_alone(lc, leader, 5, 2)
        assert done.type == INFO and done.value == [["send", 5, 2]], done


def test_a_send_no_server_listens_for_is_fail(tmp_path):
    with _stream_on_three(tmp_path, 6) as (lc, leader):
        follower, survivor = [s.name for s in lc.specs if s.name != leader]
        lc.kill(leader)
        lc.kill(follower)
        # The survivor is a follower without a quorum to elect itself: it has no subscriber
        # for lq.6 and answers no-responders, so nothing was stored.
        done = _send_alone(lc, survivor, 6, 2)
        assert done.type == FAIL and "NoStreamResponseError" in done.get("error"), done


def test_a_connect_given_up_on_a_paused_server_closes_its_socket(tmp_path, monkeypatch):
    """A paused server accepts the TCP connection and never sends INFO: each connect gives up,
    and each must close the socket it opened (the process's descriptors stay as they were)."""
    import gc
    import os
    import time

    from logquake.systems.jetstream import client as jsclient

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def give_up() -> None:
        c = JetStreamClient(replicas=1, op_timeout=4.0)
        with pytest.raises(TimeoutError):
            c.open(url)
        c.close()

    monkeypatch.setattr(jsclient, "CONNECT_TIMEOUT", 1.0)
    with running(local_lifecycle(tmp_path, n=1)) as lc:
        node = lc.specs[0]
        url = f"nats://{node.address}:{node.client_port}"
        assert lc.pause(node.name)
        gc.disable()  # a collection must not hide a socket nobody holds any more
        try:
            give_up()  # the loop thread and its own descriptors, once
            time.sleep(0.5)
            before = fds()
            for _ in range(5):
                give_up()
            # A closed transport lets its socket go on one of the loop's next turns, later
            # under load; a socket left open stays so, and fails this after the deadline.
            deadline = time.monotonic() + 30
            while fds() > before and time.monotonic() < deadline:
                time.sleep(0.1)
            assert fds() <= before, f"{fds() - before} descriptors more after 5 connects given up"
        finally:
            gc.enable()
            lc.resume(node.name)


def _fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


def _loop_tasks(loop) -> list[str]:
    """What runs on the clients' shared event loop, by coroutine name."""
    import asyncio

    async def names() -> list[str]:
        me = asyncio.current_task()
        return sorted(t.get_coro().__qualname__ for t in asyncio.all_tasks() if t is not me)

    return asyncio.run_coroutine_threadsafe(names(), loop).result(30)


def _settled(loop, want: tuple[int, list[str]], timeout: float = 30.0) -> tuple[int, list[str]]:
    """(descriptors, the loop's tasks) once they are `want` again, or as they are after
    `timeout` s: a closed transport lets its socket go on one of the loop's next turns, which
    come late on a loaded machine; a socket or a task left behind stays, and still fails."""
    import time

    deadline = time.monotonic() + timeout
    while (got := (_fds(), _loop_tasks(loop))) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def _warm_loop(url: str):
    """The clients' shared loop once a client has come and gone (its thread and its own
    descriptors made), with the descriptors and tasks that are then the baseline."""
    import time

    warm = JetStreamClient(replicas=1, op_timeout=4.0)
    warm.open(url)
    loop = warm.connection.loop.loop
    warm.close()
    time.sleep(0.5)
    return loop, _fds(), _loop_tasks(loop)


def test_a_close_the_loop_gets_to_late_still_closes_the_socket_and_its_tasks(tmp_path):
    """The loop every client shares falls seconds behind under load (a flood of deliveries,
    a 2-core machine at load 10): a close it gets to only after the closing thread stopped
    waiting must still close the socket and end the connection's subscription tasks, or
    each such crash leaves a descriptor and a task to the end of the process."""
    import time

    with running(local_lifecycle(tmp_path, n=1)) as lc:
        url = f"nats://{lc.specs[0].address}:{lc.specs[0].client_port}"
        loop, fds, tasks = _warm_loop(url)
        clients = []
        for v in range(3):
            c = Validated(JetStreamClient(replicas=1, op_timeout=4.0))
            c.open(url)
            assert _send(c, 7, v).type == OK  # a request: the connection now has a subscription
            clients.append(c)
        loop.call_soon_threadsafe(time.sleep, 4.0)  # the loop busy past the 2-3 s a close waits
        for c in clients:
            c.close()
        assert _settled(loop, (fds, tasks)) == (fds, tasks)


def test_a_connect_that_ends_after_its_open_gave_up_is_closed(tmp_path, monkeypatch):
    """An open that stopped waiting (the loop late) leaves its connect to end on the loop:
    a connection it makes then is nobody's and must be closed, or it reconnects after every
    fault to the end of the process."""
    import threading

    from logquake.systems.jetstream import client as jsclient

    monkeypatch.setattr(jsclient, "CONNECT_TIMEOUT", 1.0)  # an open waits 3 s
    with running(local_lifecycle(tmp_path, n=1)) as lc:
        url = f"nats://{lc.specs[0].address}:{lc.specs[0].client_port}"
        loop, fds, tasks = _warm_loop(url)
        c = JetStreamClient(replicas=1, op_timeout=4.0)
        # The loop held until the open's wait has ended, however late this thread gets to
        # the open (a fixed 3.5 s sleep left 0.5 s for it on a loaded machine).
        gate = threading.Event()
        loop.call_soon_threadsafe(gate.wait, 60)
        try:
            with pytest.raises(TimeoutError):
                c.open(url)
        finally:
            gate.set()
        c.close()
        assert _settled(loop, (fds, tasks)) == (fds, tasks)  # the connect ended on the loop, and was closed

