"""A restarted nats-server's memory against the data it stores: RSS after recovery vs messages.

    .venv/bin/python benchmarks/bench_jetstream_restart_rss.py [--counts 0,2000,8000,16000,32000]
        [--modes ids,noids,ids-old] [--nodes 1] [--stop kill] [--settle 60] [--out DIR]

Why: in the JetStream soak (benchmarks/README, "Soak") nats-server's RSS across restarts grew
with the hour, each restarted process starting higher as the 10 streams grew; no single process
grew. This script asks what a restarted server holds, as a function of what it stores.

For each mode and each N in --counts, from an empty store: `--nodes` nats-server processes on
127.0.0.1 (pinned wheel, the seam's own config writer plus a profiling port, file storage,
default sync_interval), 10 streams named and configured as logquake's queue workload makes them
(lq-<k> on subject lq.<k>, file storage, replicas min(3, nodes)), N messages published to each
(payload the value as text, as the workload's integers; a header padding each stored record to
~145 bytes, about the soak's, whose atomic batches add headers), QUIET_S s of quiet, then n1
stopped (SIGKILL, as the kill fault; or SIGTERM) and started again on the same store. n1's RSS
(and RssAnon, /proc) is sampled from the moment it is ready (/healthz ok: its streams are
recovered) until --settle s later; then its Go heap is read from the profiling port
(/debug/pprof/heap?debug=1&gc=1: MemStats, and the in-use bytes of the sampled allocation sites
scaled as pprof does, grouped by their innermost nats-server functions). The modes:

    ids      each message carries a Nats-Msg-Id (`<k>-<v>`, as logquake's idempotent producer)
             and the restart comes within the stream's duplicate window (the server's default,
             2 min): recovery rebuilds the dedupe map from every message in the window.
    noids    no Msg-Id, the same window: the window's messages are read, no ids kept.
    ids-old  Msg-Ids, a 5 s duplicate window, passed before the stop: no id is kept.

Printed per run: what n1 stores (/jsz: messages, bytes), the live server's RSS before the stop,
RSS after the restart; in the table, RSS over the same mode's N=0 per stored message (KB/msg)
and per stored byte (x data), and the heap's largest sites. One run is one scheduling of the
parallel stream recoveries: repeat a point before reading a few MB into it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import nats
import psutil
from bench_jetstream import add_stream, free_ports

from logquake.systems.base import NodeSpec
from logquake.systems.jetstream.client import msg_id, stream_name, subject
from logquake.systems.jetstream.server import (
    JetStreamSettings,
    client_urls,
    find_binary,
    monitor_json,
    node_not_ready,
    render_config,
    server_config,
)

STREAMS = 10  # the soak's --key-count: one stream a key
PAD = 60  # header bytes that bring a stored record (with a Msg-Id) to ~145 B, about the soak's
INFLIGHT = 2000  # publishes awaiting their PubAck
OLD_WINDOW_S = 5.0  # ids-old: the stream's duplicate window, waited out before the stop
MODES = ("ids", "noids", "ids-old")
SAMPLE_AT = (0.0, 10.0, 30.0, 60.0, 120.0, 240.0)  # s after ready, up to --settle (the soak sampled at ~10 s)
QUIET_S = 10.0  # from the last ack to the stop, in every mode
DEPTH = 9  # nats-server functions that name an allocation site, innermost first (pools' New funcs left out)
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy


class Cluster:
    """`nodes` nats-server processes on 127.0.0.1 under `base`, each with a profiling port."""

    def __init__(self, base: Path, nodes: int) -> None:
        self.binary = find_binary()
        ports = free_ports(4 * nodes)
        self.specs = [NodeSpec(name=f"n{i + 1}", node_id=i + 1, address="127.0.0.1", client_port=ports[i],
                               peer_port=ports[nodes + i], node_dir=str(base / f"n{i + 1}")) for i in range(nodes)]
        self.monitor = {s.name: ports[2 * nodes + i] for i, s in enumerate(self.specs)}
        self.prof = {s.name: ports[3 * nodes + i] for i, s in enumerate(self.specs)}
        self.procs: dict[str, subprocess.Popen] = {}
        for s in self.specs:
            Path(s.path("data")).mkdir(parents=True)
            cfg = server_config(s, self.specs, JetStreamSettings(), monitor_port=self.monitor[s.name])
            cfg["prof_port"] = self.prof[s.name]  # bound to the listen host, 127.0.0.1
            Path(s.path("nats-server.conf")).write_text(render_config(cfg))

    @property
    def urls(self) -> str:
        return client_urls(self.specs)

    def start(self, name: str) -> None:
        s = next(s for s in self.specs if s.name == name)
        with open(s.path("nats-server.out"), "ab") as out:
            self.procs[name] = subprocess.Popen([self.binary, "-c", s.path("nats-server.conf")], stdout=out,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self, name: str, sig: int) -> None:
        """Signal the node and wait for it; SIGKILL when it outlives 30 s."""
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def wait_ready(self, names: list[str], timeout: float = 120.0) -> float:
        """Seconds until every node in `names` is ready (node_not_ready says None)."""
        t0 = time.monotonic()
        while waiting := [s.name for s in self.specs
                          if s.name in names and node_not_ready(s, self.specs, monitor_port=self.monitor[s.name])]:
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"nats-server {', '.join(waiting)} not ready after {timeout:g} s")
            time.sleep(0.05)
        return time.monotonic() - t0

    def jsz(self, name: str) -> dict[str, Any]:
        return monitor_json(f"http://127.0.0.1:{self.monitor[name]}/jsz")

    def heap(self, name: str) -> str:
        with _DIRECT.open(f"http://127.0.0.1:{self.prof[name]}/debug/pprof/heap?debug=1&gc=1", timeout=30) as r:
            return r.read().decode()

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name, signal.SIGTERM)


def moments(settle: float) -> list[float]:
    """When n1 is sampled, in s after it is ready again."""
    return sorted({*(at for at in SAMPLE_AT if at < settle), settle})


def memory(pid: int) -> dict[str, float]:
    """RSS and its anonymous part (the heap; RssFile is mostly the binary's text), MB."""
    out = {"rss": psutil.Process(pid).memory_info().rss / 2**20}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                out["anon"] = int(line.split()[1]) / 1024
    return out


_RECORD = re.compile(r"^(\d+): (\d+) \[(\d+): (\d+)\] @")
_FRAME = re.compile(r"^#\s+0x[0-9a-f]+\s+(\S+)")


def parse_heap(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """(MemStats in MB, in-use MB per site: its DEPTH innermost nats-server functions) from a debug=1 heap profile.

    The records count sampled allocations: each is scaled up as pprof does for this format,
    by 1 / (1 - exp(-mean size / rate)), rate being half the header's heap/<2*rate>.
    """
    stats: dict[str, float] = {}
    sites: dict[str, float] = defaultdict(float)
    rate = 512 * 1024
    if m := re.search(r"@ heap/(\d+)", text):
        rate = int(m.group(1)) // 2
    objects = size = 0
    site: str | None = None

    def flush() -> None:
        if objects and size:
            scale = 1 / (1 - math.exp(-(size / objects) / rate)) if rate else 1.0
            sites[site or "(outside nats-server)"] += size * scale / 2**20

    for line in text.splitlines():
        if m := _RECORD.match(line):
            flush()
            objects, size, site = int(m.group(1)), int(m.group(2)), None
        elif m := _FRAME.match(line):
            fn = m.group(1).rsplit("/", 1)[-1].split("+")[0].removeprefix("server.")
            if "nats-server" in m.group(1) and not fn.startswith("init") and (site or "").count("<") < DEPTH - 1:
                site = fn if site is None else f"{site} < {fn}"
        elif line.startswith("# ") and " = " in line:
            flush()
            objects = size = 0
            key, _, value = line[2:].partition(" = ")
            if key in ("HeapAlloc", "HeapInuse", "HeapIdle", "HeapReleased", "HeapSys", "Sys", "StackInuse"):
                stats[key] = int(value) / 2**20
    flush()
    return stats, dict(sites)


async def load(urls: str, replicas: int, n: int, mode: str) -> None:
    """Make the 10 streams and publish n messages to each, every one acknowledged."""
    nc = await nats.connect(servers=urls.split(","), connect_timeout=10, max_reconnect_attempts=60)
    try:
        js = nc.jetstream(timeout=10, publish_async_max_pending=INFLIGHT)
        for k in range(STREAMS):
            window = {"duplicate_window": OLD_WINDOW_S} if mode == "ids-old" else {}
            await add_stream(js, stream_name(k), [subject(k)], time.monotonic() + 60, replicas=replicas, **window)
        pad = "x" * PAD
        futs = []
        for v in range(n):
            for k in range(STREAMS):
                headers = {"Lq-Pad": pad}
                if mode != "noids":
                    headers["Nats-Msg-Id"] = msg_id(k, v)
                futs.append(await js.publish_async(subject(k), str(v).encode(), headers=headers))
            if len(futs) >= 20 * INFLIGHT:
                await asyncio.gather(*futs)
                futs = []
        await asyncio.gather(*futs)
        await asyncio.wait_for(js.publish_async_completed(), 120)
        for k in range(STREAMS):
            got = (await js.stream_info(stream_name(k))).state.messages
            if got != n:
                raise RuntimeError(f"{stream_name(k)} holds {got} messages, {n} were published")
    finally:
        await nc.close()


def run_one(base: Path, nodes: int, n: int, mode: str, stop: int, settle: float) -> dict[str, Any]:
    """One store of n messages a stream: n1's memory before its stop and after its restart."""
    c = Cluster(base, nodes)
    try:
        for s in c.specs:
            c.start(s.name)
        c.wait_ready([s.name for s in c.specs])
        t0 = time.monotonic()
        asyncio.run(load(c.urls, min(3, nodes), n, mode))
        publish_s = time.monotonic() - t0
        time.sleep(QUIET_S)  # replicas catch up; ids-old's window passes
        jsz = c.jsz("n1")
        before = memory(c.procs["n1"].pid)
        c.stop("n1", stop)
        c.start("n1")
        ready_s = c.wait_ready(["n1"])
        pid = c.procs["n1"].pid
        t_ready = time.monotonic()
        samples: dict[float, dict[str, float]] = {}
        for at in moments(settle):
            time.sleep(max(0.0, t_ready + at - time.monotonic()))
            samples[at] = memory(pid)
        stats, sites = parse_heap(c.heap("n1"))
        after = c.jsz("n1")
        return {"mode": mode, "n": n, "nodes": nodes, "stop": signal.Signals(stop).name, "publish_s": publish_s,
                "ready_s": ready_s, "stored_msgs": jsz.get("messages", 0), "stored_bytes": jsz.get("bytes", 0),
                "streams_on_n1": jsz.get("streams", 0), "recovered_msgs": after.get("messages", 0),
                "rss_before": before["rss"], "samples": {f"{k:g}": v for k, v in samples.items()},
                "heap": stats, "sites": dict(sorted(sites.items(), key=lambda kv: -kv[1])[:12])}
    finally:
        c.close()


def short(site: str) -> str:
    """A site's chain of functions as its innermost one and the ones in it that say why it ran
    (a rebuild, the dedupe map, a Raft log), else its two outermost."""
    chain = site.split(" < ")
    why = [f for f in chain[1:] if any(w in f for w in ("rebuild", "Dedupe", "MsgId", "Raft", "PerSubject"))]
    return site if len(chain) <= 3 else f"{chain[0]} < ... < {' < '.join(why[:3] or chain[-2:])}"


def table(rows: list[dict[str, Any]], settle: float) -> None:
    end = f"{settle:g}"
    base = {(r["mode"], r["nodes"]): r for r in rows if r["n"] == 0}
    print(f"\n{'mode':8} {'nodes':>5} {'N/stream':>8} {'n1 msgs':>8} {'n1 MB':>6} {'live':>6} "
          + " ".join(f"{'rss@' + format(a, 'g'):>7}" for a in moments(settle))
          + f" {'anon@end':>8} {'heapInuse':>9} {'heapIdle':>8} {'released':>8} {'KB/msg':>7} {'x data':>6}")
    for r in rows:
        s = r["samples"]
        z = base.get((r["mode"], r["nodes"]))
        per = ratio = ""
        if z is not None and r["stored_msgs"] > z["stored_msgs"]:
            grew = s[end]["rss"] - z["samples"][end]["rss"]
            per = f"{grew * 1024 / (r['stored_msgs'] - z['stored_msgs']):.2f}"
            ratio = f"{grew * 2**20 / (r['stored_bytes'] - z['stored_bytes']):.2f}"
        h = r["heap"]
        print(f"{r['mode']:8} {r['nodes']:>5} {r['n']:>8} {r['stored_msgs']:>8} {r['stored_bytes'] / 2**20:>6.1f} "
              f"{r['rss_before']:>6.1f} " + " ".join(f"{v['rss']:>7.1f}" for v in s.values())
              + f" {s[end]['anon']:>8.1f} {h.get('HeapInuse', 0):>9.1f} {h.get('HeapIdle', 0):>8.1f}"
                f" {h.get('HeapReleased', 0):>8.1f} {per:>7} {ratio:>6}")
    print("\nin-use heap after a forced GC at the end, by site: its innermost nats-server"
          f" function < ... < those of its {DEPTH} that say why (MB, top 3):")
    for r in rows:
        top = "; ".join(f"{short(k)} {v:.1f}" for k, v in list(r["sites"].items())[:3])
        print(f"  {r['mode']:8} N={r['n']:<6} {top}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="0,2000,8000,16000,32000", help="messages per stream, comma-separated")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--nodes", type=int, default=1, help="1, or a cluster (3-replica streams); n1 restarts")
    ap.add_argument("--stop", choices=("kill", "term"), default="kill", help="how n1 stops (kill: as the fault)")
    ap.add_argument("--settle", type=float, default=60.0, help="s after n1 is ready again to its last sample")
    ap.add_argument("--out", type=Path, help="write every run's figures to OUT/restart_rss.json")
    ap.add_argument("--keep", action="store_true", help="keep the nodes' directories (printed)")
    a = ap.parse_args()
    modes = a.modes.split(",")
    if unknown := set(modes) - set(MODES):
        ap.error(f"unknown modes: {', '.join(sorted(unknown))}")
    stop = signal.SIGKILL if a.stop == "kill" else signal.SIGTERM
    print(f"nats-server {find_binary()}, {a.nodes} node(s), {STREAMS} streams, stop {a.stop}, "
          f"settle {a.settle:g} s, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="lq-restart-rss-"))
    try:
        for mode in modes:
            for n in (int(x) for x in a.counts.split(",")):
                r = run_one(tmp / f"{mode}-{n}", a.nodes, n, mode, stop, a.settle)
                rows.append(r)
                s = r["samples"]
                print(f"{mode} N={n}: n1 stores {r['stored_msgs']} msgs ({r['stored_bytes'] / 2**20:.1f} MB) in "
                      f"{r['streams_on_n1']} streams (published in {r['publish_s']:.0f} s); live {r['rss_before']:.1f} MB; restarted, ready in "
                      f"{r['ready_s']:.1f} s: RSS " + ", ".join(f"{v['rss']:.1f}" for v in s.values())
                      + f" MB at {', '.join(s)} s; heap {json.dumps({k: round(v, 1) for k, v in r['heap'].items()})}",
                      flush=True)
                if a.out:
                    a.out.mkdir(parents=True, exist_ok=True)
                    (a.out / "restart_rss.json").write_text(json.dumps(rows, indent=1))
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    table(rows, a.settle)


if __name__ == "__main__":
    main()
