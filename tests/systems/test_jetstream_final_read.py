"""The final read is per key, against real nats-server processes: a stream that cannot
answer (its one replica's server killed) leaves only its own key unread, and the keys whose
streams answered read to their end; a stored message that holds no value is recorded as
`unparsed` and read past.

Start servers: run under the heavy lock.
"""

from __future__ import annotations

import time

from logquake.checker import CheckOptions, check_history
from logquake.history import INFO, INVOKE, OK, Op
from logquake.systems.jetstream.client import JetStreamClient, stream_name, subject
from logquake.workloads.client import Validated

from .jskit import local_lifecycle, running, stream_leader

SETTLE_DEADLINE = 60.0  # generous: a loaded 2-core machine elects leaders slowly
DEAD, ALIVE = 1, 2  # key DEAD's stream has one replica, on the server killed; ALIVE's three


def _op(f, value, **extra) -> Op:
    return Op(process=0, type=INVOKE, f=f, value=value, extra=extra)


def _client(url: str, replicas: int = 3) -> Validated:
    c = Validated(JetStreamClient(replicas=replicas, op_timeout=4.0, producer={"idempotence": True}))
    c.open(url)
    return c


class _History(list):
    """Each op invoked through `run`, its invocation and completion, as a run records them."""

    def run(self, c: Validated, f: str, value, process: int, **extra) -> Op:
        invoked = Op(index=len(self), time=len(self), process=process, type=INVOKE, f=f, value=value, extra=extra)
        self.append(invoked)
        done = c.invoke(invoked)
        self.append(Op(index=len(self), time=len(self), process=process, type=done.type, f=f, value=done.value,
                       extra=dict(done.extra)))
        return done


def _send(h: _History, url: str, k: int, values, replicas: int) -> list[Op]:
    c = _client(url, replicas)
    try:
        return [h.run(c, "send", [["send", k, v]], process=0) for v in values]
    finally:
        c.close()


def test_a_stream_with_no_server_left_leaves_only_its_key_unread(tmp_path):
    with running(local_lifecycle(tmp_path)) as lc:
        h = _History()
        sends = _send(h, lc.bootstrap(), DEAD, (1, 2, 3), replicas=1) + _send(h, lc.bootstrap(), ALIVE, (1, 2, 3), 3)
        assert [s.type for s in sends] == [OK] * 6, sends
        reader = _client(lc.bootstrap())  # reads every value once, so none is unseen
        try:
            h.run(reader, "assign", [DEAD, ALIVE], process=2)
            assert h.run(reader, "poll", [["poll"]], process=2).value[0][1] == {
                str(k): [[1, 1], [2, 2], [3, 3]] for k in (DEAD, ALIVE)}
        finally:
            reader.close()
        dead = stream_leader(lc, stream_name(DEAD))
        lc.kill(dead)
        c = _client(",".join(f"nats://{s.address}:{s.client_port}" for s in lc.specs if s.name != dead))
        try:
            # ALIVE's stream elects a leader among the two servers left (it may have been `dead`).
            deadline = time.monotonic() + SETTLE_DEADLINE
            while (assign := c.invoke(_op("assign", [DEAD, ALIVE], seek_to_beginning=True, final=True))
                   ).get("ends") != {str(DEAD): None, str(ALIVE): 4}:
                assert time.monotonic() < deadline, assign
            h.run(c, "assign", [DEAD, ALIVE], process=1, seek_to_beginning=True, final=True)
            # Right after a kill the server may still answer ALIVE's read "JetStream system
            # temporarily unavailable" (503): with DEAD's unanswered too, no stream answered and
            # the poll is info. The drain then polls again; so does this test.
            # A poll may also return part of ALIVE (a consumer on a replica still catching up,
            # or gets after its consumer could not be made): the next goes on from there.
            read: list[list[int]] = []
            poll = None
            while poll is None or poll.get("positions") != {str(ALIVE): 4}:
                while (poll := h.run(c, "poll", [["poll"]], process=1, final=True)).type == INFO:
                    assert "unread" not in poll.extra and time.monotonic() < deadline, poll
                # What the answering stream returned, and which key went unanswered, with why.
                assert poll.type == OK, poll
                assert list(poll.value[0][1]) in ([str(ALIVE)], []), poll
                read += poll.value[0][1].get(str(ALIVE), [])
                assert list(poll.get("unread")) == [str(DEAD)] and poll.get("unread")[str(DEAD)], poll
                assert time.monotonic() < deadline, poll
            assert read == [[1, 1], [2, 2], [3, 3]]
            # A poll of the main phase is not judged per key: it fails whole, as before.
            c.invoke(_op("assign", [DEAD, ALIVE], seek_to_beginning=True))
            assert (main := c.invoke(_op("poll", [["poll"]]))).type == INFO, main
        finally:
            c.close()
        # The checker: ALIVE's final read is complete, DEAD's alone is unknown.
        r = check_history(list(h), CheckOptions())
        assert r["valid"] == "unknown" and r["final_read"]["incomplete_keys"] == [DEAD], r
        assert r["unknown_because"].startswith(f"the final read of key(s) {DEAD} did not reach")
        assert r["final_read"]["complete_keys"] == 1


def test_a_final_poll_no_stream_answered_is_info(tmp_path):
    with running(local_lifecycle(tmp_path)) as lc:
        assert all(s.type == OK for s in _send(_History(), lc.bootstrap(), DEAD, (1,), replicas=1))
        dead = stream_leader(lc, stream_name(DEAD))
        lc.kill(dead)
        c = _client(",".join(f"nats://{s.address}:{s.client_port}" for s in lc.specs if s.name != dead))
        try:
            assign = c.invoke(_op("assign", [DEAD], seek_to_beginning=True, final=True))
            assert assign.type == OK and assign.get("ends") == {str(DEAD): None}, assign
            poll = c.invoke(_op("poll", [["poll"]], final=True))
            assert poll.type == INFO and "unread" not in poll.extra, poll
        finally:
            c.close()


def test_a_message_that_holds_no_value_is_recorded_unparsed_and_read_past(tmp_path):
    """An empty message (as an abort's left by a server that stored it) and a text one in a
    key's stream: the reads record them as `unparsed`, read on to the end, and the check runs."""
    import asyncio

    import nats

    async def publish_raw(url: str, payloads) -> None:
        nc = await nats.connect(url.split(","))
        try:
            for p in payloads:
                await nc.jetstream().publish(subject(ALIVE), p)
        finally:
            await nc.close()

    with running(local_lifecycle(tmp_path)) as lc:
        h = _History()
        assert [s.type for s in _send(h, lc.bootstrap(), ALIVE, (1, 2), 3)] == [OK, OK]
        asyncio.run(publish_raw(lc.bootstrap(), [b"", b"not a number", str(2**64).encode()]))
        assert [s.type for s in _send(h, lc.bootstrap(), ALIVE, (3,), 3)] == [OK]
        c = _client(lc.bootstrap())
        try:
            assign = h.run(c, "assign", [ALIVE], process=1, seek_to_beginning=True, final=True)
            assert assign.get("ends") == {str(ALIVE): 7}, assign
            poll = h.run(c, "poll", [["poll"]], process=1, final=True)
            # A main-phase poll of a fresh position meets them alike, and is ok.
            h.run(c, "assign", [ALIVE], process=1, seek_to_beginning=True)
            main = h.run(c, "poll", [["poll"]], process=1)
        finally:
            c.close()
        for p in (poll, main):
            assert p.type == OK, p
            assert p.value == [["poll", {str(ALIVE): [[1, 1], [2, 2], [6, 3]]}]], p
            assert p.get("unparsed") == {str(ALIVE): [[3, ""], [4, "not a number"], [5, str(2**64)]]}, p
        assert poll.get("positions") == {str(ALIVE): 7}
        # The check reads the history to its end: the final read complete, no value lost.
        r = check_history(list(h), CheckOptions())
        assert r["valid"] is True, r
        assert r["final_read"]["complete_keys"] == 1 and r["final_read"]["lost"] == 0, r["final_read"]


async def _fill_alive(url: str, n: int, hole: int, *, replicas: int) -> None:
    """ALIVE's stream holding 1..n, message `hole` deleted."""
    import asyncio

    import nats

    nc = await nats.connect(url.split(","))
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(JetStreamClient(replicas=replicas, op_timeout=4.0)._stream_config(ALIVE))
        # The stream's subject reaches the other servers' routes after add_stream answers: a
        # publish through one that has not heard yet goes nowhere ("no response from stream",
        # seen on a loaded machine). The first one waits for that, the rest follow it.
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            try:
                await js.publish(subject(ALIVE), b"1")
                break
            except nats.js.errors.NoStreamResponseError:
                assert asyncio.get_running_loop().time() < deadline, "the stream never answered"
                await asyncio.sleep(0.1)
        await asyncio.gather(*[await js.publish_async(subject(ALIVE), str(v).encode()) for v in range(2, n + 1)])
        await js.delete_msg(stream_name(ALIVE), hole)
    finally:
        await nc.close()


def test_the_final_read_reads_every_stored_message_past_a_gap_in_bulk(tmp_path):
    """The final read (an ordered consumer per key, `_read_key_to_end`) returns every stored
    message once, in order, past a deleted one, and more than a main-phase poll's batch at once."""
    import asyncio

    from logquake.systems.jetstream.client import READ_BATCH

    n, hole = 3 * READ_BATCH + 7, 150

    with running(local_lifecycle(tmp_path)) as lc:
        asyncio.run(_fill_alive(lc.bootstrap(), n, hole, replicas=3))
        c = _client(lc.bootstrap())
        try:
            assign = c.invoke(_op("assign", [ALIVE, DEAD], seek_to_beginning=True, final=True))
            assert assign.get("ends") == {str(ALIVE): n + 1, str(DEAD): 1}, assign
            read, polls = [], 0
            while (poll := c.invoke(_op("poll", [["poll"]], final=True))).get("positions") != {
                    str(ALIVE): n + 1, str(DEAD): 1}:
                assert poll.type == OK and (polls := polls + 1) < 10, poll
                read += poll.value[0][1].get(str(ALIVE), [])
            read += poll.value[0][1].get(str(ALIVE), [])
        finally:
            c.close()
        assert read == [[v, v] for v in range(1, n + 1) if v != hole]
        assert polls <= 1, f"{polls + 1} polls for {n} messages"


def test_a_key_whose_consumer_cannot_be_made_is_read_by_gets(tmp_path, caplog):
    """The bulk read's ordered consumer is created through the meta leader; a get needs only
    the stream leader. Two of three servers killed, the survivor has no meta quorum, so no
    consumer can be made (it times out), while it still leads the one-replica stream it
    holds and answers its info and gets: the final read reads that key by gets
    (`_read_key`), every message once, in order, past a deleted one, over several polls."""
    import asyncio
    import logging

    from logquake.systems.jetstream.client import READ_BATCH

    n, hole = 2 * READ_BATCH + 7, 120

    with running(local_lifecycle(tmp_path)) as lc:
        asyncio.run(_fill_alive(lc.bootstrap(), n, hole, replicas=1))
        survivor = stream_leader(lc, stream_name(ALIVE))
        for s in lc.specs:
            if s.name != survivor:
                lc.kill(s.name)
        spec = lc.spec(survivor)
        # The default op_timeout: a final poll's 5 s leave 3 s of gets after the consumer's 2 s timeout.
        c = Validated(JetStreamClient(replicas=1, op_timeout=10.0))
        c.open(f"nats://{spec.address}:{spec.client_port}")
        try:
            assign = c.invoke(_op("assign", [ALIVE], seek_to_beginning=True, final=True))
            assert assign.get("ends") == {str(ALIVE): n + 1}, assign
            read, polls = [], 0
            with caplog.at_level(logging.INFO, logger="logquake.client.nats-py"):
                while (polls := polls + 1) <= 10:
                    poll = c.invoke(_op("poll", [["poll"]], final=True))
                    assert poll.type == OK, poll
                    read += poll.value[0][1].get(str(ALIVE), [])
                    if poll.get("positions") == {str(ALIVE): n + 1}:
                        break
        finally:
            c.close()
        assert read == [[v, v] for v in range(1, n + 1) if v != hole]
        assert 3 <= polls <= 10, polls  # by gets: READ_BATCH messages a poll at most
        assert f"final read of {stream_name(ALIVE)} in bulk: TimeoutError" in caplog.text, caplog.text


def test_a_delivered_sequence_is_read_from_the_reply_subject_as_nats_py_reads_it():
    import pytest
    from nats.aio.msg import Msg

    from logquake.systems.jetstream.client import delivered_seq

    for reply in ("$JS.ACK.lq-1.c.1.17.3.1700000000000000000.42",  # no domain
                  "$JS.ACK.d.hash.lq-1.c.1.17.3.1700000000000000000.42.tok",  # domain, account
                  "$JS.ACK.d.hash.lq-1.c.1.17.3.1700000000000000000.42"):
        meta = Msg(None, reply=reply).metadata
        assert delivered_seq(reply) == (meta.sequence.stream, meta.num_pending) == (17, 42)
    for reply in ("", "_INBOX.x", "$JS.ACK.lq-1.c.1", "$JS.ACK.lq-1.c.1.x.3.1700000000000000000.42"):
        with pytest.raises(ValueError):
            delivered_seq(reply)
