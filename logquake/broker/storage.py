"""Durable storage of one Raft group: segment files of CRC-checked entries plus the hard state.

Layout of a group's directory:

    LOCK                          flock'ed while open, so two processes never share a log
                                  (absent when the caller locks a parent: `lock=False`)
    hardstate                     term, vote, commit (+ CRC); replaced atomically by rename
    00000000000000000001.seg      entries 1.. ; a new segment starts past `segment_bytes`
    00000000000000004711.seg      ...

Each entry on disk is `length u32 | crc32 u32 | term u64 | index u64 | data`, where length
counts term+index+data and the CRC (zlib.crc32) covers them. On open, `load()` re-reads every
segment; the first record that is torn (the file ends inside it), fails its CRC or breaks the
index sequence ends the log: the file is cut there, later segments are removed, and a warning
says so. Raft then re-fetches the lost suffix from the leader (or, if this node's copy was the
only one, the entries were never acknowledged by a majority that included it). `load_window`
scans the same way, keeping every term, then reads back only the newest entries' payloads, for a node
that holds a window of its log in memory and reads older entries back with `read`: one pread
per segment a range touches, from any thread while the log is appended to.

Positions are sparse, as Kafka's offset index is: a segment remembers where one entry of every
`index_bytes` (4 KiB) starts, and a read starts at the sample at or before it and walks the
record headers from there, reading at most about `index_bytes` more than asked. A position
per entry (8 bytes) was most of what an hour of small transactional writes left in memory.

Durability: term and vote are always fsynced before `save_hard_state` returns, whatever the
policy, because voting twice in a term breaks Raft's safety. Entries follow the policy:
`always` fsyncs in `append` (unless the shell passes `sync=False` and calls `sync()` itself, e.g.
once for many groups from a worker thread), `interval` leaves `sync()` to the shell's timer, and
`never` never fsyncs (the unsafe mode `fsync: never`: an acknowledged write can vanish on power
loss). A commit-index-only change is kept in memory and written with the next durable save or
at close: the commit index is advisory and Raft relearns it from the leader.

Open files: a log holds no descriptor but its LOCK until its first append, and with an
`OpenFiles` shared by many logs (a node's partitions), only the most recently written logs
keep their active segment open: the least recently used one, or one idle for `idle_s`, is
synced (unless `never`) and closed when another log needs a descriptor, and reopened on its
next append. A node that has held hundreds of partitions thus holds a bounded number of fds
(and so does LazyFS, which mirrors them).
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import os
import struct
import threading
import time
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from logquake.broker.raft import ENTRY_COST, Entry, HardState
from logquake.errors import UserError

__all__ = ["FSYNC_POLICIES", "RECORD_OVERHEAD", "DirLock", "OpenFiles", "SegmentLog", "StorageError"]

log = logging.getLogger(__name__)

FSYNC_POLICIES = ("always", "interval", "never")
_SUFFIX = ".seg"
_HDR = struct.Struct("<II")  # payload length, crc32(payload)
_META = struct.Struct("<QQ")  # term, index (start of the payload)
RECORD_OVERHEAD = _HDR.size + _META.size  # bytes of a record besides its payload
_LEN = struct.Struct("<I")  # a record header's length alone
_HS = struct.Struct("<4sIQqQ")  # magic, crc32(rest), term, vote (-1 = none), commit
_HS_MAGIC = b"LQHS"
_MAX_ENTRY = 1 << 30  # a length beyond this is garbage, not an entry
_LOAD_CHUNK = 256 << 10  # load() reads segments in chunks this big (each copied once, with the rest of the last)
INDEX_BYTES = 4096  # one position in memory per this many bytes of a segment (Kafka's index.interval.bytes)


class StorageError(UserError):
    """The data directory cannot be used (not a directory, not writable, in use, damaged)."""


class DirLock:
    """`directory` (created if missing) flock'ed through its LOCK file until `close()`: two
    processes never use one data directory. A node takes one for its whole data directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        d = self.directory = Path(directory)
        if d.exists() and not d.is_dir():
            raise StorageError(f"data directory {d} exists and is not a directory")
        try:
            d.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(d / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(
                f"cannot use data directory {d}: {exc.strerror}", hint="check the path and its permissions"
            ) from exc
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._fd)
            raise StorageError(
                f"data directory {d} is in use by another process", hint="is another broker running on it?"
            ) from exc

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class OpenFiles:
    """The logs that keep their active segment open, at most `capacity`, least recently written
    first; a log not written for `idle_s` gives its descriptor back at the next `use()`.

    `use()` runs in whichever thread appends (one at a time: the node's ready loop or its
    writer thread); the lock guards only against a log's `close()` from another thread."""

    def __init__(self, capacity: int = 32, idle_s: float = 30.0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.idle_s = idle_s
        self._lru: OrderedDict[SegmentLog, float] = OrderedDict()  # log -> last use (monotonic)
        self._mu = threading.Lock()

    def use(self, log_: SegmentLog) -> None:
        """`log_` is about to write: mark it most recent; close the descriptors of the least
        recently used logs beyond capacity and of the idle ones."""
        now = time.monotonic()
        with self._mu:
            self._lru[log_] = now
            self._lru.move_to_end(log_)
            victims = []
            while len(self._lru) > 1:
                old, last = next(iter(self._lru.items()))
                if len(self._lru) <= self.capacity and now - last < self.idle_s:
                    break
                del self._lru[old]
                victims.append(old)
        for v in victims:
            v._release_fd()

    def forget(self, log_: SegmentLog) -> None:
        with self._mu:
            self._lru.pop(log_, None)

    def __len__(self) -> int:
        return len(self._lru)


class _Segment:
    """One segment file's sparse index: `pos[k]` is where entry `idx[k]` starts; the first
    entry is always sampled, then the first one at least `every` bytes past the last sample."""

    __slots__ = ("first", "path", "idx", "pos", "size")

    def __init__(self, first: int, path: Path) -> None:
        self.first = first
        self.path = path
        self.idx = array("Q")
        self.pos = array("Q")
        self.size = 0

    def note(self, index: int, pos: int, every: int) -> None:
        """Entry `index` starts at `pos` (entries are noted in order)."""
        if not self.pos or pos - self.pos[-1] >= every:
            self.idx.append(index)
            self.pos.append(pos)

    def cut(self, index: int) -> None:
        """Forget the samples of entries from `index` on."""
        j = bisect.bisect_left(self.idx, index)
        del self.idx[j:]
        del self.pos[j:]

    def span(self, lo: int, stop: int, budget: int | None) -> tuple[int, int, int]:
        """(index, start, end): the byte range holding entries lo..stop-1 of this segment
        (stop: at most its last + 1), from the sample at or before `lo` (entry `index`); with
        `budget`, ending at the first sample by which the payloads from `lo` surely reach it,
        if that comes sooner."""
        idx, pos = self.idx, self.pos
        a = bisect.bisect_right(idx, lo) - 1
        b = bisect.bisect_left(idx, stop, a)  # the first sample at or past `stop`
        end = pos[b] if b < len(idx) else self.size
        if budget is not None:
            c = bisect.bisect_left(idx, lo, a, b)  # the first sample at or after `lo`
            if c + 1 < b:  # end past c: entry idx[c] is read even when the budget is spent
                per = _HDR.size + _META.size
                pc, ic = pos[c], idx[c]
                m = bisect.bisect_left(range(c + 1, b), budget,
                                       key=lambda m: pos[m] - pc - per * (idx[m] - ic))
                if c + 1 + m < b:
                    end = pos[c + 1 + m]
        return idx[a], pos[a], end


class SegmentLog:
    """The persisted log and hard state of one Raft group, in `directory`.

    Args:
        directory: created if missing; must be writable and not used by another process.
        fsync: "always" | "interval" | "never" (see the module docstring).
        segment_bytes: roll to a new segment file once the current one reaches this size.
        lock: flock `directory`/LOCK; False when the caller holds a `DirLock` on a parent.
        files: the `OpenFiles` this log shares with others (None: it keeps its segment open).
        index_bytes: a position is kept in memory for one entry of every this many bytes
            (1: every entry); a read walks the headers from the nearest one before it.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, fsync: str = "always", segment_bytes: int = 64 << 20,
        lock: bool = True, files: OpenFiles | None = None, index_bytes: int = INDEX_BYTES,
    ):
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes}")
        self.directory = Path(directory)
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.index_bytes = max(1, index_bytes)
        self._files = files
        self._lock = self._open_directory(lock)
        self._segments: list[_Segment] = []
        self._firsts: list[int] = []
        self._last = 0
        self._fd: int | None = None  # the active (last) segment, opened for appending when needed
        self._dirty = False
        self._dir_dirty = False
        # `sync()` may run in a worker thread while the loop appends: it only snapshots state
        # (and dups the fd) under this lock, so the loop never waits for an fsync.
        self._mu = threading.Lock()
        # Guards only the positions (segments, offsets, sizes, last index), and never across a
        # write: `read` on the event loop must not wait for the writer thread's write.
        self._meta = threading.Lock()
        self._hs: HardState | None = None
        self._hs_on_disk: HardState | None = None
        self._loaded = False
        self._closed = False
        self.repaired_term: int | None = None  # see `_repair_mark`

    def _open_directory(self, lock: bool) -> DirLock | None:
        if lock:
            return DirLock(self.directory)
        d = self.directory
        if d.exists() and not d.is_dir():
            raise StorageError(f"data directory {d} exists and is not a directory")
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot use data directory {d}: {exc.strerror}", hint="check the path and its permissions"
            ) from exc
        return None

    # ---- reading back ----------------------------------------------------------------------

    def load(self) -> tuple[HardState | None, list[Entry]]:
        """Read the hard state and every entry, repairing a torn or corrupt tail (with a warning)."""
        hs, _, entries = self.load_window(None)
        return hs, entries

    def load_window(self, window_bytes: int | None) -> tuple[HardState | None, list[tuple[int, int]], list[Entry]]:
        """Like `load`, but keep only the newest entries whose payloads fit `window_bytes` (at
        least the last entry; None: all). Returns (hard state, (first index, term) of each
        term's run from index 1, those entries); older payloads stay on disk for `read`."""
        self._check_open()
        self._cleanup_temp()
        hs = self._load_hard_state()
        scan = _Scan()
        self._segments, self._firsts = [], []
        paths = sorted(self.directory.glob("*" + _SUFFIX))
        cut = False
        for pos, path in enumerate(paths):
            first = _segment_first(path)
            expected = scan.last + 1
            if first != expected:
                cut = True
                self._drop_segments(
                    paths[pos:], f"segment {path.name} starts at {first}, expected {expected}"
                )
                break
            seg = _Segment(first, path)
            clean = self._read_segment(seg, scan)
            if seg.size:
                self._segments.append(seg)
                self._firsts.append(first)
            else:
                path.unlink()
                self._dir_dirty = True
            if not clean:
                cut = True
                self._drop_segments(paths[pos + 1 :], "they follow a damaged segment")
                break
        self._last = scan.last
        self._hs = self._hs_on_disk = hs
        self._loaded = True
        self.repaired_term = self._repair_mark(cut, hs, scan.runs)
        self._sync_dir()
        return hs, scan.runs, self._newest(window_bytes)

    def _newest(self, window: int | None) -> list[Entry]:
        """The newest entries whose payloads (plus ENTRY_COST each, as the Raft log counts
        its window) reach `window`: at least the last one; all with None. Read back after
        the scan from the last sample from which they surely do: on disk an entry takes
        its payload plus RECORD_OVERHEAD, so from sample k to the end they count the bytes
        there plus ENTRY_COST - RECORD_OVERHEAD per entry."""
        if self._last == 0:
            return []
        lo, need, end = 1, window, self._last + 1
        extra = ENTRY_COST - RECORD_OVERHEAD
        if need is not None:
            for seg in reversed(self._segments):  # each holds a sample of its first entry
                idx, pos, size = seg.idx, seg.pos, seg.size

                def short(k: int, idx: array[int] = idx, pos: array[int] = pos, size: int = size,
                          end: int = end, need: int = need) -> bool:
                    return size - pos[k] + extra * (end - idx[k]) < need

                k = bisect.bisect_left(range(len(idx)), True, key=short) - 1  # the last that reaches it
                if k >= 0:
                    lo = idx[k]
                    break
                need -= size + extra * (end - seg.first)
                end = seg.first
        entries = self._read(lo, self._last + 1, None, entries=True)
        if window is None:
            return entries
        size = sum(len(e.data) for e in entries) + ENTRY_COST * len(entries)
        k = 0
        while k < len(entries) - 1 and size - len(entries[k].data) - ENTRY_COST >= window:
            size -= len(entries[k].data) + ENTRY_COST
            k += 1
        return entries[k:]

    def _read_segment(self, seg: _Segment, out: _Scan) -> bool:
        """Check `seg`'s records and note their terms in `out`; on damage cut the file there
        and return False.

        Read in chunks of _LOAD_CHUNK, each record parsed in place (no object per record):
        a load holds one chunk, never a whole segment, and costs little per entry (321k
        records of a soak's node: 4.6 s under cProfile when each was read and kept as an
        Entry on its way through a window)."""
        n = seg.path.stat().st_size
        pos = 0  # file position of the next record
        idx = seg.first
        hdr, meta = _HDR.size, _META.size
        unpack_hdr, unpack_meta, crc32 = _HDR.unpack_from, _META.unpack_from, zlib.crc32
        every, note_idx, note_pos = self.index_bytes, seg.idx, seg.pos
        last_note = -every
        runs = out.runs
        term_now = runs[-1][1] if runs else None
        problem = ""
        with open(seg.path, "rb", buffering=0) as f:
            buf, base = b"", 0  # buf holds the file's bytes from `base` on
            view = memoryview(buf)
            while pos < n:
                off = pos - base
                if off + hdr + meta > len(buf):
                    buf, base, off = _refill(f, buf[off:], hdr + meta), pos, 0
                    view = memoryview(buf)
                    if hdr + meta > len(buf):
                        problem = "torn record header"
                        break
                length, crc = unpack_hdr(buf, off)
                if length < meta or length > _MAX_ENTRY:
                    problem = f"impossible record length {length}"
                    break
                end = pos + hdr + length
                if end > n:
                    problem = f"torn record ({n - pos - hdr} of {length} bytes)"
                    break
                if off + hdr + length > len(buf):
                    buf, base, off = _refill(f, buf[off:], hdr + length), pos, 0
                    view = memoryview(buf)
                    if hdr + length > len(buf):
                        problem = f"torn record ({len(buf) - hdr} of {length} bytes)"
                        break
                if crc32(view[off + hdr : off + hdr + length]) != crc:
                    problem = "CRC mismatch"
                    break
                term, index = unpack_meta(buf, off + hdr)
                if index != idx:
                    problem = f"record index {index}, expected {idx}"
                    break
                if pos - last_note >= every:  # _Segment.note, inline
                    note_idx.append(index)
                    note_pos.append(pos)
                    last_note = pos
                if term != term_now:
                    runs.append((index, term))
                    term_now = term
                idx += 1
                pos = end
            view.release()
        out.last = idx - 1
        seg.size = pos
        if not problem:
            return True
        log.warning(
            "%s: %s at byte %d: truncating %d bytes (entries from %d on are dropped)",
            seg.path,
            problem,
            pos,
            n - pos,
            idx,
        )
        os.truncate(seg.path, pos)
        return False

    def _repair_mark(self, cut: bool, hs: HardState | None, runs: list[tuple[int, int]]) -> int | None:
        """The term this log lost a tail in, kept in `repaired` across restarts until the log
        holds an entry of a later term: Raft keeps the node out of elections meanwhile (raft.py,
        "Repaired storage"), also if it crashes again before a leader caught it up."""
        path = self.directory / "repaired"
        if cut:
            term = hs.term if hs is not None else 0
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, b"%d\n" % term)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._dir_dirty = True
            return term
        try:
            term = int(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:  # a crash while writing it: the hard state's term is at least as late
            term = hs.term if hs is not None else 0
        if runs and runs[-1][1] > term:
            path.unlink()
            self._dir_dirty = True
            return None
        log.warning("%s: lost its tail in term %d and holds no later term yet: out of elections", path, term)
        return term

    def _drop_segments(self, paths: Sequence[Path], why: str) -> None:
        for p in paths:
            log.warning("%s: removing segment because %s", p, why)
            p.unlink()
            self._dir_dirty = True

    def _load_hard_state(self) -> HardState | None:
        path = self.directory / "hardstate"
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) != _HS.size:
            raise StorageError(f"{path}: hard state has {len(raw)} bytes, expected {_HS.size}")
        magic, crc, term, vote, commit = _HS.unpack(raw)
        if magic != _HS_MAGIC or zlib.crc32(raw[8:]) != crc:
            raise StorageError(
                f"{path}: hard state is corrupt (bad magic or CRC)",
                hint="the Raft term and vote are lost; wipe this node's data directory to rejoin empty",
            )
        return HardState(term, None if vote < 0 else vote, commit)

    def _cleanup_temp(self) -> None:
        tmp = self.directory / "hardstate.tmp"
        if tmp.exists():
            tmp.unlink()  # a save that crashed before its rename: the old file is still valid

    def read(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries lo..hi-1, read back with one pread per segment they span; with `max_bytes`
        the prefix (at least one entry) whose payloads just reach it, so only that is read.

        Safe from another thread than the appending one, for entries already appended: the
        positions are taken under the lock, and a later truncation only cuts above them."""
        return self._read(lo, hi, max_bytes, entries=True)

    def read_payloads(self, lo: int, hi: int) -> list[bytes]:
        """The payloads of entries lo..hi-1, as `read` reads them, but only their lengths are
        parsed and no Entry is made. A fetch of many small batches below the window reads
        through this."""
        return self._read(lo, hi, None, entries=False)

    def _read(self, lo: int, hi: int, max_bytes: int | None, *, entries: bool) -> list[Any]:
        """Entries lo..hi-1 (or, with `max_bytes`, the prefix whose payloads reach it), as
        Entries or (not `entries`) their payloads."""
        self._check_loaded()
        out: list[Any] = []
        with self._meta:
            if not 1 <= lo < hi <= self._last + 1:
                raise ValueError(f"cannot read {lo}..{hi - 1}: the log holds 1..{self._last}")
        budget = max_bytes
        walk = _walk_entries if entries else _walk_payloads
        while lo < hi:
            with self._meta:
                k = bisect.bisect_right(self._firsts, lo) - 1
                seg = self._segments[k]
                stop = min(hi, self._firsts[k + 1] if k + 1 < len(self._firsts) else self._last + 1)
                first, start, end = seg.span(lo, stop, budget)
            # Short is fine: past `stop` the writer may be cutting the file this very moment.
            at, budget = walk(_pread(seg.path, start, end, short=True), first, lo, stop, budget, seg.path, out)
            if budget is not None and budget <= 0:
                break
            if at == lo:
                raise StorageError(f"{seg.path}: no record of entry {lo} at bytes {start}..{end}")
            lo = at
        return out

    def _position(self, seg: _Segment, index: int) -> int:
        """Where entry `index` of `seg` starts: walked to from the sample before it."""
        a = bisect.bisect_right(seg.idx, index) - 1
        if seg.idx[a] == index:
            return seg.pos[a]
        end = seg.pos[a + 1] if a + 1 < len(seg.pos) else seg.size
        buf = _pread(seg.path, seg.pos[a], end)
        hdr, pos, at = _HDR.size, 0, seg.idx[a]
        while at < index:
            pos += hdr + _HDR.unpack_from(buf, pos)[0]
            at += 1
        return seg.pos[a] + pos

    # ---- writing ---------------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self._last

    def append(self, entries: Sequence[Entry], *, sync: bool | None = None) -> None:
        """Write `entries` (contiguous); from `entries[0].index` on, any older suffix is replaced.

        `sync=None` follows the policy (fsync now under "always"); False defers to `sync()`."""
        self._check_loaded()
        if not entries:
            return
        if self._files is not None:
            self._files.use(self)  # may close other logs' descriptors (never under our _mu)
        with self._mu:
            self._append_locked(entries)
        if sync if sync is not None else self.fsync == "always":
            self.sync()

    def _append_locked(self, entries: Sequence[Entry]) -> None:
        first = entries[0].index
        if first > self._last + 1 or first < 1:
            raise ValueError(f"append at {first} would leave a gap after {self._last}")
        with self._meta:  # file metadata operations only (truncate, unlink, create): short
            if first <= self._last:
                self._truncate_from(first)
            if not self._segments or self._segments[-1].size >= self.segment_bytes:
                self._roll(first)
        seg = self._segments[-1]
        parts: list[bytes] = []
        start = pos = seg.size
        new_idx, new_pos = array("Q"), array("Q")
        last_sample = seg.pos[-1] if seg.pos else -self.index_bytes
        expect = first
        for e in entries:
            if e.index != expect:
                raise ValueError(f"entries are not contiguous: {e.index} after {expect - 1}")
            expect += 1
            meta = _META.pack(e.term, e.index)
            data = e.data
            length = len(meta) + len(data)
            parts.append(_HDR.pack(length, zlib.crc32(data, zlib.crc32(meta))))
            parts.append(meta)
            parts.append(data)
            if pos - last_sample >= self.index_bytes:
                new_idx.append(e.index)
                new_pos.append(pos)
                last_sample = pos
            pos += _HDR.size + length
        fd = self._active_fd()
        try:
            _write_all(fd, b"".join(parts))
        except OSError:
            os.ftruncate(fd, start)  # e.g. ENOSPC: leave no half record behind, then fail loudly
            raise
        with self._meta:
            seg.idx.extend(new_idx)
            seg.pos.extend(new_pos)
            seg.size = pos
            self._last = expect - 1
        self._dirty = True

    def _truncate_from(self, index: int) -> None:
        k = bisect.bisect_right(self._firsts, index) - 1
        for seg in self._segments[k + 1 :]:
            seg.path.unlink()
        del self._segments[k + 1 :]
        del self._firsts[k + 1 :]
        seg = self._segments[k]
        cut = index - seg.first
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if cut == 0:
            seg.path.unlink()
            del self._segments[k]
            del self._firsts[k]
        else:
            seg.size = self._position(seg, index)
            seg.cut(index)
            os.truncate(seg.path, seg.size)
        self._dir_dirty = True
        self._dirty = True
        self._last = index - 1
        if self._segments:  # reopened now: the cut file must be synced before any roll closes it
            self._active_fd()

    def _active_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)
        return self._fd

    def _release_fd(self) -> None:
        """Close the active segment (it reopens on the next append), synced first unless `never`:
        a later `sync()` has no descriptor left to sync it through."""
        with self._mu:
            if self._fd is None:
                return
            if self._dirty and self.fsync != "never":
                os.fdatasync(self._fd)
            self._dirty = False
            os.close(self._fd)
            self._fd = None

    def _roll(self, first: int) -> None:
        if self._fd is not None:
            if self._dirty and self.fsync != "never":
                os.fsync(self._fd)  # the old segment must not lag behind the new one
            os.close(self._fd)
        path = self.directory / f"{first:020d}{_SUFFIX}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        self._segments.append(_Segment(first, path))
        self._firsts.append(first)
        self._dir_dirty = True

    def sync(self, *, exclusive: bool = False) -> None:
        """Make appended entries durable (a no-op under "never", and when nothing is pending).

        `exclusive`: the caller's thread is the only one that appends to, truncates or closes
        this log (the node's writer thread), so the descriptor is synced as it is. Otherwise
        a duplicate is synced, which another thread's roll or close cannot invalidate: two
        more system calls, each a hand-over of the GIL from a thread that runs beside the
        event loop."""
        self._check_loaded()
        if self.fsync == "never":
            return
        if exclusive:
            if self._dirty and self._fd is not None:
                self._dirty = False
                os.fdatasync(self._fd)
            self._sync_dir()
            return
        with self._mu:
            fd = os.dup(self._fd) if self._dirty and self._fd is not None else None
            self._dirty = False
        if fd is not None:
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self._sync_dir()

    def save_hard_state(self, hs: HardState) -> None:
        """Record `hs`. Term and vote are durable when this returns, whatever the fsync policy."""
        self._check_loaded()
        self._hs = hs
        old = self._hs_on_disk
        if old is not None and old.term == hs.term and old.vote == hs.vote:
            return  # commit alone: advisory, written with the next durable save or at close
        self._write_hard_state(hs)

    def _write_hard_state(self, hs: HardState) -> None:
        body = _HS.pack(_HS_MAGIC, 0, hs.term, -1 if hs.vote is None else hs.vote, hs.commit)[8:]
        raw = _HS_MAGIC + struct.pack("<I", zlib.crc32(body)) + body
        tmp = self.directory / "hardstate.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, raw)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.directory / "hardstate")
        self._dir_dirty = True
        self._sync_dir(force=True)
        self._hs_on_disk = hs

    def _sync_dir(self, *, force: bool = False) -> None:
        if not self._dir_dirty or (self.fsync == "never" and not force):
            return
        self._dir_dirty = False
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Flush what is pending (the commit index, unsynced entries) and release the directory."""
        if self._closed:
            return
        try:
            if self._loaded:
                if self._hs is not None and self._hs != self._hs_on_disk:
                    self._write_hard_state(self._hs)
                self.sync()
        finally:
            self._closed = True
            if self._files is not None:
                self._files.forget(self)
            with self._mu:
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
            if self._lock is not None:
                self._lock.close()

    def __enter__(self) -> SegmentLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("SegmentLog is closed")

    def _check_loaded(self) -> None:
        self._check_open()
        if not self._loaded:
            raise RuntimeError("call load() before writing to a SegmentLog")


class _Scan:
    """What `load_window` keeps while it scans: every term's run and the last index."""

    __slots__ = ("runs", "last")

    def __init__(self) -> None:
        self.runs: list[tuple[int, int]] = []
        self.last = 0


def _refill(f: Any, rest: bytes, need: int) -> bytes:
    """`rest` and the file's next bytes: at least `need` in all unless it ends sooner, and a
    chunk's worth when it has them."""
    parts, have = [rest], len(rest)
    want = max(need, _LOAD_CHUNK)
    while have < want:
        more = f.read(want - have)
        if not more:
            break
        parts.append(more)
        have += len(more)
        if have >= need:
            break
    return b"".join(parts)


def _pread(path: Path, start: int, end: int, *, short: bool = False) -> bytes:
    """Bytes start..end-1 of `path`; fewer only if `short` (the file ends sooner)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = os.pread(fd, end - start, start)
    finally:
        os.close(fd)
    if len(buf) != end - start and not short:
        raise StorageError(f"{path}: short read of {len(buf)} of {end - start} bytes at {start}")
    return buf


def _walk_entries(buf: bytes, index: int, lo: int, stop: int, budget: int | None, path: Path,
                  out: list[Entry]) -> tuple[int, int | None]:
    """Append to `out` the records of `buf` (whole ones, the first being entry `index`) from
    `lo` up to `stop` or until their payloads reach `budget`; returns (next index, budget left)."""
    hdr, meta = _HDR.size, _META.size
    unpack_len, unpack_meta = _LEN.unpack_from, _META.unpack_from
    pos, n = 0, len(buf)
    while index < lo:  # from the sample before `lo`: lengths only
        pos += hdr + unpack_len(buf, pos)[0]
        index += 1
    while pos + hdr <= n and index < stop:
        length = unpack_len(buf, pos)[0]
        end = pos + hdr + length
        if end > n:
            break
        term, got = unpack_meta(buf, pos + hdr)
        if got != index:
            raise StorageError(f"{path}: record index {got} where {index} was expected")
        out.append(Entry(term, index, buf[pos + hdr + meta : end]))
        index += 1
        pos = end
        if budget is not None:
            budget -= length - meta
            if budget <= 0:
                break
    return index, budget


def _walk_payloads(buf: bytes, index: int, lo: int, stop: int, budget: int | None, path: Path,
                   out: list[bytes]) -> tuple[int, int | None]:
    """`_walk_entries` for payloads alone, with no budget: lengths are all it parses (the
    positions and the index sequence were checked when the log was written or loaded)."""
    hdr, skip = _HDR.size, _HDR.size + _META.size
    unpack_len = _LEN.unpack_from
    pos, n = 0, len(buf)
    while index < lo:
        pos += hdr + unpack_len(buf, pos)[0]
        index += 1
    append = out.append
    while pos + hdr <= n and index < stop:
        end = pos + hdr + unpack_len(buf, pos)[0]
        if end > n:
            break
        append(buf[pos + skip : end])
        index += 1
        pos = end
    return index, budget


def _segment_first(path: Path) -> int:
    try:
        return int(path.name[: -len(_SUFFIX)])
    except ValueError:
        raise StorageError(f"{path}: not a segment file name (expected <first index>{_SUFFIX})") from None


def _write_all(fd: int, buf: bytes) -> None:
    mv = memoryview(buf)
    while mv:
        n = os.write(fd, mv)
        mv = mv[n:]
