"""Harness throughput: sustained ops/s with full history recording vs. raw client calls.

Both halves run in the same process against the same cluster, one after the other, with the
same workers, op mix (the queue generator, no txn) and client library:

- raw:     each thread calls the client adapter's invoke() directly, nothing recorded;
- harness: the runner's workers (timeout wrapper, generator lock, history.jsonl streaming,
           live counters), rate limit set far above what the cluster can do.

The two halves alternate for `--rounds` rounds (the first round also warms the cluster up:
topics, leaders, connections). Prints ops/s of both, their ratio and the harness's overhead
per op. `--cluster memory` swaps the brokers for an in-process log with a mutex, so the
figures are the harness's own ceiling rather than the brokers'.

Where the time goes (printed after the rounds): the harness's last history split by op kind
(send, poll that read something, poll that read nothing, other) with each kind's median
latency and share of the workers' time, and the CPU each op cost this process and the broker
processes (lab and local clusters). Each broker logs its requests per API key every 5 s
(`req_<key>` in broker.log's stats line).

Measured 30 Nov 2026 (lab, 3 nodes, 20 workers, 2 cores shared with other jobs at load 5-7):
sends take 60-85 % of the workers' time (median 20-40 ms: acks=all waits for about two Raft
write turns, the leader's queue behind the running write and the follower's write+fsync;
each turn took ~9 ms, ~4 of them in the writing thread). CPU per op: this process ~0.4 ms
(its Python held the GIL for about a third of that; the rest is librdkafka's threads of 40
client instances and the workers outside the GIL), brokers ~0.85 ms in all, ~80 % of it in
the interpreter (Raft loop, request decoding, kafka-python's encoding, handlers) and ~20 %
in the kernel (perf). Before consumers stopped prefetching into a non-empty
queue (confluent.py) every send answered ~5 long-polling fetches per broker and the brokers
spent ~1.1 ms per op. At ~1.25 ms of CPU per op, two cores cannot give 2,000 ops/s whatever
the harness does; see benchmarks/README.md. Usage:

    .venv/bin/python benchmarks/bench_harness.py [--workers 20] [--seconds 10] [--cluster lab|local|memory]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from logquake.config import resolve_config
from logquake.history import HistoryWriter, load_history
from logquake.runner import MAIN, Crew, Pacer, Recorder, Stats
from logquake.workloads import Context, make_client, make_generator


class _MemoryLog:
    """A log in this process: appends and reads under one lock (a near-zero-cost system)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: dict[int, list[int]] = {}


class _MemoryClient:
    def __init__(self, log: _MemoryLog) -> None:
        self.log, self.assigned, self.pos = log, [], {}

    def open(self, bootstrap_servers: str) -> None:
        pass

    def close(self) -> None:
        pass

    def invoke(self, op):
        from logquake.history import INFO, OK
        from logquake.workloads import complete

        if op.f == "crash":
            return complete(op, INFO, op.value, error="crash")
        if op.f in ("assign", "subscribe"):
            self.assigned = list(op.value)
            return complete(op, OK, op.value)
        value = []
        with self.log.lock:
            for m in op.value:
                if m[0] == "send":
                    lg = self.log.logs.setdefault(m[1], [])
                    lg.append(m[2])
                    value.append(["send", m[1], [len(lg) - 1, m[2]]])
                else:
                    polled = {}
                    for k in self.assigned:
                        lg = self.log.logs.get(k, [])
                        start = self.pos.get(k, 0)
                        end = min(len(lg), start + 20)  # a fetch returns a bounded batch
                        if start < end:
                            polled[str(k)] = [[o, lg[o]] for o in range(start, end)]
                            self.pos[k] = end
                    value.append(["poll", polled])
        return complete(op, OK, value)


def _make(kind: str, cfg):
    """A client factory; for `memory`, each call of _make is a fresh log."""
    if kind == "memory":
        log = _MemoryLog()
        return lambda: _MemoryClient(log)
    return lambda: make_client(cfg)


@contextlib.contextmanager
def _cluster(kind: str, cfg, tmp: Path, pids: list[int]):
    """The bootstrap servers; `pids` gets the broker processes' pids when they are ours."""
    if kind == "memory":
        yield "memory"
        return
    if kind == "local":
        from logquake.broker import LocalCluster

        with LocalCluster(n=cfg.nodes, base_dir=tmp / "local") as c:
            c.wait_ready()
            pids.extend(p.pid for p in c.procs.values())
            yield c.bootstrap_servers
        return
    from logquake.runner import open_cluster

    with open_cluster(cfg, tmp) as c:
        c.wait_ready(120.0)
        # The lab's brokers share our pid namespace: their CPU is readable in /proc.
        pids.extend(p for n in c.nodes if (p := c.lifecycle.pid(n)) and Path(f"/proc/{p}").exists())
        yield c.bootstrap_servers


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _kind(op) -> str:
    if op.f == "poll":
        return "poll (read)" if any(op.value[0][1].values()) else "poll (empty)"
    return op.f if op.f in ("send", "txn") else "other"


def _breakdown(path: Path) -> dict[str, list[float]]:
    """Latency (ms) of each completed op of a history, by kind."""
    invoked, out = {}, {}
    for op in load_history(path):
        if op.type == "invoke":
            invoked[op.process] = op
        elif (inv := invoked.pop(op.process, None)) is not None:
            out.setdefault(_kind(op), []).append((op.time - inv.time) / 1e6)
    return out


def _raw(cfg, bootstrap: str, seconds: float, make) -> int:
    gen, lock = make_generator(cfg), threading.Lock()
    done = [0] * cfg.concurrency
    over = threading.Event()

    def loop(w: int) -> None:
        client = make()
        client.open(bootstrap)
        try:
            while not over.is_set():
                ctx = Context(worker=w, process=w, phase=MAIN)
                with lock:
                    op = gen.op(ctx)
                res = client.invoke(op)
                with lock:
                    gen.update(ctx, res)
                done[w] += 1
        finally:
            client.close()

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in range(cfg.concurrency)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # warm-up: clients connected, topics created
    start = sum(done)
    time.sleep(seconds)
    n = sum(done) - start
    over.set()
    for t in threads:
        t.join(40)
    return n


def _harness(cfg, bootstrap: str, seconds: float, tmp: Path, make,
             pids: list[int]) -> tuple[int, Path, list[float]]:
    """Ops completed in `seconds`, the history, and CPU seconds used meanwhile (us, brokers)."""
    stats = Stats()
    path = tmp / f"history-{time.monotonic_ns()}.jsonl"
    rec = Recorder(HistoryWriter(path), stats)
    crew = Crew(cfg, make_generator(cfg), rec, bootstrap, make)
    over = threading.Event()
    crew.start(MAIN, over, Pacer(1e6))
    time.sleep(2.0)
    start = stats.ok + stats.info + stats.fail
    cpu0 = [_cpu(p) for p in (os.getpid(), *pids)]
    time.sleep(seconds)
    n = stats.ok + stats.info + stats.fail - start
    cpu = [_cpu(p) - c for p, c in zip((os.getpid(), *pids), cpu0, strict=True)]
    over.set()
    crew.join(40)
    crew.close()
    rec.close()
    return n, path, cpu


def _print_breakdown(path: Path, n_ops: int, cpu: list[float], workers: int, seconds: float) -> None:
    lat = _breakdown(path)
    total = sum(sum(v) for v in lat.values()) or 1.0
    print("where the workers' time went (last harness round):")
    for kind, v in sorted(lat.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {kind:13s} {len(v):6d} ops  median {statistics.median(v):7.1f} ms"
              f"  {100 * sum(v) / total:5.1f} % of the time")
    per_op = 1e3 / max(1, n_ops)
    line = f"CPU per op: this process {cpu[0] * per_op:.2f} ms"
    if len(cpu) > 1:
        line += f", brokers {sum(cpu[1:]) * per_op:.2f} ms"
    print(line + f" ({os.cpu_count()} cores; {workers} workers for {seconds:.0f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--client", default="confluent")
    ap.add_argument("--cluster", choices=("lab", "local", "memory"), default="lab")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    cfg = resolve_config(None, {"concurrency": a.workers, "nodes": a.nodes, "client": a.client, "seed": 1,
                                "replication_factor": min(3, a.nodes)})
    print(f"cluster={a.cluster} nodes={a.nodes} client={a.client} workers={a.workers} seconds={a.seconds}")
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    raws, hs, pids = [], [], []
    with tempfile.TemporaryDirectory() as d, _cluster(a.cluster, cfg, Path(d), pids) as bootstrap:
        for r in range(a.rounds):
            raw = _raw(cfg, bootstrap, a.seconds, _make(a.cluster, cfg)) / a.seconds
            harness, path, cpu = _harness(cfg, bootstrap, a.seconds, Path(d), _make(a.cluster, cfg), pids)
            h = harness / a.seconds
            print(f"round {r + 1}: raw {raw:9.1f} ops/s   harness {h:9.1f} ops/s"
                  f" ({len(load_history(path))} history lines)")
            raws.append(raw)
            hs.append(h)
        _print_breakdown(path, harness, cpu, a.workers, a.seconds)
    print("load average at end:   {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    # The last round is the steady state: the first one also created topics and elected leaders.
    raw_rate, h_rate = raws[-1], hs[-1]
    print(f"raw client calls:        {raw_rate:9.1f} ops/s")
    print(f"harness (with history):  {h_rate:9.1f} ops/s")
    if raw_rate and h_rate:
        print(f"harness / raw:           {h_rate / raw_rate:9.3f}")
        cost = (1 / h_rate - 1 / raw_rate) * 1e6
        print(f"overhead per op:         {cost:9.1f} us of the process (1/harness - 1/raw: the GIL")
        print(f"                         {cost * a.workers:9.1f} us of each worker's time   serialises both)")


if __name__ == "__main__":
    main()
