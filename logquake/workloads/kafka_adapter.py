"""What the two Kafka adapters (confluent-kafka, kafka-python) do alike, written once.

A Kafka adapter holds one producer and one consumer. Their lifecycle (a transactional id
lent while open, a replaced producer fenced at once, an open transaction ended on close)
and the shape of assign, subscribe and plain send/poll ops are the same for both libraries;
each subclass makes the library calls through the hooks below and keeps its own error
classification (which errors mean "certainly not written" is a fact about the library).
"""

from __future__ import annotations

from typing import Any, ClassVar

from logquake.history import FAIL, INFO, OK, Op
from logquake.workloads.client import QueueClient, complete

__all__ = ["ENDS_TIMEOUT", "OPEN_ABORTED_S", "TXN_TIMEOUT_MS", "KafkaAdapter"]

# The coordinator aborts a transaction left open this long (a replaced producer ends it sooner).
TXN_TIMEOUT_MS = 10_000
# How long a deliberately aborted transaction's records sit open in their partitions.
OPEN_ABORTED_S = 0.3
# How long a final assign may spend in all asking for the ends of its keys' logs.
ENDS_TIMEOUT = 5.0


class KafkaAdapter(QueueClient):
    """One producer and one consumer of a Kafka client library, driven as QueueClient ops.

    Subclasses set `local_errors` (what the library raises for a refused assign or
    subscribe, which changes nothing in the log) and implement the hooks: `_new_producer`,
    `_new_consumer`, `_discard_producer`, `_fence`, `_close_clients`, `_rewind`,
    `_apply_assignment`, `_ends`, `_positions`, `_send_and_wait`, `_poll_one`, `_seek_back`,
    `_classify`, `_err_text`, and `_txn`.
    """

    local_errors: ClassVar[tuple[type[BaseException], ...]]

    # -- lifecycle --------------------------------------------------------------------

    def open(self, bootstrap_servers: str) -> None:
        self._bootstrap = bootstrap_servers
        if self.txn and self._txn_id is None:
            self._txn_id = self.txn_ids.acquire()
        self._producer = self._new_producer()
        self._consumer = self._new_consumer()

    def _reopen_producer(self) -> None:
        """After a fatal error or a transaction end of unknown outcome: a new producer under
        the same transactional id, fenced in at once (see client.TxnIds)."""
        old, self._producer = self._producer, None
        if old is not None:
            try:
                self._discard_producer(old)
            except Exception:  # noqa: BLE001 - the old producer is abandoned anyway
                pass
        self._txn_ready = False
        self._replaced = True
        self._producer = self._new_producer()
        if self.txn:
            self._txn_ready = self._fence(self._producer)

    def close(self) -> None:
        p, c, self._producer, self._consumer = self._producer, self._consumer, None, None
        if p is not None and self.txn and self._replaced and not self._txn_ready:
            # A replaced producer's transaction may still be open: end it now rather than
            # at the coordinator's timeout (the drain reads past it).
            self._fence(p)
        self.abandon()  # the id is lent out again at once
        self._close_clients(p, c)

    # -- ops --------------------------------------------------------------------------

    def _assign(self, op: Op) -> Op:
        keys = list(op.value)
        if op.get("seek_to_beginning"):
            self._rewind(keys)
        self.assigned = keys
        try:
            self._apply_assignment()
        except self.local_errors as e:
            # Assignment is local to this consumer: nothing in the log changed.
            return complete(op, FAIL, op.value, error=self._err_text(e))
        done = complete(op, OK, op.value)
        if op.get("final"):
            done.extra["ends"] = self._ends(keys)
        return done

    def _subscribe(self, op: Op) -> Op:
        assert self._consumer is not None
        topics = sorted({self.keymap.topic_partition(k)[0] for k in op.value})
        try:
            self._consumer.subscribe(topics)
        except self.local_errors as e:
            # Subscribing only changes this consumer's interest; nothing in the log changed.
            return complete(op, FAIL, op.value, error=self._err_text(e))
        self.assigned = list(op.value)
        self.subscribed = True
        return complete(op, OK, op.value)

    def _plain(self, op: Op) -> Op:
        """send or poll ops outside transactions, one micro-op at a time."""
        value = [list(m) for m in op.value]
        for i, m in enumerate(value):
            if m[0] == "send":
                if (err := self._send_and_wait(value, i)) is not None:
                    return complete(op, self._classify(err), value, error=self._err_text(err))
            elif (err := self._poll_one(value, i)) is not None:
                self._seek_back(value)
                return complete(op, INFO, value, error=self._err_text(err))
        done = complete(op, OK, value)
        if op.get("final"):
            done.extra["positions"] = self._positions()
        return done

    # -- hooks ------------------------------------------------------------------------

    def _new_producer(self) -> Any: raise NotImplementedError
    def _new_consumer(self) -> Any: raise NotImplementedError
    def _discard_producer(self, producer: Any) -> None: raise NotImplementedError  # drop, not wait
    def _fence(self, producer: Any) -> bool: raise NotImplementedError  # init_transactions worked
    def _close_clients(self, producer: Any, consumer: Any) -> None: raise NotImplementedError  # ~1 s
    def _rewind(self, keys: list[int]) -> None: raise NotImplementedError  # next read from the start
    def _apply_assignment(self) -> None: raise NotImplementedError
    def _ends(self, keys: list[int]) -> dict[str, int | None]: raise NotImplementedError
    def _positions(self) -> dict[str, int]: raise NotImplementedError
    def _send_and_wait(self, value: list[list[Any]], i: int) -> Any: raise NotImplementedError  # error|None
    def _poll_one(self, value: list[list[Any]], i: int) -> Any: raise NotImplementedError  # error|None
    def _seek_back(self, value: list[list[Any]]) -> None: raise NotImplementedError
    def _classify(self, err: Any) -> str: raise NotImplementedError  # fail: certainly not written
    def _err_text(self, err: Any) -> str: raise NotImplementedError
