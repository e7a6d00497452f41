"""Import of Jepsen histories: `history.edn` and the `jepsen.log` op lines (README.md's History format).

Both become `logquake.history.Op` values, so every analysis runs on them unchanged:

- history.edn: one EDN map per op (`{:type :ok, :f :cas, :value [1 4], :process 3,
  :time 123, :index 7}`), possibly all inside one vector, possibly tagged as records
  (`#jepsen.history.Op{...}`).
- jepsen.log: the lines Jepsen's `jepsen.util/log-op` prints, e.g.
  `INFO  jepsen.util - 3 :ok :cas [1 4]` (fields separated by tabs or spaces, any
  logger prefix before `jepsen.util`); other log lines are skipped. The log has no usable
  clock (millisecond timestamps would tie), so an op's time is its line number, which keeps
  the order the log saw.

Mapping: keywords become strings without the colon (`:cas` -> "cas", `:nemesis` ->
"nemesis"); any non-integer process is a non-client process, recorded as "nemesis" with the
original in the `jepsen_process` extra field; vectors, lists and sets become lists; map keys
that are vectors become tuples. Keys of history.edn maps other than :index :time :process
:type :f :value are kept as extra fields (`:error` -> "error").

Final reads: Jepsen's Kafka workload ends with `final-polls`: each thread crashes its
client, then a fresh process asks `:debug-topic-partitions`, assigns every key with
`:seek-to-beginning? true` and polls with `:poll-ms`. Those assigns and polls (of the
processes that made such polls) get `"final": true`, logquake's marker of the final read
(checker/final_read.py). Jepsen records no end of the log on them, so a key's final read
counts as complete once it reached the highest offset known for the key. jepsen.log lines
carry no such fields and stay unmarked.

Errors (HistoryFormatError) name the file and the line.

The EDN reader is a small one for the subset Jepsen histories use (maps, vectors, lists,
sets, keywords, symbols, strings, characters, integers, floats, nil, true/false, tagged
literals, `#_` discards, comments): the PyPI EDN packages are either unmaintained or
slower, and this subset is small.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from logquake.errors import HistoryFormatError
from logquake.history import NEMESIS, TYPES, Op, load_history

__all__ = [
    "EdnError",
    "Keyword",
    "detect_format",
    "load_any_history",
    "load_edn_history",
    "load_jepsen_log",
    "parse_edn",
    "read_edn_forms",
]


class Keyword(str):
    """An EDN keyword: a str without the colon, so `Keyword("ok") == "ok"`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return ":" + str(self)


class EdnError(ValueError):
    """Malformed EDN at `pos` (a character offset into the text)."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


# --- a small EDN reader ------------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r", "backspace": "\b", "formfeed": "\f"}
_INT = re.compile(r"[+-]?\d+N?$")
_FLOAT = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?$")
_RATIO = re.compile(r"[+-]?\d+/\d+$")
_CLOSERS = {"(": ")", "[": "]", "{": "}", "#{": "}"}
# One regex scans the text in C; the loop in _forms sees only the tokens.
_TOKENS = re.compile(
    r"""
    (?P<skip>[\s,]+|;[^\n]*)
    |(?P<open>\#\{|[\[({])
    |(?P<close>[\])}])
    |(?P<str>"(?:[^"\\]|\\.)*")
    |(?P<discard>\#_)
    |(?P<tag>\#[A-Za-z][^\s,()\[\]{}";]*)
    |(?P<char>\\(?:u[0-9a-fA-F]{4}|newline|space|tab|return|backspace|formfeed|.))
    |(?P<atom>[^\s,()\[\]{}";\#\\][^\s,()\[\]{}";]*)
    |(?P<bad>.)
    """,
    re.X | re.S,
)
_STR_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)


def _unescape(body: str, pos: int) -> str:
    def one(m: re.Match[str]) -> str:
        e = m[1]
        if len(e) == 5:
            return chr(int(e[1:], 16))
        if e not in _ESCAPES:
            raise EdnError(f"bad string escape \\{e}", pos + m.start())
        return _ESCAPES[e]

    return _STR_ESCAPE.sub(one, body) if "\\" in body else body


def _atom(tok: str) -> Any:
    if tok[0] == ":":
        return Keyword(tok[1:])
    if tok == "nil":
        return None
    if tok == "true":
        return True
    if tok == "false":
        return False
    if _INT.match(tok):
        return int(tok.rstrip("N"))
    if _FLOAT.match(tok):
        return float(tok.rstrip("M"))
    if _RATIO.match(tok):
        num, den = tok.split("/")
        return int(num) / int(den)
    return tok  # a symbol


def _collection(opener: str, items: list[Any], pos: int) -> Any:
    if opener != "{":
        return items  # vectors, lists and sets alike: lists, as in JSON
    if len(items) % 2:
        raise EdnError("a map needs an even number of forms", pos)
    return {_hashable(items[k]): items[k + 1] for k in range(0, len(items), 2)}


def _forms(text: str) -> Iterator[tuple[int, int, Any]]:
    """(start, end, form) for each top-level form; raises EdnError. Lazy: stops when you do."""
    # A frame: [opener, items, start, discards pending]; the bottom one is the top level.
    stack: list[list[Any]] = [["", [], 0, 0]]
    for m in _TOKENS.finditer(text):
        kind, pos = m.lastgroup, m.start()
        if kind == "skip" or kind == "tag":  # a tagged literal keeps its form
            continue
        if kind == "open":
            stack.append([m[0], [], pos, 0])
            continue
        if kind == "discard":
            stack[-1][3] += 1
            continue
        if kind == "close":
            if len(stack) == 1 or _CLOSERS[stack[-1][0]] != m[0]:
                raise EdnError(f"unexpected {m[0]!r}", pos)
            opener, items, start, _ = stack.pop()
            form: Any = _collection(opener, items, pos)
        elif kind == "str":
            start, form = pos, _unescape(m[0][1:-1], pos)
        elif kind == "char":
            body = m[0][1:]
            start, form = pos, _CHARS.get(body) or (chr(int(body[1:], 16)) if len(body) == 5 else body)
        elif kind == "atom":
            start, form = pos, _atom(m[0])
        else:
            c = m[0]
            if c == '"':
                raise EdnError("unclosed string", pos)
            raise EdnError(
                f"unsupported dispatch {text[pos : pos + 2]!r}" if c == "#" else f"unexpected {c!r}", pos
            )
        frame = stack[-1]
        if frame[3]:
            frame[3] -= 1  # #_ drops this form
        elif len(stack) == 1:
            yield start, m.end(), form
        else:
            frame[1].append(form)
    if len(stack) > 1:
        raise EdnError(f"unclosed {stack[-1][0]!r}", stack[-1][2])


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((repr(k), _hashable(x)) for k, x in v.items()))
    return v


def parse_edn(text: str) -> Any:
    """The one EDN form in `text`; raises EdnError."""
    forms = _forms(text)
    first = next(forms, None)
    if first is None:
        raise EdnError("unexpected end of input", len(text))
    extra = next(forms, None)
    if extra is not None:
        raise EdnError("more than one form", extra[0])
    return first[2]


def read_edn_forms(text: str) -> Iterator[tuple[int, Any]]:
    """(character offset, form) for each top-level form in `text`; raises EdnError."""
    for start, _, form in _forms(text):
        yield start, form


# --- Jepsen ops to logquake ops ----------------------------------------------------------------


def _plain(v: Any) -> Any:
    """Keywords to str, keeping JSON-able shapes."""
    if isinstance(v, Keyword):
        return str(v)
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {_plain_key(k): _plain(x) for k, x in v.items()}
    return v


def _plain_key(k: Any) -> Any:
    if isinstance(k, Keyword):
        return str(k)
    if isinstance(k, tuple):
        return tuple(_plain_key(x) for x in k)
    return k


def _process(p: Any) -> tuple[int | str, dict[str, Any]]:
    if isinstance(p, int) and not isinstance(p, bool):
        return p, {}
    if p == NEMESIS:
        return NEMESIS, {}
    return NEMESIS, {"jepsen_process": _plain(p)}


def _op_from_map(m: dict[Any, Any], position: int) -> tuple[Op | None, str | None]:
    """An Op from one history.edn map, or the reason it is not one."""
    for k in ("type", "f", "process"):
        if k not in m:
            return None, f"missing :{k}"
    typ = m["type"]
    if typ not in TYPES:
        return None, f"unknown :type {typ!r}; expected :invoke, :ok, :fail or :info"
    t = m.get("time", position)
    idx = m.get("index", position)
    if not isinstance(t, int) or not isinstance(idx, int):
        return None, f":time and :index must be integers, got {t!r} and {idx!r}"
    process, extra = _process(m["process"])
    extra.update(
        {
            str(k): _plain(v)
            for k, v in m.items()
            if k not in ("type", "f", "process", "time", "index", "value")
        }
    )
    f = m["f"]
    return Op(
        index=idx,
        time=t,
        process=process,
        type=str(typ),
        f=str(f) if isinstance(f, str) else repr(_plain(f)),
        value=_plain(m.get("value")),
        extra=extra,
    ), None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise HistoryFormatError(str(path), 0, "no such file") from None
    except IsADirectoryError:
        raise HistoryFormatError(str(path), 0, "is a directory, not a history file") from None


def load_edn_history(path: str | os.PathLike[str]) -> list[Op]:
    """The ops of a Jepsen history.edn (top-level maps, or one vector of maps)."""
    path = Path(path)
    text = _read_text(path)

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    ops: list[Op] = []
    try:
        for offset, form in read_edn_forms(text):
            maps = form if isinstance(form, list) else [form]
            for m in maps:
                if not isinstance(m, dict):
                    raise HistoryFormatError(str(path), line_of(offset), f"expected an op map, got {m!r:.60}")
                op, problem = _op_from_map(m, len(ops))
                if problem:
                    raise HistoryFormatError(str(path), line_of(offset), problem)
                ops.append(op)  # type: ignore[arg-type]
    except EdnError as e:
        raise HistoryFormatError(str(path), line_of(e.pos), f"malformed EDN: {e}") from None
    return _mark_final_reads(ops)


def _mark_final_reads(ops: list[Op]) -> list[Op]:
    """Jepsen's final-polls ops marked `"final": true` (see the module docstring)."""
    final_pollers = {op.process for op in ops if op.f == "poll" and op.get("poll-ms") is not None}
    if not final_pollers:
        return ops

    def final(op: Op) -> bool:
        if op.process not in final_pollers:
            return False
        return (op.f == "poll" and op.get("poll-ms") is not None) or (
            op.f == "assign" and op.get("seek-to-beginning?") is True)

    return [replace(op, extra={**op.extra, "final": True}) if final(op) else op for op in ops]


# `... jepsen.util - 3\t:ok\t:cas\t[1 4]`, `... jepsen.util: 3 :ok ...`; the rest is the value
# form then, optionally, the error.
_LOG_LINE = re.compile(
    r"jepsen\.util\s*[-:]?\s+(?P<process>\d+|:[\w\-.]+)\s+:(?P<type>[\w-]+)\s+(?P<f>\S+)(?P<rest>.*)$"
)


def _log_op(m: re.Match[str], lineno: int) -> tuple[Op | None, str | None]:
    typ = m["type"]
    if typ not in TYPES:
        return None, f"unknown op type :{typ}"
    try:
        first = next(_forms(m["rest"]), None)  # the value; any text after it is the error
        value, end = (None, 0) if first is None else (first[2], first[1])
        error = m["rest"][end:].strip()
        proc_form = parse_edn(m["process"])
        f = parse_edn(m["f"])
    except EdnError as e:
        return None, f"malformed value ({e})"
    process, extra = _process(proc_form)
    if error:
        extra["error"] = error
    return Op(
        index=lineno,
        time=lineno,
        process=process,
        type=typ,
        f=str(f) if isinstance(f, str) else repr(_plain(f)),
        value=_plain(value),
        extra=extra,
    ), None


def load_jepsen_log(path: str | os.PathLike[str]) -> list[Op]:
    """The ops logged in a jepsen.log; lines that are not op lines are skipped."""
    path = Path(path)
    ops: list[Op] = []
    for lineno, line in enumerate(_read_text(path).splitlines(), 1):
        if "jepsen.util" not in line:
            continue
        m = _LOG_LINE.search(line)
        if m is None:
            continue  # jepsen.util logs other things too
        op, problem = _log_op(m, lineno)
        if problem:
            raise HistoryFormatError(str(path), lineno, problem)
        ops.append(op)  # type: ignore[arg-type]
    if not ops:
        raise HistoryFormatError(
            str(path), 0, "no Jepsen op lines (`INFO jepsen.util - 3 :ok :read 4`) found"
        )
    return ops


def detect_format(path: str | os.PathLike[str]) -> str:
    """ "jsonl", "edn" or "jepsen-log", from the name, else from the first non-blank line."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".jsonl") or name.endswith(".json"):
        return "jsonl"
    if name.endswith(".edn"):
        return "edn"
    if name.endswith(".log"):
        return "jepsen-log"
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                text = line.strip()
                if not text:
                    continue
                if "jepsen.util" in text:
                    return "jepsen-log"
                if text.startswith('{"') or text.startswith('{ "'):
                    return "jsonl"
                return "edn"
    except (FileNotFoundError, IsADirectoryError):
        return "jsonl"  # load_history reports it
    return "jsonl"


def load_any_history(path: str | os.PathLike[str], *, fmt: str | None = None) -> list[Op]:
    """A history.jsonl, Jepsen history.edn or jepsen.log, by `fmt` or as `detect_format` says."""
    fmt = fmt or detect_format(path)
    if fmt == "edn":
        return load_edn_history(path)
    if fmt == "jepsen-log":
        return load_jepsen_log(path)
    return load_history(path)
