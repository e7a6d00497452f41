"""The history: the contract between a run and its analysis (README.md's History format).

A history is a sequence of `Op`s in completion order, stored as JSON Lines
(`history.jsonl`). This module alone reads and writes that file:

- `HistoryWriter` appends the ops' lines as they come, every few ms, fsyncing at least once
  a second and at close, so a harness that is SIGKILLed leaves a readable history.
- `read_history` streams ops back and checks the format as it goes; any malformed line
  raises `HistoryFormatError` naming the file and line. A torn last line (the writer died
  mid-write) is dropped with a warning rather than failing the whole history.

Offsets are Kafka's: 0 to 2^63-1. A send acknowledged at -1 has no offset (Kafka's
INVALID_OFFSET, what a producer reports under acks=0): the reader turns it into null, the
history's word for that, so no analysis mistakes it for a position. Any other negative
offset, in a send or a poll, cannot be: the line is malformed. The rule is applied here,
once, so every analysis of a stored history (the runner's included: it checks the
history it has written) sees only offsets that can be.

Op semantics (Jepsen's): a client process invokes an op (`invoke`) and later completes it
with `ok` (it happened), `fail` (it certainly did not happen) or `info` (unknown). A process
never has two ops in flight, and after an `info` it is never used again. Process `"nemesis"`
records faults as `info` ops and is exempt from the pairing rules.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from logquake.errors import HistoryFormatError
from logquake.gcpause import paused_gc

log = logging.getLogger(__name__)


def _stdlib_dumps(d: dict[str, Any]) -> str:
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False)


try:  # orjson decodes history lines ~3x faster than the stdlib; the checker reads millions
    from orjson import JSONDecodeError as _JSONDecodeError
    from orjson import dumps as _dumps
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency, but the format must not need it
    _loads = json.loads
    _JSONDecodeError = json.JSONDecodeError

    def _dumps(d: dict[str, Any]) -> bytes:
        return _stdlib_dumps(d).encode()

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = frozenset({INVOKE, OK, FAIL, INFO})
NEMESIS = "nemesis"
CORE_FIELDS = ("index", "time", "process", "type", "f", "value")
NO_OFFSET = -1  # a send's offset when the broker gave none (Kafka's ProduceResponse.INVALID_OFFSET)

Process = int | str


@dataclass(frozen=True, kw_only=True, slots=True)
class Op:
    """One history event. `extra` keeps any further fields (error, node, ...) verbatim."""

    index: int = -1
    time: int = 0
    process: Process
    type: str
    f: str
    value: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_invoke(self) -> bool:
        return self.type == INVOKE

    @property
    def is_client(self) -> bool:
        return self.process != NEMESIS

    def get(self, key: str, default: Any = None) -> Any:
        """An extra field, e.g. `op.get("error")`."""
        return self.extra.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "time": self.time,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
        }
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Op:
        extra = {k: v for k, v in d.items() if k not in CORE_FIELDS}
        return cls(
            index=d["index"],
            time=d["time"],
            process=d["process"],
            type=d["type"],
            f=d["f"],
            value=d.get("value"),
            extra=extra,
        )


def encode_op(op: Op) -> str:
    """One JSON line, without the newline."""
    return _numbered(op.index, _encode_unnumbered(op))


def _encode_unnumbered(op: Op) -> str:
    """The JSON object of `op` without its index (the writer numbers ops as it queues them)."""
    d = op.to_dict()
    del d["index"]
    try:
        return _dumps(d).decode()
    except TypeError:  # what orjson refuses (a non-str key, an int past 64 bits): the stdlib
        return _stdlib_dumps(d)


def _numbered(index: int, unnumbered: str) -> str:
    return f'{{"index":{index},{unnumbered[1:]}'


class HistoryWriter:
    """Appends ops to a history.jsonl as they complete; thread-safe.

    The writer assigns dense indices (0, 1, 2, ...) in write order, so callers never
    coordinate them. `write` encodes the line in the caller's thread and queues it; a
    thread of the writer's own appends what is queued every `flush_interval` (5 ms), one
    write(2) per batch, and fsyncs when a second has passed since the last time, and at
    close. The callers (20 workers of a run) so never wait on the file: with the write
    and flush inside the lock, a worker that released the GIL for the syscall often
    waited a switch interval (5 ms) to get it back, holding the lock while every other
    worker queued behind it. A SIGKILL loses at most the last batch: ops of the last few
    ms, a suffix of the history (never an op in part, nor a completion without its
    invocation). Use as a context manager.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync_interval: float = 1.0, flush_interval: float = 0.005
    ) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._queued: list[str] = []
        self._next_index = 0
        self._fsync_interval = fsync_interval
        self._flush_interval = flush_interval
        self._last_fsync = time.monotonic()
        self._closing = threading.Event()
        self._closed = False
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._append_queued, daemon=True, name="history-writer")
        self._thread.start()

    def write(self, op: Op) -> Op:
        """Queue `op` with the next index; returns the op as written."""
        unnumbered = _encode_unnumbered(op)  # before the lock: the costly part
        with self._lock:  # the index and the place in the queue together: file order is index order
            if self._closed or self._error is not None:
                raise self._error or ValueError(f"{self.path}: the history writer is closed")
            index = self._next_index
            self._next_index = index + 1
            self._queued.append(_numbered(index, unnumbered) + "\n")
        return replace(op, index=index)

    def _append_queued(self) -> None:
        while not self._closing.wait(self._flush_interval):
            self._flush()
        self._flush()

    def _flush(self) -> None:
        """Append the queued lines: one write(2), then fsync if a second has passed."""
        with self._lock:
            batch, self._queued = self._queued, []
        if not batch:
            return
        data = "".join(batch).encode()
        try:
            while data:
                data = data[os.write(self._fd, data) :]
            now = time.monotonic()
            if now - self._last_fsync >= self._fsync_interval:
                os.fsync(self._fd)
                self._last_fsync = now
        except OSError as e:  # disk full, say: the next write or close raises it
            self._error = e

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        self._thread.join()
        try:
            if self._error is None:
                os.fsync(self._fd)
        finally:
            os.close(self._fd)
        if self._error is not None:
            raise self._error

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_history(path: str | os.PathLike[str], ops: Iterable[Op]) -> None:
    """Write a whole history at once (tests, imports); indices are renumbered densely."""
    with HistoryWriter(path) as w:
        for op in ops:
            w.write(op)


class _Validator:
    """Checks the pairing rules of a history as it streams past, one op at a time."""

    def __init__(self) -> None:
        self.in_flight: dict[Process, Op] = {}
        self.retired: set[Process] = set()

    def check(self, op: Op) -> str | None:
        """The reason `op` breaks a rule, or None."""
        p = op.process
        if p == NEMESIS:
            return None
        if p in self.retired:
            return f"process {p} is used again after its op ended with info"
        if op.type == INVOKE:
            if p in self.in_flight:
                prev = self.in_flight[p]
                return f"process {p} invokes a second op while op {prev.index} is still in flight"
            self.in_flight[p] = op
            return None
        inv = self.in_flight.pop(p, None)
        if inv is None:
            return f"process {p} completes an op ({op.type} {op.f}) it never invoked"
        if inv.f != op.f:
            return f"process {p} invoked {inv.f!r} (op {inv.index}) but completed {op.f!r}"
        if op.type == INFO:
            self.retired.add(p)
        return None


def _parse_line(raw: bytes) -> tuple[Op | None, str | None]:
    """Decode one line into an op, or give the reason it is malformed (_fast_op's slow twin)."""
    try:
        d = _loads(raw)
    except _JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg} at column {e.colno})"
    if not isinstance(d, dict):
        return None, f"expected a JSON object, got {type(d).__name__}"
    for key in ("index", "time", "process", "type", "f"):
        if key not in d:
            return None, f"missing field {key!r}"
    if not isinstance(d["type"], str) or d["type"] not in TYPES:  # (a list is not hashable)
        return None, f"unknown type {d['type']!r}; expected one of invoke, ok, fail, info"
    if not isinstance(d["index"], int) or isinstance(d["index"], bool):
        return None, f"index must be an integer, got {d['index']!r}"
    if not isinstance(d["time"], int) or isinstance(d["time"], bool):
        return None, f"time must be an integer (nanoseconds), got {d['time']!r}"
    p = d["process"]
    if not ((isinstance(p, int) and not isinstance(p, bool)) or p == NEMESIS):
        return None, f"process must be an integer or \"nemesis\", got {p!r}"
    if not isinstance(d["f"], str):
        return None, f"f must be a string, got {d['f']!r}"
    # A negative number right after "[" can only be an offset (pairs are [offset, value]):
    # two C-level scans spare the walk over the micro-ops on every other line.
    if b"-" in raw and _NEGATIVE_FIRST.search(raw):
        problem = offset_problem(d.get("value"))
        if problem is not None:
            return None, problem
    return _op_from_parsed(d), None


_NEGATIVE_FIRST = re.compile(rb"\[\s*-")


def offset_problem(value: Any) -> str | None:
    """Apply the offset rule to an op's micro-ops: what is wrong with an offset, or None.

    A send's -1 becomes None in place (no offset); any other negative offset of a send or
    a poll is the problem returned. Anything else about the micro-ops' shape is the
    analyses' business, not this rule's.
    """
    if not isinstance(value, list):
        return None
    for mop in value:
        if not isinstance(mop, list) or len(mop) < 2:
            continue
        if mop[0] == "send" and len(mop) > 2:
            result = mop[2]
            if isinstance(result, list) and result and _negative(o := result[0]):
                if o != NO_OFFSET:
                    return f"a send to key {mop[1]!r} at offset {o}: offsets are 0 or more (a send with no offset says null or -1)"
                result[0] = None
        elif mop[0] == "poll" and isinstance(mop[1], dict):
            for k, pairs in mop[1].items():
                for pair in pairs if isinstance(pairs, list) else ():
                    if isinstance(pair, list) and pair and _negative(pair[0]):
                        return f"a poll of key {k} read offset {pair[0]}: offsets are 0 or more"
    return None


def _negative(o: Any) -> bool:
    return isinstance(o, int) and not isinstance(o, bool) and o < 0


class _OpSlots:
    """An Op's memory layout without its frozen __setattr__: filled by plain attribute
    stores (which CPython specialises), then made an Op by assigning __class__ (allowed
    between classes of identical slots). A million ops are built ~2x faster than by Op's
    slot descriptors' __set__, ~4x faster than by its __init__."""

    __slots__ = Op.__slots__


def _new_op(index: int, t: int, process: Process, typ: str, f: str, value: Any, extra: dict) -> Op:
    op: Any = _OpSlots()
    op.index = index
    op.time = t
    op.process = process
    op.type = typ
    op.f = _F_NAMES.setdefault(f, f)
    op.value = value
    # Most ops have no extra field: they share one empty mapping, read-only so that no
    # writer can give them all a field (an empty dict each was 64 bytes an op).
    op.extra = extra if extra else _NO_EXTRA
    op.__class__ = Op
    return op


def _op_from_parsed(d: dict[str, Any]) -> Op:
    """Op.from_dict for a freshly decoded line: its dict becomes the op's `extra`."""
    typ = _TYPE_NAMES[d.pop("type")]  # (_parse_line checked it is one of TYPES)
    return _new_op(d.pop("index"), d.pop("time"), d.pop("process"), typ, d.pop("f"), d.pop("value", None), d)


def _fast_op(raw: bytes) -> Op | None:
    """The op of a well-formed line, or None: _parse_line then decides, and names what is
    wrong. Accepts nothing _parse_line rejects, with fewer steps: each field is popped
    once, a wrong shape fails a pop or a type test (bool is not `type(x) is int`)."""
    try:
        d = _loads(raw)
        index = d.pop("index")
        t = d.pop("time")
        p = d.pop("process")
        typ = _TYPE_NAMES[d.pop("type")]
        f = d.pop("f")
    except (ValueError, KeyError, TypeError, AttributeError):  # (orjson's errors are ValueErrors)
        return None
    if type(index) is not int or type(t) is not int or type(f) is not str:
        return None
    if type(p) is not int and p != NEMESIS:
        return None
    value = d.pop("value", None)
    if b"-" in raw and _NEGATIVE_FIRST.search(raw) and offset_problem(value) is not None:
        return None
    return _new_op(index, t, p, typ, f, value, d)


_NO_EXTRA: Any = MappingProxyType({})
# Each op's type and f as one shared string per name, not one decoded per line (~100 bytes
# an op, a tenth of a loaded queue op). f names are few: the workloads' operations.
_TYPE_NAMES = {t: t for t in TYPES}
_F_NAMES: dict[str, str] = {}


def read_history(path: str | os.PathLike[str], *, validate: bool = True) -> Iterator[Op]:
    """Stream the ops of a history.jsonl file, checking its format.

    Raises HistoryFormatError naming the line of the first problem. Blank lines are
    skipped. A last line with no newline that does not parse is a torn write from a killed
    harness: it is dropped with a warning.
    """
    path = Path(path)
    try:
        fh = open(path, "rb")  # noqa: SIM115 (bytes: orjson decodes UTF-8 itself, and faster)
    except FileNotFoundError:
        raise HistoryFormatError(str(path), 0, "the file does not exist") from None
    except IsADirectoryError:
        raise HistoryFormatError(str(path), 0, "is a directory, not a history file") from None
    check = _Validator().check if validate else None
    with fh:
        for lineno, raw in enumerate(fh, 1):
            op = _fast_op(raw)
            if op is None and (op := _slow_op(path, lineno, raw)) is None:
                continue
            if check is not None and (rule := check(op)) is not None:
                raise HistoryFormatError(str(path), lineno, rule)
            yield op


def _slow_op(path: Path, lineno: int, raw: bytes) -> Op | None:
    """A line _fast_op declined: its op, None if blank or torn, or HistoryFormatError."""
    if not raw.strip():
        return None
    op, problem = _parse_line(raw)
    if problem is None:
        return op
    if not raw.endswith(b"\n") and problem.startswith("not valid JSON"):
        # (the last line: it has no newline.) One line for whoever reads (the terminal,
        # harness.log), not a Python warning with its source line.
        log.warning("%s:%d: dropping a torn last line (a write cut short)", path, lineno)
        return None
    raise HistoryFormatError(str(path), lineno, problem)


def load_history(path: str | os.PathLike[str], *, validate: bool = True) -> list[Op]:
    """The whole history as a list (see read_history).

    The cyclic GC is paused while the list grows: a million ops are millions of live
    containers, which it would rescan over and over (more than half the load time).
    """
    with paused_gc():
        return list(read_history(path, validate=validate))


def pairs(ops: Iterable[Op]) -> Iterator[tuple[Op, Op | None]]:
    """(invocation, completion) for every client op; completion None if it never finished."""
    in_flight: dict[Process, Op] = {}
    done: list[tuple[Op, Op | None]] = []
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.type == INVOKE:
            in_flight[op.process] = op
        else:
            inv = in_flight.pop(op.process, None)
            if inv is not None:
                done.append((inv, op))
    yield from done
    yield from ((inv, None) for inv in in_flight.values())
