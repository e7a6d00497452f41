"""The kafka-python adapter for the queue workload.

Client settings live in `producer_config` / `consumer_config` only; errors are classified
in `_FAIL` only: an exception class is listed when kafka-python guarantees the records were
not written. Everything unlisted is `info` (docs/architecture.md).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from typing import Any

import kafka.errors as kerr
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from logquake.history import FAIL, INFO, OK, Op
from logquake.workloads.client import TxnIds, add_polled, complete, seek_back
from logquake.workloads.kafka_adapter import ENDS_TIMEOUT, OPEN_ABORTED_S, TXN_TIMEOUT_MS, KafkaAdapter

log = logging.getLogger("logquake.client.kafka-python")

_ids = itertools.count()
FORCE_CLOSE_WAIT = 5.0  # s for a force-closed producer's I/O thread to fail its records and end
TXN_IDS = TxnIds(f"lq-kp-txn-{os.getpid()}")

# Exception classes that mean "certainly not written". Each entry says why.
_FAIL: dict[type[BaseException], str] = {
    # The broker refused a stale or fenced producer before appending anything.
    kerr.InvalidProducerEpochError: "stale producer epoch, refused before append",
    kerr.ProducerFencedError: "producer fenced, refused before append",
    # The broker rejected the whole batch: nothing appended.
    kerr.MessageSizeTooLargeError: "rejected by the broker, nothing appended",
    kerr.TopicAuthorizationFailedError: "rejected by the broker, nothing appended",
}


def classify(e: BaseException) -> str:
    """`fail` if `e` guarantees nothing was written, else `info`."""
    return FAIL if type(e) in _FAIL else INFO


def _err_text(e: BaseException | str) -> str:
    if isinstance(e, str):
        return e
    return f"{type(e).__name__}: {e}"


def producer_config(bootstrap: str, *, txn: bool, producer: dict[str, Any],
                    txn_id: str | None = None) -> dict[str, Any]:
    """kafka-python producer settings: acks=all and idempotence unless `producer.acks` says otherwise.

    `txn_id` is the client's transactional id (see client.TxnIds); without one a fresh id outside the pool.
    """
    acks: Any = producer.get("acks", "all")
    acks = "all" if str(acks) in ("all", "-1") else int(acks)
    conf: dict[str, Any] = {
        "bootstrap_servers": bootstrap.split(","),
        "acks": acks,
        # A guarantee profile sets idempotence explicitly; transactions always need it.
        "enable_idempotence": bool(producer.get("idempotence", acks == "all")) or txn,
        "delivery_timeout_ms": 10_000,
        "request_timeout_ms": 5_000,
        "max_block_ms": 5_000,
        "linger_ms": 0,
        "metadata_max_age_ms": 2_000,
        "retry_backoff_ms": 100,
        "reconnect_backoff_max_ms": 1_000,
    }
    if "retries" in producer:
        conf["retries"] = int(producer["retries"])
    if txn:
        conf["transactional_id"] = txn_id or f"lq-kp-txn-{os.getpid()}-u{next(_ids)}"  # u: never a pool id
        conf["transaction_timeout_ms"] = TXN_TIMEOUT_MS
    return conf


def consumer_config(bootstrap: str, *, txn: bool, sub_via: str) -> dict[str, Any]:
    """kafka-python consumer settings: no group with assign; one shared group with subscribe."""
    conf: dict[str, Any] = {
        "bootstrap_servers": bootstrap.split(","),
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed" if txn else "read_uncommitted",
        "request_timeout_ms": 5_000,
        "session_timeout_ms": 6_000,
        "heartbeat_interval_ms": 1_000,
        "metadata_max_age_ms": 2_000,
        "fetch_max_wait_ms": 100,
        "reconnect_backoff_max_ms": 1_000,
    }
    if sub_via == "subscribe":
        conf.update({"group_id": "logquake", "enable_auto_commit": True})
    else:
        conf.update({"group_id": None, "enable_auto_commit": False})
    return conf


class KafkaPythonClient(KafkaAdapter):
    """One producer and one consumer; see the module docstring."""

    txn_ids = TXN_IDS
    local_errors = (kerr.KafkaError, AssertionError, ValueError)

    _producer: KafkaProducer | None
    _consumer: KafkaConsumer | None

    def _new_producer(self) -> KafkaProducer:
        return KafkaProducer(**producer_config(self._bootstrap, txn=self.txn, producer=self.producer_settings,
                                               txn_id=self._txn_id))

    def _new_consumer(self) -> KafkaConsumer:
        return KafkaConsumer(**consumer_config(self._bootstrap, txn=self.txn, sub_via=self.sub_via))

    def _discard_producer(self, producer: KafkaProducer) -> None:
        _close_producer(producer, timeout=0)

    def _fence(self, producer: KafkaProducer) -> bool:
        """init_transactions (bounded by max_block_ms): fences the id's previous producer and
        ends its open transaction. On failure the next transaction op tries again."""
        try:
            producer.init_transactions()
            return True
        except Exception as e:  # noqa: BLE001 - the next op retries, and fails cleanly if it cannot
            log.info("init_transactions of %s failed: %s", self._txn_id, _err_text(e))
            return False

    def _close_clients(self, producer: KafkaProducer | None, consumer: KafkaConsumer | None) -> None:
        for thing in (producer, consumer):
            try:
                if thing is not None:
                    _close_producer(thing, timeout=1) if thing is producer else thing.close()
            except Exception:  # noqa: BLE001 - close never raises
                pass

    def _tp(self, k: int) -> TopicPartition:
        t, p = self.keymap.topic_partition(k)
        return TopicPartition(t, p)

    def _rewind(self, keys: list[int]) -> None:
        for k in keys:
            self.position.pop(k, None)  # no position: _apply_assignment seeks to the beginning

    def _ends(self, keys: list[int]) -> dict[str, int | None]:
        """end_offsets of the keys, in one call bounded by ENDS_TIMEOUT; all None if it fails.
        kafka-python asks ListOffsets with the consumer's isolation_level: the LSO under
        read_committed."""
        assert self._consumer is not None
        tps = {str(k): self._tp(k) for k in keys}
        try:
            got = self._consumer.end_offsets(list(tps.values()), timeout_ms=int(ENDS_TIMEOUT * 1000))
        except Exception as e:  # noqa: BLE001 - unanswered ends stay unknown
            log.info("ends of %s: %s", ",".join(tps), _err_text(e))
            return dict.fromkeys(tps)
        return {k: got.get(tp) for k, tp in tps.items()}

    def _positions(self) -> dict[str, int]:
        """position() per assigned key: the fetcher's next offset, past markers and aborted
        batches it skipped. A key the consumer has no position for yet is left out."""
        assert self._consumer is not None
        out: dict[str, int] = {}
        for k in self.assigned:
            try:
                pos = self._consumer.position(self._tp(k), timeout_ms=0)
            except Exception as e:  # noqa: BLE001 - a position not known yet is left out
                log.debug("position of %s: %s", k, _err_text(e))
                continue
            if pos is not None:
                out[str(k)] = pos
        return out

    def _apply_assignment(self) -> None:
        assert self._consumer is not None
        if self.subscribed:
            self._consumer.unsubscribe()
            self.subscribed = False
        tps = [self._tp(k) for k in self.assigned]
        self._consumer.assign(tps)
        fresh = []
        for k, tp in zip(self.assigned, tps, strict=True):
            if k in self.position:
                self._consumer.seek(tp, self.position[k])
            else:
                fresh.append(tp)
        if fresh:
            self._consumer.seek_to_beginning(*fresh)

    def _send_and_wait(self, value: list[list[Any]], i: int) -> BaseException | None:
        try:
            _fill(value, i, self._send_one(value, i).get(timeout=self.op_timeout))
        except Exception as e:  # noqa: BLE001 - classified by _classify
            return e
        return None

    def _send_one(self, value: list[list[Any]], i: int) -> Any:
        """Send micro-op i; the future of its record metadata (see _fill)."""
        assert self._producer is not None
        _, k, v = value[i]
        t, p = self.keymap.topic_partition(k)
        return self._producer.send(t, value=str(v).encode(), key=str(k).encode(), partition=p)

    def _poll_one(self, value: list[list[Any]], i: int) -> BaseException | None:
        assert self._consumer is not None
        polled: dict[str, list[list[Any]]] = {}
        value[i] = ["poll", polled]
        if not self.assigned:
            return None
        try:
            batches = self._consumer.poll(timeout_ms=int(self.poll_timeout * 1000), max_records=500)
        except Exception as e:  # noqa: BLE001 - a poll changes nothing in the log: info
            return e
        for tp, records in batches.items():
            k = self.keymap.key(tp.topic, tp.partition)
            for r in records:
                add_polled(polled, k, r.offset, int(r.value))
                self.position[k] = r.offset + 1
        return None

    def _seek_back(self, value: list[list[Any]]) -> None:
        back = seek_back(value)
        if not back or self._consumer is None:
            return
        self.position.update(back)
        for k, off in back.items():
            try:
                self._consumer.seek(self._tp(k), off)
            except (kerr.KafkaError, AssertionError, ValueError) as e:
                log.info("seek-back failed: %s", _err_text(e))

    def _txn(self, op: Op) -> Op:
        assert self._producer is not None
        value = [list(m) for m in op.value]
        try:
            if not self._txn_ready:
                self._producer.init_transactions()
                self._txn_ready = True
            self._producer.begin_transaction()
        except Exception as e:  # noqa: BLE001
            # No transaction began, so nothing of this op was sent. An init that timed out
            # is tried again by the next op; otherwise a fresh producer (same transactional
            # id) gets the next op out of whatever state this one is in.
            if self._txn_ready or not isinstance(e, kerr.KafkaTimeoutError):
                self._reopen_producer()
            return complete(op, FAIL, value, error=_err_text(e))
        futures: dict[int, Any] = {}
        for i, m in enumerate(value):
            if m[0] == "send":
                try:
                    futures[i] = self._send_one(value, i)
                except Exception as e:  # noqa: BLE001
                    return self._abort(op, value, e)
            elif (err := self._poll_one(value, i)) is not None:
                return self._abort(op, value, err)
        if op.get("abort"):
            return self._abort_on_purpose(op, value, futures)
        if (unsent := self._unsent(futures)) is not None:
            # kafka-python fails an expired batch's future but leaves the transaction
            # committable, so committing now would commit it without that record (seen under
            # kills: an ok txn whose value never reached the log). Kafka's Java producer
            # makes such a transaction abortable; abort it the same way.
            _fill_done(value, futures)
            return self._abort(op, value, unsent)
        try:
            self._end_txn(commit=True)
        except Exception as e:  # noqa: BLE001 - whether the commit happened is unknown: info
            _fill_done(value, futures)
            self._seek_back(value)
            self._reopen_producer()
            return complete(op, INFO, value, error=_err_text(e))
        _fill_done(value, futures)
        return complete(op, OK, value)

    def _end_txn(self, *, commit: bool) -> None:
        """commit_transaction / abort_transaction, but waiting at most op_timeout.

        kafka-python 3.0 waits for their answer without end (with the coordinator down,
        until the runner's watchdog gives the whole client up after 30 s); this is the same
        call through its transaction manager (kafka-python is pinned exactly), with a bound.
        A KafkaTimeoutError leaves the outcome unknown: the caller replaces the producer.
        """
        assert self._producer is not None
        tm = self._producer._transaction_manager
        result = tm.begin_commit() if commit else tm.begin_abort()
        self._producer._sender.wakeup()
        if not result.wait(timeout_ms=int(self.op_timeout * 1000)):
            what = "commit" if commit else "abort"
            raise kerr.KafkaTimeoutError(f"{what} not answered within {self.op_timeout:.0f} s")

    def _unsent(self, futures: dict[int, Any]) -> BaseException | str | None:
        """Why a send of the open transaction is not acknowledged after a flush, or None."""
        assert self._producer is not None
        try:
            self._producer.flush(timeout=self.op_timeout)
        except Exception as e:  # noqa: BLE001 - a flush that timed out leaves sends unacknowledged
            return e
        for fut in futures.values():
            if not fut.is_done:
                return "a send was not acknowledged before the commit"
            if fut.failed():
                return fut.exception
        return None

    def _abort_on_purpose(self, op: Op, value: list[list[Any]], futures: dict[int, Any]) -> Op:
        """The generator's `abort` ops: the records reach their partitions and stay there
        open a moment (a read_committed fetch leaking past the LSO would return them), then
        the transaction is aborted."""
        assert self._producer is not None
        try:
            self._producer.flush(timeout=self.op_timeout)
        except Exception as e:  # noqa: BLE001 - aborted below all the same
            log.info("flush before a deliberate abort: %s", _err_text(e))
        _fill_done(value, futures)
        time.sleep(OPEN_ABORTED_S)
        return self._abort(op, value, "aborted on purpose")

    def _abort(self, op: Op, value: list[list[Any]], err: BaseException | str) -> Op:
        """Abort the open transaction: fail if the abort is confirmed, else info."""
        assert self._producer is not None
        self._seek_back(value)
        try:
            self._end_txn(commit=False)
        except Exception as e:  # noqa: BLE001
            self._reopen_producer()
            return complete(op, INFO, value, error=f"{_err_text(err)}; abort: {_err_text(e)}")
        # The coordinator confirmed the abort: no record of this transaction is visible.
        return complete(op, FAIL, value, error=_err_text(err))


    def _classify(self, err: BaseException) -> str:
        return classify(err)

    def _err_text(self, err: BaseException | str) -> str:
        return _err_text(err)


def _close_producer(producer: KafkaProducer, *, timeout: float) -> None:
    """Close, sending nothing more after `timeout`. kafka-python's close() flushes first and,
    when records are still unsent at the timeout, raises before it stops its I/O thread: that
    thread would go on (sockets, retries) and send them after the op was recorded, for the
    process's life. So stop it as close does past its timeout (force_close: pending records
    fail), then close. Private attributes: kafka-python is pinned (pyproject.toml)."""
    try:
        producer.close(timeout=timeout)
    except kerr.KafkaTimeoutError:
        producer._sender.force_close()
        producer._sender.join(FORCE_CLOSE_WAIT)
        producer.close(timeout=0)


def _fill(value: list[list[Any]], i: int, md: Any) -> None:
    """Complete send micro-op i from the broker's record metadata."""
    _, k, v = value[i]
    value[i] = ["send", k, [md.offset if md.offset >= 0 else None, v]]


def _fill_done(value: list[list[Any]], futures: dict[int, Any]) -> None:
    """Complete the send micro-ops whose futures succeeded; the rest keep their invoked form."""
    for i, fut in futures.items():
        if fut.is_done and fut.succeeded():
            _fill(value, i, fut.value)
