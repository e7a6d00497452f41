"""JetStream's atomic batch publish as the queue workload's transactions: the protocol, no I/O.

nats-server 2.12 and later store a batch of publishes to one stream all together or not at
all (ADR-50 in nats-io/nats-architecture-and-design; the server side is stream.go's atomic
batch path). nats-py has no helper for it, so the adapter speaks the headers itself:

- every message of a batch carries `Nats-Batch-Id` (one id per attempt, at most 64 bytes)
  and `Nats-Batch-Sequence` (1, 2, ... with no gap); the last one also carries
  `Nats-Batch-Commit: 1`. Each is sent as a request: the stream leader answers a message
  it staged with an empty reply, and the commit with a PubAck whose `seq` is the stream
  sequence of the batch's last message, plus `batch` (the id) and `count` (its messages);
  the other messages hold the `count - 1` sequences before it.
- the batch is staged on the stream's leader only and replicated as one proposal at the
  commit. A batch whose commit is never sent is never stored: the leader drops it after
  10 s without traffic, or when a message arrives out of sequence (the adapter's abort:
  a commit with a gap, which the server rejects with "batch is incomplete"), or when its
  leader changes (the new leader knows no such batch and rejects the commit).
- one batch reaches one stream, and each key is a stream of its own (client.py), so a
  transaction's sends must all name one key: a transaction spanning keys is refused
  (`refusal`), never split into batches that could be stored one without the other.
  Offsets stay each key's own stream sequences, so a batch's values sit at consecutive
  offsets of their key, as a Kafka transaction's records sit in their partition.
- a batch holds publishes only. Reads have no part in JetStream's promise, so a
  transaction that polls is refused rather than run as reads beside the batch.

What the client reports (fail only where nothing can have been stored, docs/architecture.md):
the op is ok with the PubAck's offsets; fail when the commit was never sent (a message
before it was refused or went unanswered: the batch was abandoned) or when the commit was
rejected for a fault of the message itself (`_REJECTED`), which every server finds alike;
info otherwise (no reply to the commit, a rejection that can come after the batch was
proposed, one made from the answering server's own state, an ack that does not confirm this
batch). A rejection from state is no proof: the server that answered first need not be the
one that stored the batch (`_STATEFUL`). The op's attempts add up: one that may have stored
the batch keeps the op from `fail`, and an idempotent producer (Msg-Ids) tries again after
such a rejection, where the stream's dedup keeps a stored batch single and says so.

A restarted producer resends a batch it was unsure of (its commit unanswered: a crash, a
timeout, a failover) as the same messages under the same Msg-Ids in a new batch (a fresh
batch id: the server keeps ids of batches in flight only, and a new batch under an old id
would meet a staged remnant of it). The leader checks every Msg-Id of a batch at its commit,
before proposing anything, against the ids the stream stored within its duplicate window
(and those proposed, not yet applied): one held id rejects the whole batch with
`DUPLICATE_ID` (the reply names no sequence), one in a proposal not yet applied with
`ID_IN_PROCESS` (stream.go `processJetStreamAtomicBatchMsg`, jetstream_batching.go
`checkMsgHeadersPreClusteredProposal`, nats-server 2.12.1 and later; 2.12.0 refuses Msg-Ids
in batches). A batch is stored whole or not at all, so a resend so rejected repeats a batch
that was stored whole: `Held`, the resend ok with its offsets unknown. So is a send's
attempt so rejected: a Msg-Id is `key-value` and a value is sent once, so the ids held are
the op's own, stored by one of its earlier attempts (whose answer was not to be trusted).

Reads need no special handling: the leader applies a committed batch under the lock its
reads take, so a read returns all of a batch or none of it, and the checker's analyses of
aborted reads (G1a), cycles (G1c) and torn transactions judge JetStream as they judge Kafka.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from logquake.history import FAIL, INFO

__all__ = ["ATOMIC_DISABLED", "ATOMIC_SINCE", "DUPLICATE_ID", "ID_IN_PROCESS", "MSG_IDS_SINCE", "Committed", "Held",
           "Rejected", "Reply", "Staged", "Unexpected", "abort_headers", "headers", "new_id", "parse_reply", "refusal",
           "server_refusal", "supports_atomic", "supports_msg_ids", "version_tuple"]

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQ = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
MSG_ID = "Nats-Msg-Id"
#: The first nats-server release with atomic batch publish.
ATOMIC_SINCE = (2, 12)
#: The first with Nats-Msg-Id in a batch (2.12.0 rejects the header, 10177).
MSG_IDS_SINCE = (2, 12, 1)
MAX_MESSAGES = 1000  # the server's default cap on a batch
ATOMIC_DISABLED = 10174  # the stream does not allow atomic publish (yet): turn it on, try again
DUPLICATE_ID = 10201  # a Msg-Id of the batch is stored (or twice in the batch): none of it is
ID_IN_PROCESS = 10158  # a Msg-Id of the batch is in a proposal not yet applied: none of it is

# The error codes of rejections that store nothing whichever server makes them: checks of
# the message itself, which every server makes alike. A commit rejected with one of these
# stored nothing.
_REJECTED: dict[int, str] = {
    10175: "batch sequence missing",
    10177: "a header batches do not support",
    10179: "batch id invalid",
    10199: "batch too large",
    10200: "batch commit invalid",
}
# Rejections the leader also makes before proposing, but from its own state: what it staged,
# its batches in flight, its copy of the stream's config and of the Msg-Ids. A commit so
# rejected is `info`, not `fail`: the server that answered need not be the one that stored
# the batch. Around a partition's heal the old leader, cut off and not yet told of the new
# term, still subscribes to the stream's subjects beside the new leader; both get every
# message, both answer, and the client takes the first reply (soak 20261202T163620, op
# 20056: the new leader stored the batch at 56-59 while the attempt was answered as a
# rejection, so the retry met the batch's Msg-Ids in process, then held).
_STATEFUL: dict[int, str] = {
    ATOMIC_DISABLED: "atomic publish disabled on the stream",
    10176: "batch incomplete: a gap, an unknown batch, or one abandoned by its leader",
    10210: "too many batches in flight",
    # The stream holds a Msg-Id of the batch: an earlier publish of it was stored.
    DUPLICATE_ID: "batch contains a duplicate message id",
    # An earlier publish of the id is proposed and not yet applied: tried again, it meets
    # the id stored (DUPLICATE_ID) or, the proposal lost with its leader, nothing at all.
    ID_IN_PROCESS: "a message id of the batch is in a proposal not yet applied",
}
# Of those, the rejections that would come again however often the same batch is tried.
_FINAL = frozenset({10175, 10177, 10179, 10199, 10200, DUPLICATE_ID})


@dataclass(frozen=True, kw_only=True)
class Committed:
    """The commit's PubAck: the batch is stored, its messages ending at stream sequence `last`."""

    batch: str
    count: int
    last: int

    def offsets(self) -> list[int]:
        """Each message's stream sequence, in batch order."""
        return list(range(self.last - self.count + 1, self.last + 1))


@dataclass(frozen=True, kw_only=True)
class Rejected:
    """An error reply to a batch message: what the server said."""

    code: int | None
    description: str

    def outcome(self) -> str:
        """Of a rejected commit: `fail` when the rejection certainly stored nothing, else `info`.
        (A rejected message before the commit is always `fail`: the batch never commits.)"""
        return FAIL if self.code in _REJECTED else INFO

    @property
    def final(self) -> bool:
        """Would the same batch be rejected again? (Else a retry may pass: a new leader, a
        stream that now allows atomic publish, a free slot among the batches in flight.)"""
        return self.code in _FINAL

    @property
    def held(self) -> bool:
        """Does the stream hold a Msg-Id of the batch? (For a resend: see `Held`.)"""
        return self.code == DUPLICATE_ID

    def __str__(self) -> str:
        return f"rejected ({self.code}): {self.description}"


@dataclass(frozen=True, kw_only=True)
class Held:
    """A batch rejected because the stream holds its Msg-Ids (`Rejected.held`), none twice in
    it: the batch it repeats, stored whole or not at all, was stored whole by an earlier
    publish of those ids (an earlier attempt of the op; for a resend, the original or an
    earlier resend) within the duplicate window, and this one stored nothing. The reply
    names no sequence, so the values' offsets stay unknown."""

    def sends(self, k: int, values: list[Any]) -> list[list[Any]]:
        """The resend's completed micro-ops: each value acknowledged, its offset unknown."""
        return [["send", k, [None, v]] for v in values]


@dataclass(frozen=True, kw_only=True)
class Staged:
    """The empty reply to a message before the commit: the leader holds it for the batch."""


@dataclass(frozen=True, kw_only=True)
class Unexpected:
    """A reply that is neither of the above: a PubAck for another batch or size, or none at
    all (a server that ignored the batch headers and stored messages one by one). Whatever
    was stored, the batch's promise was not kept: `info`."""

    description: str

    def __str__(self) -> str:
        return self.description


Reply = Committed | Rejected | Staged | Unexpected


def new_id() -> str:
    """A fresh batch id: one per attempt, so a retry never joins an abandoned batch."""
    return uuid.uuid4().hex


def headers(batch: str, seq: int, *, commit: bool, msg_id: str | None = None) -> dict[str, str]:
    """The headers of the batch's `seq`-th message (from 1); `commit` on the last one."""
    out = {BATCH_ID: batch, BATCH_SEQ: str(seq)}
    if commit:
        out[BATCH_COMMIT] = "1"
    if msg_id is not None:
        out[MSG_ID] = msg_id
    return out


def abort_headers(batch: str, sent: int) -> dict[str, str]:
    """A commit that skips a sequence after `sent` messages: the leader drops the batch at
    once (it would anyway, 10 s later) and frees its slot among the batches in flight.
    `sent` counts every message sent, the last one's answer missing or a rejection included:
    a message that timed out may still arrive, and one another server rejected may be staged
    on the leader, so a commit right after the last staged one would store the batch."""
    return headers(batch, sent + 2, commit=True)


def parse_reply(data: bytes, *, batch: str, count: int) -> Reply:
    """The server's reply to the `count`-th message of `batch`."""
    if not data:
        return Staged()
    try:
        reply: Any = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return Unexpected(description=f"reply is not JSON: {data[:80]!r}")
    if not isinstance(reply, dict):
        return Unexpected(description=f"reply is not a PubAck: {data[:80]!r}")
    if isinstance(err := reply.get("error"), dict):
        code = err.get("err_code")
        return Rejected(code=code if isinstance(code, int) else None,
                        description=str(err.get("description", err)))
    seq, got_batch, got_count = reply.get("seq"), reply.get("batch"), reply.get("count")
    if got_batch != batch or got_count != count or not isinstance(seq, int) or seq < count:
        return Unexpected(description=f"PubAck does not confirm batch {batch} of {count}: {reply}")
    return Committed(batch=batch, count=count, last=seq)


def refusal(value: list[list[Any]]) -> str | None:
    """Why a transaction's micro-ops cannot be one atomic batch, or None when they can."""
    if any(m[0] != "send" for m in value):
        return "a JetStream batch holds publishes only; this transaction also polls"
    keys = sorted({m[1] for m in value})
    if len(keys) != 1:
        return f"a JetStream batch reaches one stream, one key; this transaction sends to keys {keys}"
    if len(value) > MAX_MESSAGES:
        return f"a JetStream batch holds at most {MAX_MESSAGES} messages, got {len(value)}"
    return None


def version_tuple(version: str) -> tuple[int, ...] | None:
    """(2, 12, 0) from "v2.12.0" or "2.12.0-beta.1"; None when it names no version."""
    core = version.strip().lstrip("v").split("-", 1)[0].split("+", 1)[0]
    try:
        return tuple(int(p) for p in core.split("."))
    except ValueError:
        return None


def server_refusal(version: str, *, msg_ids: bool, server: str | None = None) -> str | None:
    """Why nats-server `version` cannot take this producer's batches (None: it can): it has
    no atomic batch publish, or `msg_ids` (an idempotent producer's) and it refuses them in
    a batch. `server` names it in the answer (default "nats-server <version>")."""
    server = server or f"nats-server {version}"
    if not supports_atomic(version):
        since = ".".join(map(str, ATOMIC_SINCE))
        return f"{server} has no atomic batch publish, which JetStream transactions are (nats-server {since} and later)"
    if msg_ids and not supports_msg_ids(version):
        since = ".".join(map(str, MSG_IDS_SINCE))
        return (f"{server} takes no Nats-Msg-Id in an atomic batch, which a transactional producer sends "
                f"(nats-server {since} and later)")
    return None


def supports_msg_ids(version: str) -> bool:
    """Does nats-server `version` take a Nats-Msg-Id in an atomic batch (and dedup by it)?"""
    parsed = version_tuple(version)
    return parsed is not None and parsed >= MSG_IDS_SINCE


def supports_atomic(version: str) -> bool:
    """Does nats-server `version` ("v2.15.1") offer atomic batch publish?"""
    parsed = version_tuple(version)
    return parsed is not None and parsed[:2] >= ATOMIC_SINCE
