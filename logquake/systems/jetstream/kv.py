"""The nats-py adapter for the kv workload: a JetStream KV bucket as a set of CAS registers.

How the register's ops map onto the bucket (one bucket `lq-kv`, stream `KV_lq-kv`, one
revision kept per key, file storage, `replicas` replicas):

- key k is the bucket's key `k<k>`; values are small ints stored as their decimal text.
- read is `kv.get`: the key's latest entry, or nil when it has none. How it is answered is
  the test's `kv_reads`: `leader` asks the stream's leader (the stream get-message API, the
  bucket made without `allow_direct`); `direct` uses direct gets (the bucket made with
  `allow_direct`), which any replica may answer from what it has applied so far.
- write is `kv.put`: a publish to the key's subject, ok on its PubAck.
- cas [old, new] is a get followed by `kv.update(key, new, last=revision)`: the update
  carries the revision the get saw as the expected last sequence of the key's subject, and
  the stream leader stores it only if that is still the key's latest revision. Revisions
  are stream sequences, unique per stored entry, so an update that is stored replaced
  exactly the entry holding `old`: the cas took effect at the update, atomically.

What can have happened when an op does not end ok (everything unlisted is info):

- A read changes nothing: whatever went wrong it is fail, as the offsets workload's.
- A cas whose get found another value (or none, or did not answer) sent no update: fail.
- A cas whose update the leader refused for a wrong last sequence (JetStream error 10071)
  was checked before it was proposed to the stream's Raft group: nothing stored, fail.
  What the key held instead is not known (the get may have been stale, or another write
  came between), so the failed cas says nothing about the register and the checker drops it.
- A write or update with no stream to store it (no responders) went nowhere: it is tried
  again (after making the bucket) while the op has time, as the queue client's publish is,
  since a bucket just made answers no one until its stream has a leader; fail if it never did.
- Timeouts, lost connections and any other error after the request was sent: info.

nats-py is asyncio: the connection and the loop thread it runs on are the queue client's
(client.py's `JetStreamClient.open`), so both workloads connect and reconnect alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.client import KV_PRE_TEMPLATE, KV_STREAM_TEMPLATE
from nats.js.kv import KeyValue

from logquake.history import FAIL, INFO, OK, Op
from logquake.systems.jetstream.client import (
    PUBLISH_TIMEOUT,
    RETRY_BACKOFF,
    JetStreamClient,
    _err_text,
    _Loop,
    classify,
)
from logquake.systems.jetstream.server import DIRECT, LEADER, kv_reads
from logquake.workloads.client import complete

log = logging.getLogger("logquake.client.nats-kv")

BUCKET = "lq-kv"
OP_TIMEOUT = 5.0  # s an op waits for its answers before it is info
WRONG_LAST_SEQUENCE = (10071, 10164)  # JetStream's refusals of an expected last sequence


def key_name(k: int) -> str:
    return f"k{k}"


def bucket_config(bucket: str, *, replicas: int, reads: str) -> api.KeyValueConfig:
    """The bucket: one revision per key, file storage, direct gets only when reads are direct."""
    return api.KeyValueConfig(bucket=bucket, history=1, replicas=replicas, storage=api.StorageType.FILE,
                              direct=reads == DIRECT)


def describe(*, replicas: int, reads: str) -> dict[str, Any]:
    """What test.json says the client does."""
    return {"bucket": BUCKET, "replicas": replicas, "history": 1, "allow_direct": reads == DIRECT,
            "reads": "direct get, any replica" if reads == DIRECT else "stream get-message, the leader",
            "cas": "get, then update with the revision seen as the expected last subject sequence",
            "op_timeout_s": OP_TIMEOUT}


class KVClient:
    """One NATS connection doing the kv workload's ops on the bucket; see the module docstring."""

    def __init__(self, *, replicas: int = 3, reads: str = LEADER, op_timeout: float = OP_TIMEOUT,
                 bucket: str = BUCKET) -> None:
        self.bucket = bucket
        self.replicas = replicas
        self.reads = kv_reads(reads)
        self.op_timeout = op_timeout
        self._conn: JetStreamClient | None = None  # the connection and its loop
        self._loop: _Loop | None = None
        self._nc: Any = None
        self._kv: KeyValue | None = None
        self._bucket_made = False

    def open(self, bootstrap_servers: str) -> None:
        """Connect as the queue client does (its loop thread, reconnecting on its own)."""
        self._conn = JetStreamClient(replicas=self.replicas, op_timeout=self.op_timeout)
        self._conn.open(bootstrap_servers)
        shared = self._conn.connection
        self._loop, self._nc = shared.loop, shared.nc
        # A handle names the bucket and says how it reads; it asks the server nothing, so a
        # client opened during a fault still opens. The bucket is made on the first op.
        self._kv = KeyValue(name=self.bucket, stream=KV_STREAM_TEMPLATE.format(bucket=self.bucket),
                            pre=KV_PRE_TEMPLATE.format(bucket=self.bucket), js=shared.js,
                            direct=self.reads == DIRECT)

    def close(self) -> None:
        conn, self._conn, self._loop, self._nc, self._kv = self._conn, None, None, None, None
        if conn is not None:
            conn.close()

    def invoke(self, op: Op) -> Op:
        if op.f == "read":
            return self._run(op, self._read(op), unanswered=FAIL)
        if op.f == "write":
            return self._run(op, self._write(op), unanswered=INFO)
        if op.f == "cas":
            return self._run(op, self._cas(op), unanswered=INFO)
        return complete(op, FAIL, op.value, error=f"the kv workload has no op {op.f!r}")

    def _run(self, op: Op, coro: Coroutine[Any, Any, Op], *, unanswered: str) -> Op:
        assert self._loop is not None
        try:
            return self._loop.run(coro, timeout=self.op_timeout + 1.0)
        except TimeoutError as e:
            return complete(op, unanswered, op.value, error=f"timeout: {e}")

    async def _ensure_bucket(self) -> None:
        """Make the bucket once per client; making it again with the same config is a no-op,
        so racing clients agree. A failure only logs: the op then says what went wrong."""
        if self._bucket_made:
            return
        try:
            await self._nc.jetstream(timeout=PUBLISH_TIMEOUT).create_key_value(
                bucket_config(self.bucket, replicas=self.replicas, reads=self.reads))
            self._bucket_made = True
        except Exception as e:  # noqa: BLE001 - making a bucket stores no value
            log.info("bucket %s: %s", self.bucket, _err_text(e))

    async def _get(self, k: int) -> tuple[int | None, int]:
        """(value, revision) of key k; (None, 0) when it has no entry."""
        assert self._kv is not None
        try:
            entry = await asyncio.wait_for(self._kv.get(key_name(k)), self.op_timeout)
        except nats.js.errors.KeyNotFoundError:
            return None, 0
        assert entry.value is not None
        return int(entry.value), entry.revision

    async def _read(self, op: Op) -> Op:
        k = op.value[0]
        try:
            v, _ = await self._get(k)
        except Exception as e:  # noqa: BLE001 - a read changes nothing: fail, whatever it was
            await self._after_no_stream(e)
            return complete(op, FAIL, op.value, error=_err_text(e))
        return complete(op, OK, [k, v])

    async def _write(self, op: Op) -> Op:
        assert self._kv is not None
        k, v = op.value
        await self._ensure_bucket()
        try:
            await self._store(lambda: self._kv.put(key_name(k), str(v).encode()))
        except Exception as e:  # noqa: BLE001 - classified
            return complete(op, _classify(e), op.value, error=_err_text(e))
        return complete(op, OK, [k, v])

    async def _cas(self, op: Op) -> Op:
        assert self._kv is not None
        k, (old, new) = op.value
        await self._ensure_bucket()
        try:
            seen, revision = await self._get(k)
        except Exception as e:  # noqa: BLE001 - no update was sent
            await self._after_no_stream(e)
            return complete(op, FAIL, op.value, error=f"get: {_err_text(e)}")
        if seen != old:
            return complete(op, FAIL, op.value, error=f"get found {seen!r}, not {old!r}: no update sent")
        try:
            await self._store(lambda: self._kv.update(key_name(k), str(new).encode(), last=revision))
        except Exception as e:  # noqa: BLE001 - classified
            return complete(op, _classify(e), op.value, error=f"update at revision {revision}: {_err_text(e)}")
        return complete(op, OK, [k, [old, new]])

    async def _store(self, request: Callable[[], Awaitable[Any]]) -> None:
        """Send a put or update; again while no stream answered it (nothing was stored then)
        and the op has time left; raise what ended the last attempt."""
        deadline = asyncio.get_running_loop().time() + self.op_timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(request(), max(left, 0.1))
                return
            except Exception as e:  # noqa: BLE001 - the caller classifies what is raised
                await self._after_no_stream(e)
                if not _no_stream(e) or deadline - asyncio.get_running_loop().time() < PUBLISH_TIMEOUT:
                    raise
            await asyncio.sleep(RETRY_BACKOFF)

    async def _after_no_stream(self, e: BaseException) -> None:
        if _no_stream(e):
            self._bucket_made = False
            await self._ensure_bucket()


def _no_stream(e: BaseException) -> bool:
    """No stream answered the request: the server forwarded it nowhere, nothing was stored."""
    return isinstance(e, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError)


def _classify(e: BaseException) -> str:
    """`fail` if a write or update `e` ended was certainly not stored, else `info`."""
    if isinstance(e, nats.js.errors.KeyWrongLastSequenceError):
        return FAIL  # refused by the leader before it proposed anything
    if isinstance(e, nats.js.errors.APIError) and e.err_code in WRONG_LAST_SEQUENCE:
        return FAIL
    return classify(e)
