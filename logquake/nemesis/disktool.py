"""Runs on a node (through Host.exec) to damage a stopped node's data the way a crash can.

    python -m logquake.nemesis.disktool corrupt-tail DATA_DIR --files GLOB [--files GLOB ...]
        --mode truncate|flip --bytes N --seed S

Picks the newest non-empty file under DATA_DIR matching one of the system's data-file globs
(`System.data_files`: the broker's `**/*.seg`, JetStream's stream message blocks) and either
cuts its last N bytes (a torn write) or flips one random bit in each of its last N bytes (a
misdirected or rotten write). Never any other file: damage to an index or a config file is
a different fault, and a system may rightly refuse to start on it. Prints one line saying
what it did; exits 0 with "nothing to corrupt" when no data file exists yet.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path


def newest_data_file(data_dir: Path, patterns: Sequence[str]) -> Path | None:
    """The most recently modified non-empty file under data_dir matching a pattern; None if none."""
    files = {p for pattern in patterns for p in data_dir.glob(pattern) if p.is_file() and p.stat().st_size > 0}
    return max(files, key=lambda p: (p.stat().st_mtime_ns, str(p))) if files else None


def corrupt_tail(path: Path, *, mode: str, nbytes: int, rng: random.Random) -> str:
    size = path.stat().st_size
    n = max(1, min(nbytes, size))
    with open(path, "r+b") as f:
        if mode == "truncate":
            f.truncate(size - n)
        else:
            f.seek(size - n)
            tail = bytearray(f.read(n))
            for i in range(len(tail)):
                tail[i] ^= 1 << rng.randrange(8)
            f.seek(size - n)
            f.write(tail)
        f.flush()
        os.fsync(f.fileno())
    verb = "truncated" if mode == "truncate" else "flipped a bit in each of"
    return f"{verb} the last {n} bytes of {path} ({size} bytes)"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="logquake.nemesis.disktool")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corrupt-tail")
    c.add_argument("data_dir", type=Path)
    c.add_argument("--files", action="append", required=True, metavar="GLOB",
                   help="a data-file pattern relative to data_dir (repeatable)")
    c.add_argument("--mode", choices=("truncate", "flip"), default="truncate")
    c.add_argument("--bytes", type=int, default=64)
    c.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    path = newest_data_file(args.data_dir, args.files)
    if path is None:
        print(f"nothing to corrupt in {args.data_dir} ({', '.join(args.files)})")
        return 0
    print(corrupt_tail(path, mode=args.mode, nbytes=args.bytes, rng=random.Random(args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
