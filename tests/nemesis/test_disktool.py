"""disktool's choice of file per system layout, and what it does to that file (no lab needed).

The layouts are the real ones: the broker's groups/<group>/ directories, and nats-server
2.15.1's store_dir as a 3-node cluster leaves it after a stream of 50 messages.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from logquake.nemesis.disktool import corrupt_tail, main, newest_data_file
from logquake.systems import get_system

KAFKA_FILES = get_system("kafka").data_files
JETSTREAM_FILES = get_system("jetstream").data_files

BROKER_LAYOUT = ("groups/__meta/hardstate", "groups/__meta/00000000000000000001.seg",
                 "groups/lq-k0-0/LOCK", "groups/lq-k0-0/hardstate", "groups/lq-k0-0/00000000000000000001.seg")

JETSTREAM_LAYOUT = (
    "jetstream/$G/streams/lq-k0/meta.inf", "jetstream/$G/streams/lq-k0/meta.sum",
    "jetstream/$G/streams/lq-k0/msgs/1.blk", "jetstream/$G/streams/lq-k0/msgs/index.db",
    "jetstream/$SYS/_js_/S-R3F-1fpHJVgQ/meta.inf", "jetstream/$SYS/_js_/S-R3F-1fpHJVgQ/msgs/1.blk",
    "jetstream/$SYS/_js_/S-R3F-1fpHJVgQ/peers.idx", "jetstream/$SYS/_js_/S-R3F-1fpHJVgQ/tav.idx",
    "jetstream/$SYS/_js_/_meta_/msgs/3.blk", "jetstream/$SYS/_js_/_meta_/snapshots/snap.1.3",
)


def _tree(root: Path, paths: tuple[str, ...], *, newest_first: bool = False) -> None:
    """Each path as a small file, written in order so that the last is the newest (or the first)."""
    order = reversed(paths) if newest_first else paths
    for i, rel in enumerate(order):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * 100)
        os.utime(p, ns=(1_000_000_000 * (i + 1), 1_000_000_000 * (i + 1)))


def test_the_broker_tears_its_newest_segment_never_its_hard_state(tmp_path):
    _tree(tmp_path, BROKER_LAYOUT)
    assert newest_data_file(tmp_path, KAFKA_FILES) == tmp_path / "groups/lq-k0-0/00000000000000000001.seg"
    _tree(tmp_path / "b", BROKER_LAYOUT, newest_first=True)
    assert newest_data_file(tmp_path / "b", KAFKA_FILES) == tmp_path / "b/groups/__meta/00000000000000000001.seg"


def test_jetstream_tears_a_stream_message_block_never_its_index_meta_or_raft_files(tmp_path):
    # index.db and the Raft group's files are newer than the block: the old "any file" fallback took them
    _tree(tmp_path, ("jetstream/$G/streams/lq-k1/msgs/1.blk", *JETSTREAM_LAYOUT))
    assert newest_data_file(tmp_path, JETSTREAM_FILES) == tmp_path / "jetstream/$G/streams/lq-k0/msgs/1.blk"
    _tree(tmp_path / "b", ("jetstream/$G/streams/lq-k1/msgs/1.blk", *JETSTREAM_LAYOUT), newest_first=True)
    assert newest_data_file(tmp_path / "b", JETSTREAM_FILES) == tmp_path / "b/jetstream/$G/streams/lq-k1/msgs/1.blk"


def test_empty_blocks_and_meta_only_stores_leave_nothing_to_corrupt(tmp_path, capsys):
    meta_only = tuple(p for p in JETSTREAM_LAYOUT if "/streams/" not in p)
    _tree(tmp_path, meta_only)
    empty = tmp_path / "jetstream/$G/streams/lq-k0/msgs/1.blk"
    empty.parent.mkdir(parents=True)
    empty.touch()  # a block created but never written to
    assert newest_data_file(tmp_path, JETSTREAM_FILES) is None
    assert newest_data_file(tmp_path, KAFKA_FILES) is None
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["corrupt-tail", str(tmp_path), *(a for g in JETSTREAM_FILES for a in ("--files", g))]) == 0
    assert capsys.readouterr().out.startswith(f"nothing to corrupt in {tmp_path} (")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_truncate_cuts_and_flip_changes_only_the_last_bytes(tmp_path):
    f = tmp_path / "1.blk"
    data = bytes(range(256)) * 4
    f.write_bytes(data)
    assert corrupt_tail(f, mode="truncate", nbytes=24, rng=random.Random(0)) == \
        f"truncated the last 24 bytes of {f} (1024 bytes)"
    assert f.read_bytes() == data[:-24]
    f.write_bytes(data)
    corrupt_tail(f, mode="flip", nbytes=8, rng=random.Random(0))
    after = f.read_bytes()
    assert after[:-8] == data[:-8] and len(after) == len(data)
    assert all(bin(a ^ b).count("1") == 1 for a, b in zip(after[-8:], data[-8:], strict=True))


def test_the_cli_needs_the_data_file_globs(tmp_path, capsys):
    _tree(tmp_path, JETSTREAM_LAYOUT)
    with pytest.raises(SystemExit):
        main(["corrupt-tail", str(tmp_path)])
    capsys.readouterr()
    block = tmp_path / "jetstream/$G/streams/lq-k0/msgs/1.blk"
    assert main(["corrupt-tail", str(tmp_path), "--files", JETSTREAM_FILES[0], "--bytes", "10", "--seed", "3"]) == 0
    assert capsys.readouterr().out.strip() == f"truncated the last 10 bytes of {block} (100 bytes)"
    assert block.stat().st_size == 90
