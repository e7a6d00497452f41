"""The node's view of one Raft group's durable log: `open_store(dir, fsync=...)`.

The node needs five calls per group: `load() -> (HardState | None, [Entry])`,
`append(entries, hard_state)` (truncating a conflicting suffix first), `sync()`, `close()`.
storage.py's `SegmentLog` (segment files, CRC per entry, torn-tail recovery) provides them;
until it is importable, `_SimpleLog` (one CRC'd file per group) stands in so the broker runs.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Any

from logquake.broker.raft import Entry, HardState

__all__ = ["open_store"]

log = logging.getLogger("logquake.broker.storage")

_REC = struct.Struct(">IIQQ")  # length of data, crc32 of (term, index, data), term, index
_HS = struct.Struct(">QqQI")  # term, vote (-1 none), commit, crc


def open_store(path: Path, *, fsync: str) -> Any:
    try:
        from logquake.broker.storage import SegmentLog  # noqa: F401
    except ImportError:
        return _SimpleLog(path)
    return _SegmentStore(path, fsync)


class _SegmentStore:
    """Adapter over storage.SegmentLog (filled in when its API is committed)."""

    def __init__(self, path: Path, fsync: str) -> None:
        from logquake.broker.storage import SegmentLog

        self._log = SegmentLog(path)

    def load(self) -> tuple[HardState | None, list[Entry]]:
        return self._log.load()

    def append(self, entries: tuple[Entry, ...], hs: HardState | None) -> None:
        if entries:
            self._log.append(entries)
        if hs is not None:
            self._log.save_hard_state(hs)

    def sync(self) -> None:
        self._log.sync()

    def close(self) -> None:
        self._log.close()


class _SimpleLog:
    """One file of CRC'd entries plus a hard-state file; a torn tail is cut on load."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._path = path / "entries.log"
        self._hs_path = path / "hardstate"
        self._offsets: list[int] = []  # file position of entry index i+1
        self._f: Any = None
        self._hs_dirty = False

    def load(self) -> tuple[HardState | None, list[Entry]]:
        entries: list[Entry] = []
        data = self._path.read_bytes() if self._path.exists() else b""
        pos = 0
        while pos + _REC.size <= len(data):
            ln, crc, term, index = _REC.unpack_from(data, pos)
            body = data[pos + _REC.size : pos + _REC.size + ln]
            if len(body) != ln or zlib.crc32(body, zlib.crc32(struct.pack(">QQ", term, index))) != crc \
                    or index != len(entries) + 1:
                break
            self._offsets.append(pos)
            entries.append(Entry(term, index, body))
            pos += _REC.size + ln
        if pos != len(data):
            log.warning("%s: torn tail of %d bytes after entry %d truncated", self._path, len(data) - pos,
                        len(entries))
        self._f = open(self._path, "r+b" if self._path.exists() else "w+b")  # noqa: SIM115
        self._f.truncate(pos)
        self._f.seek(pos)
        return self._load_hs(), entries

    def _load_hs(self) -> HardState | None:
        if not self._hs_path.exists():
            return None
        raw = self._hs_path.read_bytes()
        if len(raw) != _HS.size:
            return None
        term, vote, commit, crc = _HS.unpack(raw)
        if zlib.crc32(raw[:-4]) != crc:
            log.warning("%s: hard state CRC mismatch; starting from term 0", self._hs_path)
            return None
        return HardState(term, None if vote < 0 else vote, commit)

    def append(self, entries: tuple[Entry, ...], hs: HardState | None) -> None:
        f = self._f
        if entries:
            first = entries[0].index
            if first <= len(self._offsets):
                pos = self._offsets[first - 1]
                del self._offsets[first - 1 :]
                f.truncate(pos)
                f.seek(pos)
            parts = []
            pos = f.tell()
            for e in entries:
                head = struct.pack(">QQ", e.term, e.index)
                parts.append(_REC.pack(len(e.data), zlib.crc32(e.data, zlib.crc32(head)), e.term, e.index))
                parts.append(e.data)
                self._offsets.append(pos)
                pos += _REC.size + len(e.data)
            f.write(b"".join(parts))
            f.flush()
        if hs is not None:
            body = struct.pack(">QqQ", hs.term, -1 if hs.vote is None else hs.vote, hs.commit)
            tmp = self._hs_path.with_suffix(".tmp")
            with open(tmp, "wb") as h:
                h.write(body + struct.pack(">I", zlib.crc32(body)))
            os.replace(tmp, self._hs_path)
            self._hs_dirty = True

    def sync(self) -> None:
        os.fsync(self._f.fileno())
        if self._hs_dirty:
            self._hs_dirty = False
            fd = os.open(self._hs_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            dfd = os.open(self._hs_path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
