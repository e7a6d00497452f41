"""Import of Jepsen histories: `history.edn` and the `jepsen.log` op lines (DESIGN.md §7).

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

_DELIMS = frozenset(' \t\r\n,()[]{}";')
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r", "backspace": "\b", "formfeed": "\f"}
_INT = re.compile(r"[+-]?\d+N?$")
_FLOAT = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?$")
_RATIO = re.compile(r"[+-]?\d+/\d+$")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


class _Reader:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def skip_ws(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n,":
                self.i += 1
            elif c == ";":
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j + 1
            elif s.startswith("#_", self.i):
                self.i += 2
                self.read()
            else:
                return

    def at_end(self) -> bool:
        self.skip_ws()
        return self.i >= len(self.s)

    def read(self) -> Any:
        self.skip_ws()
        if self.i >= len(self.s):
            raise EdnError("unexpected end of input", self.i)
        c = self.s[self.i]
        if c in _CLOSERS:
            self.i += 1
            items = self.read_until(_CLOSERS[c])
            return self.to_map(items) if c == "{" else items
        if c in ")]}":
            raise EdnError(f"unexpected {c!r}", self.i)
        if c == '"':
            return self.read_string()
        if c == "\\":
            return self.read_char()
        if c == "#":
            return self.read_dispatch()
        return self.read_atom()

    def read_until(self, closer: str) -> list[Any]:
        start = self.i - 1
        items = []
        while True:
            self.skip_ws()
            if self.i >= len(self.s):
                raise EdnError(f"unclosed {self.s[start]!r}", start)
            if self.s[self.i] == closer:
                self.i += 1
                return items
            items.append(self.read())

    def to_map(self, items: list[Any]) -> dict[Any, Any]:
        if len(items) % 2:
            raise EdnError("a map needs an even number of forms", self.i)
        return {_hashable(items[k]): items[k + 1] for k in range(0, len(items), 2)}

    def read_string(self) -> str:
        s, start = self.s, self.i
        self.i += 1
        out = []
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                self.i += 1
                e = s[self.i : self.i + 1]
                if e == "u":
                    out.append(chr(int(s[self.i + 1 : self.i + 5], 16)))
                    self.i += 5
                    continue
                if e not in _ESCAPES:
                    raise EdnError(f"bad string escape \\{e}", self.i)
                out.append(_ESCAPES[e])
            else:
                out.append(c)
            self.i += 1
        raise EdnError("unclosed string", start)

    def read_char(self) -> str:
        self.i += 1
        tok = self.token()
        if len(tok) == 1:
            return tok
        if tok in _CHARS:
            return _CHARS[tok]
        if tok.startswith("u") and len(tok) == 5:
            return chr(int(tok[1:], 16))
        if not tok and self.i < len(self.s):  # \( \[ and friends
            self.i += 1
            return self.s[self.i - 1]
        raise EdnError(f"bad character literal \\{tok}", self.i)

    def read_dispatch(self) -> Any:
        nxt = self.s[self.i + 1 : self.i + 2]
        if nxt == "{":
            self.i += 2
            return self.read_until("}")  # a set: a list, as in JSON
        self.i += 1
        tag = self.token()
        if not tag[:1].isalpha():  # not a tag: reader conditionals, regexes... are not EDN
            raise EdnError(f"unsupported dispatch #{nxt}", self.i)
        return self.read()  # a tagged literal (#inst, #uuid, records): keep the form

    def token(self) -> str:
        j = self.i
        s = self.s
        while j < len(s) and s[j] not in _DELIMS:
            j += 1
        tok, self.i = s[self.i : j], j
        return tok

    def read_atom(self) -> Any:
        start = self.i
        tok = self.token()
        if not tok:
            raise EdnError(f"unexpected {self.s[start]!r}", start)
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


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((repr(k), _hashable(x)) for k, x in v.items()))
    return v


def parse_edn(text: str) -> Any:
    """The one EDN form in `text`; raises EdnError."""
    r = _Reader(text)
    form = r.read()
    if not r.at_end():
        raise EdnError("more than one form", r.i)
    return form


def read_edn_forms(text: str) -> Iterator[tuple[int, Any]]:
    """(character offset, form) for each top-level form in `text`; raises EdnError."""
    r = _Reader(text)
    while not r.at_end():
        start = r.i
        yield start, r.read()


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
    return ops


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
        r = _Reader(m["rest"])
        value = None if r.at_end() else r.read()
        error = m["rest"][r.i :].strip()
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
