"""Broker figures: time until a fresh 3-node cluster accepts writes; acks=all throughput.

    .venv/bin/python benchmarks/bench_broker.py [--messages 200000] [--size 1024] [--fsync always]

Figures (DESIGN: reported, never asserted):
- ready: seconds from spawning 3 `logquake broker` processes to the first acks=all write
  acknowledged (topic created through CreateTopics first); reference in the same run: the
  time one bare Python interpreter takes to import the broker (process start-up floor).
- latency (low load): one acks=all write in flight at a time, confluent-kafka with
  linger.ms=0: p50/p99 from produce() to the delivery report, and from produce() to a
  waiting consumer's receipt (its long-poll Fetch woken by the high watermark moving); the
  same write as a bare Produce request on a socket (the broker's own share); reference in
  the same run: a TCP ping-pong between two Python processes on loopback (one process
  hop each way; an acks=all write needs client->leader->follower->leader->client).
- throughput: 1 KiB messages, acks=all, replication factor 3, one confluent-kafka producer
  (linger.ms=20, batch.size=1 MB); references in the same run: the same producer against
  a 1-node cluster with acks=1 (the cost of replication and commit is the ratio), and the
  disk's own fdatasync'ed write rate: with all 3 replicas on one disk and fsync=always, the
  ceiling is that rate / 3, whatever the broker does.
- catch-up read: the same messages consumed from offset 0 by one confluent-kafka consumer
  once written, nearly all of them older than the leader's payload window (read back from
  its segments through the sparse indexes); reference in the same run: the write rate.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

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


def throughput(base: Path, *, n_nodes: int, acks: str, messages: int, size: int, overrides: dict,
               read_back: bool = False) -> tuple[float, float | None]:
    """Messages/s written, and with `read_back` then read from offset 0 (else None)."""
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
        return messages / dt, catch_up(c.bootstrap_servers, messages + 1000) if read_back else None


def catch_up(bootstrap: str, n: int) -> float:
    """Messages/s of one consumer reading `n` messages of topic bench from offset 0."""
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "catch-up", "enable.auto.commit": False,
                     "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 1_048_576})
    cons.assign([TopicPartition("bench", 0, 0)])
    got = 0
    t0 = time.monotonic()
    deadline = t0 + 300
    while got < n and time.monotonic() < deadline:
        got += sum(m.error() is None for m in cons.consume(10_000, 1.0))
    dt = time.monotonic() - t0
    cons.close()
    if got < n:
        print(f"  catch-up read got {got} of {n} messages")
    return got / dt


_ECHO = """
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (b := c.recv(64)):
    c.sendall(b)
"""


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def pingpong_rtt(n: int = 300) -> list[float]:
    """Round trips of 16 bytes to an echo process: this machine's cost of two process hops now."""
    proc = subprocess.Popen([sys.executable, "-c", _ECHO], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())  # type: ignore[union-attr]
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                s.sendall(b"x" * 16)
                got = 0
                while got < 16:
                    got += len(s.recv(64))
                out.append(time.perf_counter() - t0)
                time.sleep(0.002)
            return out
    finally:
        proc.kill()
        proc.wait()


def raw_produce_rtt(host: str, port: int, n: int) -> list[float]:
    """A bare acks=all Produce (v7, one 1-record batch) per round trip on one connection."""
    from kafka.protocol.producer import ProduceRequest
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=None, value=b"x" * 100, headers=[])
    records = bytes(b.build())
    R = ProduceRequest[7]
    out = []
    with socket.create_connection((host, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(n):
            req = R(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[R.TopicProduceData(
                name="lat", partition_data=[R.TopicProduceData.PartitionProduceData(index=0, records=records)])])
            req.with_header(correlation_id=i, client_id="bench")
            data = bytes(req.encode(header=True, framed=True))
            t0 = time.perf_counter()
            s.sendall(data)
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
                buf += s.recv(65536)
            out.append(time.perf_counter() - t0)
            time.sleep(0.005)
    return out


def latency(base: Path, *, n: int, overrides: dict) -> dict[str, list[float]]:
    """Single in-flight acks=all writes on a 3-node cluster: see the module docstring."""
    with LocalCluster(n=3, base_dir=base, broker_overrides=overrides) as c:
        c.wait_ready(timeout=60)
        c.create_topic("lat")
        p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 0})
        cons = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "lat", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 500})
        cons.assign([TopicPartition("lat", 0, 0)])
        ack: list[float] = []
        e2e: list[float] = []
        for i in range(n + 10):  # the first 10 warm up connections and metadata
            acked: list[float] = []
            t0 = time.perf_counter()
            p.produce("lat", b"x" * 100, on_delivery=lambda e, m, a=acked: a.append(time.perf_counter()))
            while not acked:
                p.poll(0.0002)
            while True:
                m = cons.poll(5)
                if m is not None and m.error() is None:
                    break
            t1 = time.perf_counter()
            if i >= 10:
                ack.append(acked[0] - t0)
                e2e.append(t1 - t0)
            time.sleep(0.005)
        cons.close()
        raw = raw_produce_rtt(*c.address(c.leader("lat")), n)
        return {"ack": ack, "e2e": e2e, "raw": raw}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--fsync", default="always")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--latency-writes", type=int, default=300)
    ap.add_argument("--latency-only", action="store_true")
    args = ap.parse_args()
    overrides = {"fsync": args.fsync}
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        tmp_p = Path(tmp)
        lat = latency(tmp_p / "lat", n=args.latency_writes, overrides=overrides)
        rtt = pingpong_rtt()
        print(f"latency, one acks=all write in flight (fsync {args.fsync}, {args.latency_writes} writes): "
              f"produce->ack p50 {pct(lat['ack'], .5):.1f} p99 {pct(lat['ack'], .99):.1f} ms; "
              f"produce->consumer p50 {pct(lat['e2e'], .5):.1f} p99 {pct(lat['e2e'], .99):.1f} ms; "
              f"bare Produce p50 {pct(lat['raw'], .5):.1f} p99 {pct(lat['raw'], .99):.1f} ms (target p50 < 5 ms)")
        print(f"reference: loopback ping-pong between two processes p50 {pct(rtt, .5):.2f} p99 {pct(rtt, .99):.2f} ms; "
              f"bare Produce p50 is {pct(lat['raw'], .5) / pct(rtt, .5):.1f}x of it")
        if args.latency_only:
            return
        floor = import_floor()
        ready = time_to_ready(tmp_p / "ready", overrides)
        print(f"ready: {ready:.2f} s to first acks=all write (target <= 3 s); "
              f"import floor {floor:.2f} s (ratio {ready / floor:.1f}x)")
        rate, read = throughput(tmp_p / "rf3", n_nodes=3, acks="all", messages=args.messages, size=args.size,
                                overrides=overrides, read_back=True)
        print(f"throughput: {rate:,.0f} msg/s ({rate * args.size / 2**20:.1f} MiB/s), {args.size} B, acks=all, "
              f"RF 3, fsync {args.fsync} (target >= 50,000)")
        print(f"catch-up read from offset 0: {read:,.0f} msg/s ({read / rate:.2f}x of the write rate)")
        if args.fsync != "never":
            disk = disk_rate(tmp_p / "disk")
            ceiling = disk * 2**20 / 3 / args.size
            print(f"disk: {disk:.0f} MiB/s with fdatasync -> ceiling {ceiling:,.0f} msg/s for 3 replicas on this disk; "
                  f"broker reaches {rate / ceiling:.2f}x of it")
            never, _ = throughput(tmp_p / "rf3never", n_nodes=3, acks="all", messages=args.messages, size=args.size,
                               overrides={**overrides, "fsync": "never"})
            print(f"throughput with fsync never (CPU-bound): {never:,.0f} msg/s ({never / rate:.2f}x of fsync {args.fsync})")
        if not args.skip_reference:
            ref, _ = throughput(tmp_p / "rf1", n_nodes=1, acks="1", messages=args.messages, size=args.size,
                             overrides=overrides)
            print(f"reference: {ref:,.0f} msg/s on 1 node, acks=1; RF3/acks=all is {rate / ref:.2f}x of it")


if __name__ == "__main__":
    main()
