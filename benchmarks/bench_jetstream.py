"""logquake's broker against NATS JetStream, same machine, same run, same message size.

    .venv/bin/python benchmarks/bench_jetstream.py [--messages 100000] [--size 1024] [--json PATH]

Both sides: 3 server processes on 127.0.0.1, replication factor 3, one producer in one
Python process with many publishes in flight, every message acknowledged only once the
replicas have it.

- logquake: LocalCluster(n=3), topic with 1 partition and RF 3, confluent-kafka producer
  with acks=all (linger.ms=5, batches up to 1 MB, at most --inflight unacknowledged), once with the broker's default
  fsync=always and once with fsync=never.
- JetStream: Debian's nats-server, 3 clustered servers with JetStream, a stream with
  num_replicas=3 and file storage; nats-py `publish_async` with up to --inflight publishes
  awaiting their PubAck (sent by the stream leader after a quorum stored the message).
  nats-server 2.9's file store does not fsync each message, so the fsync=never broker row
  is the like-for-like one; the fsync=always row is what logquake runs by default.

Latency is per message, from handing it to the client to its acknowledgement arriving in
the callback, so it includes time queued in the client behind other in-flight messages.
Figures: messages/s, p50/p99 latency, and the broker/JetStream ratio of messages/s.
Skips JetStream (with the reason, and no ratio) when nats-server or nats-py is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Producer

from logquake.broker import LocalCluster

TARGET_RATE = 50_000
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def figures(n: int, seconds: float, lat: list[float]) -> dict:
    return {"rate": n / seconds, "p50_ms": percentile(lat, 0.50) * 1e3, "p99_ms": percentile(lat, 0.99) * 1e3,
            "acked": len(lat)}


# --- logquake ------------------------------------------------------------------------------------


def broker_run(base: Path, messages: int, size: int, fsync: str, inflight: int) -> dict:
    with LocalCluster(n=3, base_dir=base, broker_overrides={"fsync": fsync}) as c:
        c.wait_ready(timeout=120)
        c.create_topic("bench", replication_factor=3)
        p = Producer({"bootstrap.servers": c.bootstrap_servers, **PRODUCER})
        value = b"x" * size
        lat: list[float] = []
        errors: list[str] = []
        pending = [0]

        def send(record: bool) -> None:
            while pending[0] >= inflight:  # the same window as JetStream's publish_async_max_pending
                p.poll(0.001)
            pending[0] += 1
            t0 = time.perf_counter()

            def done(err, _msg) -> None:  # type: ignore[no-untyped-def]
                pending[0] -= 1
                if err is not None:
                    errors.append(str(err))
                elif record:
                    lat.append(time.perf_counter() - t0)

            while True:
                try:
                    p.produce("bench", value, on_delivery=done)
                    return
                except BufferError:
                    p.poll(0.005)

        for _ in range(min(1000, messages)):  # warm-up: connections, metadata, leader
            send(False)
        p.flush(120)
        t0 = time.perf_counter()
        for _ in range(messages):
            send(True)
            p.poll(0)
        p.flush(600)
        took = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"{len(errors)} delivery errors, e.g. {errors[0]}")
        return figures(messages, took, lat)


# --- JetStream -----------------------------------------------------------------------------------


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_listening(port: int, deadline: float) -> None:
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def nats_config(i: int, client: list[int], route: list[int], store: Path) -> str:
    routes = ", ".join(f"nats-route://127.0.0.1:{p}" for j, p in enumerate(route) if j != i)
    return (f'server_name: "n{i + 1}"\nlisten: "127.0.0.1:{client[i]}"\n'
            f'jetstream {{ store_dir: "{store}" }}\n'
            f'cluster {{ name: "bench", listen: "127.0.0.1:{route[i]}", routes: [{routes}] }}\n')


@contextmanager
def nats_cluster(base: Path, binary: str) -> Iterator[list[str]]:
    """Three clustered nats-server processes with JetStream; yields their client URLs."""
    ports = free_ports(6)
    client, route = ports[:3], ports[3:]
    procs = []
    try:
        for i in range(3):
            d = base / f"n{i + 1}"
            d.mkdir(parents=True)
            (d / "nats.conf").write_text(nats_config(i, client, route, d / "js"))
            log = open(d / "server.log", "wb")  # noqa: SIM115 - closed with the process below
            procs.append((subprocess.Popen([binary, "-c", str(d / "nats.conf")], stdout=log,
                                           stderr=subprocess.STDOUT), log))
        for p in client:
            wait_listening(p, time.monotonic() + 60)
        yield [f"nats://127.0.0.1:{p}" for p in client]
    finally:
        for proc, _log in procs:
            proc.terminate()
        for proc, log in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


async def _add_stream(js, deadline: float) -> None:  # type: ignore[no-untyped-def]
    from nats.js.api import StorageType, StreamConfig

    cfg = StreamConfig(name="BENCH", subjects=["bench"], num_replicas=3, storage=StorageType.FILE)
    while True:  # the cluster needs a meta leader before it can place a replicated stream
        try:
            await js.add_stream(cfg)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _jetstream(urls: list[str], messages: int, size: int, inflight: int) -> dict:
    import nats

    async def quiet(_e: Exception) -> None:  # reconnects while the cluster forms are expected
        return None

    nc = await nats.connect(servers=urls, connect_timeout=10, max_reconnect_attempts=60, error_cb=quiet)
    try:
        js = nc.jetstream(publish_async_max_pending=inflight)
        await _add_stream(js, time.monotonic() + 120)
        value = b"x" * size
        lat: list[float] = []
        errors: list[BaseException] = []

        async def send(record: bool) -> None:
            t0 = time.perf_counter()
            fut = await js.publish_async("bench", value)  # no wait_stall: wait_for would add a task per publish

            def done(f: asyncio.Future) -> None:
                if f.cancelled() or f.exception() is not None:
                    errors.append(f.exception() if not f.cancelled() else RuntimeError("cancelled"))
                elif record:
                    lat.append(time.perf_counter() - t0)

            fut.add_done_callback(done)

        for _ in range(min(1000, messages)):
            await send(False)
        await asyncio.wait_for(js.publish_async_completed(), 120)
        t0 = time.perf_counter()
        for _ in range(messages):
            await send(True)
        await asyncio.wait_for(js.publish_async_completed(), 600)
        took = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"{len(errors)} failed publishes, e.g. {errors[0]!r}")
        info = await js.stream_info("BENCH")
        if info.state.messages < messages:
            raise RuntimeError(f"stream holds {info.state.messages} messages, {messages} were acknowledged")
        return figures(messages, took, lat)
    finally:
        await nc.close()


def jetstream_missing() -> str | None:
    if shutil.which("nats-server") is None:
        return "nats-server not installed (apt-get install nats-server)"
    try:
        import nats  # noqa: F401
    except ImportError:
        return "nats-py not installed (pip install 'logquake[bench]')"
    return None


def jetstream_run(base: Path, messages: int, size: int, inflight: int) -> dict:
    with nats_cluster(base, shutil.which("nats-server") or "nats-server") as urls:
        return asyncio.run(_jetstream(urls, messages, size, inflight))


# --- table ---------------------------------------------------------------------------------------


def row(metric: str, value: float | None, unit: str, *, reference: str | None = None,
        ratio: float | None = None, target: str | None = None, met: bool | None = None) -> dict:
    return {"benchmark": "jetstream", "metric": metric, "value": value, "unit": unit, "reference": reference,
            "ratio": ratio, "target": target, "met": met}


def rows_for(results: dict[str, dict], skipped: str | None) -> list[dict]:
    js = results.get("jetstream")
    out = []
    for name, r in results.items():
        label = "JetStream R3 file" if name == "jetstream" else f"broker RF3 acks=all {name}"
        ratio = r["rate"] / js["rate"] if js and name != "jetstream" else None
        target = None if name == "jetstream" else f">= {TARGET_RATE:,} and >= 1.0x JetStream"
        met = None if ratio is None else bool(r["rate"] >= TARGET_RATE and ratio >= 1.0)
        out.append(row(f"{label}: msg/s", round(r["rate"]), "msg/s",
                       reference=(f"JetStream {js['rate']:,.0f} msg/s" if ratio is not None else skipped),
                       ratio=ratio, target=target, met=met))
        for q in ("p50", "p99"):
            ref = js[f"{q}_ms"] if js and name != "jetstream" else None
            out.append(row(f"{label}: {q} latency", round(r[f"{q}_ms"], 2), "ms",
                           reference=f"JetStream {ref:.2f} ms" if ref else None,
                           ratio=r[f"{q}_ms"] / ref if ref else None))
    if skipped:
        out.append(row("JetStream", None, "", reference=f"skipped: {skipped}"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--inflight", type=int, default=4000, help="publishes awaiting their ack, both sides")
    ap.add_argument("--json", type=Path, help="also write the figures as table rows to this file")
    a = ap.parse_args()
    results: dict[str, dict] = {}
    skipped = jetstream_missing()
    with tempfile.TemporaryDirectory(prefix="bench-jetstream-") as tmp:
        base = Path(tmp)
        for fsync in ("always", "never"):
            results[f"fsync={fsync}"] = broker_run(base / f"broker-{fsync}", a.messages, a.size, fsync,
                                                       a.inflight)
        if skipped is None:
            results["jetstream"] = jetstream_run(base / "nats", a.messages, a.size, a.inflight)
    for name, r in results.items():
        print(f"{name:14} {r['rate']:10,.0f} msg/s   p50 {r['p50_ms']:8.2f} ms   p99 {r['p99_ms']:8.2f} ms")
    if skipped:
        print(f"JetStream skipped: {skipped}")
    else:
        for name in ("fsync=always", "fsync=never"):
            print(f"broker {name} / JetStream: {results[name]['rate'] / results['jetstream']['rate']:.2f}x msg/s")
    if a.json:
        a.json.write_text(json.dumps(rows_for(results, skipped), indent=1))


if __name__ == "__main__":
    main()
