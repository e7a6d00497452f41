"""Checkpoints of a partition's applied state, so a restart applies only its log's tail.

Without one, a restarted replica rebuilds its `PartitionState` by applying its whole
committed log: after a 60-min soak, 95 MB in 204 groups took ~19 s of CPU under cProfile
(reading and CRC-checking every record, then parsing every batch again). A checkpoint is
the state at one applied index, without payloads: offsets, the sparse samples indexing the
batches (every row sampled as `PartitionState.trim` would), epochs, producer windows and the
transaction index. The payloads stay in the Raft log, read back through the state's loader.

File `checkpoint` in the group's directory, replaced atomically (temp file, fsync, rename,
directory fsync; no fsync under the `never` policy):

    magic "LQCP" | version u32 | crc32(body) u32 | body length u64 | body

The body is little-endian int64s: applied index, its term, next offset, log start offset,
batch bytes before the samples' end, then counted sections: epochs (epoch, start offset),
samples (four columns), producers (id, epoch, batch count, then 4 ints a batch), open
transactions (producer id, first offset), aborted ones (producer id, first, last offset).

Use (`read`): only when the log still holds the checkpoint's index with the same term: by
Raft's log matching the log up to there is then the one the state was applied from. A
checkpoint ahead of the log (a torn tail cut it, or unsynced entries were lost) or of
another term (an unclean election replaced the entries) is discarded with a warning, as is
a damaged file; the replica then replays the whole log, as without one.

Cadence (`Checkpoints`): every `every_bytes` of payloads or `every_entries` entries applied,
so a crash leaves at most that much to replay, every `every_s` seconds for a group that
applied anything, and at a clean stop. The state is encoded on
the caller's thread (a consistent copy of a state the loop keeps changing) and written by one
background thread; a save while the previous write runs waits for a later apply.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType

from logquake.broker import producer_state, txn_index
from logquake.broker.partition import PartitionState

__all__ = ["FILE", "CheckpointError", "Checkpoints", "decode", "encode", "read", "write"]

log = logging.getLogger(__name__)

FILE = "checkpoint"
VERSION = 1
_MAGIC = b"LQCP"
_HEAD = struct.Struct("<4sIIQ")  # magic, version, crc32(body), body length
# A crash leaves at most this much of a group's log to replay (n3 of a 60-min soak: 95 MB in
# 204 groups; its biggest checkpoint, 320 KB, took 0.3 ms to encode and 1 ms to write+fsync).
EVERY_BYTES = 1 << 20
EVERY_ENTRIES = 10_000
EVERY_S = 60.0  # and a group that applied anything: most groups never reach the two above
_LITTLE = array("q", [1]).tobytes()[0] == 1


class CheckpointError(ValueError):
    """A checkpoint file is damaged or of an unknown version."""


def encode(state: PartitionState) -> bytes:
    """The checkpoint of `state` (rows sampled, no payloads): header and body."""
    d = state.detached()
    out = array("q", [d.applied_index, d.last_term, d.next_offset, d.log_start_offset, d._before_rows])
    out.append(len(d.epochs))
    for epoch, start in d.epochs:
        out.extend((epoch, start))
    out.append(len(d._s_bases))
    for col in (d._s_bases, d._s_indexes, d._s_before, d._s_max_ts):
        out.extend(col)
    producers = d.producers.producers
    out.append(len(producers))
    for pid, entry in producers.items():
        out.extend((pid, entry.epoch, len(entry.batches)))
        for b in entry.batches:
            out.extend((b.base_sequence, b.last_sequence, b.first_offset, b.last_offset))
    out.append(len(d.txns.open))
    for pid, first in d.txns.open.items():
        out.extend((pid, first))
    aborted = d.txns.aborted
    out.append(len(aborted))
    for a in aborted:
        out.extend((a.producer_id, a.first_offset, a.last_offset))
    if not _LITTLE:
        out.byteswap()
    body = out.tobytes()
    return _HEAD.pack(_MAGIC, VERSION, zlib.crc32(body), len(body)) + body


def decode(raw: bytes) -> PartitionState:
    """The state a checkpoint holds (no loader, no payload window: the replica sets them)."""
    if len(raw) < _HEAD.size:
        raise CheckpointError(f"{len(raw)} bytes, shorter than its header")
    magic, version, crc, n = _HEAD.unpack_from(raw)
    if magic != _MAGIC:
        raise CheckpointError(f"bad magic {magic!r}")
    if version != VERSION:
        raise CheckpointError(f"version {version}, this broker reads {VERSION}")
    body = raw[_HEAD.size :]
    if len(body) != n or n % 8:
        raise CheckpointError(f"body of {len(body)} bytes, header says {n}")
    if zlib.crc32(body) != crc:
        raise CheckpointError("CRC mismatch")
    v = array("q")
    v.frombytes(body)
    if not _LITTLE:
        v.byteswap()
    try:
        return _state(v)
    except (IndexError, ValueError) as exc:  # a CRC-valid body that does not parse: a bug
        raise CheckpointError(f"body does not parse: {exc}") from exc


def _state(v: array[int]) -> PartitionState:
    pos = 0

    def take(n: int) -> array[int]:
        nonlocal pos
        if pos + n > len(v):
            raise ValueError(f"cut short at value {pos} of {len(v)}")
        pos += n
        return v[pos - n : pos]

    index, term, nxt_off, start, before, n = take(6)
    st = PartitionState(applied_index=index, last_term=term, next_offset=nxt_off, log_start_offset=start)
    st._before_rows = before
    flat = take(2 * n)
    st.epochs = list(zip(flat[::2], flat[1::2], strict=True))
    (n,) = take(1)
    st._s_bases, st._s_indexes, st._s_before, st._s_max_ts = (take(n) for _ in range(4))
    producers = {}
    for _ in range(take(1)[0]):
        pid, epoch, nb = take(3)
        flat = take(4 * nb)
        batches = tuple(producer_state.BatchRecord(base_sequence=flat[k], last_sequence=flat[k + 1],
                                                   first_offset=flat[k + 2], last_offset=flat[k + 3])
                        for k in range(0, 4 * nb, 4))
        producers[pid] = producer_state.ProducerEntry(epoch=epoch, batches=batches)
    st.producers = producer_state.ProducerStates(producers=MappingProxyType(producers))
    (n,) = take(1)
    flat = take(2 * n)
    opened = dict(zip(flat[::2], flat[1::2], strict=True))
    (n,) = take(1)
    flat = take(3 * n)
    aborted = [txn_index.AbortedTxn(producer_id=flat[k], first_offset=flat[k + 1], last_offset=flat[k + 2])
               for k in range(0, 3 * n, 3)]
    st.txns = txn_index.TxnIndex(open=MappingProxyType(opened), _log=aborted, _n=len(aborted))
    if pos != len(v):
        raise ValueError(f"{len(v) - pos} values left over")
    return st


def write(directory: Path, blob: bytes, *, fsync: bool = True) -> None:
    """Replace `directory`/checkpoint with `blob` atomically (durably unless not `fsync`)."""
    tmp = directory / (FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        mv = memoryview(blob)
        while mv:
            mv = mv[os.write(fd, mv) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / FILE)
    if fsync:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def read(directory: Path, runs: Sequence[tuple[int, int]], last: int) -> PartitionState | None:
    """The checkpointed state, if the log (every term's (first index, term) run and its last
    index, as `SegmentLog.load_window` returns them) holds its applied index with its term;
    else None, the file removed with a warning when it was there."""
    path = directory / FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("%s: cannot read the checkpoint (%s); replaying the whole log", path, exc)
        return None
    try:
        st = decode(raw)
    except CheckpointError as exc:
        return _discard(path, f"damaged checkpoint ({exc})")
    index, term = st.applied_index, st.last_term
    if index > last:
        return _discard(path, f"checkpoint at index {index} is ahead of the log, which ends at {last}")
    have = _term_at(runs, index)
    if have != term:
        return _discard(path, f"checkpoint at index {index} has term {term}, the log has term {have} there")
    return st


def _term_at(runs: Sequence[tuple[int, int]], index: int) -> int:
    if index <= 0:
        return 0
    k = bisect_right(runs, (index, 2**63)) - 1
    return runs[k][1] if k >= 0 else 0


def _discard(path: Path, why: str) -> None:
    log.warning("%s: %s; discarded, replaying the whole log", path, why)
    try:
        path.unlink()
    except OSError:
        pass
    return None


_writer: ThreadPoolExecutor | None = None


def _background() -> ThreadPoolExecutor:
    """One thread for every group's checkpoint writes (created at the first one)."""
    global _writer  # noqa: PLW0603 - one per process, like the loop's default executor
    if _writer is None:
        _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lq-checkpoint")
    return _writer


class Checkpoints:
    """When and how one group's checkpoints are written (module docstring, "Cadence").

    `source` gives the state to write at `close` (the replica sets it): a stop writes the
    state as it is, so the next start applies nothing."""

    def __init__(self, directory: Path, *, fsync: bool = True, every_bytes: int = EVERY_BYTES,
                 every_entries: int = EVERY_ENTRIES, every_s: float = EVERY_S) -> None:
        self.directory = directory
        self.fsync = fsync
        self.every_bytes = every_bytes
        self.every_entries = every_entries
        self.every_s = every_s
        self._since = time.monotonic()
        self.source: Callable[[], PartitionState] | None = None
        self.written_index = 0  # the applied index of the last checkpoint handed to the writer
        self._bytes = self._entries = 0
        self._pending: Future[None] | None = None
        self.saves = 0

    def restored(self, state: PartitionState) -> None:
        """The replica starts from `state` (a checkpoint just read, or an empty state)."""
        self.written_index = state.applied_index

    def forget(self) -> None:
        """The last checkpoint may hold entries an unclean election lost: the next save or
        `close` replaces it (a load would discard it anyway: its term no longer matches)."""
        self.written_index = 0
        self._bytes = self.every_bytes

    def note(self, entries: int, nbytes: int) -> bool:
        """`entries` of `nbytes` were applied; True when a checkpoint is due."""
        self._entries += entries
        self._bytes += nbytes
        return (self._bytes >= self.every_bytes or self._entries >= self.every_entries
                or (self._entries > 0 and time.monotonic() - self._since >= self.every_s))

    def save(self, state: PartitionState) -> bool:
        """Encode `state` now and write it in the background; False (still due) while the
        previous write runs."""
        if self._pending is not None and not self._pending.done():
            return False
        self._wait()
        blob = encode(state)
        self._pending = _background().submit(write, self.directory, blob, fsync=self.fsync)
        self._reset(state)
        return True

    def _wait(self) -> None:
        """The write in flight, if any, finished (a failure is a warning: the log still holds
        everything, and the next checkpoint is due again at once)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except OSError as exc:
            log.warning("%s: checkpoint write failed: %s", self.directory, exc)
            self.written_index = 0
            self._bytes = self.every_bytes

    def _reset(self, state: PartitionState) -> None:
        self.written_index = state.applied_index
        self._bytes = self._entries = 0
        self._since = time.monotonic()
        self.saves += 1

    def close(self) -> None:
        """Wait for a write in flight, then write the current state if it moved since."""
        self._wait()
        if self.source is None:
            return
        state = self.source()
        if state.applied_index > self.written_index:
            try:
                write(self.directory, encode(state), fsync=self.fsync)
            except OSError as exc:
                log.warning("%s: checkpoint write failed: %s", self.directory, exc)
                return
            self._reset(state)
