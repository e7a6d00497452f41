"""Harness throughput: sustained ops/s with full history recording vs. raw client calls.

Both halves run in the same process against the same cluster, one after the other, with the
same workers, op mix (the queue generator, no txn) and client library:

- raw:     each thread calls the client adapter's invoke() directly, nothing recorded;
- harness: the runner's workers (timeout wrapper, generator lock, history.jsonl streaming,
           live counters), rate limit set far above what the cluster can do.

The two halves alternate for `--rounds` rounds (the first round also warms the cluster up:
leaders, connections). Each half writes to keys of its own, so it creates its topics while
it is measured, as a run does, on a cluster that keeps every earlier half's topics. The
cluster is the default one (5 nodes) unless `--nodes` says otherwise. Prints ops/s of both,
their ratio and the harness's overhead per op. `--cluster memory` swaps the brokers for an in-process log with a mutex, so the
figures are the harness's own ceiling rather than the brokers'.

Where the time goes (printed after the rounds): the harness's last history split by op kind
(send, poll that read something, poll that read nothing, other) with each kind's median
latency and share of the workers' time, and the CPU each op cost this process and the broker
processes (lab and local clusters). Per op, from the brokers' 5 s stats lines in broker.log
over the measured window: requests by API key, Raft messages and the peer frames carrying
them, write turns handed to the writer thread and their fsyncs; from /proc: the brokers'
read and write syscalls and context switches.

`--rate R` paces the harness half at R ops/s instead of as fast as it goes. CPU per op
depends on throughput (more ops per Raft write turn and per frame when busier), so an A/B
of two versions on a shared machine compares best at a rate both sustain. With
LQ_BROKER_CPROFILE=<dir> in the environment, every broker writes a cProfile of its event
loop's thread (CPU time) there when it stops (about 3x slower while on).

On a quiet 2-core machine the harness is bound by CPU (brokers ~0.6 ms and this process
~0.22 ms per op), not by latency: librdkafka's once-a-second topic scan would add latency to
the first sends to every new key and to the polls after assigning one, which the broker's
topic-level "coming up" answer (handlers.py) and the adapter's metadata request at assign
(confluent.py) avoid. Latest figures: benchmarks/README.md. Usage:

    .venv/bin/python benchmarks/bench_harness.py [--workers 20] [--seconds 10] [--cluster lab|local|memory]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from logquake.broker.logstats import stats_lines
from logquake.config import TestConfig, resolve_config
from logquake.crew import Crew, Pacer, Recorder, Stats
from logquake.history import HistoryWriter, load_history
from logquake.workloads import MAIN, Context, make_client, make_generator


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
def _cluster(kind: str, cfg, tmp: Path, pids: list[int], logs: list[Path] | None = None):
    """The bootstrap servers; `pids` gets the broker processes' pids when they are ours and
    `logs` their broker.log files when this process can read them."""
    logs = [] if logs is None else logs
    if kind == "memory":
        yield "memory"
        return
    if kind == "local":
        from logquake.broker import LocalCluster

        with LocalCluster(n=cfg.nodes, base_dir=tmp / "local") as c:
            c.wait_ready()
            pids.extend(p.pid for p in c.procs.values())
            logs.extend(p for p in (tmp / "local").rglob("*.log"))
            yield c.bootstrap_servers
        return
    from logquake.runner import open_cluster

    with open_cluster(cfg, tmp) as c:
        c.wait_ready(120.0)
        # The lab's brokers share our pid namespace: their CPU is readable in /proc.
        pids.extend(p for n in c.nodes if (p := c.lifecycle.pid(n)) and Path(f"/proc/{p}").exists())
        logs.extend(q for n in c.nodes if (q := Path(c.lifecycle.logs(n)[0])).exists())
        yield c.bootstrap_servers


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _broker_stats(logs: list[Path], t0: float, t1: float) -> tuple[dict[str, float], int]:
    """Per second, summed over the brokers: the counters of their 5 s stats lines logged
    between wall-clock times t0 and t1 (each line counts the 5 s before it), and how many
    lines that was."""
    sums: dict[str, float] = {}
    n_lines = 0
    for path in logs:
        with contextlib.suppress(OSError):
            for at, stats in stats_lines(path.read_text(errors="replace")):
                t = time.mktime(time.strptime(at, "%Y-%m-%d %H:%M:%S"))
                if t0 + 5 <= t <= t1:
                    n_lines += 1
                    for k, v in stats.items():
                        if not k.endswith("_max_ms"):
                            sums[k] = sums.get(k, 0) + v
    # Each node logs once per 5 s: lines / nodes windows of 5 s each.
    span = 5.0 * n_lines / max(1, len(logs))
    return {k: v / span for k, v in sums.items()} if span else {}, n_lines


def _sys_counts(pid: int) -> tuple[int, int, int]:
    """(read syscalls, write syscalls, context switches of all threads) of a process so far."""
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if line.endswith("ctxt_switches:") or "ctxt_switches:" in line:
                    switches += int(line.split()[1])
    return int(io["syscr"]), int(io["syscw"]), switches


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


_rounds_started = itertools.count(1)


def _fresh_generator(cfg):
    """The queue generator on keys no earlier half used, as in a run: every half creates its
    keys' topics and Raft groups while it is measured, and those of the earlier halves stay
    (their heartbeats go on). Reusing keys 0, 1, ... made later halves ~20 % faster than a run.
    """
    return make_generator(cfg, first_key=100_000 * next(_rounds_started))


def _raw(cfg, bootstrap: str, seconds: float, make) -> int:
    gen, lock = _fresh_generator(cfg), threading.Lock()
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
             pids: list[int], rate: float = 1e6) -> tuple[int, Path, list[float], tuple[float, float, list[int]]]:
    """Ops completed in `seconds`, the history, CPU seconds used meanwhile (us, brokers), and
    the measured window's wall-clock start and end with the brokers' read and write syscalls
    and context switches in it."""
    stats = Stats()
    path = tmp / f"history-{time.monotonic_ns()}.jsonl"
    rec = Recorder(HistoryWriter(path), stats)
    crew = Crew(cfg, _fresh_generator(cfg), rec, bootstrap, make)
    over = threading.Event()
    crew.start(MAIN, over, Pacer(rate))
    time.sleep(2.0)
    start = stats.ok + stats.info + stats.fail
    cpu0 = [_cpu(p) for p in (os.getpid(), *pids)]
    sys0 = [_sys_counts(p) for p in pids]
    t0 = time.time()
    time.sleep(seconds)
    t1 = time.time()
    sys1 = [_sys_counts(p) for p in pids]
    n = stats.ok + stats.info + stats.fail - start
    cpu = [_cpu(p) - c for p, c in zip((os.getpid(), *pids), cpu0, strict=True)]
    over.set()
    crew.join(40)
    crew.close()
    rec.close()
    sysc = [sum(b[i] - a[i] for a, b in zip(sys0, sys1, strict=True)) for i in range(3)]
    return n, path, cpu, (t0, t1, sysc)


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
    ap.add_argument("--nodes", type=int, default=TestConfig().nodes, help="default: the default cluster's")
    ap.add_argument("--client", default="confluent")
    ap.add_argument("--cluster", choices=("lab", "local", "memory"), default="lab")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=float, default=1e6,
                    help="harness ops/s (default: unlimited); at a rate both of two versions sustain, "
                         "their CPU per op compares the same amount of batching")
    a = ap.parse_args()
    cfg = resolve_config(None, {"concurrency": a.workers, "nodes": a.nodes, "client": a.client, "seed": 1,
                                "replication_factor": min(3, a.nodes)})
    print(f"cluster={a.cluster} nodes={a.nodes} client={a.client} workers={a.workers} seconds={a.seconds}"
          + (f" rate={a.rate:g}" if a.rate < 1e6 else ""))
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    raws, hs, pids, logs = [], [], [], []
    with tempfile.TemporaryDirectory() as d, _cluster(a.cluster, cfg, Path(d), pids, logs) as bootstrap:
        for r in range(a.rounds):
            raw = _raw(cfg, bootstrap, a.seconds, _make(a.cluster, cfg)) / a.seconds
            harness, path, cpu, window = _harness(cfg, bootstrap, a.seconds, Path(d), _make(a.cluster, cfg), pids,
                                                  a.rate)
            h = harness / a.seconds
            print(f"round {r + 1}: raw {raw:9.1f} ops/s   harness {h:9.1f} ops/s"
                  f" ({len(load_history(path))} history lines)")
            raws.append(raw)
            hs.append(h)
        _print_breakdown(path, harness, cpu, a.workers, a.seconds)
        time.sleep(5.5)  # the brokers' stats line that covers the window's end
        rates, n_lines = _broker_stats(logs, window[0], window[1])
        if rates and harness:
            per_op = a.seconds / harness
            reqs = sorted((k for k in rates if k.startswith("req_")), key=lambda k: -rates[k])
            print(f"broker counters per op, all brokers ({n_lines} stats lines of {len(logs)} brokers):")
            print("  requests by API key: " + ", ".join(f"{k[4:]}: {rates[k] * per_op:.2f}" for k in reqs)
                  + f" (all: {sum(rates[k] for k in reqs) * per_op:.2f}, {sum(rates[k] for k in reqs):.0f}/s)")
            print("  syscalls: {:.2f} reads, {:.2f} writes; context switches {:.2f}".format(
                *(x / harness for x in window[2])))
            print("  raft messages sent: {:.2f} in {:.2f} peer frames".format(
                *(rates.get(k, 0) * per_op for k in ("raft_msgs", "peer_frames"))))
            print("  raft appends sent: {:.2f}; write turns inline: {:.2f}, in a thread: {:.2f} (their ms:"
                  " {:.2f}); fsyncs: {:.2f} ({:.2f} inline)".format(*(rates.get(k, 0) * per_op for k in (
                      "append_msgs", "inline_turns", "persist_turns", "persist_total_ms", "fsyncs",
                      "inline_fsyncs"))))
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
