"""Broker figures: time until a fresh 3-node cluster accepts writes; acks=all throughput.

    .venv/bin/python benchmarks/bench_broker.py [--messages 200000] [--size 1024] [--fsync always]

Figures (DESIGN: reported, never asserted):
- ready: seconds from spawning 3 `logquake broker` processes to the first acks=all write
  acknowledged (topic created through CreateTopics first); reference in the same run: the
  time one bare Python interpreter takes to import the broker (process start-up floor).
- throughput: 1 KiB messages, acks=all, replication factor 3, one confluent-kafka producer
  (linger.ms=20, batch.size=1 MB); references in the same run: the same producer against
  a 1-node cluster with acks=1 (the cost of replication and commit is the ratio), and the
  disk's own fdatasync'ed write rate: with all 3 replicas on one disk and fsync=always, the
  ceiling is that rate / 3, whatever the broker does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from logquake.broker import LocalCluster

PRODUCER = {"linger.ms": 20, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576, "compression.type": "none"}


def import_floor() -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "from logquake.broker.process import _light_kafka_import as f; f(); import logquake.broker.node"], check=True)
    return time.monotonic() - t0


def disk_rate(base: Path, mib: int = 256, block_mib: int = 4) -> float:
    """MiB/s of `block_mib` writes each made durable with fdatasync, as a broker's Ready batches are."""
    base.mkdir(parents=True, exist_ok=True)
    path = base / "disk.bin"
    block = b"x" * (block_mib << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t0 = time.monotonic()
    try:
        for _ in range(mib // block_mib):
            os.write(fd, block)
            os.fdatasync(fd)
    finally:
        os.close(fd)
        path.unlink()
    return mib / (time.monotonic() - t0)


def time_to_ready(base: Path, overrides: dict) -> float:
    t0 = time.monotonic()
    with LocalCluster(n=3, base_dir=base, broker_overrides=overrides) as c:
        c.wait_ready(timeout=60)
        c.create_topic("ready")
        p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
        ok: list[bool] = []
        while not ok:
            p.produce("ready", b"x", on_delivery=lambda e, m: ok.append(e is None))
            p.flush(10)
        return time.monotonic() - t0


def throughput(base: Path, *, n_nodes: int, acks: str, messages: int, size: int, overrides: dict) -> float:
    with LocalCluster(n=n_nodes, base_dir=base, broker_overrides=overrides) as c:
        c.wait_ready(timeout=60)
        c.create_topic("bench", replication_factor=n_nodes)
        p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": acks, **PRODUCER})
        value = b"x" * size
        errors: list[str] = []

        def done(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))

        # Warm-up (connections, metadata), then the timed run.
        for _ in range(1000):
            p.produce("bench", value, on_delivery=done)
        p.flush(60)
        t0 = time.monotonic()
        for _ in range(messages):
            while True:
                try:
                    p.produce("bench", value, on_delivery=done)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        p.flush(300)
        dt = time.monotonic() - t0
        if errors:
            print(f"  {len(errors)} delivery errors, e.g. {errors[0]}")
        return messages / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--fsync", default="always")
    ap.add_argument("--skip-reference", action="store_true")
    args = ap.parse_args()
    overrides = {"fsync": args.fsync}
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        tmp_p = Path(tmp)
        floor = import_floor()
        ready = time_to_ready(tmp_p / "ready", overrides)
        print(f"ready: {ready:.2f} s to first acks=all write (target <= 3 s); "
              f"import floor {floor:.2f} s (ratio {ready / floor:.1f}x)")
        rate = throughput(tmp_p / "rf3", n_nodes=3, acks="all", messages=args.messages, size=args.size,
                          overrides=overrides)
        print(f"throughput: {rate:,.0f} msg/s ({rate * args.size / 2**20:.1f} MiB/s), {args.size} B, acks=all, "
              f"RF 3, fsync {args.fsync} (target >= 50,000)")
        if args.fsync != "never":
            disk = disk_rate(tmp_p / "disk")
            ceiling = disk * 2**20 / 3 / args.size
            print(f"disk: {disk:.0f} MiB/s with fdatasync -> ceiling {ceiling:,.0f} msg/s for 3 replicas on this disk; "
                  f"broker reaches {rate / ceiling:.2f}x of it")
            never = throughput(tmp_p / "rf3never", n_nodes=3, acks="all", messages=args.messages, size=args.size,
                               overrides={**overrides, "fsync": "never"})
            print(f"throughput with fsync never (CPU-bound): {never:,.0f} msg/s ({never / rate:.2f}x of fsync {args.fsync})")
        if not args.skip_reference:
            ref = throughput(tmp_p / "rf1", n_nodes=1, acks="1", messages=args.messages, size=args.size,
                             overrides=overrides)
            print(f"reference: {ref:,.0f} msg/s on 1 node, acks=1; RF3/acks=all is {rate / ref:.2f}x of it")


if __name__ == "__main__":
    main()
