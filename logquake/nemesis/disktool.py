"""Runs on a node (through Host.exec) to damage a stopped broker's data the way a crash can.

    python -m logquake.nemesis.disktool corrupt-tail DATA_DIR --mode truncate|flip --bytes N --seed S

Picks the newest non-empty segment file (`*.seg`, else `*.log`, else any file) under DATA_DIR
and either cuts its last N bytes (a torn write) or flips one random bit in each of its last N
bytes (a misdirected or rotten write). Prints one line saying what it did; exits 0 with
"nothing to corrupt" when there is no segment yet.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

SUFFIXES = (".seg", ".log")


def newest_segment(data_dir: Path) -> Path | None:
    files = [p for p in data_dir.rglob("*") if p.is_file() and p.stat().st_size > 0]
    for suffix in SUFFIXES:
        pool = [p for p in files if p.suffix == suffix]
        if pool:
            return max(pool, key=lambda p: (p.stat().st_mtime_ns, str(p)))
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
    c.add_argument("--mode", choices=("truncate", "flip"), default="truncate")
    c.add_argument("--bytes", type=int, default=64)
    c.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    seg = newest_segment(args.data_dir)
    if seg is None:
        print(f"nothing to corrupt in {args.data_dir}")
        return 0
    print(corrupt_tail(seg, mode=args.mode, nbytes=args.bytes, rng=random.Random(args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
