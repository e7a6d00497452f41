"""The confluent-kafka (librdkafka) adapter for the queue workload.

Client settings live in `producer_config` / `consumer_config` only; errors are classified
in `_FAIL` only: a code is listed there when librdkafka guarantees the records were not
written (or a transaction was aborted). Everything unlisted is `info` (docs/architecture.md: a
wrong `fail` creates false aborted reads).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from logquake.history import FAIL, INFO, OK, Op
from logquake.workloads.client import TxnIds, add_polled, complete, seek_back
from logquake.workloads.kafka_adapter import ENDS_TIMEOUT, OPEN_ABORTED_S, TXN_TIMEOUT_MS, KafkaAdapter

log = logging.getLogger("logquake.client.confluent")

_ids = itertools.count()
TXN_IDS = TxnIds(f"lq-txn-{os.getpid()}")
# init_transactions right after replacing a producer: long enough for the coordinator to
# end the old transaction, short enough to leave the op's commit and abort their time.
FENCE_TIMEOUT = 5.0
# How long an assign waits in all for its new topics' metadata (see _learn_topics).
METADATA_TIMEOUT = 0.5
# Where a key nobody has read yet starts: offset 0, a logquake log's start (a log whose
# start moved answers OFFSET_OUT_OF_RANGE, and auto.offset.reset takes the consumer there).
# Never the logical OFFSET_BEGINNING: librdkafka resolves it with ListOffsets, and a reply
# it drops as outdated re-arms its offset-query timer, which survives the next assign at a
# real offset. Firing 500 ms on, it moves the partition back to the log start with no
# version barrier: records already fetched stay queued, so a poll returns them and then the
# log again from 0 (int-nonmonotonic-poll, safe/txn/partition seed 8).
START_OFFSET = 0

# Error codes that mean "certainly not written". Each entry says why.
_FAIL: dict[int, str] = {
    # The message never left the local queue: purged before any request was sent.
    KafkaError._PURGE_QUEUE: "purged from the local queue before being sent",
    # librdkafka knows no such topic/partition, so it never sent the message.
    KafkaError._UNKNOWN_TOPIC: "no such topic, never sent",
    KafkaError._UNKNOWN_PARTITION: "no such partition, never sent",
    # The broker rejected the batch as a whole: it appended nothing.
    KafkaError.MSG_SIZE_TOO_LARGE: "rejected by the broker, nothing appended",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "rejected by the broker, nothing appended",
    # A fenced or stale-epoch producer is refused before any append.
    KafkaError.INVALID_PRODUCER_EPOCH: "stale producer epoch, refused before append",
    KafkaError.PRODUCER_FENCED: "producer fenced, refused before append",
}


def classify(err: KafkaError | None) -> str:
    """`fail` if `err` guarantees nothing was written, else `info`."""
    if err is not None and err.code() in _FAIL:
        return FAIL
    return INFO


def _err_text(err: Any) -> str:
    if isinstance(err, str):
        return err
    if isinstance(err, KafkaError):
        return err.name() or err.str()
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return err.args[0].name() or err.args[0].str()
    return f"{type(err).__name__}: {err}"


def producer_config(bootstrap: str, *, txn: bool, producer: dict[str, Any],
                    txn_id: str | None = None) -> dict[str, Any]:
    """librdkafka producer settings. acks=all with idempotence unless `producer.acks` says otherwise.

    `txn_id` is the client's transactional id (see client.TxnIds); without one a fresh id outside the pool.
    """
    acks = str(producer.get("acks", "all"))
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        # Idempotence needs acks=all; with acks=1 or 0 the test is about those modes. A
        # guarantee profile sets it explicitly; transactions always need it.
        "enable.idempotence": bool(producer.get("idempotence", acks in ("all", "-1"))) or txn,
        "message.timeout.ms": 10_000,
        "request.timeout.ms": 5_000,
        "socket.timeout.ms": 5_000,
        "linger.ms": 0,
        "topic.metadata.refresh.interval.ms": 2_000,
        "retry.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1_000,
        "log.connection.close": False,
    }
    if "retries" in producer:
        conf["retries"] = int(producer["retries"])
    if txn:
        conf["transactional.id"] = txn_id or f"lq-txn-{os.getpid()}-u{next(_ids)}"  # u: never a pool id
        conf["transaction.timeout.ms"] = TXN_TIMEOUT_MS
    return conf


def consumer_config(bootstrap: str, *, txn: bool, sub_via: str) -> dict[str, Any]:
    """librdkafka consumer settings: no auto-commit with assign; one shared group with subscribe."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "isolation.level": "read_committed" if txn else "read_uncommitted",
        "session.timeout.ms": 6_000,
        "heartbeat.interval.ms": 1_000,
        "socket.timeout.ms": 5_000,
        "topic.metadata.refresh.interval.ms": 2_000,
        "reconnect.backoff.max.ms": 1_000,
        "fetch.wait.max.ms": 100,
        # Prefetch only into an empty queue: a partition with a record waiting for the next
        # poll is left out of fetches (re-checked every 20 ms). Prefetching everything made
        # every send answer a long-polling fetch of each consumer assigned its key (~5
        # fetches per send, most of the brokers' CPU); this way a fetch carries whatever
        # arrived since the last poll. What a poll op returns is still what the consumer
        # has read, in order.
        "queued.min.messages": 1,
        "fetch.queue.backoff.ms": 20,
        "log.connection.close": False,
    }
    if sub_via == "subscribe":
        conf.update({"group.id": "logquake", "enable.auto.commit": True})
    else:
        conf.update({"group.id": f"lq-assign-{os.getpid()}-{next(_ids)}", "enable.auto.commit": False})
    return conf


class ConfluentClient(KafkaAdapter):
    """One producer and one consumer; see the module docstring."""

    txn_ids = TXN_IDS
    local_errors = (KafkaException,)

    _producer: Producer | None
    _consumer: Consumer | None

    # -- lifecycle --------------------------------------------------------------------

    def _new_producer(self) -> Producer:
        conf = producer_config(self._bootstrap, txn=self.txn, producer=self.producer_settings,
                               txn_id=self._txn_id)
        return Producer(conf, logger=log)

    def _new_consumer(self) -> Consumer:
        self._known_topics: set[str] = set()  # whose metadata the consumer has (see _learn_topics)
        return Consumer(consumer_config(self._bootstrap, txn=self.txn, sub_via=self.sub_via), logger=log)

    def _discard_producer(self, producer: Producer) -> None:
        producer.purge()
        producer.flush(0)

    def _fence(self, producer: Producer) -> bool:
        """init_transactions: fences the id's previous producer and ends its open transaction.
        On failure the next transaction op tries again (and fails cleanly if it cannot)."""
        try:
            producer.init_transactions(FENCE_TIMEOUT)
            return True
        except KafkaException as e:
            log.info("init_transactions of %s failed: %s", self._txn_id, _err_text(e))
            return False

    def _close_clients(self, producer: Producer | None, consumer: Consumer | None) -> None:
        try:
            if producer is not None:
                producer.flush(1.0)
        except Exception:  # noqa: BLE001 - close never raises
            pass
        try:
            if consumer is not None:
                consumer.close()
        except Exception:  # noqa: BLE001
            pass

    # -- ops --------------------------------------------------------------------------

    def _rewind(self, keys: list[int]) -> None:
        for k in keys:
            self.position[k] = START_OFFSET

    def _ends(self, keys: list[int]) -> dict[str, int | None]:
        """Each key's end of the log for the final read: the high watermark, or the last
        stable offset under read_committed (librdkafka's ListOffsets asks with the consumer's
        isolation.level). None where the leader did not answer in time: that key's final
        read can then not be known complete."""
        assert self._consumer is not None
        deadline = time.monotonic() + ENDS_TIMEOUT
        ends: dict[str, int | None] = {}
        for k in keys:
            ends[str(k)] = None
            left = deadline - time.monotonic()
            if left <= 0:
                continue
            t, p = self.keymap.topic_partition(k)
            try:
                _low, high = self._consumer.get_watermark_offsets(TopicPartition(t, p), timeout=left, cached=False)
            except KafkaException as e:
                log.info("end of %s/%d: %s", t, p, _err_text(e))
                continue
            ends[str(k)] = high if high is not None and high >= 0 else None
        return ends

    def _positions(self) -> dict[str, int]:
        """The consumer's position per assigned key (the next offset it reads), which passes
        transaction markers and aborted records that no poll returns. Keys without one yet
        are left out."""
        assert self._consumer is not None
        tps = [TopicPartition(*self.keymap.topic_partition(k)) for k in self.assigned]
        try:
            got = self._consumer.position(tps)
        except KafkaException as e:
            log.info("positions: %s", _err_text(e))
            return {}
        return {str(self.keymap.key(tp.topic, tp.partition)): tp.offset for tp in got if tp.offset >= 0}

    def _apply_assignment(self) -> None:
        assert self._consumer is not None
        if self.subscribed:
            self._leave_group()
        tps = []
        for k in self.assigned:
            t, p = self.keymap.topic_partition(k)
            tps.append(TopicPartition(t, p, self.position.get(k, START_OFFSET)))
        self._consumer.assign(tps)
        self._learn_topics({tp.topic for tp in tps})

    def _learn_topics(self, topics: set[str]) -> None:
        """Ask for the metadata of assigned topics this consumer has not seen yet.

        librdkafka requests a newly assigned topic's metadata only at its once-a-second scan
        of unknown topics, so the partition had no leader to fetch from and the polls after
        an assign of a new key came back empty for ~1 s (~9 polls of 100 ms, measured on 5
        local nodes); with the answer at hand it fetches at once (~30 ms). A topic is known
        once the answer lists it without error; until then every assign asks again.
        """
        assert self._consumer is not None
        deadline = time.monotonic() + METADATA_TIMEOUT
        for t in sorted(topics - self._known_topics):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                md = self._consumer.list_topics(topic=t, timeout=left)
            except KafkaException as e:  # the scan will find it: only the fast path is lost
                log.debug("metadata of %s: %s", t, _err_text(e))
                continue
            got = md.topics.get(t)
            if got is not None and got.error is None:
                self._known_topics.add(t)

    def _leave_group(self) -> None:
        """Unsubscribe and wait for the revocation, which would otherwise undo our assign()."""
        assert self._consumer is not None
        self._consumer.unsubscribe()
        self.subscribed = False
        deadline = time.monotonic() + 5.0
        # Records returned meanwhile are dropped unrecorded: assign() restarts from
        # self.position, which only ever advances with recorded reads.
        while self._consumer.assignment() and time.monotonic() < deadline:
            self._consumer.poll(0.05)

    def _send_and_wait(self, value: list[list[Any]], i: int) -> Any:
        """Produce micro-op i and wait for it; fills in its offset. The error, or None."""
        assert self._producer is not None
        _, k, v = value[i]
        t, p = self.keymap.topic_partition(k)
        result: list[Any] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                value[i] = ["send", k, [msg.offset(), v]]
            result.append(err)

        try:
            self._producer.produce(t, value=str(v).encode(), key=str(k).encode(), partition=p,
                                   on_delivery=delivered)
        except (KafkaException, BufferError) as e:
            return e  # not queued: info unless its code is listed in _FAIL
        deadline = time.monotonic() + self.op_timeout
        while not result and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if not result:
            return KafkaError(KafkaError._TIMED_OUT)
        return result[0]

    def _poll_one(self, value: list[list[Any]], i: int) -> Any:
        """Poll micro-op i: whatever the consumer returns within poll_timeout. The error, or None."""
        assert self._consumer is not None
        polled: dict[str, list[list[Any]]] = {}
        value[i] = ["poll", polled]
        if not self.assigned:
            return None
        try:
            # poll() returns at the first record (consume() would wait out its timeout
            # unless the batch fills); then take whatever else is already fetched.
            first = self._consumer.poll(self.poll_timeout)
            msgs = [] if first is None else [first, *self._consumer.consume(num_messages=499, timeout=0)]
        except (KafkaException, RuntimeError) as e:
            return e
        for msg in msgs:
            if msg.error() is not None:
                # Per-partition notices (leader moved, topic not created yet) change nothing read.
                continue
            k = self.keymap.key(msg.topic(), msg.partition())
            add_polled(polled, k, msg.offset(), int(msg.value()))
            self.position[k] = msg.offset() + 1
        return None

    def _seek_back(self, value: list[list[Any]]) -> None:
        """After a failed/info op: read again what it polled (see client.seek_back)."""
        back = seek_back(value)
        if not back:
            return
        self.position.update(back)
        try:
            if self.sub_via == "assign":
                self._apply_assignment()
            else:
                assert self._consumer is not None
                for k, off in back.items():
                    t, p = self.keymap.topic_partition(k)
                    self._consumer.seek(TopicPartition(t, p, off))
        except KafkaException as e:
            log.info("seek-back failed: %s", _err_text(e))

    def _txn(self, op: Op) -> Op:
        """A transaction: sends and polls between begin and commit."""
        assert self._producer is not None
        value = [list(m) for m in op.value]
        try:
            if not self._txn_ready:
                self._producer.init_transactions(self.op_timeout)
                self._txn_ready = True
            self._producer.begin_transaction()
        except KafkaException as e:
            # No transaction began, so nothing of this op was sent. An init that timed out
            # is tried again by the next op; otherwise a fresh producer (same transactional
            # id) gets the next op out of whatever state this one is in.
            kerr = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if self._txn_ready or kerr is None or not kerr.retriable():
                self._reopen_producer()
            return complete(op, FAIL, value, error=_err_text(e))
        sent: list[int] = []  # the micro-ops handed to the producer
        for i, m in enumerate(value):
            if m[0] == "send":
                if (err := self._produce_async(value, i)) is not None:
                    # Not queued: committing would acknowledge the op without this value.
                    return self._abort(op, value, sent, err)
                sent.append(i)
            elif (err := self._poll_one(value, i)) is not None:
                return self._abort(op, value, sent, err)
        if op.get("abort"):
            return self._abort_on_purpose(op, value, sent)
        try:
            self._producer.commit_transaction(self.op_timeout)
        except KafkaException as e:
            kerr = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if kerr is not None and kerr.txn_requires_abort():
                return self._abort(op, value, sent, e)
            # Whether the commit happened is unknown. A fresh producer under the same id
            # makes the coordinator finish or abort it now (not at its timeout).
            self._seek_back(value)
            self._reopen_producer()
            return complete(op, INFO, value, error=_err_text(e))
        self._producer.poll(0)  # run any delivery callbacks still queued
        return complete(op, OK, value)

    def _produce_async(self, value: list[list[Any]], i: int) -> Any:
        """Queue micro-op i; its delivery report fills in its offset. The error, or None."""
        assert self._producer is not None
        _, k, v = value[i]
        t, p = self.keymap.topic_partition(k)

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                value[i] = ["send", k, [msg.offset(), v]]

        try:
            self._producer.produce(t, value=str(v).encode(), key=str(k).encode(), partition=p,
                                   on_delivery=delivered)
        except (KafkaException, BufferError) as e:
            return e
        return None

    def _abort_on_purpose(self, op: Op, value: list[list[Any]], sent: list[int]) -> Op:
        """The generator's `abort` ops: the records reach their partitions and stay there
        open a moment (a read_committed fetch leaking past the LSO would return them), then
        the transaction is aborted."""
        assert self._producer is not None
        self._producer.flush(self.op_timeout)
        time.sleep(OPEN_ABORTED_S)
        return self._abort(op, value, sent, "aborted on purpose")

    def _abort(self, op: Op, value: list[list[Any]], sent: list[int], err: Any) -> Op:
        """Abort the open transaction: fail if the abort is confirmed, else info. An op after
        which the producer was replaced says `"reopened": true`."""
        assert self._producer is not None
        self._seek_back(value)
        try:
            self._producer.abort_transaction(self.op_timeout)
        except KafkaException as e:
            self._reopen_producer()
            done = complete(op, INFO, value, error=f"{_err_text(err)}; abort: {_err_text(e)}")
            done.extra["reopened"] = True
            return done
        # The coordinator confirmed the abort: no record of this transaction is visible.
        done = complete(op, FAIL, value, error=_err_text(err))
        if any(not isinstance(value[i][2], list) for i in sent):
            # A send without an offset was purged by the abort, and librdkafka rewinds the
            # partition's sequence numbers over purged messages without an epoch bump, even
            # over one sent before (a request timeout queues it again). Had the broker
            # appended it, the next transaction's send would reuse its sequence number, be
            # answered DUPLICATE_SEQUENCE with the aborted record's offset, and be
            # acknowledged at an offset that holds another value. A new producer's
            # init_transactions bumps the epoch, which restarts the sequences.
            self._reopen_producer()
            done.extra["reopened"] = True
        return done

    def _classify(self, err: Any) -> str:
        # Only a delivery report's KafkaError carries a code _FAIL can vouch for.
        return classify(err if isinstance(err, KafkaError) else None)

    def _err_text(self, err: Any) -> str:
        return _err_text(err)
