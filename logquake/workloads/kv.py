"""The `kv` workload: a key-value store's keys as compare-and-set registers (docs/jetstream-kv.md).

A few keys (`KEYS`, 5); each is an independent register, checked for linearizability with the
cas-register model (logquake.checker.linear). A `read` gets a key's value, a `write` puts
one, a `cas` replaces a value with another only if the key still holds it. Values written are
unique and increasing per key (1, 2, 3...), so every read names the one write or cas it saw.

History shape (jepsen.independent pairs, as the offsets workload's registers):

    invoke {"f": "read",  "value": [k, null]}        ok {"f": "read",  "value": [k, v or null]}
    invoke {"f": "write", "value": [k, v]}           ok {"f": "write", "value": [k, v]}
    invoke {"f": "cas",   "value": [k, [old, new]]}  ok {"f": "cas",   "value": [k, [old, new]]}

`KVGenerator` is pure, like the offsets generator: in the main phase each worker reads,
writes or swaps a random key; a cas expects the value the generator last learned the key
holds (from any worker's ok op), so most swaps can succeed. In the drain phase each worker
reads every key once (again after a read that did not succeed), so a write lost in the faults
shows up as a stale final read. The client is the system's (JetStream KV:
logquake.systems.jetstream.kv).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from logquake.history import OK, Op
from logquake.workloads.generator import DRAIN, Context, invoke, settle_drain_read

if TYPE_CHECKING:
    from logquake.config import TestConfig
    from logquake.systems.jetstream.kv import KVClient

KEYS = 5
READ_SHARE = 0.4
WRITE_SHARE = 0.3  # the rest are cas


@dataclass
class _Worker:
    rng: random.Random
    drain_left: list[int] | None = None  # keys still to read in the drain phase


@dataclass
class KVGenerator:
    """Chooses the kv workload's ops; see the module docstring."""

    seed: int
    keys: int = KEYS
    next_value: dict[int, int] = field(default_factory=dict)
    last_seen: dict[int, Any] = field(default_factory=dict)  # key -> the value an ok op last left or saw
    _workers: dict[int, _Worker] = field(default_factory=dict)

    def _worker(self, w: int) -> _Worker:
        st = self._workers.get(w)
        if st is None:
            st = self._workers[w] = _Worker(rng=random.Random(f"kv-{self.seed}-{w}"))
        return st

    def fresh_client(self, worker: int) -> None:
        """A client replaced: nothing to redo (gets and puts carry no client state)."""

    def _fresh(self, k: int) -> int:
        v = self.next_value.get(k, 1)
        self.next_value[k] = v + 1
        return v

    def op(self, ctx: Context) -> Op | None:
        """The next invocation for this worker, or None when it has nothing left to do."""
        st = self._worker(ctx.worker)
        if ctx.phase == DRAIN:
            if st.drain_left is None:
                st.drain_left = list(range(self.keys))
            return invoke(ctx, "read", [st.drain_left[0], None]) if st.drain_left else None
        k = st.rng.randrange(self.keys)
        roll = st.rng.random()
        if roll < READ_SHARE:
            return invoke(ctx, "read", [k, None])
        if roll < READ_SHARE + WRITE_SHARE:
            return invoke(ctx, "write", [k, self._fresh(k)])
        return invoke(ctx, "cas", [k, [self.last_seen.get(k), self._fresh(k)]])

    def update(self, ctx: Context, event: Op) -> None:
        """Learn what a key holds from ok ops; in the drain, a key is done once one of this
        worker's reads of it succeeded, and one whose read did not goes to the back of the line."""
        if event.type == OK and event.f in ("read", "write", "cas"):
            k, v = event.value
            self.last_seen[k] = v[1] if event.f == "cas" else v
        st = self._worker(ctx.worker)
        if ctx.phase != DRAIN or event.f != "read" or not st.drain_left:
            return
        settle_drain_read(st.drain_left, event)


# -- from a TestConfig ------------------------------------------------------------------


def make_generator(cfg: TestConfig) -> KVGenerator:
    assert cfg.seed is not None, "resolve the seed first (TestConfig.with_seed)"
    return KVGenerator(seed=cfg.seed)


def reads(cfg: TestConfig) -> str:
    """How the test's clients read (`jetstream.kv_reads`), checked."""
    from logquake.systems.jetstream.server import kv_reads

    return kv_reads((cfg.jetstream or {}).get("kv_reads"))


def make_client(cfg: TestConfig) -> KVClient:
    """A fresh, unopened KV client reading as the test says."""
    from logquake.systems.jetstream.kv import KVClient
    from logquake.systems.jetstream.system import replicas

    return KVClient(replicas=replicas(cfg), reads=reads(cfg))


def client_configs(cfg: TestConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """No producer or consumer: one KV client per worker, as test.json's consumer config."""
    from logquake.systems.jetstream.kv import describe
    from logquake.systems.jetstream.system import replicas

    return {}, describe(replicas=replicas(cfg), reads=reads(cfg))


def banner(cfg: TestConfig) -> str:
    from logquake.systems.jetstream.kv import BUCKET

    return (f"{KEYS} keys of KV bucket {BUCKET}, get/put/cas, {reads(cfg)} reads, "
            "checked as cas registers for linearizability")


def analyse(ops: list[Op]) -> dict[str, Any]:
    """The results.json object of a kv history: the cas-register model's verdict per key."""
    from logquake.checker import check_linearizable, get_model

    return check_linearizable(ops, get_model("cas-register"))
