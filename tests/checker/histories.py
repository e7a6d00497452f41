"""A tiny builder for literal queue histories in tests.

    h = H()
    h.send(0, 1, 10, offset=0)                 # process 0 sends 10 to key 1, ok at offset 0
    h.poll(1, {1: [(0, 10)]})                  # process 1 polls it
    h.txn(2, [("send", 1, 11, 1), ("poll", {1: [(1, 11)]})], type="info")

Each call appends an invoke and its completion (in that order) unless split with
`invoke` / `complete` to make ops overlap.
"""

from __future__ import annotations

from typing import Any

from logquake.history import Op


def _invoked(mops: list) -> list:
    return [["send", m[1], m[2]] if m[0] == "send" else ["poll"] for m in mops]


def _completed(mops: list) -> list:
    out = []
    for m in mops:
        if m[0] == "send":
            out.append(["send", m[1], [m[3], m[2]]] if len(m) > 3 else ["send", m[1], m[2]])
        else:
            out.append(
                ["poll", {str(k): [list(p) for p in ps] for k, ps in m[1].items()}]
                if len(m) > 1
                else ["poll"]
            )
    return out


def _f(mops: list) -> str:
    kinds = {m[0] for m in mops}
    return kinds.pop() if len(kinds) == 1 else "txn"


class H:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.pending: dict[Any, tuple[str, list]] = {}

    def _add(self, **kw: Any) -> Op:
        extra = kw.pop("extra", {})
        op = Op(index=len(self.ops), time=len(self.ops) * 1_000_000, **kw, extra=extra)
        self.ops.append(op)
        return op

    def invoke(self, p: Any, mops: list) -> None:
        self.pending[p] = (_f(mops), mops)
        self._add(process=p, type="invoke", f=_f(mops), value=_invoked(mops))

    def complete(self, p: Any, type: str = "ok", mops: list | None = None, **extra: Any) -> Op:
        f, invoked = self.pending.pop(p)
        return self._add(
            process=p, type=type, f=f, value=_completed(mops if mops is not None else invoked), extra=extra
        )

    def txn(self, p: Any, mops: list, type: str = "ok", **extra: Any) -> Op:
        self.invoke(p, mops)
        return self.complete(p, type, mops, **extra)

    def send(self, p: Any, k: Any, v: Any, offset: int | None = None, type: str = "ok", **extra: Any) -> Op:
        return self.txn(p, [("send", k, v, offset)], type, **extra)

    def poll(self, p: Any, reads: dict, type: str = "ok", **extra: Any) -> Op:
        return self.txn(p, [("poll", reads)], type, **extra)

    def assign(self, p: Any, keys: list, seek_to_beginning: bool = False, f: str = "assign") -> None:
        extra = {"seek_to_beginning": True} if seek_to_beginning else {}
        self._add(process=p, type="invoke", f=f, value=keys, extra=extra)
        self._add(process=p, type="ok", f=f, value=keys, extra=extra)

    def nemesis(self, f: str = "start-partition", value: Any = "majority") -> None:
        self._add(process="nemesis", type="info", f=f, value=value)
