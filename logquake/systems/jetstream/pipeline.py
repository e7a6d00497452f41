"""The pipeline workload on NATS JetStream: the nats-py `PipelineClient` (logquake.workloads.pipeline).

How the pipeline's words map onto JetStream (docs/jetstream-pipeline.md):

- input key k is stream `lq-in-<k>` holding subject `lq.in.<k>`, output key k stream
  `lq-out-<k>` holding `lq.out.<k>`, each with the test's replicas and file storage, all made
  before the first input is written. An offset is a stream sequence.
- the input producer publishes value v with `Nats-Msg-Id` `in-<k>-<v>` and retries until a
  PubAck or `INPUT_TIMEOUT`: an input is stored once however often it is sent (Kafka's
  idempotent input producer).
- the consumer group is one durable pull consumer `lq-pipeline` on each input stream, with
  explicit acks and `ack_wait`: every worker binds to it and the server splits the messages
  among the workers' fetches; an input not acked within ack_wait is delivered again, to any
  of them. Unlike a Kafka partition, a stream is not owned by one member: several workers
  process one key's inputs at once, so nothing orders one key's outputs
  (`PipelineAdapter.shared_consumer`: output-reorder is reported, not bad).
- a worker's batch is what one fetch from every input stream returned, one `process` op.
  The result of input (k, v) is `[k, v]` published to output key k. When the input is acked
  follows the guarantee (`Guarantee.commit`):
  before (at-most-once): the batch's inputs double acked (`ack_sync`: the server confirms
  each), then each result published once; an input whose ack the server did not confirm, or
  confirmed only after ack_wait (it may have been delivered again meanwhile), is not
  processed (loss is allowed, twice is not).
  after (at-least-once, idempotent): input by input, the result is published, retried until
  its PubAck, then the input acked.
  in-transaction (exactly-once): as after, with the result's `Nats-Msg-Id` derived from the
  input (`<input stream>:<sequence>`) and a double ack: a redelivered input (its ack lost,
  its worker crashed, its ack_wait past) is published again under the same Msg-Id, which
  the output stream drops as a duplicate within its duplicate window. This is what NATS
  offers for exactly-once; JetStream has no transaction spanning a publish and an ack.
  There a publish or an ack that failed stops the batch: it and the inputs after it are
  nak'd (delivered again at once).
- the final read reads every output stream from the first sequence with the stream's
  get-message API (answered by the stream leader): while the workers run until every
  acknowledged input was read, then, once they stopped, up to each stream's last sequence
  (recorded as `ends`, last sequence + 1, on the first final poll).

The workers, the input producer and the reader each hold a connection on the process's one
event loop (client.py's `_Loop`); errors are classified as the queue adapter's (`classify`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from logquake.guarantees import Guarantee, get_guarantee
from logquake.history import FAIL, INFO, INVOKE, OK, Op
from logquake.systems.jetstream.client import (
    FIRST_SEQ,
    PUBLISH_TIMEOUT,
    RETRY_BACKOFF,
    _err_text,
    _Loop,
    classify,
)
from logquake.systems.jetstream.server import duration_seconds
from logquake.workloads.pipeline import History, PipelineAdapter, paced_inputs

if TYPE_CHECKING:
    from logquake.config import TestConfig

__all__ = ["GROUP", "JETSTREAM", "JetStreamPipeline", "Worker", "in_stream", "out_stream", "result_msg_id"]

log = logging.getLogger("logquake.pipeline.nats-py")

GROUP = "lq-pipeline"  # the durable consumer every worker binds to, one per input stream
ACK_WAIT_S = 5.0  # an input not acked within this is delivered again
FETCH_BATCH = 20  # inputs one fetch asks of each input stream
FETCH_S = 0.5  # how long a fetch waits for inputs
ACK_TIMEOUT = 2.0  # a double ack waits this long for the server's confirmation
OP_TIMEOUT = 15.0  # one worker batch: publishes are retried until then
INPUT_TIMEOUT = 20.0  # one input publish, all attempts
SETUP_TIMEOUT = 60.0  # making the streams and consumers, all attempts
READ_BATCH = 200  # messages one poll reads per output stream at most
CALL_SLACK = 5.0  # a call on the loop is abandoned this long after its own deadline


def in_stream(k: int) -> str:
    return f"lq-in-{k}"


def out_stream(k: int) -> str:
    return f"lq-out-{k}"


def in_subject(k: int) -> str:
    return f"lq.in.{k}"


def out_subject(k: int) -> str:
    return f"lq.out.{k}"


def result_msg_id(stream: str, seq: int) -> str:
    """The output's Msg-Id for the input at `seq` of `stream`: the same for every delivery of it."""
    return f"{stream}:{seq}"


async def _quiet(*_: Any) -> None:
    """The pipeline's connections' error callback: their errors are not logged."""
    return None


async def publish(js: Any, subj: str, data: bytes, *, msg_id: str | None, retries: int | None,
                  deadline: float) -> api.PubAck | tuple[str, str]:
    """The PubAck, or (fail|info, why): retried until `deadline` (loop time) or after `retries`
    attempts that may have stored it; fail only when no attempt can have (client.classify)."""
    loop = asyncio.get_running_loop()
    maybe_stored, verdict, errors = 0, FAIL, []
    while True:
        try:
            return await js.publish(subj, data, timeout=PUBLISH_TIMEOUT,
                                    headers={"Nats-Msg-Id": msg_id} if msg_id else None)
        except Exception as e:  # noqa: BLE001 - classified below
            errors.append(_err_text(e))
            if classify(e) == INFO:
                verdict, maybe_stored = INFO, maybe_stored + 1
        if (retries is not None and maybe_stored > retries) or deadline - loop.time() < PUBLISH_TIMEOUT:
            return verdict, "; ".join(errors[-3:])
        await asyncio.sleep(RETRY_BACKOFF)


class JetStreamPipeline:
    """The pipeline's ops on one JetStream cluster (module docstring): streams, inputs, workers, reads."""

    def __init__(self, bootstrap: str, profile: Guarantee, *, replicas: int = 3, duplicate_window: str | None = None,
                 ack_wait: float = ACK_WAIT_S) -> None:
        self.bootstrap, self.profile = bootstrap, profile
        self.replicas, self.duplicate_window, self.ack_wait = replicas, duplicate_window, ack_wait
        self._lock = threading.Lock()
        self._ready: set[int] = set()  # keys whose streams and consumer exist
        self._loop = _Loop()
        self._reader: Any = None  # the admin and reading connection
        self._position: dict[int, int] = {}  # output key -> next sequence to read

    # -- setup --------------------------------------------------------------------------

    def _call(self, coro: Any, timeout: float) -> Any:
        """Run `coro` on the loop, the reading connection connected first if it is not: by
        `_Loop.connect`, which leaves no connection behind, not inside a call that a
        timeout may cancel mid-connect."""
        try:
            if self._reader is None:
                self._reader = self._loop.connect(self.bootstrap, error_cb=_quiet)
        except BaseException:
            coro.close()
            raise
        return self._loop.run(coro, timeout + CALL_SLACK)

    def _js(self) -> Any:
        """The JetStream context of the reading connection (connected by `_call`)."""
        return self._reader.jetstream(timeout=PUBLISH_TIMEOUT)

    def ensure_streams(self, keys: int) -> None:
        """Every key's input and output stream and the input's consumer, retried until made or
        SETUP_TIMEOUT (then logged: the ops that need them fail and say why)."""
        with self._lock:
            deadline = time.monotonic() + SETUP_TIMEOUT
            for k in range(keys):
                while k not in self._ready:
                    try:
                        self._call(self._make(k), 10.0)
                        self._ready.add(k)
                    except Exception as e:  # noqa: BLE001 - the cluster may still be electing
                        if time.monotonic() > deadline:
                            log.error("streams of key %d not made in %.0f s: %s", k, SETUP_TIMEOUT, _err_text(e))
                            break
                        time.sleep(0.5)

    def _stream(self, name: str, subj: str) -> api.StreamConfig:
        cfg = api.StreamConfig(name=name, subjects=[subj], num_replicas=self.replicas, storage=api.StorageType.FILE)
        if self.duplicate_window is not None:
            cfg.duplicate_window = duration_seconds(self.duplicate_window)
        return cfg

    async def _make(self, k: int) -> None:
        js = self._js()
        await js.add_stream(self._stream(in_stream(k), in_subject(k)))
        await js.add_stream(self._stream(out_stream(k), out_subject(k)))
        await js.add_consumer(in_stream(k), api.ConsumerConfig(
            durable_name=GROUP, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=self.ack_wait,
            deliver_policy=api.DeliverPolicy.ALL))

    # -- PipelineClient -----------------------------------------------------------------

    def produce_inputs(self, keys: int, n: int, hist: History, *, rate: float | None = None,
                       stop: threading.Event | None = None) -> None:
        """Values 1..n (or until `stop`) to input key v % keys, each an `input` op (paced_inputs)."""
        self.ensure_streams(keys)
        loop = _Loop()
        nc = loop.connect(self.bootstrap, error_cb=_quiet)
        js = nc.jetstream(timeout=PUBLISH_TIMEOUT)

        def send(k: int, v: int) -> int | tuple[str, str]:
            try:
                got = loop.run(self._input(js, k, v), INPUT_TIMEOUT + CALL_SLACK)
            except TimeoutError as e:
                return INFO, _err_text(e)
            return got.seq if isinstance(got, api.PubAck) else got

        try:
            paced_inputs(keys, n, hist, send, rate=rate, stop=stop)
        finally:
            loop.close(nc)

    async def _input(self, js: Any, k: int, v: int) -> api.PubAck | tuple[str, str]:
        deadline = asyncio.get_running_loop().time() + INPUT_TIMEOUT
        return await publish(js, in_subject(k), str(v).encode(), msg_id=f"in-{k}-{v}", retries=None,
                             deadline=deadline)

    def worker(self, index: int, keys: int, hist: History) -> Worker:
        self.ensure_streams(keys)
        return Worker(index, self, keys, hist)

    def drain(self, keys: int, hist: History, *, want: set[tuple[int, int]], timeout: float) -> None:
        """Read the output streams onwards until every input of `want` was read, or timeout."""
        missing, deadline = set(want), time.monotonic() + timeout
        while missing and time.monotonic() < deadline:
            read = self._poll(keys, hist)
            missing -= read
            if not read:
                time.sleep(0.5)

    def final_read(self, keys: int, hist: History, *, timeout: float) -> None:
        """Read every output stream on up to its last sequence, now that no worker writes."""
        deadline = time.monotonic() + timeout
        ends: dict[int, int] = {}
        while len(ends) < keys and time.monotonic() < deadline:
            for k in range(keys):
                if k not in ends:
                    try:
                        ends[k] = self._call(self._end(k), PUBLISH_TIMEOUT)
                    except Exception as e:  # noqa: BLE001 - asked again until the deadline
                        log.info("end of %s: %s", out_stream(k), _err_text(e))
            if len(ends) < keys:
                time.sleep(0.5)
        # At least one final poll, the first carrying the ends; more until they are reached.
        extra: dict[str, Any] = {"final": True, "ends": {str(k): e for k, e in sorted(ends.items())}}
        while True:
            self._poll(keys, hist, **extra)
            extra = {"final": True}
            if time.monotonic() > deadline or all(self._position.get(k, FIRST_SEQ) >= e for k, e in ends.items()):
                break
        if len(ends) < keys or any(self._position.get(k, FIRST_SEQ) < e for k, e in ends.items()):
            log.warning("final read incomplete: ends %s, read up to %s", ends, self._position)
        self.close()

    async def _end(self, k: int) -> int:
        """Output key k's end of the log: its stream's last sequence + 1, from the leader."""
        info = await self._js().stream_info(out_stream(k))
        return int(info.state.last_seq) + 1

    def _poll(self, keys: int, hist: History, **extra: Any) -> set[tuple[int, int]]:
        """One `poll` op of process -2 over every output stream from its position on: the
        inputs it read; an info poll reads nothing (positions stay)."""
        hist.record(-2, INVOKE, "poll", [["poll"]], **extra)
        try:
            got = self._call(self._read(keys), 10.0)
        except Exception as e:  # noqa: BLE001 - nothing read, as far as the history goes
            hist.record(-2, INFO, "poll", [["poll"]], error=_err_text(e), **extra)
            return set()
        polled: dict[str, list[Any]] = {}
        for k, msgs in got.items():
            for seq, kv in msgs:
                polled.setdefault(str(k), []).append([seq, kv])
                self._position[k] = seq + 1
        hist.record(-2, OK, "poll", [["poll", polled]], **extra)
        return {tuple(kv) for msgs in got.values() for _, kv in msgs}

    async def _read(self, keys: int) -> dict[int, list[tuple[int, list[int]]]]:
        js = self._js()
        out: dict[int, list[tuple[int, list[int]]]] = {}
        for k in range(keys):
            seq, got = self._position.get(k, FIRST_SEQ), []
            while len(got) < READ_BATCH:
                try:
                    m = await js.get_msg(out_stream(k), seq=seq, subject=out_subject(k), next=True)
                except nats.js.errors.NotFoundError:
                    break  # nothing at or after seq: read up to the end
                got.append((m.seq, json.loads(m.data)))
                seq = m.seq + 1
            out[k] = got
        return out

    def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            self._loop.close(reader)


class Worker:
    """One member of the group: fetches a batch, processes it input by input per the profile."""

    def __init__(self, index: int, pipe: JetStreamPipeline, keys: int, hist: History) -> None:
        self.index, self.process, self.pipe, self.keys, self.hist = index, index, pipe, keys, hist
        self.profile = pipe.profile
        self._loop = _Loop()
        self._nc = self._loop.connect(pipe.bootstrap, error_cb=_quiet)
        self._js = self._nc.jetstream(timeout=PUBLISH_TIMEOUT)
        self._subs: dict[int, Any] = {}
        self._fetched_at = time.monotonic()  # when the last fetch was asked (the loop's clock)

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                msgs = self.fetch()
                if msgs:
                    self.process_batch(msgs)
        finally:
            self.close()

    def fetch(self) -> list[Any]:
        """What one fetch from every input stream delivered; after a fetch that only failed
        (the cluster down, say), a pause, so a worker does not spin on the errors."""
        self._fetched_at = time.monotonic()  # before the server can have delivered anything
        try:
            msgs, errors = self._loop.run(self._fetch(), FETCH_S + CALL_SLACK)
        except Exception as e:  # noqa: BLE001 - a fetch that failed delivered nothing we know of
            msgs, errors = [], [_err_text(e)]
        if errors:
            log.info("worker %d: fetch: %s", self.index, "; ".join(sorted(set(errors))))
            if not msgs:
                time.sleep(FETCH_S)
        return msgs

    async def _fetch(self) -> tuple[list[Any], list[str]]:
        for k in range(self.keys):
            if k not in self._subs:
                self._subs[k] = await self._js.pull_subscribe_bind(durable=GROUP, stream=in_stream(k))
        got = await asyncio.gather(*(self._fetch_key(k) for k in range(self.keys)), return_exceptions=True)
        msgs: list[Any] = []
        errors: list[str] = []
        for k, res in enumerate(got):
            if isinstance(res, BaseException):
                errors.append(f"{in_stream(k)}: {_err_text(res)}")
            else:
                msgs += res
        return msgs, errors

    async def _fetch_key(self, k: int) -> list[Any]:
        try:
            return await self._subs[k].fetch(batch=FETCH_BATCH, timeout=FETCH_S)
        except nats.errors.TimeoutError:
            return []

    def process_batch(self, msgs: list[Any]) -> Op:
        """One `process` op: every input of `msgs` through the profile's steps; info (and a
        new process number) unless every step was confirmed."""
        value: dict[str, Any] = {"consumed": [_consumed(m) for m in msgs], "produced": [], "acked": [],
                                 "deduplicated": [], "skipped": []}
        self.hist.record(self.process, INVOKE, "process", _copy(value))
        try:
            kind, why = self._loop.run(self._steps(msgs, value), OP_TIMEOUT + CALL_SLACK)
        except Exception as e:  # noqa: BLE001 - timed out on the loop: whatever happened, happened
            kind, why = INFO, _err_text(e)
        extra = {"error": why} if why else {}
        op = self.hist.record(self.process, kind, "process", _copy(value), **extra)
        if kind == INFO:
            self.process += 1000  # an indeterminate op retires its process
        return op

    async def _steps(self, msgs: list[Any], value: dict[str, Any]) -> tuple[str, str | None]:
        """The batch's inputs per the profile; fail only when nothing happened at all."""
        deadline = asyncio.get_running_loop().time() + OP_TIMEOUT
        if self.profile.commit == "before":
            return await self._ack_first(msgs, value, deadline)
        for i, m in enumerate(msgs):
            failed = await self._one(m, value, deadline)
            if failed is not None:
                kind, why = failed
                await _nak(msgs[i:])
                nothing = kind == FAIL and not value["produced"] and not value["acked"]
                return (FAIL if nothing else INFO), why
        return OK, None

    async def _one(self, m: Any, value: dict[str, Any], deadline: float) -> tuple[str, str] | None:
        """Input m processed, then acked: None when both are confirmed, else (fail|info, why);
        at the first input not confirmed the batch stops and the rest are nak'd."""
        got = await self._produce(m, value, deadline)
        if isinstance(got, tuple):
            return got
        why = await self._ack(m, value, double=self.profile.commit == "in-transaction")
        return None if why is None else (INFO, why)

    async def _ack_first(self, msgs: list[Any], value: dict[str, Any], deadline: float) -> tuple[str, str | None]:
        """at-most-once: every input acked (double ack) before any is processed, and processed
        only if the server confirmed its ack within ack_wait of the fetch.

        An ack confirmed later may have come after the server gave the input to another
        worker: it accepts an ack of an earlier delivery (nats-server issue 4786), so the
        confirmation alone does not say this worker is the input's only processor (the local
        time-keeping that issue asks of exactly-once consumers). So the batch's acks go out
        together, before any publish can hold them up.
        """
        loop = asyncio.get_running_loop()
        unconfirmed = [why for why in await asyncio.gather(*(self._ack(m, value, double=True) for m in msgs))
                       if why is not None]
        acked = {(k, seq) for k, seq in value["acked"]}
        if loop.time() > self._fetched_at + self.pipe.ack_wait:
            value["skipped"] = [list(_input(m)) for m in msgs if (_input(m)[0], _seq(m)) in acked]
            unconfirmed.append(f"acks confirmed {loop.time() - self._fetched_at:.1f} s after the fetch, past "
                               f"ack_wait: {len(value['skipped'])} inputs not processed")
            return INFO, "; ".join(unconfirmed[:3])
        for m in msgs:
            if (_input(m)[0], _seq(m)) in acked:  # an input whose ack is unknown is not processed
                if isinstance(got := await self._produce(m, value, deadline), tuple):
                    unconfirmed.append(got[1])
        return (INFO, "; ".join(unconfirmed[:3])) if unconfirmed else (OK, None)

    async def _produce(self, m: Any, value: dict[str, Any], deadline: float) -> api.PubAck | tuple[str, str]:
        """Input m's result published (publish_result), recorded in `value` once it has a PubAck."""
        k, v = _input(m)
        got = await self.publish_result(m, deadline)
        if not isinstance(got, api.PubAck):
            return got[0], f"publishing [{k}, {v}]: {got[1]}"
        value["produced"].append([k, v])
        if got.duplicate:
            value["deduplicated"].append([k, v])
        return got

    async def publish_result(self, m: Any, deadline: float | None = None) -> api.PubAck | tuple[str, str]:
        """Input m's result to its output stream: with a Msg-Id derived from m where the profile
        is idempotent, retried per the profile's retries until `deadline` (loop time)."""
        k, v = _input(m)
        seq = _seq(m)
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + OP_TIMEOUT
        msg_id = result_msg_id(in_stream(k), seq) if self.profile.idempotence else None
        return await publish(self._js, out_subject(k), json.dumps([k, v]).encode(), msg_id=msg_id,
                             retries=self.profile.retries, deadline=deadline)

    async def _ack(self, m: Any, value: dict[str, Any], *, double: bool) -> str | None:
        try:
            if double:
                await m.ack_sync(timeout=ACK_TIMEOUT)
            else:
                await m.ack()
        except Exception as e:  # noqa: BLE001 - the ack may or may not have reached the server
            return f"acking {list(_input(m))}: {_err_text(e)}"
        value["acked"].append([_input(m)[0], _seq(m)])
        return None

    def publish_unacked(self, msgs: list[Any]) -> list[api.PubAck | tuple[str, str]]:
        """Publish the results of `msgs` and ack none of them: what a worker that crashes
        between its publish and its ack leaves behind (close() next, as the crash)."""
        async def all_of() -> list[api.PubAck | tuple[str, str]]:
            return [await self.publish_result(m) for m in msgs]

        return self._loop.run(all_of(), OP_TIMEOUT * max(1, len(msgs)) + CALL_SLACK)

    def close(self) -> None:
        """Drop the connection without acking anything more (a crash, as far as the server knows)."""
        nc, self._nc = self._nc, None
        if nc is not None:
            self._loop.close(nc)


def _input(m: Any) -> tuple[int, int]:
    """(input key, value) of a delivered input message."""
    return int(m.subject.rsplit(".", 1)[1]), int(m.data)


def _seq(m: Any) -> int:
    """The input's sequence in its stream (the same for every delivery of it)."""
    return int(m.metadata.sequence.stream)


def _consumed(m: Any) -> list[int]:
    k, v = _input(m)
    return [k, _seq(m), v]


def _copy(value: dict[str, Any]) -> dict[str, Any]:
    """A snapshot of a batch's value: the loop may still add to it after a timed-out call."""
    return {key: [list(x) for x in items] for key, items in value.items()}


async def _nak(msgs: list[Any]) -> None:
    """Ask for these inputs again at once; a nak lost is an ack_wait's delay, nothing more."""
    for m in msgs:
        try:
            await m.nak()
        except Exception as e:  # noqa: BLE001
            log.debug("nak: %s", _err_text(e))


# -- the adapter record -------------------------------------------------------------------


def _open(cfg: TestConfig, bootstrap: str) -> JetStreamPipeline:
    from logquake.systems.jetstream.system import replicas, settings

    return JetStreamPipeline(bootstrap, get_guarantee(cfg.guarantee), replicas=replicas(cfg),
                             duplicate_window=settings(cfg).duplicate_window)


def _configs(cfg: TestConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """What test.json says the workers do: (producer, consumer), as the Kafka pipeline's configs."""
    from logquake.systems.jetstream.system import replicas, settings

    g = get_guarantee(cfg.guarantee)
    stream: dict[str, Any] = {"storage": "file", "num_replicas": replicas(cfg)}
    if (window := settings(cfg).duplicate_window) is not None:
        stream["duplicate_window"] = window
    ack = {"before": "double ack (ack_sync) before publishing the result once",
           "after": "ack after the result's PubAck",
           "in-transaction": "double ack (ack_sync) after the result's PubAck"}[g.commit]
    return ({"Nats-Msg-Id": "<input stream>:<input sequence>" if g.idempotence else False,
             "retries": "until the batch's deadline" if g.retries is None else g.retries,
             "publish_timeout_s": PUBLISH_TIMEOUT, "stream": stream},
            {"consumer": f"durable pull consumer {GROUP} per input stream, shared by every worker",
             "ack_policy": "explicit", "ack_wait_s": ACK_WAIT_S, "ack": ack})


# Exactly-once here is the derived Msg-Id and the double ack, not an atomic batch: a server
# without atomic batches (before 2.12) runs it.
JETSTREAM = PipelineAdapter(client="nats-py", open=_open, configs=_configs, shared_consumer=True, transactional=False)
