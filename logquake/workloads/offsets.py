"""The `offsets` workload: consumer-group committed offsets as registers (docs/architecture.md).

Each key is one (group, topic-partition): key k is partition `k % partitions` of topic
`lq-offsets`, committed by group `lq-offsets-<k // partitions>`. A `write` commits an
offset (OffsetCommit), a `read` fetches the committed one (OffsetFetch); the history is a
set of independent registers, checked for linearizability with the register model
(logquake.checker.linear). Values written are unique and increasing per key (1, 2, 3...),
so every read names the one write it saw.

History shape (what `operations_from_history` reads as jepsen.independent pairs):

    invoke {"f": "write", "value": [k, v]}      ok   {"f": "write", "value": [k, v]}
    invoke {"f": "read",  "value": [k, null]}   ok   {"f": "read",  "value": [k, v or null]}

Commits are standalone, as a consumer using assign() makes them: no JoinGroup, generation
-1 and an empty member id, which Kafka accepts for a group with no members. So no
rebalance ever fences a worker and every rejection is about the offsets themselves.

`OffsetsGenerator` is pure (`op(ctx)` / `update(ctx, event)`), like the queue generator:
in the main phase each worker reads or writes a random key; in the drain phase each worker
reads every key once (again after a read that did not succeed), so a commit lost in the
faults shows up as a stale final read. `ConfluentOffsetsClient` (the default) does the ops through
librdkafka (`Consumer.commit(offsets=...)`, its outcome awaited for at most `op_timeout` s, and
`committed()`), one consumer per group, each made on first use; `KafkaPythonOffsetsClient`
the same through kafka-python (`client: kafka-python`).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logquake.checker import check_linearizable, get_model
from logquake.config import TestConfig
from logquake.history import FAIL, INFO, OK, Op
from logquake.workloads.client import complete
from logquake.workloads.generator import DRAIN, Context, invoke, settle_drain_read

log = logging.getLogger("logquake.client.offsets")

TOPIC = "lq-offsets"
GROUP_PREFIX = "lq-offsets-"
READ_SHARE = 0.5


@dataclass(frozen=True, kw_only=True)
class OffsetKeys:
    """The fixed set of keys: `groups` x `partitions` (group, partition) pairs of one topic.

    Four groups, so that each of logquake's broker's three `__consumer_offsets` partitions
    coordinates at least one (faults aimed at a coordinator then always hit some key).
    """

    groups: int = 4
    partitions: int = 2
    topic: str = TOPIC

    @property
    def keys(self) -> list[int]:
        return list(range(self.groups * self.partitions))

    def group(self, k: int) -> str:
        return f"{GROUP_PREFIX}{k // self.partitions}"

    def topic_partition(self, k: int) -> tuple[str, int]:
        return self.topic, k % self.partitions

    def describe(self) -> dict[str, str]:
        """Key -> "group topic/partition", for people reading a history or a verdict."""
        return {str(k): f"{self.group(k)} {self.topic}/{k % self.partitions}" for k in self.keys}


# -- the generator (pure) ------------------------------------------------------------------


@dataclass
class _Worker:
    rng: random.Random
    drain_left: list[int] | None = None  # keys still to read in the drain phase


@dataclass
class OffsetsGenerator:
    """Chooses the offsets workload's ops; see the module docstring."""

    seed: int
    keys: OffsetKeys = field(default_factory=OffsetKeys)
    read_share: float = READ_SHARE
    next_value: dict[int, int] = field(default_factory=dict)
    _workers: dict[int, _Worker] = field(default_factory=dict)

    def _worker(self, w: int) -> _Worker:
        st = self._workers.get(w)
        if st is None:
            st = self._workers[w] = _Worker(rng=random.Random(f"offsets-{self.seed}-{w}"))
        return st

    def fresh_client(self, worker: int) -> None:
        """A client replaced: nothing to redo (commits and fetches carry no client state)."""

    def op(self, ctx: Context) -> Op | None:
        """The next invocation for this worker, or None when it has nothing left to do."""
        st = self._worker(ctx.worker)
        if ctx.phase == DRAIN:
            if st.drain_left is None:
                st.drain_left = list(self.keys.keys)
            return invoke(ctx, "read", [st.drain_left[0], None]) if st.drain_left else None
        k = st.rng.choice(self.keys.keys)
        if st.rng.random() < self.read_share:
            return invoke(ctx, "read", [k, None])
        v = self.next_value.get(k, 1)
        self.next_value[k] = v + 1
        return invoke(ctx, "write", [k, v])

    def update(self, ctx: Context, event: Op) -> None:
        """Drain: a key is done once one of this worker's reads of it succeeded; a key
        whose read did not goes to the back of the line."""
        st = self._worker(ctx.worker)
        if ctx.phase != DRAIN or event.f != "read" or not st.drain_left:
            return
        settle_drain_read(st.drain_left, event)


# -- the confluent-kafka client -------------------------------------------------------------

# OffsetCommit errors after which the offset was certainly not written: the coordinator
# checks these before it appends to __consumer_offsets, or librdkafka never sent the
# request. Each says why. Anything else (NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE can
# come after the append, when leadership moves while it replicates; timeouts; transport
# errors) is info.
_FAIL: dict[int, str] = {
    # Membership checks come before the append; a standalone commit only meets them when
    # some consumer has joined the group.
    KafkaError.ILLEGAL_GENERATION: "membership check, before the append",
    KafkaError.UNKNOWN_MEMBER_ID: "membership check, before the append",
    KafkaError.REBALANCE_IN_PROGRESS: "membership check, before the append",
    KafkaError.FENCED_INSTANCE_ID: "membership check, before the append",
    # Validation and authorization, before the append.
    KafkaError.OFFSET_METADATA_TOO_LARGE: "validated before the append",
    KafkaError.INVALID_COMMIT_OFFSET_SIZE: "the offsets batch was refused whole",
    KafkaError.INVALID_GROUP_ID: "validated before the append",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "refused before the append",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "refused before the append",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "no such partition, refused before the append",
    # The coordinator is still loading the group's offsets: it appends nothing meanwhile.
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: "coordinator loading, nothing appended",
    # Local: librdkafka sent nothing.
    KafkaError._NO_OFFSET: "nothing to commit, never sent",
    KafkaError._INVALID_ARG: "invalid argument, never sent",
}


def classify_commit(err: KafkaError | None) -> str:
    """`fail` if `err` guarantees the commit was not written, else `info`."""
    return FAIL if err is not None and err.code() in _FAIL else INFO


def _error(e: BaseException | KafkaError) -> KafkaError | None:
    if isinstance(e, KafkaError):
        return e
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0]
    return None


def _err_text(e: BaseException | KafkaError) -> str:
    err = _error(e)
    return (err.name() or err.str()) if err is not None else f"{type(e).__name__}: {e}"


OP_TIMEOUT = 10.0  # s an op waits for its answer before it is info


def consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    """A consumer that never joins its group: it only commits and fetches offsets."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "socket.timeout.ms": 5_000,
        "reconnect.backoff.max.ms": 1_000,
        "topic.metadata.refresh.interval.ms": 2_000,
        "log.connection.close": False,
    }


def kafka_python_consumer_config(bootstrap: str, group: str, op_timeout: float) -> dict[str, Any]:
    """kafka-python's KafkaConsumer arguments for the same never-joining consumer."""
    return {"bootstrap_servers": bootstrap.split(","), "group_id": group, "enable_auto_commit": False,
            "request_timeout_ms": int(op_timeout * 1000), "reconnect_backoff_max_ms": 1_000}


_prepared: set[str] = set()
_prepared_lock = threading.Lock()


def ensure_topic(bootstrap: str, keys: OffsetKeys, *, replication_factor: int, timeout: float = 30.0) -> None:
    """Create the offsets topic once per cluster (Kafka refuses commits for unknown partitions).

    A failure is only logged: the commits then fail with UNKNOWN_TOPIC_OR_PARTITION, which
    the history shows.
    """
    with _prepared_lock:
        if bootstrap in _prepared:
            return
        admin = AdminClient({"bootstrap.servers": bootstrap, "log.connection.close": False})
        futures = admin.create_topics([NewTopic(keys.topic, keys.partitions, replication_factor)],
                                      operation_timeout=timeout, request_timeout=timeout)
        try:
            futures[keys.topic].result(timeout)
        except KafkaException as e:
            if _error(e) is None or _error(e).code() != KafkaError.TOPIC_ALREADY_EXISTS:  # type: ignore[union-attr]
                log.warning("could not create topic %s: %s", keys.topic, _err_text(e))
                return
        _prepared.add(bootstrap)


class _GroupClient:
    """What both libraries' clients share: the keys' topic, made on open, and one consumer
    per group, made on first use; `_new_consumer` is the library's own part."""

    def __init__(self, *, keys: OffsetKeys | None = None, replication_factor: int = 3,
                 op_timeout: float = OP_TIMEOUT) -> None:
        self.keys = keys or OffsetKeys()
        self.replication_factor = replication_factor
        self.op_timeout = op_timeout
        self._bootstrap = ""
        self._consumers: dict[str, Any] = {}

    def open(self, bootstrap_servers: str) -> None:
        self._bootstrap = bootstrap_servers
        ensure_topic(bootstrap_servers, self.keys, replication_factor=self.replication_factor)

    def _consumer(self, k: int) -> Any:
        group = self.keys.group(k)
        c = self._consumers.get(group)
        if c is None:
            c = self._consumers[group] = self._new_consumer(group)
        return c

    def _new_consumer(self, group: str) -> Any:
        raise NotImplementedError


class ConfluentOffsetsClient(_GroupClient):
    """Commits and fetches offsets through librdkafka; see the module docstring."""

    def __init__(self, *, keys: OffsetKeys | None = None, replication_factor: int = 3,
                 op_timeout: float = OP_TIMEOUT) -> None:
        super().__init__(keys=keys, replication_factor=replication_factor, op_timeout=op_timeout)
        self._outcomes: dict[tuple[str, str, int, int], KafkaError | None] = {}  # on_commit's answers

    def _new_consumer(self, group: str) -> Consumer:
        conf = {**consumer_config(self._bootstrap, group),
                "on_commit": lambda err, parts: self._on_commit(group, err, parts)}
        return Consumer(conf, logger=log)

    def _on_commit(self, group: str, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        # Values are unique per key, so (group, topic, partition, offset) names the op it answers,
        # even an earlier op's commit answered late, after that op ended info.
        for tp in partitions:
            self._outcomes[(group, tp.topic, tp.partition, tp.offset)] = tp.error if tp.error is not None else err

    def invoke(self, op: Op) -> Op:
        return self._write(op) if op.f == "write" else self._read(op)

    def _write(self, op: Op) -> Op:
        """Commit asynchronously and wait for the outcome at most `op_timeout` s: a
        synchronous commit has no timeout and waits out a whole outage."""
        k, v = op.value
        topic, p = self.keys.topic_partition(k)
        c = self._consumer(k)
        try:
            c.commit(offsets=[TopicPartition(topic, p, v)], asynchronous=True)
        except KafkaException as e:
            return complete(op, classify_commit(_error(e)), op.value, error=_err_text(e))
        deadline = time.monotonic() + self.op_timeout
        key = (self.keys.group(k), topic, p, v)
        while key not in self._outcomes:
            if time.monotonic() > deadline:
                # The request may still be sent or retried: it can take effect later.
                return complete(op, INFO, op.value, error="timeout")
            c.poll(0.05)  # serves on_commit; this consumer has nothing assigned to fetch
        err = self._outcomes.pop(key)
        if err is not None:
            return complete(op, classify_commit(err), op.value, error=_err_text(err))
        return complete(op, OK, [k, v])

    def _read(self, op: Op) -> Op:
        # A read changes nothing, so whatever went wrong it is `fail`: the checker then
        # ignores it, as it would an indeterminate read, and the process lives on.
        k = op.value[0]
        topic, p = self.keys.topic_partition(k)
        try:
            got = self._consumer(k).committed([TopicPartition(topic, p)], timeout=self.op_timeout)
        except KafkaException as e:
            return complete(op, FAIL, op.value, error=_err_text(e))
        tp = got[0]
        if tp.error is not None:
            return complete(op, FAIL, op.value, error=_err_text(tp.error))
        # librdkafka says "no committed offset" with a negative logical offset (-1001).
        return complete(op, OK, [k, tp.offset if tp.offset >= 0 else None])

    def close(self) -> None:
        consumers, self._consumers = list(self._consumers.values()), {}
        for c in consumers:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - close never raises
                pass


# -- the kafka-python client ----------------------------------------------------------------


@functools.cache
def _kafka_python_fail() -> dict[type[BaseException], str]:
    """kafka-python's counterpart of `_FAIL` (its errors, raised from commit())."""
    import kafka.errors as kerr

    return {
        # Raised for ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and REBALANCE_IN_PROGRESS answers,
        # and when the consumer is in no generation: checked before any append.
        kerr.CommitFailedError: "membership check, before the append",
        kerr.FencedInstanceIdError: "membership check, before the append",
        kerr.OffsetMetadataTooLargeError: "validated before the append",
        kerr.InvalidCommitOffsetSizeError: "the offsets batch was refused whole",
        kerr.InvalidGroupIdError: "validated before the append",
        kerr.GroupAuthorizationFailedError: "refused before the append",
        kerr.TopicAuthorizationFailedError: "refused before the append",
        kerr.UnknownTopicOrPartitionError: "no such partition, refused before the append",
    }


class KafkaPythonOffsetsClient(_GroupClient):
    """The same ops through kafka-python's `KafkaConsumer.commit()` / `committed()`.

    kafka-python retries a retriable commit error (NOT_COORDINATOR, timeouts) itself within
    `timeout_ms`; what it raises after that is classified like librdkafka's errors. (Both
    libraries retry inside one call, so an earlier attempt may have landed before a later
    one is refused; a standalone commit to an existing topic never meets the refusals, so
    no `fail` here hides a write.)
    """

    def _new_consumer(self, group: str) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(**kafka_python_consumer_config(self._bootstrap, group, self.op_timeout))

    def invoke(self, op: Op) -> Op:
        from kafka import TopicPartition as KTopicPartition
        from kafka.structs import OffsetAndMetadata

        k, v = op.value
        topic, p = self.keys.topic_partition(k)
        tp = KTopicPartition(topic, p)
        timeout_ms = int(self.op_timeout * 1000)
        try:
            c = self._consumer(k)
            if op.f == "write":
                c.commit(offsets={tp: OffsetAndMetadata(v, "", -1)}, timeout_ms=timeout_ms)
                return complete(op, OK, [k, v])
            got = c.committed(tp, timeout_ms=timeout_ms)
        except Exception as e:  # noqa: BLE001 - classified below; anything unlisted is info
            text = f"{type(e).__name__}: {e}"
            # kafka-python hands a later committed() of the same partitions the request still
            # pending from a timed-out one: an answer from before that later call began,
            # which would look like a stale read. A fresh consumer has no such leftovers.
            self._drop(self.keys.group(k))
            if op.f == "read":  # a read changes nothing: see ConfluentOffsetsClient._read
                return complete(op, FAIL, op.value, error=text)
            return complete(op, FAIL if type(e) in _kafka_python_fail() else INFO, op.value, error=text)
        return complete(op, OK, [k, got if got is not None and got >= 0 else None])

    def _drop(self, group: str) -> None:
        c = self._consumers.pop(group, None)
        if c is not None:
            _close_kafka_python(c)

    def close(self) -> None:
        consumers, self._consumers = list(self._consumers.values()), {}
        for c in consumers:
            _close_kafka_python(c)


def _close_kafka_python(c: Any) -> None:
    try:
        c.close(autocommit=False)
    except Exception:  # noqa: BLE001 - close never raises
        pass


# -- from a TestConfig ------------------------------------------------------------------


def make_generator(cfg: TestConfig) -> OffsetsGenerator:
    assert cfg.seed is not None, "resolve the seed first (TestConfig.with_seed)"
    return OffsetsGenerator(seed=cfg.seed, keys=offset_keys(cfg))


def offset_keys(cfg: TestConfig) -> OffsetKeys:
    """4 groups x `partitions` (at least 2) partitions."""
    return OffsetKeys(partitions=max(2, cfg.partitions))


def make_client(cfg: TestConfig) -> ConfluentOffsetsClient | KafkaPythonOffsetsClient:
    """A fresh, unopened offsets client of the configured library."""
    rf = cfg.replication_factor if cfg.backend == "external" else min(cfg.replication_factor, cfg.nodes)
    cls = KafkaPythonOffsetsClient if cfg.client == "kafka-python" else ConfluentOffsetsClient
    return cls(keys=offset_keys(cfg), replication_factor=rf)


def analyse(ops: list[Op], keys: OffsetKeys) -> dict[str, Any]:
    """The results.json object of an offsets history: the register model's verdict, plus
    which (group, partition) each key is."""
    res = check_linearizable(ops, get_model("register"))
    res["offsets"] = {"keys": keys.describe()}
    return res
