"""The nats-py adapter for the queue workload, against NATS JetStream.

How the queue's words map onto JetStream:

- key k is stream `lq-<k>` holding the one subject `lq.<k>`, with `replicas` replicas and
  file storage. A stream is created on the first send that finds nobody listening on its
  subject (the broker's auto-creation of topics, done by the client); creating an existing
  stream with the same config is a no-op, so racing creators agree.
- offset is the stream sequence: the PubAck's `seq` for a send, the stored message's
  sequence for a read. Sequences start at 1 (Kafka offsets at 0); nothing in the history
  assumes where a log starts.
- send publishes and waits for the PubAck, retrying (per `producer.retries`, unbounded
  within the op's time by default) on anything that may be transient. With
  `producer.idempotence` every attempt of a send carries the same `Nats-Msg-Id`
  (`<k>-<v>`, values being unique per key): the stream stores it once within its
  duplicate window, and the PubAck of a duplicate carries the original sequence, so the
  checker's duplicate analysis tests the server's dedup. Without it retries may store a
  value twice, as Kafka's at-least-once producer does. A send tried more than once records
  when (`attempts`), and one a PubAck called a duplicate says so (`duplicate`), so the
  checker can tell a retry inside the stream's duplicate window from one after it.
- assign is a consumer with no server-side state at all, as an assigned Kafka consumer
  that commits nothing: the client keeps a position per key and a poll reads each
  assigned stream in sequence order from there with the stream's get-message API (the
  next stored message at or after the position, answered by the stream leader), so a
  poll reports exactly the messages the server returned, in the order it returned them.
  An ephemeral JetStream consumer was not used for this: its delivery pointer moves on
  when it sends, so a message in flight when a fetch gives up would be skipped by the
  next fetch, and the harness would report a skip it caused itself.
- subscribe is JetStream's shared durable consumer, the closest thing to a consumer
  group: one durable pull consumer `lq-group` per stream, bound by every subscribing
  client; the server keeps the position and splits the messages among the clients that
  fetch, and a message is acked after an ok poll returned it (Kafka's auto-commit after
  processing). A message fetched by a poll that ends info is not acked and is delivered
  again after `ACK_WAIT_S`.
- the final read (the drain's ops marked `final`) reads each key from this client's position
  to the end its final assign recorded in one go, through an ordered consumer, not with a
  get per message (`_read_key_to_end` says why and what that means); a key whose end is
  unknown is read as an assigned poll reads it. A final assign records each key's end
  of the log as `ends`, the stream's last sequence + 1 (where the next message would go,
  as a Kafka high watermark is), read from the stream leader's StreamInfo; an empty
  stream's end is its first sequence, a stream the server does not know ends at
  `FIRST_SEQ` (nothing was stored), and a key whose leader did not answer in time gets
  None. Each final poll records this client's position per key (`positions`), which
  passes gaps in the sequence that no read returns. The final read is per key, as the
  checker judges it: a final poll in which some streams answered and others did not (no
  leader, say) is ok with what the answering ones returned, and names the others with
  their error as `unread` (no position recorded for them); only a final poll that no
  stream answered is info.
- the final read from every node (`System.node_reads`, the drain's ops marked `node`): a client
  connected to that node alone reads with direct gets (`$JS.API.DIRECT.GET.<stream>`,
  answered from a replica's own store), its final assign recording as `ends` the node's
  own end of each log (its last message on the key's subject + 1) and as `not_held` the
  keys whose stream has no replica on the node. Streams are made without `allow_direct`,
  so that final assign turns it on; every replica then answers direct gets at once,
  caught up or not (one created with it joins once nearly caught up after a start, and
  stays however far it falls behind). They answer through one queue group, and
  nats-server picks among its members at random, its local one included (a request from
  a client gets no local preference), and no answer says which server sent it. So each
  request carries a `Nats-Trace-Dest` header, and the node's own trace event says
  whether it answered itself or forwarded the request over a route: a forwarded answer
  is dropped and asked again (`NODE_ATTEMPTS` times within `NODE_READ_TIMEOUT`), and a
  key the node never answered itself stays unread, its read incomplete (unknown for that
  node). Message tracing and batched direct gets need nats-server 2.11+: on an older
  server the drain skips these reads at once and says why (`node_reads_refusal`,
  system.py); a node read that meets one anyway ends info, saying so.
- a stored message whose payload is not an integer of 64 bits (the workload writes only
  those; an empty message stored by a server that did not take an abort's headers as a
  batch's, say) is no value: a poll records it beside its values as `unparsed`
  (`{"5": [[17, ""]]}`, offset and text), with a warning, and reads on past it, so one
  foreign message neither stops a key's read nor reaches the checker as a value.
- crash is the runner's: it closes this client (the connection drops) and opens a new one.
  Under idempotence the worker's new client first resends each of the worker's sends that
  ended info (`resend` ops, workloads/generator.py): a publish like any other, under the
  same Msg-Id, so only the stream's dedup keeps the value single (docs/jetstream-dedup.md).
- a transaction is one atomic batch publish to its key's stream (server 2.12+): its sends
  must all name one key, and it holds no polls (batch.py says how and why). Streams of a
  transactional test allow atomic publish (`allow_atomic`). A restarted producer resends
  a batch that ended info as one batch again (a `resend` op): ok when it is stored now,
  ok with `duplicate` and offsets unknown when the leader rejects it for Msg-Ids the
  stream holds (the batch was stored whole before), fail when it certainly stored nothing.
  A transaction invoked while nats-py is between servers waits for it to reach one, for its
  op's time less one attempt's, and fails (nothing sent) only when none answered by then.

nats-py is asyncio and the runner's workers are threads: every client's connection lives on
the process's one event loop thread (`_Loop`), and `invoke` hands an op to it and waits for
the completion.
Errors are classified in `_FAIL` only (everything unlisted is info, docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from logquake.errors import ConfigError
from logquake.history import FAIL, INFO, OK, Op
from logquake.systems.jetstream import batch
from logquake.systems.jetstream.batch import version_tuple  # `batch` is also a parameter below
from logquake.systems.jetstream.server import duration_seconds
from logquake.workloads.client import TOPIC_PREFIX, QueueClient, add_polled, complete, seek_back
from logquake.workloads.generator import NODE

if TYPE_CHECKING:
    from logquake.config import TestConfig

log = logging.getLogger("logquake.client.nats-py")

FIRST_SEQ = 1  # a stream's first sequence
CONNECT_TIMEOUT = 10.0  # a connect, every server tried as often as fits, gives up after this
CLOSE_TIMEOUT = 2.0  # nats-py's close gets this long; what it left undone is then done by hand (`shutdown`)
GROUP = "lq-group"  # the durable consumer subscribers share
ACK_WAIT_S = 5.0  # a subscriber's unacked message is delivered again after this
STREAM_NAME_IN_USE = 10058  # JSStreamNameExistErr: "stream name already in use with a different configuration"
READ_BATCH = 100  # messages a poll reads per key at most (but the final read's, `_read_key_to_end`)
BULK_IDLE = 2.0  # the final read of a key ends its poll when its consumer delivered nothing for this long
# A client's final read has this many keys' consumers open at once: each costs the servers a
# consumer (created through the meta leader); all of a 100-key history at once, from every
# worker, made the servers slower to start delivering than the reads took.
BULK_KEYS = 32
BULK_BUDGET = 0.5  # a final poll reads in bulk for this share of op_timeout (`bulk_budget`)
PUBLISH_TIMEOUT = 2.0  # one publish attempt waits this long for its PubAck
ENDS_TIMEOUT = 5.0  # a final assign asks each key's end of the log within this
RETRY_BACKOFF = 0.1
SERVER_POLL = 0.05  # a transaction waiting for nats-py to reach a server looks this often (`_await_server`)
NODE_ATTEMPTS = 40  # direct gets per read until the node asked answers one itself
ATTEMPT_TIMEOUT = 1.0  # one direct get waits this long for its answer and the node's trace event
NODE_READ_TIMEOUT = 8.0  # all attempts of one read from a node, within an op's 10 s
NODE_ENDS_TIMEOUT = NODE_READ_TIMEOUT + 2.0  # one key's end on a node: its stream's info, then the node's read
NODE_READ_VERSION = (2, 11)  # message tracing and batched direct gets
TRACE_DEST = "Nats-Trace-Dest"
# Kinds of connection a trace event's egress names: a route, a gateway, a leafnode (the
# request went on to another server), as nats-server numbers them.
_FORWARDED = frozenset({1, 2, 4})

ABORT_OPEN_S = 0.3  # how long an abort op's batch stays staged before it is dropped

# Exceptions that mean "certainly not stored". Each entry says why.
_FAIL: dict[type[BaseException], str] = {
    # The server the client is connected to found no subscriber for the subject (no
    # stream, or none it knows of) and answered 503 instead of forwarding the message.
    nats.js.errors.NoStreamResponseError: "no responders, the message went nowhere",
    # nats-py refuses these before writing anything to the socket.
    nats.errors.OutboundBufferLimitError: "the reconnect buffer was full, never sent",
    nats.errors.MaxPayloadError: "larger than the server's max_payload, never sent",
    nats.errors.BadSubjectError: "invalid subject, never sent",
}


def classify(e: BaseException) -> str:
    """`fail` if `e` guarantees the message was not stored, else `info`."""
    return FAIL if type(e) in _FAIL else INFO


def client_configs(cfg: TestConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """What test.json says this client does: (producer, consumer), as the Kafka adapters' configs."""
    from logquake.systems.jetstream.system import replicas, settings
    from logquake.workloads.queue import producer_settings

    producer = producer_settings(cfg)
    stream: dict[str, Any] = {"storage": "file", "num_replicas": replicas(cfg)}
    if (window := settings(cfg).duplicate_window) is not None:
        stream["duplicate_window"] = window
    return ({"Nats-Msg-Id": bool(producer.get("idempotence", False)), "retries": producer.get("retries", "unbounded"),
             "publish_timeout_s": PUBLISH_TIMEOUT, "stream": stream},
            {"subscribe": f"durable pull consumer {GROUP}, explicit ack, ack_wait {ACK_WAIT_S} s"}
            if cfg.sub_via == "subscribe" else {"assign": "stream get-message by sequence from the client's position"})


def stream_name(k: int) -> str:
    return f"{TOPIC_PREFIX}{k}"


def subject(k: int) -> str:
    return f"lq.{k}"


def msg_id(k: int, v: Any) -> str:
    return f"{k}-{v}"


def direct_get(k: int) -> str:
    """The subject every replica of key k's stream answers direct gets on."""
    return f"$JS.API.DIRECT.GET.{stream_name(k)}"


def node_bootstraps(bootstrap: str) -> dict[str, str]:
    """Each server of `bootstrap` by the name it gives itself (its address if it says none),
    to its own URL: a client opened on that URL alone reads from that node (`System.node_reads`)."""
    urls = [u for u in bootstrap.split(",") if u]
    return {server_name(u) or urlsplit(u).netloc or u: u for u in urls}


def node_reads_refusal(version: str) -> str | None:
    """Why a nats-server of `version` ("v2.9.10") cannot serve a read from one node (module
    docstring), None when it can: the system skips the node reads on it (system.py)."""
    if (version_tuple(version) or ())[:2] >= NODE_READ_VERSION:
        return None
    since = ".".join(map(str, NODE_READ_VERSION))
    return (f"needs nats-server {since}+ (message tracing, batched direct gets), "
            f"this is {version.strip().lstrip('v') or 'unknown'}")


async def connect(bootstrap: str, *, timeout: float = CONNECT_TIMEOUT,
                  error_cb: Callable[[Exception], Awaitable[None]] | None = None) -> Any:
    """A nats-py connection to any of the comma-separated nats:// URLs, reconnecting on its
    own afterwards; TimeoutError after `timeout`, the socket of the attempt then under way closed.

    nats-py's connect tries the servers until one answers (max_reconnect_attempts=-1). Cut
    short mid-attempt (a server that accepted the TCP connection and sends no INFO: a
    paused one), it leaves that attempt's socket open and watched by the loop, so nothing
    would ever close it: a descriptor lost per connect given up, over a soak's pauses.
    And it can outlive its cancel: one reaching an attempt whose connection was just refused
    becomes that attempt's OSError (Python 3.11's wait_for), which nats-py retries on, every
    server down. The wait_for here waits for it to end whatever it takes; so must the caller
    (`_Loop.connect`), or `shutdown` runs while the connect goes on to connect later.
    """
    nc = nats.NATS()
    try:
        await asyncio.wait_for(nc.connect(
            servers=bootstrap.split(","), connect_timeout=2, reconnect_time_wait=0.2,
            max_reconnect_attempts=-1, allow_reconnect=True, ping_interval=2, max_outstanding_pings=2,
            error_cb=error_cb or _log_error, disconnected_cb=_ignore, reconnected_cb=_ignore, closed_cb=_ignore,
        ), timeout)
    except BaseException:
        await shutdown(nc)
        raise
    return nc


async def shutdown(nc: Any) -> None:
    """Close a nats-py connection in whatever state it is: its socket, its own tasks and its
    subscriptions' tasks, even when this is cancelled or nats-py's close is cut short.

    nats-py's close first marks the client closed, then cancels its tasks, and only after a
    few awaits ends the subscriptions' tasks and closes the socket; a close cut short there
    (its wait over, on a loop running late) leaves those for good, as a second close returns
    at once. Between two connect attempts it counts itself closed and does nothing at all,
    the next attempt's socket open all the same. What it left is done here by hand
    (nats-py 2.16's attributes, pinned in pyproject.toml)."""
    try:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), CLOSE_TIMEOUT)
    finally:
        _release(nc)


def _release(nc: Any) -> None:
    """Cancel what of `nc` still runs and close its socket; synchronous, so a cancel cannot stop it."""
    nc._status = nats.NATS.CLOSED  # a lost connection is not taken up again (`_process_op_err`)
    for sub in list(getattr(nc, "_subs", {}).values()):
        if (task := getattr(sub, "_wait_for_msgs_task", None)) is not None and not task.done():
            task.cancel()
    for name in ("_reading_task", "_ping_interval_task", "_flusher_task", "_reconnection_task"):
        if (task := getattr(nc, name, None)) is not None and not task.done():
            task.cancel()
    if (transport := getattr(nc, "_transport", None)) is not None:
        with contextlib.suppress(Exception):
            transport.close()


class NodeReadError(Exception):
    """A read from one node that the node did not answer itself."""


def server_name(url: str, timeout: float = 2.0) -> str | None:
    """The name a NATS server gives itself in the INFO it sends first; None when it says nothing."""
    u = urlsplit(url if "://" in url else f"nats://{url}")
    try:
        with socket.create_connection((u.hostname or "", u.port or 4222), timeout=timeout) as sock:
            line = sock.makefile("rb").readline(65536)
        if not line.startswith(b"INFO "):
            return None
        name = json.loads(line[5:]).get("server_name")
    except (OSError, ValueError):
        return None
    return name if isinstance(name, str) and name else None


UNPARSED_TEXT = 64  # characters of an unparsed payload kept in the history


def delivered_seq(reply: str) -> tuple[int, int]:
    """(stream sequence, messages pending) of a message a consumer delivered, from its reply
    subject (the ack subject, `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>`,
    or with `<domain>.<account hash>.` before the stream and a token after); ValueError if it
    is none. nats-py's `msg.metadata` also makes a datetime and three objects a message: a
    fifth of the loop's time in the final read (py-spy, 500k messages)."""
    t = (reply or "").split(".")
    if t[:2] == ["$JS", "ACK"]:
        if len(t) == 9:
            return int(t[5]), int(t[8])
        if len(t) >= 11:
            return int(t[7]), int(t[10])
    raise ValueError(f"not a JetStream delivery: reply subject {reply!r}")


def parse_value(data: bytes | None) -> int | None:
    """The workload's value a stored payload holds; None when it is not an integer of 64 bits
    (nats-py gives an empty message's payload as None)."""
    try:
        v = int(data or b"")
    except ValueError:
        return None
    return v if -(2**63) <= v < 2**63 else None


def _add_read(polled: dict[str, list[list[Any]]], unparsed: dict[str, list[list[Any]]], k: int, seq: int,
              data: bytes | None) -> None:
    """One stored message read: a value into the poll, or its text into `unparsed`."""
    if (v := parse_value(data)) is not None:
        add_polled(polled, k, seq, v)
        return
    text = (data or b"").decode("utf-8", "backslashreplace")
    if len(text) > UNPARSED_TEXT:
        text = text[:UNPARSED_TEXT] + "..."
    log.warning("%s: the message at %d is not an integer (%r): recorded as unparsed", stream_name(k), seq, text)
    unparsed.setdefault(str(k), []).append([seq, text])


def _status(m: Any) -> str | None:
    return (m.headers or {}).get("Status")


def _err_text(e: BaseException | str) -> str:
    return e if isinstance(e, str) else f"{type(e).__name__}: {e}"


class _Loop:
    """A client's handle on the process's one asyncio event loop, called into synchronously.

    Every client of the process shares one loop on one daemon thread, as the connections of
    an asyncio program share theirs. With a loop thread per client, every reply a client's
    loop woke up for also had to win the GIL from the other clients' loop threads, which
    cost ~40 % more of this process's CPU per op; on one loop an op crosses threads twice
    (hand-off and result) however many requests it makes. The loop never stops; a client's
    `stop` cancels only what its own calls left running.
    """

    _shared: ClassVar[tuple[int, asyncio.AbstractEventLoop] | None] = None
    _start_lock: ClassVar[threading.Lock] = threading.Lock()
    _settling: ClassVar[set[concurrent.futures.Future[Any]]] = set()  # calls nobody waits for (`_spawn`)

    def __init__(self) -> None:
        self.loop = self._the_loop()
        self._calls: set[concurrent.futures.Future[Any]] = set()

    @classmethod
    def _the_loop(cls) -> asyncio.AbstractEventLoop:
        with cls._start_lock:
            # A forked child has the parent's loop object but not its thread: it makes its own.
            if cls._shared is None or cls._shared[0] != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, daemon=True, name="nats-loop").start()
                cls._shared = (os.getpid(), loop)
            return cls._shared[1]

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """The coroutine's result; TimeoutError (and the coroutine cancelled) after timeout."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self._calls.add(fut)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"no answer within {timeout:.1f} s") from None
        finally:
            self._calls.discard(fut)

    def stop(self) -> None:
        """Cancel whatever this client's calls still run (one abandoned by a hung worker)."""
        for fut in list(self._calls):
            fut.cancel()

    def connect(self, bootstrap: str, *, error_cb: Callable[[Exception], Awaitable[None]] | None = None) -> Any:
        """`connect` on the loop: a connection, or TimeoutError; one that arrives after the
        wait is over is closed (`_settle`)."""
        return self._settle(connect(bootstrap, timeout=CONNECT_TIMEOUT, error_cb=error_cb),
                            CONNECT_TIMEOUT + 2.0, late=lambda nc: self._spawn(shutdown(nc)))

    def close(self, nc: Any) -> None:
        """`shutdown` on the loop, waited for a while; never raises."""
        try:
            self._settle(shutdown(nc), CLOSE_TIMEOUT + 1.0)
        except TimeoutError as e:
            log.info("close: %s; it goes on when the loop gets to it", e)

    def _settle(self, coro: Coroutine[Any, Any, Any], timeout: float,
                late: Callable[[Any], None] | None = None) -> Any:
        """The result of a coroutine that bounds its own time, waiting at most `timeout`; past
        that TimeoutError, the coroutine left to end on the loop, then `late` given its result.

        Never cancelled, unlike `run`'s calls: on a loop running seconds late (a flood of
        deliveries) a cancel reaches a close just after nats-py marked the client closed,
        and it does no more (`shutdown`); and a connect cancelled may go on regardless and
        connect once a server is back (`connect`), a connection nobody holds, reconnecting
        after every fault to the end of the process."""
        fut = self._spawn(coro)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            if late is not None:
                fut.add_done_callback(lambda f: f.cancelled() or f.exception() is not None or late(f.result()))
            raise TimeoutError(f"no answer within {timeout:.1f} s") from None

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """`coro` running on the loop, held until it ends (the loop holds its tasks weakly)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        _Loop._settling.add(fut)
        fut.add_done_callback(_Loop._settling.discard)
        return fut


@dataclasses.dataclass(frozen=True, kw_only=True)
class Connection:
    """An open client's connection, for an adapter that speaks another API over it (kv.py):
    the loop handle its calls run on, the nats-py connection and its JetStream context.
    It stays the client's: closing the client closes it."""

    loop: _Loop
    nc: Any
    js: Any


class JetStreamClient(QueueClient):
    """One NATS connection performing the queue workload's ops; see the module docstring."""

    def __init__(self, *, replicas: int = 3, duplicate_window: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        if self.keymap.partitions != 1:
            raise ConfigError("partitions", "JetStream keys are streams of one subject: partitions must be 1")
        self.replicas = replicas
        self.duplicate_window = duplicate_window
        self.idempotent = bool(self.producer_settings.get("idempotence", False))
        retries = self.producer_settings.get("retries")
        self.retries = None if retries is None else int(retries)
        self._loop: _Loop | None = None
        self._nc: Any = None
        self._js: Any = None
        self._subs: dict[int, Any] = {}  # subscribe: key -> pull subscription on GROUP
        self._node: str | None = None  # the node a final read reads from, None: any
        self._not_held: set[int] = set()  # keys with no replica on that node
        self._final_ends: dict[int, int] = {}  # the final read: each key's end, where its final assign got one
        self._bulk = asyncio.Semaphore(BULK_KEYS)  # the final read's consumers open at once
        self._commit = threading.Lock()  # a poll's positions move, or its op was given up: not both
        self._op_gen = 0  # ops given up so far (`_run`)
        self._undo: dict[int, int | None] = {}  # positions before the running op moved them
        # How long an assigned poll goes on reading before it returns what it has: short
        # enough that its last get (PUBLISH_TIMEOUT at most) still ends within op_timeout.
        self.read_budget = max(self.op_timeout - PUBLISH_TIMEOUT, self.op_timeout / 2)
        # A final poll's, in bulk: its consumers stop at this deadline only once the loop gets
        # to their timers, and the loop every drain worker shares falls seconds behind in a
        # flood of deliveries (their gather ended 2.5-3.1 s past an 8 s deadline: 10 workers,
        # 50k messages, load 8-11), so a poll overran op_timeout + 1 and all it read was lost.
        self.bulk_budget = self.op_timeout * BULK_BUDGET

    # -- lifecycle --------------------------------------------------------------------

    def open(self, bootstrap_servers: str) -> None:
        """Connect to any of the comma-separated nats:// URLs; reconnects on its own afterwards."""
        self._bootstrap = bootstrap_servers
        self._loop = _Loop()
        try:
            self._nc = self._loop.connect(bootstrap_servers)
        except BaseException:
            self._loop.stop()
            self._loop = None
            raise
        self._js = self._nc.jetstream(timeout=PUBLISH_TIMEOUT)

    @property
    def connection(self) -> Connection:
        """This client's open connection, to share (see `Connection`)."""
        if self._loop is None:
            raise RuntimeError("the client is not open")
        return Connection(loop=self._loop, nc=self._nc, js=self._js)

    def close(self) -> None:
        loop, nc, self._loop, self._nc, self._js = self._loop, self._nc, None, None, None
        self._subs = {}
        if loop is None:
            return
        if nc is not None:
            loop.close(nc)
        loop.stop()

    def _run(self, op: Op, coro: Coroutine[Any, Any, Op]) -> Op:
        """Run one op's coroutine on the loop; a call with no answer in time is info."""
        assert self._loop is not None
        with self._commit:
            self._undo = {}
        try:
            return self._loop.run(coro, timeout=self.op_timeout + 1.0)
        except TimeoutError as e:
            # The op may have read, or still read, before it sees the cancel: the history
            # records none of its reads, so it moves no position (those it moved go back).
            with self._commit:
                self._op_gen += 1
                for k, pos in self._undo.items():
                    if pos is None:
                        self.position.pop(k, None)
                    else:
                        self.position[k] = pos
                self._undo = {}
            return complete(op, INFO, op.value, error=f"timeout: {e}")

    # -- assign / subscribe -----------------------------------------------------------

    def _assign(self, op: Op) -> Op:
        keys = list(op.value)
        if op.get("seek_to_beginning"):
            for k in keys:
                self.position[k] = FIRST_SEQ
        if self.subscribed:
            assert self._loop is not None
            try:
                self._loop.run(self._unsubscribe(), timeout=self.op_timeout)
            except TimeoutError as e:
                log.info("unsubscribe: %s", e)  # the server drops the interest with the connection
            self.subscribed = False
        # Positions live in this client: assigning asks nothing of the server.
        self.assigned = keys
        done = complete(op, OK, op.value)
        self._node, self._not_held, self._final_ends = op.get(NODE), set(), {}
        if op.get("final"):
            assert self._loop is not None
            ends: dict[str, int | None] = {str(k): None for k in keys}
            try:
                if self._node is None:
                    ends.update(self._loop.run(self._ends(keys), timeout=ENDS_TIMEOUT + 1.0))
                else:
                    ends.update(self._loop.run(self._node_ends(keys, self._node), timeout=NODE_ENDS_TIMEOUT + 1.0))
            except TimeoutError as e:
                log.info("ends: %s", e)
            done.extra["ends"] = ends
            self._final_ends = {int(k): e for k, e in ends.items() if e is not None}
            if self._node is not None:
                done.extra["not_held"] = sorted(self._not_held)
        return done

    async def _ends(self, keys: list[int]) -> dict[str, int | None]:
        """Each key's end of the log (see the module docstring); None where unknown."""

        async def end(k: int) -> int | None:
            # Each key within its own bound: a stream with no leader leaves only its own end unknown.
            try:
                info = await asyncio.wait_for(self._js.stream_info(stream_name(k)), ENDS_TIMEOUT)
            except nats.js.errors.NotFoundError:
                return FIRST_SEQ
            except Exception as e:  # noqa: BLE001 - an unanswered end stays unknown
                log.info("end of %s: %s", stream_name(k), _err_text(e))
                return None
            return max(FIRST_SEQ, info.state.last_seq + 1)

        got = await asyncio.gather(*(end(k) for k in keys))
        return {str(k): e for k, e in zip(keys, got, strict=True)}

    async def _node_ends(self, keys: list[int], node: str) -> dict[str, int | None]:
        """Each key's end of the log on `node` alone (see the module docstring); None where
        the node did not answer itself. Keys it holds no replica of go to `_not_held`."""

        async def end(k: int) -> int | None:
            try:
                info = await self._js.stream_info(stream_name(k))
            except nats.js.errors.NotFoundError:
                return FIRST_SEQ  # no stream anywhere: nothing was stored
            cluster = info.cluster
            # Without a leader the replica list may leave one member out: no judgement then.
            if cluster is not None and cluster.leader and node not in {cluster.leader} | {
                    r.name for r in cluster.replicas or ()}:
                self._not_held.add(k)
                return FIRST_SEQ  # nothing to read there
            if not info.config.allow_direct:
                info.config.allow_direct = True
                await self._js.update_stream(info.config)
            replies = await self._ask_node(f"{direct_get(k)}.{subject(k)}", b"", node, batch=False)
            m = replies[0]
            if _status(m) == "404":
                return FIRST_SEQ  # the node holds no message of the key
            if _status(m) is not None:
                raise NodeReadError(f"{node}: {_status(m)} {m.headers.get('Description', '')}")
            return int(m.headers["Nats-Sequence"]) + 1

        async def guarded(k: int) -> int | None:
            try:
                return await asyncio.wait_for(end(k), NODE_ENDS_TIMEOUT)
            except Exception as e:  # noqa: BLE001 - an end the node did not give stays unknown
                log.info("end of %s on %s: %s", stream_name(k), node, _err_text(e))
                return None

        got = await asyncio.gather(*(guarded(k) for k in keys))
        return {str(k): e for k, e in zip(keys, got, strict=True)}

    async def _ask_node(self, subj: str, payload: bytes, node: str, *, batch: bool) -> list[Any]:
        """The replies to a direct get that `node` answered itself; NodeReadError when it
        answered none of NODE_ATTEMPTS requests, or this client is connected elsewhere."""
        info = getattr(self._nc, "_server_info", None) or {}  # nats-py keeps the server's INFO here
        if info.get("server_name") != node:
            raise NodeReadError(f"connected to {info.get('server_name') or 'no server'}, not {node}")
        if (why := node_reads_refusal(str(info.get("version") or ""))) is not None:
            raise NodeReadError(f"{node}: reading from one node {why}")
        deadline = asyncio.get_running_loop().time() + NODE_READ_TIMEOUT
        for _ in range(NODE_ATTEMPTS):
            if asyncio.get_running_loop().time() > deadline:
                break
            replies = await self._ask_once(subj, payload, node, batch=batch)
            if replies is not None:
                if replies and _status(replies[-1]) == "503":
                    raise NodeReadError(f"{node}: no server answers direct gets on {subj}")
                return replies
        raise NodeReadError(f"{node} answered none of its direct gets itself within {NODE_READ_TIMEOUT:.0f} s "
                            f"({NODE_ATTEMPTS} at most; other replicas did, or nobody in time)")

    async def _ask_once(self, subj: str, payload: bytes, node: str, *, batch: bool) -> list[Any] | None:
        """One traced direct get: its replies if `node` answered it, None if another server
        did (the node's trace event shows it forwarded the request) or no answer came in time."""
        nc = self._nc
        replies: list[Any] = []
        trace: list[dict[str, Any]] = []
        answered, traced = asyncio.Event(), asyncio.Event()

        async def on_reply(m: Any) -> None:
            replies.append(m)
            if not batch or _status(m) is not None:  # a batch ends with a status (204 EOB, 404, ...)
                answered.set()

        async def on_trace(m: Any) -> None:
            with contextlib.suppress(ValueError, AttributeError):
                event = json.loads(m.data)
                if event["server"]["name"] == node:
                    trace.append(event)
                    traced.set()

        subs = [await nc.subscribe(nc.new_inbox(), cb=on_reply), await nc.subscribe(nc.new_inbox(), cb=on_trace)]
        try:
            await nc.publish(subj, payload, reply=subs[0].subject, headers={TRACE_DEST: subs[1].subject})
            await asyncio.wait_for(asyncio.gather(answered.wait(), traced.wait()), ATTEMPT_TIMEOUT)
        except TimeoutError:
            return None
        finally:
            for sub in subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        events = trace[0].get("events") or []
        if any(e.get("type") == "eg" and e.get("kind") in _FORWARDED for e in events):
            return None
        return replies

    async def _unsubscribe(self) -> None:
        subs, self._subs = self._subs, {}
        for s in subs.values():
            try:
                await s.unsubscribe()
            except Exception as e:  # noqa: BLE001 - the durable consumer stays, bound or not
                log.info("unsubscribe: %s", _err_text(e))

    def _subscribe(self, op: Op) -> Op:
        return self._run(op, self._asubscribe(op))

    async def _asubscribe(self, op: Op) -> Op:
        await self._unsubscribe()
        try:
            for k in op.value:
                await self._ensure_stream(k)
                self._subs[k] = await self._js.pull_subscribe(
                    subject(k), durable=GROUP, stream=stream_name(k),
                    config=api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S,
                                              deliver_policy=api.DeliverPolicy.ALL))
        except Exception as e:  # noqa: BLE001
            # Creating an empty stream or binding a consumer adds or removes no message.
            await self._unsubscribe()
            return complete(op, FAIL, op.value, error=_err_text(e))
        self.assigned = list(op.value)
        self.subscribed = True
        return complete(op, OK, op.value)

    def _stream_config(self, k: int, *, allow_atomic: bool = False) -> api.StreamConfig:
        cfg = api.StreamConfig(name=stream_name(k), subjects=[subject(k)], num_replicas=self.replicas,
                               storage=api.StorageType.FILE, allow_atomic=allow_atomic or None)
        if self.duplicate_window is not None:
            cfg.duplicate_window = duration_seconds(self.duplicate_window)
        return cfg

    async def _ensure_stream(self, k: int) -> None:
        """Key k's stream, created if missing. One that exists with another config is as good:
        a transactional test's senders turn atomic publish on (`_ensure_atomic`), and a
        subscriber that refused such a stream would never bind to it."""
        try:
            await self._js.add_stream(self._stream_config(k))
        except nats.js.errors.BadRequestError as e:
            if e.err_code != STREAM_NAME_IN_USE:
                raise

    # -- send / poll ------------------------------------------------------------------

    def _plain(self, op: Op) -> Op:
        return self._run(op, self._aplain(op))

    async def _aplain(self, op: Op) -> Op:
        sent = _Attempts()  # the publish attempts, for the checker's duplicate window
        dup = False  # a PubAck said the server already held the message's Msg-Id
        value = [list(m) for m in op.value]
        acks: list[Any] = []  # subscribe: messages to ack once the op is ok
        unread: dict[int, BaseException] = {}  # assign: keys whose read the server did not answer
        unparsed: dict[str, list[list[Any]]] = {}  # messages read whose payload is no value
        redelivered: dict[str, list[int]] = {}  # subscribe: offsets the consumer delivered before
        for i, m in enumerate(value):
            if m[0] == "send":
                _, k, v = m
                outcome = await self._publish(k, v, sent)
                if isinstance(outcome, tuple):
                    return _with_attempts(complete(op, outcome[0], value, error=outcome[1]), sent, dup)
                value[i] = ["send", k, [outcome.seq, v]]
                dup = dup or bool(outcome.duplicate)
            else:
                polled: dict[str, list[list[Any]]] = {}
                value[i] = ["poll", polled]
                err = await (self._fetch(polled, unparsed, redelivered, acks) if self.subscribed
                             else self._read(polled, unparsed, unread))
                # A final read is judged per key: what the streams that answered returned
                # counts even where another stream did not answer (the poll says which).
                if err is not None and not (op.get("final") and 0 < len(unread) < len(self.assigned)):
                    self._seek_back(value)
                    return _with_read_notes(complete(op, INFO, value, error=_err_text(err)),
                                            unparsed=unparsed, redelivered=redelivered)
        for msg in acks:
            try:
                await msg.ack()
            except Exception as e:  # noqa: BLE001 - unacked: delivered again, a read twice at worst
                log.info("ack: %s", _err_text(e))
        done = _with_read_notes(_with_attempts(complete(op, OK, value), sent, dup),
                                unparsed=unparsed, redelivered=redelivered)
        if op.get("final") and not self.subscribed:
            done.extra["positions"] = {str(k): self.position.get(k, FIRST_SEQ) for k in self.assigned
                                       if k not in unread}
            if unread:
                done.extra["unread"] = {str(k): _err_text(e) for k, e in sorted(unread.items())}
        return done

    async def _publish(self, k: int, v: Any, sent: _Attempts) -> api.PubAck | tuple[str, str]:
        """The PubAck, or (fail|info, why) when none came; each attempt is noted in `sent`.

        Every attempt carries the same Msg-Id, whichever server the connection has reached by
        then (nats-py reconnects on its own): a retry after a failover reaches the new stream
        leader under the id the old one may have stored.
        """
        headers = {"Nats-Msg-Id": msg_id(k, v)} if self.idempotent else None
        deadline = asyncio.get_running_loop().time() + self.op_timeout
        # Retries are counted among attempts that may have stored the message: trying again
        # after a certain non-store (no stream yet, say) can never write a value twice.
        maybe_stored, verdict, errors = 0, FAIL, []
        while True:
            try:
                sent.note()
                return await self._js.publish(subject(k), str(v).encode(), timeout=PUBLISH_TIMEOUT,
                                              headers=dict(headers) if headers else None)
            except Exception as e:  # noqa: BLE001 - classified below
                errors.append(_err_text(e))
                # One attempt that may have stored the message makes the whole send unknown.
                if classify(e) == INFO:
                    verdict = INFO
                    maybe_stored += 1
                else:
                    sent.stored_nothing()
                if isinstance(e, nats.js.errors.NoStreamResponseError):
                    try:
                        await self._ensure_stream(k)
                    except Exception as ce:  # noqa: BLE001 - creating a stream stores no message
                        errors.append(f"creating {stream_name(k)}: {_err_text(ce)}")
            left = deadline - asyncio.get_running_loop().time()
            if (self.retries is not None and maybe_stored > self.retries) or left < PUBLISH_TIMEOUT:
                return verdict, "; ".join(errors[-3:])
            await asyncio.sleep(RETRY_BACKOFF)

    # -- transactions -----------------------------------------------------------------

    def _txn(self, op: Op) -> Op:
        return self._run(op, self._atxn(op))

    async def _atxn(self, op: Op) -> Op:
        """One atomic batch of the transaction's sends (batch.py), tried again with a fresh
        batch id after an attempt that certainly stored nothing, or (Msg-Ids on) one whose
        commit a server rejected from its own state. fail only when every attempt certainly
        stored nothing. The stream holding the batch's Msg-Ids (`batch.Held`: stored by an
        earlier attempt, or for a restarted producer's `resend` by the original) is ok with
        offsets unknown."""
        value = [list(m) for m in op.value]
        if (why := batch.refusal(value)) is not None:
            return complete(op, FAIL, value, error=why)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.op_timeout
        # A batch waits for the server it goes to, as a Kafka producer waits for a broker within
        # its delivery timeout, leaving one attempt's time (a 60-min soak refused 445 of its
        # first 20 min's 22,819 sends at once, nats-py being between servers after a fault).
        if (why := await self._await_server(deadline - PUBLISH_TIMEOUT)) is not None:
            return complete(op, FAIL, value, error=f"{why}: no batch sent")
        # Config load refused a server too old (system.py); an external or mixed cluster's
        # server is only known here.
        sv = self._nc.connected_server_version
        if (why := batch.server_refusal(f"{sv.major}.{sv.minor}.{sv.patch}", msg_ids=self.idempotent)) is not None:
            return complete(op, FAIL, value, error=why)
        k, values = value[0][1], [m[2] for m in value]
        sent = _Attempts()  # each attempt that may have stored the batch, for the duplicate window
        errors: list[str] = []
        while True:
            sent.note()
            outcome, why, again = await self._batch(k, values, abort=bool(op.get("abort")))
            if isinstance(outcome, batch.Committed):
                done = [["send", k, [off, v]] for off, v in zip(outcome.offsets(), values, strict=True)]
                return _with_attempts(complete(op, OK, done), sent, False)
            if isinstance(outcome, batch.Held):
                sent.stored_nothing()  # this attempt did not: the copy the stream holds is older
                done = _with_attempts(complete(op, OK, outcome.sends(k, values)), sent, True)
                if errors:  # how the op got here: the attempts that left it unsure
                    done.extra["error"] = _attempt_errors([*errors, why])
                return done
            if outcome == FAIL:
                sent.stored_nothing()
            errors.append(why)
            if not again or op.get("abort") or deadline - loop.time() < PUBLISH_TIMEOUT:
                # One attempt that may have stored the batch (still in `sent.at`) makes the whole op unknown.
                return _with_attempts(complete(op, INFO if sent.at else FAIL, value, error=_attempt_errors(errors)),
                                      sent, False)
            await asyncio.sleep(RETRY_BACKOFF)

    async def _await_server(self, until: float) -> str | None:
        """None once the connection is at a server whose INFO it has (connected, its version
        known), or why not by loop time `until`.

        nats-py reconnects on its own, and between servers `connected_server_version` is the
        last server's, or "0.0.0-unknown" once it reached one that has not answered yet (a
        paused one holds it `connect_timeout`). nats-py tells of a reconnect only through the
        callback `connect` gives it, so this looks in short sleeps on the shared loop."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        while not (self._nc.is_connected and self._nc.connected_server_version.major != 0):
            if self._nc.is_closed:
                return "the connection is closed"
            if (left := until - loop.time()) <= 0:
                return f"no server connected within {loop.time() - start:.1f} s (the client is reconnecting)"
            await asyncio.sleep(min(SERVER_POLL, left))
        return None

    async def _batch(self, k: int, values: list[Any], *,
                     abort: bool) -> tuple[batch.Committed | batch.Held | str, str, bool]:
        """Publish one batch: (Committed, "", False), (Held, why, False) when the stream holds
        its Msg-Ids, or (fail|info, why, whether to try again): after a certain non-store
        another attempt might not meet, or, Msg-Ids on, after a rejected commit that may hide
        a store the dedup will reveal.

        Msg-Ids are `key-value` and a value is sent once, so only this op's attempts (or the
        original of a `resend`) publish these ids: the stream holding one of them holds the
        batch, stored whole by an earlier attempt. Unless an id is twice in the batch, a
        fault of the batch itself that every server finds alike."""
        repeats = len(set(values)) < len(values)
        bid = batch.new_id()
        for seq, v in enumerate(values, start=1):
            commit = seq == len(values) and not abort
            hdrs = batch.headers(bid, seq, commit=commit, msg_id=msg_id(k, v) if self.idempotent else None)
            try:
                reply = await self._nc.request(subject(k), str(v).encode(), timeout=PUBLISH_TIMEOUT, headers=hdrs)
            except Exception as e:  # noqa: BLE001 - classified below
                if isinstance(e, nats.errors.NoRespondersError):
                    # The server connected to delivered the message nowhere (no subscriber
                    # knew of): nobody received it, so no server can store the batch.
                    await self._ensure_atomic(k)
                    return FAIL, f"message {seq}: {_err_text(e)}", True
                if not commit:  # the commit was never sent: the batch is abandoned, nothing stored
                    await self._abandon(k, bid, seq)
                    return FAIL, f"message {seq} of an uncommitted batch: {_err_text(e)}", True
                return classify(e), f"commit: {_err_text(e)}", classify(e) == FAIL
            got = batch.parse_reply(reply.data, batch=bid, count=seq)
            if isinstance(got, batch.Committed):
                return got, "", False
            if isinstance(got, batch.Rejected):
                if commit and got.held and not repeats:
                    return batch.Held(), f"message {seq}: {got}", False
                if got.code == batch.ATOMIC_DISABLED:
                    await self._ensure_atomic(k)
                if not commit:
                    await self._abandon(k, bid, seq)
                    return FAIL, f"message {seq}: {got}", not got.final
                # A Msg-Id twice in the batch is a fault of the batch itself, found by every server.
                outcome = FAIL if got.held and repeats else got.outcome()
                # Msg-Ids on, a retry of a batch stored meanwhile meets its ids (in process, or
                # held: `Held`) instead of storing it again.
                again = not got.final and (outcome == FAIL or self.idempotent)
                return outcome, f"message {seq}: {got}", again
            if isinstance(got, batch.Unexpected):
                return INFO, f"message {seq}: {got}", False
            if commit:
                return INFO, f"commit of batch {bid}: an empty reply, no PubAck", False
        await asyncio.sleep(ABORT_OPEN_S)
        await self._abandon(k, bid, len(values))
        return FAIL, "aborted on purpose: the batch was staged and never committed", False

    async def _abandon(self, k: int, bid: str, sent: int) -> None:
        """Tell the leader to drop a batch of `sent` messages that will never be committed (it
        would in 10 s): a gap after all of them, `batch.abort_headers`."""
        try:
            await self._nc.publish(subject(k), b"", headers=batch.abort_headers(bid, sent))
        except Exception as e:  # noqa: BLE001 - uncommitted, the batch is dropped either way
            log.debug("abandon %s: %s", bid, _err_text(e))

    async def _ensure_atomic(self, k: int) -> None:
        """Key k's stream, created or updated to allow atomic publish; logged when that fails
        (the next attempt's batch is then refused again, and says why)."""
        cfg = self._stream_config(k, allow_atomic=True)
        try:
            try:
                await self._js.add_stream(cfg)
            except nats.js.errors.BadRequestError:  # it exists with another config: turn atomic on
                await self._js.update_stream(cfg)
        except Exception as e:  # noqa: BLE001 - creating or updating a stream stores no message
            log.info("stream %s with atomic publish: %s", stream_name(k), _err_text(e))

    async def _read(self, polled: dict[str, list[list[Any]]], unparsed: dict[str, list[list[Any]]],
                    unread: dict[int, BaseException]) -> BaseException | None:
        """assign: read every assigned stream onwards from this client's position; a key
        whose read failed goes to `unread` with what ended it, keeping what it read before."""
        got: dict[int, list[tuple[int, bytes | None]]] = {k: [] for k in self.assigned}
        gen = self._op_gen
        budget = self.bulk_budget if self._final_ends and self._node is None else self.read_budget
        deadline = asyncio.get_running_loop().time() + budget
        results = await asyncio.gather(*(self._read_key(k, got[k], deadline) for k in self.assigned),
                                       return_exceptions=True)
        with self._commit:
            if gen != self._op_gen:
                raise asyncio.CancelledError("the op was given up: its reads are not recorded")
            for k, res in zip(self.assigned, results, strict=True):
                for seq, data in got[k]:
                    _add_read(polled, unparsed, k, seq, data)
                    self._undo.setdefault(k, self.position.get(k))
                    self.position[k] = seq + 1
                if isinstance(res, BaseException):
                    unread[k] = res
        return next(iter(unread.values()), None)

    async def _read_key(self, k: int, got: list[tuple[int, bytes | None]], deadline: float) -> None:
        """Append to `got` key k's messages (sequence, payload) from this client's position on, in order.

        One get per message: on a loaded machine a whole batch of them can outlast the op,
        and an op that times out returns nothing, so the next poll would start over from the
        same place and a drain never reach the end. Past `deadline`, or when a get times out
        after some were read, the poll returns what it read (a shorter batch, as a Kafka poll
        may return) and the next one goes on from there."""
        if self._node is not None:
            got.extend(await self._read_key_on(k, self._node))
            return
        if k in self._final_ends:
            try:
                await self._read_key_to_end(k, self._final_ends[k], got, deadline)
                return
            except (TimeoutError, nats.errors.Error) as e:
                if got:
                    raise  # what it read stands; the next poll goes on from there
                # Creating the consumer goes through the meta leader, which a kill can leave
                # unelected after the stream has its leader: the gets below need only that one.
                log.info("final read of %s in bulk: %s; reading it by gets", stream_name(k), _err_text(e))
        loop = asyncio.get_running_loop()
        seq = self.position.get(k, FIRST_SEQ)
        while len(got) < READ_BATCH and not (got and loop.time() >= deadline):
            try:
                msg = await self._js.get_msg(stream_name(k), seq=seq, subject=subject(k), next=True)
            except nats.js.errors.NotFoundError:
                break  # no message at or after seq (or no stream yet): read up to the end
            except nats.errors.TimeoutError:
                if got:
                    break
                raise
            got.append((msg.seq, msg.data))
            seq = msg.seq + 1

    async def _read_key_to_end(self, k: int, end: int, got: list[tuple[int, bytes | None]], deadline: float) -> None:
        """The final read of key k: its messages from this client's position up to `end`
        (its final assign's), all of them in one go through an ordered consumer.

        One get per message cost a request and its answer each: with every worker reading
        every key, the drain of a 50k-message history took 78 s, past its 30 s. An ordered
        consumer streams the messages (flow-controlled) and nats-py makes it over from the
        last sequence delivered when one goes missing in flight, so no message is skipped,
        which a plain ephemeral consumer could not promise a poll. The consumer's server
        delivers from its own replica: one that lags delivers later, and the read goes on to
        the leader's end; a value it returned that the quorum never held is the server's
        anomaly, seen as any consumer would see it. Past `deadline`, or when nothing came for
        BULK_IDLE s, the poll returns what it read and the next one goes on from there.
        """
        seq = self.position.get(k, FIRST_SEQ)
        if seq >= end:
            return
        async with self._bulk:
            await self._read_from_consumer(k, seq, end, got, deadline)

    async def _read_from_consumer(self, k: int, seq: int, end: int, got: list[tuple[int, bytes | None]],
                                  deadline: float) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            return
        progress, done = asyncio.Event(), asyncio.Event()

        async def on_msg(msg: Any) -> None:
            # A callback, not next_msg: a wait_for per message cost the loop a task each.
            if done.is_set():
                return
            try:
                seq, pending = delivered_seq(msg.reply)
            except ValueError as e:  # no sequence: the read stops before it, skipping nothing
                log.info("final read of %s: %s", stream_name(k), _err_text(e))
                done.set()
                return
            got.append((seq, msg.data))
            progress.set()
            if seq + 1 >= end or pending == 0:
                done.set()  # at the end, or at the last message the stream held when it was sent

        sub = None
        try:
            # Made within the poll's time too: an op over its time is given up whole (`_run`).
            sub = await asyncio.wait_for(self._js.subscribe(
                subject(k), stream=stream_name(k), ordered_consumer=True, cb=on_msg,
                config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=seq)),
                max(deadline - loop.time(), 0.1))
            while not done.is_set() and (left := deadline - loop.time()) > 0:
                progress.clear()
                try:
                    await asyncio.wait_for(progress.wait(), min(left, BULK_IDLE))
                except TimeoutError:
                    break
        finally:
            done.set()  # what arrives from here on is not this poll's
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    async def _read_key_on(self, k: int, node: str) -> list[tuple[int, bytes | None]]:
        """The messages `node` itself holds at or after this client's position (one batch)."""
        if k in self._not_held:
            return []
        request = json.dumps({"seq": self.position.get(k, FIRST_SEQ), "batch": READ_BATCH}).encode()
        got: list[tuple[int, bytes | None]] = []
        for m in await self._ask_node(direct_get(k), request, node, batch=True):
            status = _status(m)
            if status is None:
                got.append((int(m.headers["Nats-Sequence"]), m.data))
            elif status not in ("204", "404"):  # end of batch; no message at or after the position
                raise NodeReadError(f"{node}: {status} {m.headers.get('Description', '')}")
        return got

    async def _fetch(self, polled: dict[str, list[list[Any]]], unparsed: dict[str, list[list[Any]]],
                     redelivered: dict[str, list[int]], acks: list[Any]) -> BaseException | None:
        """subscribe: whatever the shared consumer of each subscribed stream delivers now. The
        offsets of messages it delivered before (after an ack wait ran out) go to `redelivered`:
        only those may come after later ones in one fetch (the checker's int-nonmonotonic-poll)."""
        keys = list(self._subs)
        results = await asyncio.gather(*(self._fetch_key(k) for k in keys), return_exceptions=True)
        err = None
        for k, res in zip(keys, results, strict=True):
            if isinstance(res, BaseException):
                err = err or res
                continue
            for msg in res:
                meta = msg.metadata
                _add_read(polled, unparsed, k, meta.sequence.stream, msg.data)
                if meta.num_delivered > 1:
                    redelivered.setdefault(str(k), []).append(meta.sequence.stream)
                acks.append(msg)
        return err

    async def _fetch_key(self, k: int) -> list[Any]:
        try:
            return await self._subs[k].fetch(batch=READ_BATCH, timeout=self.poll_timeout)
        except nats.errors.TimeoutError:
            return []  # nothing to deliver within poll_timeout

    def _seek_back(self, value: list[list[Any]]) -> None:
        # An info poll read nothing as far as the checker is concerned: read it again.
        if not self.subscribed:
            self.position.update(seek_back(value))


class _Attempts:
    """When an op's publish attempts that may have stored a message were sent, in ns after
    the op began (monotonic), and how many attempts were made at all."""

    def __init__(self) -> None:
        self.start = time.monotonic_ns()
        self.at: list[int] = []
        self.made = 0

    def note(self) -> None:
        self.at.append(time.monotonic_ns() - self.start)
        self.made += 1

    def stored_nothing(self) -> None:
        """The last attempt certainly stored nothing: it cannot have made a copy."""
        self.at.pop()


def _attempt_errors(errors: list[str], keep: int = 3) -> str:
    """An op's attempts' errors, one string: all of a few; of many, how many, the first (what
    began it) and the last `keep` (what ended it)."""
    if len(errors) <= keep + 1:
        return "; ".join(errors)
    return f"{len(errors)} attempts: first {errors[0]}; ...; last {'; '.join(errors[-keep:])}"


def _with_attempts(done: Op, sent: _Attempts, duplicate: bool) -> Op:
    """`done` with `attempts` (README.md's History format) where a send was tried more than
    once, and `duplicate` where a PubAck said the stream already held the Msg-Id."""
    if sent.made > 1:
        done.extra["attempts"] = sent.at
    if duplicate:
        done.extra["duplicate"] = True
    return done


def _with_read_notes(done: Op, **notes: dict[str, list[Any]]) -> Op:
    """`done` with what its polls noted beside the values, where they noted any (README.md's
    History format): `unparsed`, the messages that hold no value; `redelivered`, the offsets a
    shared consumer delivered again."""
    done.extra.update((name, note) for name, note in notes.items() if note)
    return done


async def _log_error(e: Exception) -> None:
    log.debug("nats: %s", _err_text(e))


async def _ignore() -> None:
    return None
