"""How much memory checking (or reporting on) a stored history takes, said before reading it.

A check holds the whole history (every op, then the index built from them), so its peak
memory grows with the history: on bench_checker's 1M-op queue history with transactions
(214 MiB of history.jsonl) it peaks at ~15 bytes per byte of history. A report streams the
history once and keeps per-op figures only, ~1 byte per byte. The estimates here are those
ratios applied to the file's size, known before a line is parsed: a history too large for
a given limit (`--max-memory`) is refused in one line saying how large it is and what would
fit, where reading it would have ended in the kernel's OOM killer halfway through.

Below the estimate for a check there is a leaner way: the check straight from the file
(checker/queue_stream.py), which holds no list of the ops, only their index, with every
poll's pairs in one int32 array (int64 if need be); it takes more CPU (the pairs are decoded, then copied,
and a few analyses read the file again). `plan_check` picks it only when the plain way
would not fit.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from logquake.errors import UserError

__all__ = ["CheckPlan", "HistorySize", "history_size", "parse_size", "plan_check", "refuse_report"]

# Peak RSS per byte of history.jsonl beyond the process's own, measured with /usr/bin/time
# on bench_checker's 1M-op history (214 MiB): `logquake check --txn` 3,232 MiB; checked from
# the file (queue_stream.py) 798 MiB at 1M and 6,825 MiB at 10M (2,197 MiB: 3.36 and 3.07
# bytes a byte; 2026-12-03 10:30; was 10,469 at 10M); `logquake report` (no results.json) 258 MiB; rounded up a
# little.
CHECK_PER_BYTE = 15.0
STREAMED_CHECK_PER_BYTE = 3.4
REPORT_PER_BYTE = 0.9
BASE = 80 * 2**20  # the interpreter, numpy and the CLI's imports: a 100-op history's peak

_SAMPLES, _SAMPLE = 8, 2**17  # pieces read across the file to estimate its bytes per op
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class HistorySize:
    """A history file's size, and its number of ops as estimated from its first lines."""

    path: Path
    bytes: int
    ops: int

    @property
    def bytes_per_op(self) -> float:
        return self.bytes / self.ops if self.ops else 1.0


@dataclass(frozen=True, kw_only=True)
class CheckPlan:
    """How to check a history under a limit: straight from its file (queue_stream.py) or loaded."""

    streamed: bool
    estimate: int  # peak bytes


def parse_size(text: str) -> int:
    """Bytes from "8G", "8GB", "8GiB", "512m", "1.5G" or "1000000" (K, M, G, T: powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a size: a number with K, M, G or T (powers of 1024), e.g. 8G")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def history_size(path: str | os.PathLike[str]) -> HistorySize:
    """The file's size, and its ops (one a line): counted in a small file, else estimated
    from the lines in pieces spread across it (a history's lines grow as its logs do)."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= _SAMPLES * _SAMPLE:
            data = fh.read()
            return HistorySize(path=path, bytes=size, ops=data.count(b"\n") + (not data.endswith(b"\n")))
        lines = 0
        for i in range(_SAMPLES):
            fh.seek((size - _SAMPLE) * i // (_SAMPLES - 1))
            lines += fh.read(_SAMPLE).count(b"\n")
    return HistorySize(path=path, bytes=size, ops=round(size * lines / (_SAMPLES * _SAMPLE)))


def plan_check(path: str | os.PathLike[str], limit: int, *, can_stream: bool = True) -> CheckPlan:
    """How to check the history at `path` within `limit` bytes; UserError when no way fits.

    `can_stream`: the history is a history.jsonl of the queue workload (what queue_stream reads).
    """
    h = history_size(path)
    plain = BASE + round(CHECK_PER_BYTE * h.bytes)
    if plain <= limit:
        return CheckPlan(streamed=False, estimate=plain)
    lean = BASE + round(STREAMED_CHECK_PER_BYTE * h.bytes) if can_stream else plain
    if lean <= limit:
        return CheckPlan(streamed=True, estimate=lean)
    raise UserError(_refusal(h, "a check", lean, limit, STREAMED_CHECK_PER_BYTE if can_stream else CHECK_PER_BYTE))


def refuse_report(path: str | os.PathLike[str], limit: int) -> None:
    """UserError when a report of the history at `path` would not fit in `limit` bytes."""
    h = history_size(path)
    need = BASE + round(REPORT_PER_BYTE * h.bytes)
    if need > limit:
        raise UserError(_refusal(h, "a report", need, limit, REPORT_PER_BYTE))


def _refusal(h: HistorySize, what: str, need: int, limit: int, per_byte: float) -> str:
    fit = max(0, limit - BASE) / per_byte
    fits = (f"~{_count(fit / h.bytes_per_op)} ops ({_bytes(fit)}) would fit" if fit >= h.bytes_per_op
            else f"nothing fits, logquake itself takes ~{_bytes(BASE)}")
    return f"{h.path}: {_bytes(h.bytes)}, ~{_count(h.ops)} ops; {what} takes ~{_bytes(need)} > --max-memory {_bytes(limit)}: {fits}"


def _bytes(n: float) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}B"


def _count(n: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"
