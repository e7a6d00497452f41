"""The KV adapter against real nats-server processes: get, put, cas, and what a refused cas is.

Start servers: run under the heavy lock.
"""

from __future__ import annotations

import contextlib
import time

import nats
import nats.js.errors
import pytest

from logquake.errors import ConfigError
from logquake.history import FAIL, INVOKE, OK, Op
from logquake.systems.jetstream import kv
from logquake.systems.jetstream.kv import KVClient

from .jskit import local_lifecycle, running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(local_lifecycle(tmp_path_factory.mktemp("jskv"))) as lc:
        yield lc


@contextlib.contextmanager
def _client(lc, **kw):
    c = KVClient(replicas=3, op_timeout=4.0, **kw)
    c.open(lc.bootstrap())
    try:
        yield c
    finally:
        c.close()


def _op(f, value) -> Op:
    return Op(process=0, type=INVOKE, f=f, value=value)


def _do(c: KVClient, f: str, value) -> tuple[str, object]:
    done = c.invoke(_op(f, value))
    return done.type, done.value


def _stream_info(c: KVClient):
    assert c._loop is not None
    return c._loop.run(c._nc.jetstream().stream_info(f"KV_{c.bucket}"), timeout=10.0)


def test_put_get_and_cas_are_a_cas_register(cluster):
    with _client(cluster, bucket="semantics") as c:
        assert _do(c, "read", [0, None]) == (OK, [0, None])  # no bucket yet: no entry
        assert _do(c, "write", [0, 1]) == (OK, [0, 1])
        assert _do(c, "read", [0, None]) == (OK, [0, 1])
        assert _do(c, "cas", [0, [1, 2]]) == (OK, [0, [1, 2]])
        assert _do(c, "read", [0, None]) == (OK, [0, 2])
        # Expecting a value the key no longer holds: no update is sent, nothing changes.
        done = c.invoke(_op("cas", [0, [1, 3]]))
        assert (done.type, done.extra["error"]) == (FAIL, "get found 2, not 1: no update sent")
        assert _do(c, "read", [0, None]) == (OK, [0, 2])
        # cas from nil creates the key (expected last revision 0), once.
        assert _do(c, "cas", [1, [None, 7]]) == (OK, [1, [None, 7]])
        assert _do(c, "cas", [1, [None, 8]])[0] == FAIL
        assert _do(c, "read", [1, None]) == (OK, [1, 7])
        info = _stream_info(c)
        assert (info.config.allow_direct, info.config.num_replicas, info.config.max_msgs_per_subject) == (False, 3, 1)


def test_a_cas_whose_revision_went_stale_is_refused_and_fails(cluster):
    """A put lands between the cas's get and its update: the leader refuses the update
    (wrong last sequence) before proposing it, so the cas certainly stored nothing."""
    with _client(cluster, bucket="stale") as c, _client(cluster, bucket="stale") as other:
        assert _do(c, "write", [0, 1]) == (OK, [0, 1])
        real_get = c._get

        async def get_then_race(k):
            seen = await real_get(k)
            # Every client's connection lives on the process's one loop: other's put is
            # awaited here, between c's get and its update.
            assert (await other._write(_op("write", [k, 2]))).type == OK
            return seen

        c._get = get_then_race  # type: ignore[method-assign]
        done = c.invoke(_op("cas", [0, [1, 3]]))
        c._get = real_get  # type: ignore[method-assign]
        assert done.type == FAIL, done
        assert "KeyWrongLastSequenceError" in done.extra["error"], done.extra
        assert _do(c, "read", [0, None]) == (OK, [0, 2])


def test_the_refusal_of_a_stale_revision_is_classified_fail(cluster):
    async def stale_update() -> BaseException:
        nc = await nats.connect(cluster.bootstrap().split(","))
        try:
            bucket = await nc.jetstream().create_key_value(kv.bucket_config("classify", replicas=3, reads=kv.LEADER))
            first = await bucket.put("k0", b"1")
            await bucket.put("k0", b"2")
            try:
                await bucket.update("k0", b"3", last=first)
            except Exception as e:  # noqa: BLE001 - the test looks at it
                return e
            raise AssertionError("an update at a stale revision was stored")
        finally:
            await nc.close()

    with _client(cluster, bucket="classify") as c:
        assert c._loop is not None
        e = c._loop.run(stale_update(), timeout=20.0)
    assert isinstance(e, nats.js.errors.KeyWrongLastSequenceError), e
    assert kv._classify(e) == FAIL


def test_direct_reads_make_the_bucket_allow_direct_and_read_the_same_values(cluster):
    with _client(cluster, bucket="direct", reads=kv.DIRECT) as c:
        assert _do(c, "write", [3, 1]) == (OK, [3, 1])
        assert _do(c, "cas", [3, [1, 2]]) == (OK, [3, [1, 2]])
        # Any replica answers, maybe one that has not applied the cas yet: but soon all have.
        deadline = time.monotonic() + 30.0
        while (got := _do(c, "read", [3, None])) != (OK, [3, 2]):
            assert got in ((OK, [3, 1]), (FAIL, [3, None])) and time.monotonic() < deadline, got
            time.sleep(0.1)
        assert _stream_info(c).config.allow_direct is True


def test_kv_reads_takes_leader_or_direct_and_names_the_key_otherwise():
    assert (kv.kv_reads(None), kv.kv_reads("leader"), kv.kv_reads("direct")) == ("leader", "leader", "direct")
    with pytest.raises(ConfigError, match="jetstream.kv_reads"):
        kv.kv_reads("follower")
