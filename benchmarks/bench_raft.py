"""Raft replication cost per Kafka message, in process (no sockets, no disk), against references.

Three RaftNodes exchange real `encode_messages`/`decode_messages` frames the way the broker's shell
does (one frame per destination per round), while the leader proposes entries that each carry a
batch of `--batch` 1 KiB records. Printed: records/s through Raft to commit on the leader, and
the same bytes through two references measured in the same run: a bare `bytes` copy (what moving
the data costs at least) and the codec alone (encode + decode of the same append frames). The
ratios, not the absolute numbers, are what carry over to another machine. The same round trip
with a 64 KiB payload window (each node persists to a list and reads older entries back from
it) shows what keeping only a window costs the hot path. Also: SegmentLog
append rates with fsync never vs always (set BENCH_DIR to measure a particular filesystem),
and how many random simulation schedules run per second.

    .venv/bin/python benchmarks/bench_raft.py [--records 200000] [--batch 16] [--sim 200]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections import defaultdict

from logquake.broker.raft import (
    Entry,
    Message,
    MsgKind,
    RaftConfig,
    RaftNode,
    decode_messages,
    encode_messages,
)
from logquake.broker.raftsim import run_many
from logquake.broker.storage import SegmentLog

RECORD = 1024


def raft_round_trip(records: int, batch: int, per_round: int, window: int | None = None) -> tuple[float, int]:
    """Seconds to commit `records` on a 3-node group; also the number of network frames.
    With `window`, each node keeps that many payload bytes and reads older ones back."""
    ids = (1, 2, 3)
    disks: dict[int, list[Entry]] = {i: [] for i in ids}

    def make(i: int) -> RaftNode:
        if window is None:
            return RaftNode(group="topic-0", node_id=i, voters=ids, rng=random.Random(i))
        return RaftNode(group="topic-0", node_id=i, voters=ids, rng=random.Random(i),
                        config=RaftConfig(log_window_bytes=window),
                        reader=lambda lo, hi, _cap, d=disks[i]: d[lo - 1 : hi - 1])

    nodes = {i: make(i) for i in ids}
    nodes[1].campaign()
    payload = bytes(RECORD * batch)
    frames = 0

    def pump() -> None:
        nonlocal frames
        out: dict[int, list[Message]] = defaultdict(list)
        for r in nodes.values():
            if r.has_ready():
                rd = r.ready()
                for m in rd.messages:
                    out[m.to].append(m)
                if rd.entries:
                    d = disks[r.id]
                    del d[rd.entries[0].index - 1 :]
                    d.extend(rd.entries)
                r.advance(rd)
        for to, msgs in out.items():
            frames += 1
            for m in decode_messages(encode_messages(msgs)):
                nodes[to].step(m)

    for _ in range(10):
        pump()
    lead = nodes[1]
    target = records // batch
    start = time.perf_counter()
    proposed = 0
    while lead.commit_index < target + 1:
        for _ in range(per_round):
            if proposed < target:
                lead.propose(payload)
                proposed += 1
        pump()
    return time.perf_counter() - start, frames


def copy_reference(records: int, batch: int) -> float:
    payload = bytes(RECORD * batch)
    start = time.perf_counter()
    for _ in range(records // batch):
        b"".join((payload, b"x"))  # one copy of the data, as the codec's join makes
    return time.perf_counter() - start


def codec_reference(records: int, batch: int, per_round: int) -> float:
    payload = bytes(RECORD * batch)
    msg = Message(
        MsgKind.APPEND, "topic-0", 1, 2, 1, 1, 1, tuple(Entry(1, 2 + k, payload) for k in range(per_round)), 1
    )
    start = time.perf_counter()
    for _ in range(records // batch // per_round):
        for _ in range(2):  # two followers
            decode_messages(encode_messages([msg]))
    return time.perf_counter() - start


def storage_rate(records: int, batch: int, policy: str) -> float:
    """Records/s appended to a SegmentLog, one entry (`batch` records) per append call."""
    payload = bytes(RECORD * batch)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        with SegmentLog(d, fsync=policy) as s:
            s.load()
            start = time.perf_counter()
            for i in range(1, records // batch + 1):
                s.append([Entry(1, i, payload)])
            s.sync()
            took = time.perf_counter() - start
    return records / took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=16, help="1 KiB records per Raft entry")
    ap.add_argument("--per-round", type=int, default=8, help="proposals between two Ready rounds")
    ap.add_argument("--sim", type=int, default=200, help="random simulation schedules to time")
    a = ap.parse_args()
    t_raft, frames = raft_round_trip(a.records, a.batch, a.per_round)
    t_copy = copy_reference(a.records, a.batch)
    t_codec = codec_reference(a.records, a.batch, a.per_round)
    rate = a.records / t_raft
    print(f"raft 3 nodes, {a.batch} x 1 KiB per entry: {rate:,.0f} records/s ({frames} frames)")
    print(
        f"  reference bytes copy:   {a.records / t_copy:,.0f} records/s  (raft costs {t_raft / t_copy:.1f}x)"
    )
    print(
        f"  reference codec alone:  {a.records / t_codec:,.0f} records/s  (raft costs {t_raft / t_codec:.1f}x)"
    )
    t_win = raft_round_trip(a.records, a.batch, a.per_round, window=64 << 10)[0]
    print(f"  with a 64 KiB window:   {a.records / t_win:,.0f} records/s  ({t_win / t_raft:.2f}x the time)")
    small = raft_round_trip(a.records // a.batch, 1, a.per_round)[0]
    print(f"raft 3 nodes, 1 record per entry: {a.records // a.batch / small:,.0f} entries/s")
    small_win = raft_round_trip(a.records // a.batch, 1, a.per_round, window=64 << 10)[0]
    print(f"  with a 64 KiB window:   {a.records // a.batch / small_win:,.0f} entries/s  "
          f"({small_win / small:.2f}x the time)")
    never = storage_rate(a.records // 4, a.batch, "never")
    always = storage_rate(a.records // 40, a.batch, "always")
    print(
        f"SegmentLog append, {a.batch} records per entry: fsync=never {never:,.0f} records/s, "
        f"fsync=always (one fsync per entry) {always:,.0f} records/s ({never / always:.0f}x slower)"
    )
    start = time.perf_counter()
    results = run_many(range(a.sim))
    took = time.perf_counter() - start
    bad = sum(1 for r in results if r.violations)
    print(
        f"simulation: {a.sim} random schedules in {took:.1f}s ({a.sim / took:,.0f}/s), {bad} with violations"
    )


if __name__ == "__main__":
    main()
