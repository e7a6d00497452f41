"""Lab and nemesis speed: cluster bring-up and partition latency, against references in the same run.

    .venv/bin/python benchmarks/bench_lab.py [--nodes 5] [--rounds 10] [--no-broker]

Figures (medians over rounds):
  lab_up_s           5 network namespaces + bridge + veths, no processes
  started_s          open_cluster(5 nodes) returned: lab built, node.yaml written, brokers spawned
  listening_s        every broker accepts TCP on its kafka port
  cluster_up_s       the first produce with acks=all is acknowledged (topic auto-created, leader elected)
  partition_s        Net.drop(majority grudge) on every node, i.e. until the rules are in place
  heal_s             Net.heal() on every node
References (same machine, same moment):
  python_start_s     starting 5 `python -c pass` processes in parallel
  broker_cli_start_s 5 parallel imports of logquake.cli + logquake.broker.process: paid by every broker start
  nsenter_s          one `nsenter ... true` into a node (one round of any fault on one node)
Targets (run_all's target column): cluster_up_s < 5 s, partition_s < 200 ms.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from logquake.cluster import create_lab, lab_hosts, open_cluster, stop_lab
from logquake.config import TestConfig
from logquake.nemesis import Net, make_grudge


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def python_start(n: int, args: tuple[str, ...] = ("-c", "pass")) -> float:
    def one(_: int) -> None:
        subprocess.run([sys.executable, *args], check=True, capture_output=True)

    with ThreadPoolExecutor(n) as pool:
        return timed(lambda: list(pool.map(one, range(n))))


def lab_figures(nodes: int, rounds: int) -> dict[str, float]:
    names = [f"n{i}" for i in range(1, nodes + 1)]
    ups, parts, heals, enters = [], [], [], []
    for r in range(rounds):
        t = time.perf_counter()
        state = create_lab(names, Path(tempfile.mkdtemp()))
        ups.append(time.perf_counter() - t)
        try:
            hosts = lab_hosts(state)
            net = Net(hosts, state.addresses, iptables=state.iptables)
            net.heal()  # warm: the first iptables use in a namespace loads its tables
            t = time.perf_counter()
            hosts["n1"].exec(["true"])
            enters.append(time.perf_counter() - t)
            grudge = make_grudge("majority", names, random.Random(r))
            t = time.perf_counter()
            net.drop(grudge)
            parts.append(time.perf_counter() - t)
            t = time.perf_counter()
            net.heal()
            heals.append(time.perf_counter() - t)
        finally:
            stop_lab(state)
    return {"lab_up_s": statistics.median(ups), "partition_s": statistics.median(parts),
            "heal_s": statistics.median(heals), "nsenter_s": statistics.median(enters)}


def _ack(acked: list[bool], err: object, _msg: object) -> None:
    acked.append(err is None)


def cluster_up(nodes: int) -> dict[str, float]:
    """Seconds from nothing to: lab built, every broker listening, the first acks=all write acknowledged."""
    from confluent_kafka import Producer

    from logquake.systems.base import port_open

    t0 = time.perf_counter()
    with open_cluster(TestConfig(nodes=nodes, replication_factor=3), Path(tempfile.mkdtemp())) as c:
        started = time.perf_counter() - t0
        while not all(port_open(a, 9092) for a in c.addresses.values()):
            if time.perf_counter() - t0 > 120:
                raise RuntimeError("brokers not listening within 120 s")
            time.sleep(0.01)
        listening = time.perf_counter() - t0
        # Short backoffs: the figure should measure the cluster, not librdkafka's retry pacing.
        p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "log_level": 0,
                      "message.timeout.ms": 120000, "retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
                      "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100,
                      "topic.metadata.refresh.interval.ms": 100})
        acked: list[bool] = []
        p.produce("bench", b"x", on_delivery=partial(_ack, acked))
        p.flush(120)
        if not (acked and acked[0]):
            raise RuntimeError("no acknowledged write within 120 s")
        return {"started_s": started, "listening_s": listening, "cluster_up_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--no-broker", action="store_true")
    args = ap.parse_args()
    figures = lab_figures(args.nodes, args.rounds)
    figures["python_start_s"] = statistics.median(python_start(args.nodes) for _ in range(3))
    figures["broker_cli_start_s"] = statistics.median(
        python_start(args.nodes, ("-c", "import logquake.cli, logquake.broker.process")) for _ in range(3))
    if not args.no_broker:
        try:
            runs = [cluster_up(args.nodes) for _ in range(3)]
            for key in runs[0]:
                figures[key] = statistics.median(r[key] for r in runs)
        except Exception as e:  # report, never hide, a broker that cannot take writes
            figures["cluster_up_error"] = str(e)
    figures["partition_per_nsenter"] = figures["partition_s"] / figures["nsenter_s"]
    if "cluster_up_s" in figures:
        figures["cluster_up_per_python_start"] = figures["cluster_up_s"] / figures["python_start_s"]
        figures["listening_per_broker_cli_start"] = figures["listening_s"] / figures["broker_cli_start_s"]
    for k, v in figures.items():
        print(f"{k:28} {v:.4f}" if isinstance(v, float) else f"{k:28} {v}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
