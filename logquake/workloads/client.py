"""The `Client` seam between the runner and a Kafka client library, plus its wrappers.

One adapter per library (confluent.py, kafkapython.py) implements `Client`. The helpers
here are shared by both and pure: key <-> topic-partition mapping, completing an op from
its partly filled micro-ops, and the consumer's seek-back positions after a failed or
indeterminate op. `Validated` checks the contract (tests use it); `WithTimeout` turns a
hung call into `info` so one stuck client never stalls its caller. (The runner gets the same
effect from one watchdog thread for all workers, without a thread hop per call.)
"""

from __future__ import annotations

import heapq
import queue
import threading
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol, runtime_checkable

from logquake.history import FAIL, INFO, INVOKE, OK, Op

TOPIC_PREFIX = "lq-"


class Client(Protocol):
    """A Kafka client that performs the queue workload's ops.

    `open` connects (it must not change the logical state of the test: no sends, no
    commits); `invoke` performs one invocation and returns its completion, never raises
    for anything the system under test did (errors become `fail` only where nothing can
    have happened, else `info`); `close` releases everything and never raises.
    """

    def open(self, bootstrap_servers: str) -> None: ...

    def invoke(self, op: Op) -> Op: ...

    def close(self) -> None: ...


@runtime_checkable
class Abandonable(Protocol):
    """Optional: a client whose call hangs can give up what a successor must take over.

    `abandon` never blocks (a call may still be running in the client); the caller closes
    the client aside afterwards.
    """

    def abandon(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class KeyMap:
    """Key k <-> topic `lq-<k // partitions>`, partition `k % partitions` (Jepsen's scheme).

    With one partition per topic (the default) every key is its own topic, created on first
    use by the broker's auto-creation, so key rotation needs no admin calls.
    """

    partitions: int = 1

    def topic_partition(self, k: int) -> tuple[str, int]:
        return f"{TOPIC_PREFIX}{k // self.partitions}", k % self.partitions

    def key(self, topic: str, partition: int) -> int:
        return int(topic[len(TOPIC_PREFIX) :]) * self.partitions + partition


def complete(op: Op, type_: str, value: Any, error: str | None = None) -> Op:
    """The completion of invocation `op`, with the micro-ops as filled in so far."""
    extra = dict(op.extra)
    if error is not None:
        extra["error"] = error
    return replace(op, type=type_, value=value, extra=extra)


def seek_back(value: Any) -> dict[int, int]:
    """For each key an op polled, the first offset it polled: where to seek after fail/info.

    An op that did not end ok read nothing as far as the checker is concerned, so the
    consumer must read those records again or the next poll would look like a skip.
    """
    first: dict[int, int] = {}
    if not isinstance(value, list):
        return first
    for m in value:
        if m[0] == "poll" and len(m) > 1:
            for key, pairs in m[1].items():
                if pairs:
                    k = int(key)
                    first[k] = min(first.get(k, pairs[0][0]), pairs[0][0])
    return first


def add_polled(acc: dict[str, list[list[Any]]], k: int, offset: int, v: Any) -> None:
    """Append one record read to a poll micro-op's {"k": [[offset, v], ...]} map."""
    acc.setdefault(str(k), []).append([offset, v])


class TxnIds:
    """Transactional ids lent to clients: `<prefix>-<n>`, the lowest free n first.

    A client takes one at open and gives it back at close, and keeps it when it replaces
    its producer. So a producer that succeeds a failed one (same client, or the next client
    of a worker after a crash or a hung call) calls init_transactions under the same id,
    which fences its predecessor and makes the coordinator end the transaction that one
    left open (abort it, or finish a commit already decided) at once. Under a fresh id that
    transaction would stay open until transaction.timeout.ms, holding the last stable
    offset of its partitions so read_committed consumers see nothing past it. (Kafka
    Streams keeps one id per task for the same reason.)
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._free: list[int] = []
        self._next = 0
        self._lock = threading.Lock()

    def acquire(self) -> str:
        with self._lock:
            if self._free:
                n = heapq.heappop(self._free)
            else:
                n, self._next = self._next, self._next + 1
        return f"{self.prefix}-{n}"

    def release(self, tid: str) -> None:
        n = int(tid.rsplit("-", 1)[1])
        with self._lock:
            if n not in self._free:
                heapq.heappush(self._free, n)


class QueueClient:
    """State and op dispatch shared by the adapters; each subclass makes the library calls.

    Subclasses implement `open`, `close`, `_assign`, `_subscribe`, `_plain` (send/poll
    outside transactions) and `_txn`, and set `txn_ids` (their library's TxnIds); the
    micro-op bookkeeping (`assigned`, `subscribed`, `position`) lives here so both
    libraries keep it the same way.
    """

    txn_ids: ClassVar[TxnIds]

    def __init__(
        self,
        *,
        keymap: KeyMap | None = None,
        txn: bool = False,
        sub_via: str = "assign",
        producer: dict[str, Any] | None = None,
        poll_timeout: float = 0.1,
        op_timeout: float = 10.0,
    ) -> None:
        self.keymap = keymap or KeyMap()
        self.txn = txn
        self.sub_via = sub_via
        self.producer_settings = dict(producer or {})
        self.poll_timeout = poll_timeout
        self.op_timeout = op_timeout
        self._bootstrap = ""
        self._producer: Any = None
        self._consumer: Any = None
        self._txn_ready = False
        self._txn_id: str | None = None  # lent by the adapter's TxnIds while open
        self._replaced = False  # the producer was replaced (its predecessor may need fencing)
        self.assigned: list[int] = []
        self.subscribed = False  # assign() on a subscribed consumer must unsubscribe first
        self.position: dict[int, int] = {}  # next offset to read, per key

    def abandon(self) -> None:
        """Give the transactional id back now, while a call may still hang in this client:
        the worker's next client takes it, and its init_transactions fences this one."""
        tid, self._txn_id = self._txn_id, None
        if tid is not None:
            self.txn_ids.release(tid)

    def invoke(self, op: Op) -> Op:
        match op.f:
            case "assign":
                return self._assign(op)
            case "subscribe":
                return self._subscribe(op)
            case "crash":
                return complete(op, INFO, op.value, error="crash")
            case _:
                has_send = isinstance(op.value, list) and any(m[0] == "send" for m in op.value)
                return self._txn(op) if self.txn and has_send else self._plain(op)

    def _assign(self, op: Op) -> Op:
        raise NotImplementedError

    def _subscribe(self, op: Op) -> Op:
        raise NotImplementedError

    def _plain(self, op: Op) -> Op:
        raise NotImplementedError

    def _txn(self, op: Op) -> Op:
        raise NotImplementedError


class ContractError(AssertionError):
    """An adapter broke the Client contract (a logquake bug)."""


class Validated:
    """Wraps a client and checks each completion against its invocation (Jepsen's Validate)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def open(self, bootstrap_servers: str) -> None:
        self.client.open(bootstrap_servers)

    def invoke(self, op: Op) -> Op:
        done = self.client.invoke(op)
        problems = []
        if done.type not in (OK, FAIL, INFO):
            problems.append(f"type {done.type!r} is not ok/fail/info")
        if done.process != op.process:
            problems.append(f"process {done.process!r} != invoked {op.process!r}")
        if done.f != op.f:
            problems.append(f"f {done.f!r} != invoked {op.f!r}")
        if isinstance(op.value, list) and op.f in ("send", "poll", "txn"):
            if len(done.value) != len(op.value):
                problems.append("completion has a different number of micro-ops")
            for inv, m in zip(op.value, done.value, strict=False):
                if inv[0] != m[0]:
                    problems.append(f"micro-op {m!r} does not match invoked {inv!r}")
        if problems:
            raise ContractError(f"{type(self.client).__name__}: {'; '.join(problems)} in {done!r}")
        return done

    def close(self) -> None:
        self.client.close()


class WithTimeout:
    """Runs `invoke` on a helper thread; a call still running after `timeout` s becomes info.

    The client is then unusable (a call is still running inside it): `broken` is set and
    the caller must close it and open a fresh one. The stuck thread is a daemon and is
    abandoned, as Jepsen abandons a timed-out client.
    """

    def __init__(self, client: Client, *, timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self.broken = False
        self._requests: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[Op | BaseException] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="client-call")
        self._thread.start()

    def _serve(self) -> None:
        while (op := self._requests.get()) is not None:
            try:
                self._results.put(self.client.invoke(op))
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                self._results.put(e)

    def open(self, bootstrap_servers: str) -> None:
        self.client.open(bootstrap_servers)

    def invoke(self, op: Op) -> Op:
        assert op.type == INVOKE and not self.broken
        self._requests.put(op)
        try:
            res = self._results.get(timeout=self.timeout)
        except queue.Empty:
            self.broken = True
            return complete(op, INFO, op.value, error="timeout")
        if isinstance(res, BaseException):
            raise res
        return res

    def close(self) -> None:
        self._requests.put(None)
        if not self.broken:
            self.client.close()
        else:
            # Closing under a running call may block on the library's locks: do it aside.
            threading.Thread(target=self.client.close, daemon=True).start()
