"""After an abort that purged a send, the next transaction writes under a new producer epoch.

librdkafka's abort_transaction purges the messages still queued and rewinds the partition's
sequence numbers over them, without an epoch bump. A message that was sent once, timed out
and was queued again for a retry is purged the same way, yet the broker may have appended
it: the next transaction's first send then carries that record's sequence number, the
broker answers DUPLICATE_SEQUENCE with the aborted record's offset, and the history holds an
acknowledged write at an offset that holds another value (lost writes in a pause soak).

The schedule below makes that happen on one broker (librdkafka 2.16.0: in each of 3 runs
without the reopen, 4 was acknowledged at offset 3, which holds the aborted 3): the partition
joins the transaction with a first send, the broker is paused (SIGSTOP) during a poll, the
second send goes into the paused broker's socket, times out and is queued again; the abort
purges it, and the broker resumes in time to read the send, append it and confirm the abort.
The reopened producer's init_transactions bumps the epoch, so 4 starts at sequence 0 anew.
"""

from __future__ import annotations

import threading
import time

import pytest

from logquake.history import FAIL, INVOKE, OK, Op
from logquake.workloads import Validated
from logquake.workloads.confluent import ConfluentClient

KEY = 7  # the transaction's writes
IDLE_KEY = 8  # assigned and never written: the poll micro-op waits out its poll_timeout
POLL_TIMEOUT = 0.5  # the poll the broker is paused at; the second send then times out (5 s) in the flush (6 s)
RESUME_AFTER = 1.2  # s into the abort (begun ~6.8 s into the op, waiting up to 6 s): after its purge
# The resume comes ~8 s into the op, 2 s before the transaction's timeout (TXN_TIMEOUT_MS, 10 s
# from the first send): had the coordinator expired it first, the abort would be answered
# fenced. (With a 2 s poll the resume came at 9.5 s.)


def _op(f, value, **extra):
    return Op(process=0, type=INVOKE, f=f, value=value, extra=extra)


@pytest.fixture
def cluster(tmp_path):
    from logquake.broker import LocalCluster

    with LocalCluster(n=1, base_dir=tmp_path) as lc:
        lc.wait_ready()
        yield lc


def _read(cluster, *, txn: bool, want: int) -> list[list[int]]:
    """[offset, value] of KEY as a fresh consumer reads it (read_committed if `txn`)."""
    r = Validated(ConfluentClient(txn=txn, op_timeout=5.0))
    r.open(cluster.bootstrap_servers)
    got: list[list[int]] = []
    try:
        assert r.invoke(_op("assign", [KEY])).type == OK
        deadline = time.monotonic() + 10
        while len(got) < want and time.monotonic() < deadline:
            got += r.invoke(_op("poll", [["poll"]])).value[0][1].get(str(KEY), [])
    finally:
        r.close()
    return got


def _paused_from_the_poll_to_the_abort(client: ConfluentClient, cluster) -> list[threading.Timer]:
    """The schedule above, set by the op's own steps rather than by timers from its start
    (a loaded machine ran the op behind them): at the poll, once the first send is answered,
    the broker is paused; 1.2 s into the abort it resumes. The resume's timer, for joining."""
    poll_one, abort = client._poll_one, client._abort
    resumes: list[threading.Timer] = []

    def paused_poll(value, i):
        client._poll_one = poll_one
        assert client._producer is not None
        assert client._producer.flush(30) == 0, "the first send was not answered"
        cluster.pause(1)
        return poll_one(value, i)

    def abort_then_resume(*args):
        client._abort = abort
        resumes.append(threading.Timer(RESUME_AFTER, cluster.resume, (1,)))
        resumes[0].start()
        return abort(*args)

    client._poll_one, client._abort = paused_poll, abort_then_resume
    return resumes


def test_the_transaction_after_an_abort_that_purged_a_sent_message_writes_at_new_offsets(cluster):
    c = Validated(ConfluentClient(txn=True, poll_timeout=POLL_TIMEOUT, op_timeout=6.0))
    c.open(cluster.bootstrap_servers)
    try:
        assert c.invoke(_op("assign", [IDLE_KEY])).type == OK
        assert c.invoke(_op("txn", [["send", KEY, 1]])).type == OK
        resumes = _paused_from_the_poll_to_the_abort(c.client, cluster)
        try:
            aborted = c.invoke(_op("txn", [["send", KEY, 2], ["poll"], ["send", KEY, 3]], abort=True))
        finally:
            for resume in resumes:
                resume.join()
            cluster.resume(1)
        assert aborted.type == FAIL, aborted  # the abort was confirmed
        assert aborted.value[2] == ["send", KEY, 3], aborted  # never acknowledged
        assert aborted.get("reopened") is True, aborted
        done = c.invoke(_op("txn", [["send", KEY, 4]]))
        assert done.type == OK, done
    finally:
        c.close()
    offset = done.value[0][2][0]
    everything = dict(map(tuple, _read(cluster, txn=False, want=4)))
    assert everything.get(offset) == 4, f"4 acknowledged at {offset}, the log holds {everything}"
    assert max(everything) == offset  # after the aborted records, not over one of them
    assert [v for _, v in _read(cluster, txn=True, want=2)] == [1, 4]
