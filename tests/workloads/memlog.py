"""An in-memory log and a Client over it: a perfect system under test, for runner tests.

It exercises the runner's phases, recording and storage without a broker; the adapters'
real behaviour is tested against real brokers elsewhere.
"""

from __future__ import annotations

import threading
from typing import Any

from logquake.history import INFO, OK, Op
from logquake.workloads import complete


class MemLog:
    def __init__(self, *, lose_every: int = 0) -> None:
        self.lock = threading.Lock()
        self.logs: dict[int, list[int]] = {}
        self.lose_every = lose_every  # acknowledge but drop every n-th write (a buggy log)
        self.appends = 0

    def append(self, k: int, v: int) -> int:
        with self.lock:
            log = self.logs.setdefault(k, [])
            self.appends += 1
            if self.lose_every and self.appends % self.lose_every == 0:
                return len(log)  # acknowledged at an offset the next write will take
            log.append(v)
            return len(log) - 1

    def read(self, k: int, start: int, n: int = 50) -> list[list[int]]:
        with self.lock:
            log = self.logs.get(k, [])
            return [[o, log[o]] for o in range(start, min(len(log), start + n))]


class MemClient:
    def __init__(self, log: MemLog) -> None:
        self.log = log
        self.assigned: list[int] = []
        self.pos: dict[int, int] = {}

    def open(self, bootstrap_servers: str) -> None:
        pass

    def close(self) -> None:
        pass

    def invoke(self, op: Op) -> Op:
        if op.f == "crash":
            return complete(op, INFO, op.value, error="crash")
        if op.f in ("assign", "subscribe"):
            self.assigned = list(op.value)
            if op.get("seek_to_beginning"):
                self.pos = {k: 0 for k in self.assigned}
            return complete(op, OK, op.value)
        value: list[Any] = []
        for m in op.value:
            if m[0] == "send":
                value.append(["send", m[1], [self.log.append(m[1], m[2]), m[2]]])
            else:
                polled: dict[str, list[list[int]]] = {}
                for k in self.assigned:
                    recs = self.log.read(k, self.pos.get(k, 0))
                    if recs:
                        polled[str(k)] = recs
                        self.pos[k] = recs[-1][0] + 1
                value.append(["poll", polled])
        return complete(op, OK, value)
