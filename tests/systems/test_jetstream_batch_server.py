"""Transactions as atomic batches, against real nats-server processes (the pinned 2.15.1).

Start servers: run under the heavy lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import nats
import pytest

from logquake.history import FAIL, INFO, OK
from logquake.systems.jetstream import batch
from logquake.systems.jetstream.client import PUBLISH_TIMEOUT, JetStreamClient
from logquake.systems.jetstream.server import JetStreamSettings
from logquake.workloads.client import Validated

from .jskit import local_lifecycle, running, stream_leader, wait_ready
from .test_jetstream_batch import OLD_SERVER
from .test_jetstream_client import _op, _read_all


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(local_lifecycle(tmp_path_factory.mktemp("jsb"))) as lc:
        yield lc


def _client(lc, **kw) -> Validated:
    c = Validated(JetStreamClient(**{"replicas": 3, "op_timeout": 8.0, "txn": True, **kw}))
    c.open(lc.bootstrap())
    return c


def _sends(k, *values) -> list[list]:
    return [["send", k, v] for v in values]


def test_a_committed_batch_is_acked_with_its_keys_offsets_and_read_whole(cluster):
    c = _client(cluster)
    try:
        first = c.invoke(_op("send", _sends(1, 1, 2, 3)))
        assert (first.type, first.value) == (OK, [["send", 1, [1, 1]], ["send", 1, [2, 2]], ["send", 1, [3, 3]]])
        # A batch of one send is a transaction too; the key's offsets go on where the last ended.
        one = c.invoke(_op("send", _sends(1, 4)))
        assert (one.type, one.value) == (OK, [["send", 1, [4, 4]]])
        assert _read_all(c, 1) == [[1, 1], [2, 2], [3, 3], [4, 4]]
    finally:
        c.close()


def test_a_batch_the_server_rejects_is_not_read_at_all(cluster):
    c = _client(cluster, producer={"idempotence": True})
    try:
        # Twice the same Msg-Id in one batch: the leader rejects the commit before replicating.
        rejected = c.invoke(_op("send", _sends(2, 1, 2, 1)))
        assert rejected.type == FAIL and "10201" in rejected.get("error"), rejected
        ok = c.invoke(_op("send", _sends(2, 3, 4)))
        assert (ok.type, ok.value) == (OK, [["send", 2, [1, 3]], ["send", 2, [2, 4]]])
        assert _read_all(c, 2) == [[1, 3], [2, 4]]
    finally:
        c.close()


def test_an_aborted_batch_is_staged_then_dropped_and_never_read(cluster):
    c = _client(cluster)
    try:
        assert c.invoke(_op("send", _sends(3, 1))).type == OK
        aborted = c.invoke(_op("txn", _sends(3, 2, 3), abort=True))
        assert aborted.type == FAIL and "aborted on purpose" in aborted.get("error"), aborted
        after = c.invoke(_op("send", _sends(3, 4)))
        assert (after.type, after.value) == (OK, [["send", 3, [2, 4]]])
        assert _read_all(c, 3) == [[1, 1], [2, 4]]
    finally:
        c.close()


def test_a_stream_made_without_atomic_publish_gets_it_and_the_batch_goes_through(cluster):
    plain = Validated(JetStreamClient(replicas=3, op_timeout=8.0))
    plain.open(cluster.bootstrap())
    c = _client(cluster)
    try:
        assert plain.invoke(_op("send", _sends(4, 1))).value == [["send", 4, [1, 1]]]
        done = c.invoke(_op("send", _sends(4, 2, 3)))
        assert (done.type, done.value) == (OK, [["send", 4, [2, 2]], ["send", 4, [3, 3]]])
        assert _read_all(c, 4) == [[1, 1], [2, 2], [3, 3]]
    finally:
        plain.close()
        c.close()


def test_a_subscriber_binds_to_a_stream_a_transaction_made_atomic(cluster):
    # The stream exists with allow_atomic, a config the subscriber's own differs from: the
    # server answers 10058 to its create, and the subscriber must bind all the same (soak of
    # 12-04: 16,001 failed subscribes in 3 minutes, every one of them that).
    c = _client(cluster)
    try:
        assert c.invoke(_op("send", _sends(7, 1, 2))).type == OK
        assert c.invoke(_op("subscribe", [7])).type == OK
        done = c.invoke(_op("poll", [["poll"]]))
        assert (done.type, done.value) == (OK, [["poll", {"7": [[1, 1], [2, 2]]}]])
    finally:
        c.close()


@pytest.mark.parametrize(("value", "words"), [
    ([["send", 5, 1], ["send", 6, 1]], "one key"),
    ([["send", 5, 1], ["poll"]], "publishes only"),
])
def test_a_transaction_no_batch_can_hold_fails_without_sending(cluster, value, words):
    c = _client(cluster)
    try:
        done = c.invoke(_op("txn", value))
        assert done.type == FAIL and words in done.get("error"), done
        assert _read_all(c, 5) == []
    finally:
        c.close()


@contextlib.contextmanager
def _between_servers(tmp_path, *, op_timeout: float):
    """A transactional client of server a (key 1's stream on it, one batch stored) that is
    between servers: a was killed, and nats-py reached b, a server it never reached before,
    paused, so it waits there `connect_timeout` at a time for an INFO (its server version
    "0.0.0-unknown"), as a client did in a soak whose node was killed while another was paused.
    Yields (a, the client)."""
    with running(local_lifecycle(tmp_path / "a", n=1)) as a, running(local_lifecycle(tmp_path / "b", n=1)) as b:
        b.pause("n1")
        c = Validated(JetStreamClient(replicas=1, op_timeout=op_timeout, txn=True))
        c.open(f"{a.bootstrap()},{b.bootstrap()}")
        try:
            _until_ok(c, _op("send", _sends(1, 1)))
            a.kill("n1")
            deadline = time.monotonic() + 30
            while c.client._nc.connected_server_version.major != 0:
                assert time.monotonic() < deadline, "the client never reached the paused server"
                time.sleep(0.01)
            yield a, c
        finally:
            c.close()
            b.resume("n1")


def test_a_transaction_between_servers_waits_for_one_and_commits(tmp_path):
    # The server is back a second later: the batch waits for the client to reach it (it
    # failed at once before, "no server connected": 445 of 22,819 sends of a soak).
    with _between_servers(tmp_path, op_timeout=20.0) as (a, c):
        restart = threading.Timer(1.0, a.start, args=("n1",))
        restart.start()
        try:
            done = c.invoke(_op("send", _sends(1, 2, 3)))
        finally:
            restart.join()
        assert (done.type, done.value) == (OK, [["send", 1, [2, 2]], ["send", 1, [3, 3]]]), done
        assert _read_all(c, 1) == [[1, 1], [2, 2], [3, 3]]


def test_a_transaction_no_server_answers_in_time_fails_having_sent_nothing(tmp_path):
    op_timeout = 6.0
    with _between_servers(tmp_path, op_timeout=op_timeout) as (a, c):
        start = time.monotonic()
        done = c.invoke(_op("send", _sends(1, 2)))
        took = time.monotonic() - start
        assert done.type == FAIL and "no server connected within" in done.get("error"), done
        # It waited the op's time less one attempt's, and then gave up (the upper bound only
        # says it did not hang: a loaded machine runs the loop late).
        assert op_timeout - PUBLISH_TIMEOUT - 0.5 <= took < op_timeout + 10.0, took
        a.start("n1")
        wait_ready(a)
        deadline = time.monotonic() + 30
        while not c.client._nc.is_connected:
            assert time.monotonic() < deadline, "the client never reached the restarted server"
            time.sleep(0.1)
        assert _read_all(c, 1) == [[1, 1]]  # nothing of the failed batch, not even sent late


@pytest.mark.skipif(OLD_SERVER is None, reason="no nats-server older than 2.12 here (Debian's: apt-get install nats-server)")
def test_a_server_without_atomic_batches_gets_no_transaction(tmp_path):
    # Such a server would store each message of a "batch" on its own: the client asks first.
    with running(local_lifecycle(tmp_path, n=1, settings=JetStreamSettings(binary=OLD_SERVER))) as lc:
        c = Validated(JetStreamClient(replicas=1, op_timeout=8.0, txn=True))
        c.open(lc.bootstrap())
        try:
            done = c.invoke(_op("send", _sends(1, 1, 2)))
            assert done.type == FAIL and "has no atomic batch publish" in done.get("error"), done
            assert _read_all(c, 1) == []
        finally:
            c.close()


def _leader_among(lc, nodes, stream) -> str | None:
    """The leader of `stream` as the first of `nodes` that answers reports it."""
    for node in nodes:
        try:
            jsz = lc.monitoring(node, "jsz?streams=true")
        except OSError:
            continue
        for account in jsz.get("account_details") or []:
            for st in account.get("stream_detail") or []:
                if st["name"] == stream:
                    return (st.get("cluster") or {}).get("leader")
    return None


def test_a_batch_staged_on_a_leader_that_dies_is_never_stored(tmp_path):
    with running(local_lifecycle(tmp_path)) as lc:
        c = _client(lc)
        try:
            assert c.invoke(_op("send", _sends(9, 1))).type == OK  # the stream, allowing atomic publish
        finally:
            c.close()
        leader = stream_leader(lc, "lq-9")
        survivors = [s.name for s in lc.specs if s.name != leader]
        bid = batch.new_id()

        async def stage(nc, seq: int) -> batch.Reply:
            reply = await nc.request("lq.9", str(seq + 1).encode(), timeout=5.0,
                                     headers=batch.headers(bid, seq, commit=seq == 3))
            return batch.parse_reply(reply.data, batch=bid, count=seq)

        async def before_the_kill() -> list[batch.Reply]:
            nc = await nats.connect(servers=lc.bootstrap().split(","))
            try:
                return [await stage(nc, 1), await stage(nc, 2)]
            finally:
                await nc.close()

        assert asyncio.run(before_the_kill()) == [batch.Staged(), batch.Staged()]
        # Staged is not stored: nothing of the batch is readable before its commit.
        assert _read_key(lc, survivors[0]) == [[1, 1]]
        lc.kill(leader)
        deadline = time.monotonic() + 60
        while _leader_among(lc, survivors, "lq-9") in (None, leader):
            assert time.monotonic() < deadline, "no new leader for lq-9"
            time.sleep(0.2)

        async def commit() -> batch.Reply:
            spec = lc.spec(survivors[0])
            nc = await nats.connect(f"nats://{spec.address}:{spec.client_port}")
            try:
                while True:
                    try:
                        return await stage(nc, 3)
                    except nats.errors.TimeoutError:  # a leader not serving yet does not answer
                        assert time.monotonic() < deadline, "the commit was never answered"
            finally:
                await nc.close()

        got = asyncio.run(commit())
        # The new leader never saw messages 1 and 2: it rejects the commit, before replicating.
        # (Still info to the client: it cannot tell this answer from one by a server beside
        # the leader that stored the batch, see the second responder below.)
        assert isinstance(got, batch.Rejected) and got.code == 10176 and got.outcome() == INFO, got
        assert _read_key(lc, survivors[0]) == [[1, 1]]


def _read_key(lc, node) -> list[list[int]]:
    spec = lc.spec(node)
    c = Validated(JetStreamClient(replicas=3, op_timeout=8.0))
    c.open(f"nats://{spec.address}:{spec.client_port}")
    try:
        return _read_all(c, 9)
    finally:
        c.close()



# What nats-server answers a commit of a batch it never saw, verbatim but for the stream.
_INCOMPLETE = (b'{"error":{"code":400,"err_code":10176,"description":"atomic publish batch is incomplete"},'
               b'"stream":"lq-%d","seq":0}')


class _SecondResponder:
    """Another subscriber to a key's subject that answers the first commit it sees with
    "batch is incomplete" at once, as the stale leader of soak 20261202T163620 did beside the
    new one around a partition's heal: the real leader stores the batch, and the client hears
    the rejection first."""

    def __init__(self, servers: str, k: int) -> None:
        self.servers, self.k, self.answered = servers.split(","), k, 0
        self.rejected = threading.Event()  # its one answer sent
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(),), daemon=True)

    async def _run(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        nc = await nats.connect(servers=self.servers)

        async def answer(msg) -> None:
            if self.answered == 0 and (msg.headers or {}).get(batch.BATCH_COMMIT):
                self.answered += 1
                await msg.respond(_INCOMPLETE % self.k)
                await nc.flush()  # the server has it, ahead of anything the leader answers later
                self.rejected.set()

        await nc.subscribe(f"lq.{self.k}", cb=answer)
        await nc.flush()
        self._ready.set()
        await self._stop.wait()
        await nc.close()

    def __enter__(self) -> _SecondResponder:
        self._thread.start()
        assert self._ready.wait(30), "the second responder never subscribed"
        time.sleep(1.0)  # its interest reaches every server over the routes
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def _until_ok(c, op) -> None:
    """`op` done ok, tried again through transient errors (an election, no responders yet)."""
    deadline = time.monotonic() + 60
    while (done := c.invoke(op)).type != OK:
        assert time.monotonic() < deadline, done
        time.sleep(0.5)


@pytest.mark.parametrize(("k", "producer"), [(11, {"idempotence": True}), (12, {})])
def test_a_commit_rejected_by_a_second_responder_while_the_leader_stored_it_is_never_fail(cluster, k, producer):
    c = _client(cluster, producer=producer)
    try:
        _until_ok(c, _op("send", _sends(k, 1)))  # the stream, allowing atomic publish
    finally:
        c.close()
    leader = stream_leader(cluster, f"lq-{k}")
    followers = [s.name for s in cluster.specs if s.name != leader]
    spec = cluster.spec(leader)
    url = f"nats://{spec.address}:{spec.client_port}"
    c = Validated(JetStreamClient(replicas=3, op_timeout=20.0, txn=True, producer=producer))
    c.open(url)
    try:
        with _SecondResponder(url, k) as second:
            # The leader stages the batch alone but commits it only with a follower: with both
            # paused the second responder's rejection comes first. A second after it (not a
            # second after the send: the responder's thread may be that late on a loaded
            # machine, and the leader's answer would then come first) they are back and the
            # leader stores the batch it proposed.
            for n in followers:
                cluster.pause(n)

            def resume_after_the_rejection() -> None:
                second.rejected.wait(60)
                time.sleep(1.0)
                for n in followers:
                    cluster.resume(n)

            resume = threading.Thread(target=resume_after_the_rejection)
            resume.start()
            try:
                done = c.invoke(_op("send", _sends(k, 2, 3)))
            finally:
                resume.join()
                for n in followers:
                    cluster.resume(n)
        assert second.answered == 1
        read = _until_read(c, k, 3)
    finally:
        c.close()
    assert "10176" in (done.get("error") or ""), done
    assert read == [[1, 1], [2, 2], [3, 3]]  # stored once, by the attempt answered "incomplete"
    if producer:
        # The retries met the batch's Msg-Ids in process, then held: stored by the first attempt.
        assert (done.type, done.value, done.get("duplicate")) == (
            OK, [["send", k, [None, 2]], ["send", k, [None, 3]]], True), done
    else:
        # No Msg-Ids to ask by: unknown, and no retry to store it twice.
        assert done.type == INFO, done


def _until_read(c, k: int, n: int) -> list[list[int]]:
    """Key k's messages once at least n are readable (a leader just resumed may lag)."""
    deadline = time.monotonic() + 60
    while len(read := _read_all(c, k)) < n and time.monotonic() < deadline:
        time.sleep(0.5)
    return read
