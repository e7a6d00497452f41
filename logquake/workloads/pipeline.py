"""The `pipeline` workload (consume-transform-produce), as Kafka Streams does it.

An input producer writes values 1..n round-robin to input keys (`lq-in-<k>`); workers in
one consumer group read them and write `[k, v]` (the transform keeps the input's identity,
so the checker can count how often each input was processed) to output keys (`lq-out-<k>`).
When the input is marked consumed follows the guarantee profile: before producing
(at-most-once), after the produce is acknowledged (at-least-once), or atomically with it
(exactly-once). Finally every output key is read from the beginning. The history records
inputs (`input`), what each worker consumed, produced and committed (`process`), and the
final reads (`poll`), in the shape logquake.checker.pipeline reads.

The run's shape (`run_pipeline`) is written once; what a client library does for it is a
`PipelineClient`, chosen by the test's `client` in `ADAPTERS` (each system offers its clients,
logquake.systems). This module holds the confluent-kafka one: offsets committed before or
after producing, or inside the producing transaction with send_offsets_to_transaction, and a
read_committed final read. The JetStream one is logquake.systems.jetstream.pipeline.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from logquake.errors import ConfigError
from logquake.guarantees import Guarantee, get_guarantee
from logquake.history import FAIL, INFO, INVOKE, OK, Op
from logquake.workloads.confluent import START_OFFSET

if TYPE_CHECKING:
    from logquake.config import TestConfig

log = logging.getLogger("logquake.pipeline")

GROUP = "lq-pipeline"
# A transactional call given `TXN_CALL_S` as its own timeout is abandoned after this long.
TXN_CALL_S, TXN_CALL_GRACE_S = 15.0, 5.0


def in_topic(k: int) -> str:
    return f"lq-in-{k}"


def out_topic(k: int) -> str:
    return f"lq-out-{k}"


def worker_producer_config(bootstrap: str, profile: Guarantee, worker: int) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "acks": profile.acks, "enable.idempotence": profile.idempotence,
        "linger.ms": 5, "message.timeout.ms": 10_000, "request.timeout.ms": 5_000,
        "reconnect.backoff.max.ms": 1_000, "log.connection.close": False,
    }
    if profile.retries is not None:
        conf["retries"] = profile.retries
    if profile.transactions:
        # One stable id per worker: a restarted worker fences its predecessor (zombie fencing).
        conf.update({"transactional.id": f"lq-pipe-{worker}", "transaction.timeout.ms": 10_000})
    return conf


def worker_consumer_config(bootstrap: str, profile: Guarantee) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
        "isolation.level": profile.isolation, "auto.offset.reset": "earliest",
        # Topics have one partition each: range would give them all to one member.
        "partition.assignment.strategy": "roundrobin",
        "session.timeout.ms": 6_000, "heartbeat.interval.ms": 1_000, "enable.partition.eof": False,
        "reconnect.backoff.max.ms": 1_000, "log.connection.close": False,
        # Input topics are created by their first write, maybe after subscribe(): a
        # subscription only grows to them at a metadata refresh (5 min by default).
        "topic.metadata.refresh.interval.ms": 1_000,
    }


class History:
    """Thread-safe op recorder: index and nanosecond time assigned on record."""

    def __init__(self, sink: Callable[[Op], Op] | None = None) -> None:
        self.ops: list[Op] = []
        self.sink = sink  # e.g. the runner's Recorder.record (streams to history.jsonl)
        self._lock = threading.Lock()
        self._t0 = time.monotonic_ns()

    def record(self, process: Any, type_: str, f: str, value: Any, **extra: Any) -> Op:
        with self._lock:
            op = Op(index=len(self.ops), time=time.monotonic_ns() - self._t0, process=process, type=type_,
                    f=f, value=value, extra=extra)
            if self.sink is not None:
                op = self.sink(op)
            self.ops.append(op)
        return op


def paced_inputs(keys: int, n: int, hist: History, send: Callable[[int, int], int | tuple[str, str]], *,
                 rate: float | None = None, stop: threading.Event | None = None) -> None:
    """Values 1..n (or until `stop`), value v to key v % keys, each an `input` op of process
    -1 (-2, -3... after an info one), at most `rate` per second: every client's input
    producer (`PipelineClient.produce_inputs`). `send(k, v)` stores one input: the offset it
    got, or (fail|info, why), fail only where nothing can have been stored."""
    proc = -1
    start = time.monotonic()
    for v in range(1, n + 1):
        if stop is not None and stop.is_set():
            break
        if rate:
            time.sleep(max(0.0, start + v / rate - time.monotonic()))
        k = v % keys
        hist.record(proc, INVOKE, "input", [["send", k, v]])
        got = send(k, v)
        if isinstance(got, int):
            hist.record(proc, OK, "input", [["send", k, [got, v]]])
        else:
            hist.record(proc, got[0], "input", [["send", k, v]], error=got[1])
            if got[0] == INFO:
                proc -= 1  # an indeterminate op retires its process


def produce_inputs(bootstrap: str, keys: int, n: int, hist: History, *, rate: float | None = None,
                   stop: threading.Event | None = None) -> None:
    """`paced_inputs` through one idempotent, acks=all producer."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "message.timeout.ms": 20_000, "log.connection.close": False})

    def send(k: int, v: int) -> int | tuple[str, str]:
        got: list[Any] = []
        p.produce(in_topic(k), value=str(v).encode(), on_delivery=lambda e, m, got=got: got.append((e, m)))
        p.flush(25.0)
        err, msg = got[0] if got else ("timeout", None)
        return msg.offset() if err is None else (INFO, str(err))

    paced_inputs(keys, n, hist, send, rate=rate, stop=stop)


class Worker:
    """One consume-transform-produce loop; see the module docstring."""

    def __init__(self, index: int, bootstrap: str, profile: Guarantee, keys: int, hist: History) -> None:
        self.index, self.profile, self.keys, self.hist = index, profile, keys, hist
        self.process = index
        self.bootstrap = bootstrap
        # librdkafka's own log lines go to harness.log, as the queue adapters' do.
        self.consumer = Consumer(worker_consumer_config(bootstrap, profile), logger=log)
        self.consumer.subscribe([in_topic(k) for k in range(keys)])
        self.producer = self._new_producer()
        self.reset: list[Any] | None = None  # the batch to re-read after a failed/unknown op
        self.producer_broken = False

    def _new_producer(self) -> Producer:
        p = Producer(worker_producer_config(self.bootstrap, self.profile, self.index), logger=log)
        if self.profile.transactions:
            # Same transactional id: this completes or aborts whatever the old one left open.
            p.init_transactions(30.0)
        return p

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                if self.reset is not None:
                    try:
                        self._reset(self.reset)
                    except KafkaException as e:
                        log.info("worker %d: reset failed, retrying: %s", self.index, e)
                        stop.wait(1.0)
                        continue
                    self.reset = None
                msgs = [m for m in self.consumer.consume(num_messages=50, timeout=0.5) if m.error() is None]
                if msgs:
                    self._process(msgs)
        finally:
            self.consumer.close()

    def _process(self, msgs: list[Any]) -> None:
        consumed = [[_key(m.topic()), m.offset(), int(m.value())] for m in msgs]
        commit = {}
        for m in msgs:
            commit[(m.topic(), m.partition())] = m.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in commit.items()]
        value = {"consumed": consumed, "produced": [], "committed": {str(_key(t)): o for (t, _), o in commit.items()}}
        self.hist.record(self.process, INVOKE, "process", value)
        try:
            getattr(self, "_" + self.profile.commit.replace("-", "_"))(msgs, offsets, value)
        except KafkaException as e:
            kind = FAIL if self.profile.transactions and self._aborted(e) else INFO
            self.hist.record(self.process, kind, "process", value, error=str(e.args[0]))
            if kind == INFO:
                self.process += 1000  # an indeterminate op retires its process
                self.producer_broken = True
            self.reset = msgs
            return
        self.hist.record(self.process, OK, "process", value)

    def _send(self, msgs: list[Any], value: dict[str, Any]) -> None:
        for m in msgs:
            k, v = _key(m.topic()), int(m.value())
            self.producer.produce(out_topic(k), value=json.dumps([k, v]).encode())
            value["produced"].append([k, v])

    def _flush(self) -> None:
        if self.producer.flush(15.0):
            raise KafkaException("produce not acknowledged in time")

    def _before(self, msgs: list[Any], offsets: list[TopicPartition], value: dict[str, Any]) -> None:
        self.consumer.commit(offsets=offsets, asynchronous=False)
        self._send(msgs, value)
        self.producer.flush(15.0)  # at-most-once: a failed send is not retried

    def _after(self, msgs: list[Any], offsets: list[TopicPartition], value: dict[str, Any]) -> None:
        self._send(msgs, value)
        self._flush()
        self.consumer.commit(offsets=offsets, asynchronous=False)

    def _in_transaction(self, msgs: list[Any], offsets: list[TopicPartition], value: dict[str, Any]) -> None:
        self.producer.begin_transaction()
        self._send(msgs, value)
        p, group = self.producer, self.consumer.consumer_group_metadata()
        _bounded(lambda: p.send_offsets_to_transaction(offsets, group, TXN_CALL_S))
        _bounded(lambda: p.commit_transaction(TXN_CALL_S))

    def _aborted(self, e: KafkaException) -> bool:
        """Abort the open transaction; True when the abort is confirmed (nothing visible)."""
        err = e.args[0] if e.args else None
        if err is not None and hasattr(err, "txn_requires_abort") and not err.txn_requires_abort():
            return False
        p = self.producer
        try:
            _bounded(lambda: p.abort_transaction(TXN_CALL_S))
            return True
        except KafkaException:
            return False

    def _reset(self, msgs: list[Any]) -> None:
        """After a failed or unknown op: a fresh transactional producer if the old one may
        be stuck mid-transaction, then continue from the group's committed offsets (what
        the outcome really was), never from the local position."""
        if self.profile.transactions and self.producer_broken:
            self.producer = self._new_producer()
            self.producer_broken = False
        tps = list({(m.topic(), m.partition()): None for m in msgs})
        committed = self.consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=10.0)
        for tp in committed:
            try:
                # Nothing committed: the log's first offset, never a logical one (confluent.START_OFFSET).
                self.consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                  tp.offset if tp.offset >= 0 else START_OFFSET))
            except KafkaException as e:
                log.info("seek failed (partition moved in a rebalance?): %s", e)


def _bounded(call: Callable[[], Any]) -> None:
    """Run a transactional producer call on a helper thread; if it outlives its own timeout
    by TXN_CALL_GRACE_S, raise a timed-out KafkaException and leave it running.

    librdkafka's send_offsets_to_transaction can block past its timeout while the group
    coordinator is down (librdkafka issue 5456: seen here as workers stuck for the whole
    drain after a kill). The caller then records the op as info and replaces the producer;
    the new one's init_transactions fences the stuck one.
    """
    done, raised = threading.Event(), []

    def run() -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            raised.append(e)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="pipe-txn-call").start()
    if not done.wait(TXN_CALL_S + TXN_CALL_GRACE_S):
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "transactional call still running: abandoned"))
    if raised:
        raise raised[0]


def _key(topic: str) -> int:
    return int(topic.rsplit("-", 1)[1])


def drain_outputs(bootstrap: str, keys: int, hist: History, *, want: set[tuple[int, int]],
                  timeout: float) -> None:
    """Read every output topic from the start, read_committed, until every input of `want`
    ((key, value) pairs) was read at least once, or timeout.

    Distinct inputs, not records: under at-least-once an input may be in the output twice,
    so a count of records can reach the number of inputs while some were not read yet.
    """
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lq-pipeline-drain", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": False,
                  "log.connection.close": False})
    c.assign([TopicPartition(out_topic(k), 0, 0) for k in range(keys)])
    missing = set(want)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and missing:
            hist.record(-2, INVOKE, "poll", [["poll"]])
            polled: dict[str, list[Any]] = {}
            for m in c.consume(num_messages=500, timeout=0.5):
                if m.error() is None:
                    kv = json.loads(m.value())
                    polled.setdefault(str(_key(m.topic())), []).append([m.offset(), kv])
                    missing.discard(tuple(kv))
            hist.record(-2, OK, "poll", [["poll", polled]])
    finally:
        c.close()


class PipelineWorker(Protocol):
    """One consume-transform-produce loop of the group, on a thread of its own."""

    index: int

    def run(self, stop: threading.Event) -> None:
        """Process inputs until `stop` is set, recording every batch as a `process` op; then
        let go of the client. Must not raise for anything the system under test does."""
        ...


class PipelineClient(Protocol):
    """What one client library does for the pipeline; `run_pipeline` calls it in this order.

    Every method records its ops in `hist` and classifies errors itself (fail only where
    nothing happened); none of them may raise for what the system under test does.
    """

    def produce_inputs(self, keys: int, n: int, hist: History, *, rate: float | None = None,
                       stop: threading.Event | None = None) -> None:
        """Values 1..n (or until `stop`), value v to key v % keys, each an `input` op of
        process -1 (-2, -3... after an info one), at most `rate` per second."""
        ...

    def worker(self, index: int, keys: int, hist: History) -> PipelineWorker:
        """Worker `index` (its first process number), a member of the one group."""
        ...

    def drain(self, keys: int, hist: History, *, want: set[tuple[int, int]], timeout: float) -> None:
        """Read the output, as `poll` ops of process -2, until every (key, value) of `want`
        was read at least once, or timeout. The workers still run."""
        ...

    def final_read(self, keys: int, hist: History, *, timeout: float) -> None:
        """After the workers stopped: read whatever the drain has not read of the output."""
        ...


@dataclass(frozen=True, kw_only=True)
class PipelineAdapter:
    """One client library's pipeline, as the registry and the checker see it.

    Attributes:
        client: the `client` config value.
        open: (cfg, bootstrap) -> a PipelineClient for that test's cluster.
        configs: cfg -> the (producer, consumer) settings test.json shows.
        shared_consumer: the group hands one key's inputs to several workers at once (a
            shared queue, not partitions owned by one member): nothing orders the outputs of
            one input key, so output-reorder is reported but not bad (logquake.guarantees).
        transactional: a guarantee with transactions (exactly-once) runs as the system's
            transactions (Kafka's: offsets sent to the producing transaction), so the test
            needs them (`Workload.needs`); False where exactly-once is made without them.
    """

    client: str
    open: Callable[[TestConfig, str], PipelineClient]
    configs: Callable[[TestConfig], tuple[dict[str, Any], dict[str, Any]]]
    shared_consumer: bool = False
    transactional: bool = False


# client -> "module:attribute" of its PipelineAdapter; imported on first use (the system's
# client library loads only when that system is tested).
ADAPTERS: Mapping[str, str] = {
    "confluent": "logquake.workloads.pipeline:KAFKA",
    "nats-py": "logquake.systems.jetstream.pipeline:JETSTREAM",
}


def get_adapter(client: str) -> PipelineAdapter:
    """The pipeline adapter of `client`; ConfigError naming `client` where there is none."""
    if client not in ADAPTERS:
        raise ConfigError("client", f"the pipeline workload is driven by {', '.join(ADAPTERS)}; got {client!r}")
    import importlib

    module, _, attr = ADAPTERS[client].partition(":")
    adapter = getattr(importlib.import_module(module), attr)
    assert isinstance(adapter, PipelineAdapter) and adapter.client == client, ADAPTERS[client]
    return adapter


def drive(cfg: TestConfig, bootstrap: str, record: Callable[[Op], Op], during: Callable[[], None]) -> None:
    """The runner's entry (Workload.drive): the test's client's pipeline under the runner's phases."""
    client = get_adapter(cfg.client).open(cfg, bootstrap)
    run_pipeline(bootstrap, get_guarantee(cfg.guarantee), keys=max(cfg.partitions, 4),
                 values=max(1, int(cfg.rate * cfg.time_limit)), workers=cfg.concurrency,
                 hist=History(sink=record), rate=cfg.rate, during=during, timeout=max(60.0, cfg.time_limit),
                 client=client)


class KafkaPipeline:
    """The confluent-kafka PipelineClient: this module's functions on one bootstrap."""

    def __init__(self, bootstrap: str, profile: Guarantee) -> None:
        self.bootstrap, self.profile = bootstrap, profile

    def produce_inputs(self, keys: int, n: int, hist: History, *, rate: float | None = None,
                       stop: threading.Event | None = None) -> None:
        produce_inputs(self.bootstrap, keys, n, hist, rate=rate, stop=stop)

    def worker(self, index: int, keys: int, hist: History) -> Worker:
        return Worker(index, self.bootstrap, self.profile, keys, hist)

    def drain(self, keys: int, hist: History, *, want: set[tuple[int, int]], timeout: float) -> None:
        drain_outputs(self.bootstrap, keys, hist, want=want, timeout=timeout)

    def final_read(self, keys: int, hist: History, *, timeout: float) -> None:
        """Nothing: the drain read while the workers ran, and read_committed sees no more."""


def _kafka_configs(cfg: TestConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    g = get_guarantee(cfg.guarantee)
    return worker_producer_config("<bootstrap>", g, 0), worker_consumer_config("<bootstrap>", g)


KAFKA = PipelineAdapter(client="confluent", open=lambda cfg, bootstrap: KafkaPipeline(bootstrap, get_guarantee(
    cfg.guarantee)), configs=_kafka_configs, transactional=True)


def run_pipeline(bootstrap: str, profile: Guarantee, *, keys: int = 4, values: int = 200, workers: int = 2,
                 timeout: float = 90.0, hist: History | None = None, rate: float | None = None,
                 during: Callable[[], None] | None = None, client: PipelineClient | None = None) -> list[Op]:
    """Run the whole workload against `bootstrap`; the history, ready for check_pipeline.

    Without `during`, all `values` inputs are written first. With it (the runner's main
    phase: faults for a while, then heal), inputs flow at `rate` while it runs and stop when
    it returns; then the output is drained, the workers stopped, and the rest read.
    `client` does the ops (default: confluent-kafka's, on `bootstrap` with `profile`).
    """
    hist = hist or History()
    client = client or KafkaPipeline(bootstrap, profile)
    stop, inputs_over = threading.Event(), threading.Event()
    if during is None:
        client.produce_inputs(keys, values, hist)
    crew = [client.worker(i, keys, hist) for i in range(workers)]
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True, name=f"pipe-{w.index}") for w in crew]
    if during is not None:
        threads.append(threading.Thread(target=client.produce_inputs, args=(keys, values, hist),
                                        kwargs={"rate": rate, "stop": inputs_over}, daemon=True))
    for t in threads:
        t.start()
    try:
        if during is not None:
            during()
            inputs_over.set()
            threads[-1].join(30.0)
        acked = {(m[1], m[2][1]) for op in hist.ops if op.f == "input" and op.type == OK for m in op.value}
        client.drain(keys, hist, want=acked, timeout=timeout)
    finally:
        inputs_over.set()
        stop.set()
        for t in threads:
            t.join(20.0)
        _log_stuck(threads)
    client.final_read(keys, hist, timeout=timeout)
    return hist.ops


def _log_stuck(threads: list[threading.Thread]) -> None:
    """Where each thread still running is stuck (a client call that ignores its timeout?)."""
    frames = sys._current_frames()
    for t in threads:
        if t.is_alive() and t.ident in frames:
            stack = "".join(traceback.format_stack(frames[t.ident]))
            log.warning("%s still running after the drain:\n%s", t.name, stack)
