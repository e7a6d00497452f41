"""LazyFS: a FUSE passthrough that keeps unsynced writes in memory, to lose them on demand.

Like Jepsen's LazyFS: writes to a file stay in this process's page map until the file is
fsynced (or fdatasynced); `echo crash > MOUNT/.lazyfs` then discards every page not yet
synced, as a power cut drops a page cache. Metadata operations (create, rename, unlink,
mkdir) go straight to the backing directory: losing only data is the fault we model (it is
also what ext4's default data=ordered mostly gives after a crash). A truncate is data too:
it is kept in memory until fsync. `echo sync > MOUNT/.lazyfs` flushes everything.

    python -m logquake.nemesis.lazyfs BACKING_DIR MOUNTPOINT

Runs single-threaded (FUSE serialises requests for us), in the foreground, until unmounted or
killed. The kernel is told not to cache attributes, so a restarted reader sees the truth.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from dataclasses import dataclass, field

PAGE = 4096
CONTROL = "/.lazyfs"


@dataclass
class Dirty:
    """Unsynced state of one file: its logical size, how much of the backing file still belongs
    to it (a truncate since the last fsync cuts that; bytes past it read as zero if the file
    grows again), and the pages written since the last fsync."""

    size: int
    valid: int
    pages: dict[int, bytearray] = field(default_factory=dict)


class LazyCore:
    """The page logic, independent of FUSE: backing files plus per-file dirty pages."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.dirty: dict[str, Dirty] = {}

    def real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def size(self, path: str) -> int:
        d = self.dirty.get(path)
        return d.size if d is not None else os.stat(self.real(path)).st_size

    def _backing_page(self, fd: int, index: int, valid: int) -> bytearray:
        """Page `index` as the backing file holds it, zero from byte `valid` of the file on."""
        n = max(0, min(PAGE, valid - index * PAGE))
        page = bytearray(os.pread(fd, n, index * PAGE)) if n else bytearray()
        return page + bytearray(PAGE - len(page))

    def _dirty(self, path: str) -> Dirty:
        if path not in self.dirty:
            size = os.stat(self.real(path)).st_size
            self.dirty[path] = Dirty(size=size, valid=size)
        return self.dirty[path]

    def read(self, path: str, fd: int, size: int, offset: int) -> bytes:
        end = min(offset + size, self.size(path))
        if offset >= end:
            return b""
        d = self.dirty.get(path)
        if d is None:
            return os.pread(fd, end - offset, offset)
        out = bytearray()
        for index in range(offset // PAGE, (end - 1) // PAGE + 1):
            page = d.pages.get(index) or self._backing_page(fd, index, d.valid)
            lo = max(offset, index * PAGE) - index * PAGE
            hi = min(end, (index + 1) * PAGE) - index * PAGE
            out += page[lo:hi]
        return bytes(out)

    def write(self, path: str, fd: int, data: bytes, offset: int) -> int:
        d = self._dirty(path)
        pos = 0
        while pos < len(data):
            index, within = divmod(offset + pos, PAGE)
            if index not in d.pages:
                d.pages[index] = self._backing_page(fd, index, d.valid)
            n = min(PAGE - within, len(data) - pos)
            d.pages[index][within : within + n] = data[pos : pos + n]
            pos += n
        d.size = max(d.size, offset + len(data))
        return len(data)

    def truncate(self, path: str, length: int, fd: int) -> None:
        d = self._dirty(path)
        for index in [i for i in d.pages if i * PAGE >= length]:
            del d.pages[index]
        last = length // PAGE
        if length % PAGE:
            # Bytes past the new end must read as zero if the file grows again.
            if last not in d.pages and last * PAGE < d.size:
                d.pages[last] = self._backing_page(fd, last, d.valid)
            if last in d.pages:
                d.pages[last][length % PAGE :] = bytes(PAGE - length % PAGE)
        d.valid = min(d.valid, length)
        d.size = length

    def fsync(self, path: str) -> None:
        d = self.dirty.pop(path, None)
        if d is None:
            return
        fd = os.open(self.real(path), os.O_WRONLY)
        try:
            os.ftruncate(fd, d.valid)  # what a truncate cut reads as zero when the file grows
            os.ftruncate(fd, d.size)
            for index, page in sorted(d.pages.items()):
                n = min(PAGE, d.size - index * PAGE)
                if n > 0:
                    os.pwrite(fd, bytes(page[:n]), index * PAGE)
            os.fsync(fd)
        finally:
            os.close(fd)

    def crash(self) -> int:
        """Forget every unsynced page; returns how many files lost data."""
        n = len(self.dirty)
        self.dirty.clear()
        return n

    def sync_all(self) -> None:
        for path in list(self.dirty):
            self.fsync(path)

    def rename(self, old: str, new: str) -> None:
        """Rename a file or a directory; unsynced pages follow every file that moved, as a page
        cache's do (a directory's files are keyed by path here, so each is moved by prefix)."""
        os.rename(self.real(old), self.real(new))
        for path in [p for p in self.dirty if p == new or p.startswith(new + "/")]:
            del self.dirty[path]
        for path in [p for p in self.dirty if p == old or p.startswith(old + "/")]:
            self.dirty[new + path[len(old):]] = self.dirty.pop(path)

    def unlink(self, path: str) -> None:
        os.unlink(self.real(path))
        self.dirty.pop(path, None)


def _operations(core: LazyCore):  # noqa: C901 - one adapter method per FUSE call
    import mfusepy as fuse

    def oserror(e: OSError) -> fuse.FuseOSError:
        return fuse.FuseOSError(e.errno or errno.EIO)

    class LazyOps(fuse.Operations):
        use_ns = True

        def __init__(self) -> None:
            self.fds: dict[int, int] = {}  # fh -> open flags

        def getattr(self, path, fh=None):
            if path == CONTROL:
                return {"st_mode": stat.S_IFREG | 0o666, "st_nlink": 1, "st_size": 0}
            try:
                st = os.lstat(core.real(path))
            except OSError as e:
                raise oserror(e) from None
            attrs = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                                                 "st_atime_ns", "st_mtime_ns", "st_ctime_ns")}
            for k in ("st_atime", "st_mtime", "st_ctime"):
                attrs[k] = attrs.pop(k + "_ns")
            if stat.S_ISREG(st.st_mode) and path in core.dirty:
                attrs["st_size"] = core.dirty[path].size
            return attrs

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(core.real(path))]

        def _wrap(fn, *args):  # noqa: N805
            try:
                return fn(*args)
            except OSError as e:
                raise oserror(e) from None

        def mkdir(self, path, mode):
            return LazyOps._wrap(os.mkdir, core.real(path), mode) or 0

        def rmdir(self, path):
            return LazyOps._wrap(os.rmdir, core.real(path)) or 0

        def unlink(self, path):
            return LazyOps._wrap(core.unlink, path) or 0

        def rename(self, old, new):
            return LazyOps._wrap(core.rename, old, new) or 0

        def chmod(self, path, mode):
            return LazyOps._wrap(os.chmod, core.real(path), mode) or 0

        def chown(self, path, uid, gid):
            return LazyOps._wrap(os.chown, core.real(path), uid, gid) or 0

        def utimens(self, path, times=None):
            if path == CONTROL:
                return 0
            if times is None:
                return LazyOps._wrap(os.utime, core.real(path)) or 0
            return LazyOps._wrap(os.utime, core.real(path), ns=tuple(times)) or 0

        def statfs(self, path):
            st = os.statvfs(core.root)
            return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

        def create(self, path, mode, fi=None):
            fd = LazyOps._wrap(os.open, core.real(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
            core.dirty.pop(path, None)
            self.fds[fd] = os.O_RDWR
            return fd

        def open(self, path, flags):
            if path == CONTROL:
                return 0
            fd = LazyOps._wrap(os.open, core.real(path), os.O_RDWR if flags & os.O_ACCMODE else os.O_RDONLY)
            self.fds[fd] = flags
            if flags & os.O_TRUNC:
                core.truncate(path, 0, fd)
            return fd

        def read(self, path, size, offset, fh):
            return LazyOps._wrap(core.read, path, fh, size, offset)

        def write(self, path, data, offset, fh):
            if path == CONTROL:
                return self._control(data)
            if self.fds.get(fh, 0) & os.O_APPEND:
                offset = core.size(path)
            return LazyOps._wrap(core.write, path, fh, bytes(data), offset)

        def _control(self, data):
            cmd = bytes(data).strip().decode(errors="replace")
            if cmd == "crash":
                print(f"lazyfs: crash: unsynced data of {core.crash()} file(s) dropped", flush=True)
            elif cmd == "sync":
                core.sync_all()
            else:
                raise fuse.FuseOSError(errno.EINVAL)
            return len(data)

        def truncate(self, path, length, fh=None):
            if path == CONTROL:
                return 0
            fd = fh if fh else LazyOps._wrap(os.open, core.real(path), os.O_RDONLY)
            try:
                core.truncate(path, length, fd)
            finally:
                if not fh:
                    os.close(fd)
            return 0

        def fsync(self, path, datasync, fh):
            LazyOps._wrap(core.fsync, path)
            return 0

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            if path != CONTROL and fh in self.fds:
                del self.fds[fh]
                os.close(fh)
            return 0

    return LazyOps()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    import mfusepy as fuse

    backing, mountpoint = argv
    os.makedirs(backing, exist_ok=True)
    os.makedirs(mountpoint, exist_ok=True)
    core = LazyCore(backing)
    print(f"lazyfs: {backing} on {mountpoint}", flush=True)
    fuse.FUSE(_operations(core), mountpoint, foreground=True, nothreads=True, attr_timeout=0,
              entry_timeout=0, negative_timeout=0, fsname="lazyfs", allow_other=os.geteuid() == 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
