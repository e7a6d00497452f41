"""The node's view of one Raft group's durable log, over storage.py's `SegmentLog`.

The node writes every group's Ready with `append(entries, hard_state)` (no fsync), then
fsyncs all written logs together with `sync()` from one worker thread (fsync coalescing
across groups), so one fsync round covers everything a loop turn produced. The node locks its
whole data directory once (`DirLock`) and its logs share one `OpenFiles`, so its descriptors
stay bounded however many partitions it has held.

A partition's store also keeps its state machine's checkpoints (checkpoint.py): read after
the log is loaded (`load_checkpoint`), written as the replica applies and when it closes.
"""

from __future__ import annotations

from pathlib import Path

from logquake.broker import checkpoint
from logquake.broker.partition import PartitionState
from logquake.broker.raft import Entry, HardState
from logquake.broker.storage import OpenFiles, SegmentLog

__all__ = ["GroupStore", "open_store"]


class GroupStore:
    """One group's log: load, append (+ hard state), sync, read back, close."""

    def __init__(self, path: Path, fsync: str, files: OpenFiles) -> None:
        self.path = path
        self._log = SegmentLog(path, fsync=fsync, lock=False, files=files)
        self.checkpoints = checkpoint.Checkpoints(path, fsync=fsync != "never")
        self._runs: list[tuple[int, int]] = []

    def load(self, window_bytes: int | None = None) -> tuple[HardState | None, list[tuple[int, int]], list[Entry]]:
        """Hard state, every term's (first index, term) and the newest entries (`load_window`)."""
        hs, self._runs, entries = self._log.load_window(window_bytes)
        return hs, self._runs, entries

    def load_checkpoint(self) -> PartitionState | None:
        """The partition state checkpointed here, if the loaded log still holds its index
        with its term (`checkpoint.read`; call after `load`)."""
        return checkpoint.read(self.path, self._runs, self._log.last_index)

    @property
    def repaired_term(self) -> int | None:
        """`SegmentLog.repaired_term`: Raft's quarantine of a log that lost a tail."""
        return self._log.repaired_term

    def read(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Persisted entries lo..hi-1 (a prefix with `max_bytes`): the Raft log's `reader`.
        Runs on the event loop: one pread per segment the range spans."""
        return self._log.read(lo, hi, max_bytes)

    def read_payloads(self, lo: int, hi: int) -> list[bytes]:
        """Just the payloads of lo..hi-1: the Raft log's `payload_reader` (a fetch's reads)."""
        return self._log.read_payloads(lo, hi)

    def append(self, entries: tuple[Entry, ...], hs: HardState | None) -> None:
        if entries:
            self._log.append(entries, sync=False)
        if hs is not None:
            self._log.save_hard_state(hs)  # term/vote changes are fsynced here, whatever the policy

    def sync(self) -> None:
        # The node's writer thread (or the ready loop inline) is the only one writing a group's
        # log, and it closes no store while a write runs: no duplicate descriptor needed.
        self._log.sync(exclusive=True)

    def close(self) -> None:
        """Close the log (synced), then write the state machine's last checkpoint, if any."""
        self._log.close()
        self.checkpoints.close()


def open_store(path: Path, *, fsync: str, files: OpenFiles) -> GroupStore:
    """A group's store under a node's data directory (which the node has locked)."""
    return GroupStore(path, fsync, files)
