"""LazyFS's page logic against a model of a file and its last fsynced state.

The core works on a real backing directory (no FUSE needed): every step is checked against
what a disk with a page cache would hold, before and after a power cut.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from logquake.nemesis.lazyfs import PAGE, LazyCore

PATH = "/f"


def _open(tmp_path) -> tuple[LazyCore, int]:
    (tmp_path / "f").write_bytes(b"")
    core = LazyCore(str(tmp_path))
    return core, os.open(core.real(PATH), os.O_RDWR)


def _contents(core: LazyCore, fd: int) -> bytes:
    return core.read(PATH, fd, core.size(PATH) + 1, 0)


def test_a_truncated_then_grown_file_reads_zeros_where_the_cut_was(tmp_path):
    core, fd = _open(tmp_path)
    core.write(PATH, fd, b"A" * 3 * PAGE, 0)
    core.fsync(PATH)
    core.truncate(PATH, 100, fd)
    core.truncate(PATH, 3 * PAGE, fd)
    assert core.read(PATH, fd, PAGE, PAGE) == bytes(PAGE)
    core.write(PATH, fd, b"B", 2 * PAGE)  # a write into the gap keeps the rest of its page zero
    assert core.read(PATH, fd, 2, 2 * PAGE) == b"B\0"
    core.fsync(PATH)
    assert (tmp_path / "f").read_bytes() == b"A" * 100 + bytes(2 * PAGE - 100) + b"B" + bytes(PAGE - 1)


def test_a_crash_forgets_an_unsynced_truncate(tmp_path):
    core, fd = _open(tmp_path)
    core.write(PATH, fd, b"A" * 2 * PAGE, 0)
    core.fsync(PATH)
    core.truncate(PATH, 10, fd)
    core.write(PATH, fd, b"B" * 20, 10)
    core.crash()
    assert _contents(core, fd) == b"A" * 2 * PAGE


_steps = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 4 * PAGE), st.integers(1, 2 * PAGE), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 5 * PAGE)),
    st.tuples(st.just("fsync")),
    st.tuples(st.just("crash")),
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(steps=_steps)
def test_every_read_is_what_a_page_cache_over_a_disk_would_give(tmp_path_factory, steps):
    tmp = tmp_path_factory.mktemp("lazy")
    core, fd = _open(tmp)
    cached, synced = bytearray(), bytearray()  # the file as read now, and as the disk holds it
    try:
        for step in steps:
            if step[0] == "write":
                _, offset, n, byte = step
                core.write(PATH, fd, bytes([byte]) * n, offset)
                cached.extend(bytes(max(0, offset - len(cached))))
                cached[offset:offset + n] = bytes([byte]) * n
            elif step[0] == "truncate":
                core.truncate(PATH, step[1], fd)
                cached = cached[:step[1]] + bytearray(max(0, step[1] - len(cached)))
            elif step[0] == "fsync":
                core.fsync(PATH)
                synced = bytearray(cached)
            else:
                core.crash()
                cached = bytearray(synced)
            assert _contents(core, fd) == bytes(cached), step
        core.sync_all()
        assert (tmp / "f").read_bytes() == bytes(cached)
    finally:
        os.close(fd)


def test_unsynced_writes_follow_their_file_when_its_directory_is_renamed(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"")
    core = LazyCore(str(tmp_path))
    fd = os.open(core.real("/a/f"), os.O_RDWR)
    try:
        core.write("/a/f", fd, b"R" * 5000, 0)
        core.rename("/a", "/b")
        assert core.size("/b/f") == 5000
        assert core.read("/b/f", fd, 5000, 0) == b"R" * 5000
        core.fsync("/b/f")
        assert (tmp_path / "b" / "f").read_bytes() == b"R" * 5000
        assert core.dirty == {}
    finally:
        os.close(fd)
