"""NATS JetStream as a `System` (docs/architecture.md): nats-server on every node, nats-py as its client.

What a test may not ask of it is refused at config load, by the record's fields: one
partition per key (a key is a stream of one subject), the queue, pipeline and kv workloads, no clock
faults: nats-server is a statically linked Go binary, so libfaketime's LD_PRELOAD never
loads into it and its clock reads bypass libc. Transactions are atomic batch publishes
(batch.py), which the server offers from 2.12 on: a test whose workload uses them (the
queue's `txn`, or a guarantee that brings them; not the pipeline, whose exactly-once is a
Msg-Id and a double ack) is refused when the binary it would run is older. The drain's
reads from each node need 2.11+ (message tracing): on an older binary they are skipped. A batch
only publishes, to one stream, so the workload's transactions here are sends to one key
(`System.txn_writes_one_key`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from logquake.systems.base import NODE_READS, NodeSetup, NodeSpec, System
from logquake.systems.jetstream import batch
from logquake.systems.jetstream.client import node_bootstraps, node_reads_refusal
from logquake.systems.jetstream.server import (
    CLIENT_PORT,
    CLUSTER_PORT,
    DEFAULT_DUPLICATE_WINDOW_S,
    MONITOR_PORT,
    NO_FAKETIME,
    JetStreamLifecycle,
    JetStreamSettings,
    client_urls,
    duration_seconds,
    find_binary,
    monitor_json,
    node_not_ready,
    parse_settings,
    server_version,
)

if TYPE_CHECKING:
    from logquake.config import TestConfig

__all__ = ["DATA_FILES", "JETSTREAM", "settings"]

# Each stream's message blocks: store_dir/jetstream/<account>/streams/<stream>/msgs/<n>.blk,
# what a reader of the stream is served from. Beside them lie index.db, meta.inf and meta.sum
# (the stream's state and config), and under jetstream/$SYS/_js_/ every Raft group's own
# log and peer files: a torn tail there is a different fault from a torn write of messages.
DATA_FILES = ("jetstream/*/streams/*/msgs/*.blk",)


def settings(cfg: TestConfig) -> JetStreamSettings:
    """The test's `jetstream:` mapping, checked (ConfigError naming `jetstream.<key>`)."""
    return parse_settings(cfg.jetstream or None, nodes=cfg.nodes)


def replicas(cfg: TestConfig) -> int:
    """Each stream's replicas: `jetstream.replicas`, else the test's replication_factor."""
    return settings(cfg).replicas or min(cfg.replication_factor, cfg.nodes)


def _make_lifecycle(setup: NodeSetup) -> JetStreamLifecycle:
    return JetStreamLifecycle(hosts=setup.hosts, specs=setup.specs, settings=settings(setup.cfg),
                              python=setup.python, faketime=setup.needs.faketime, lazyfs=setup.needs.lazyfs)


def _bootstrap(specs: Sequence[NodeSpec], cfg: TestConfig) -> str:
    return client_urls(specs)


def _not_ready(bootstrap: str, specs: Sequence[NodeSpec]) -> list[str]:
    return [s.name for s in specs if node_not_ready(s, specs) is not None]


def _leaders(bootstrap: str, names: Mapping[int, str], timeout: float) -> dict[str, str]:
    """{"<stream>/0": node} from the servers' /jsz; {} where none answers in time.

    Each server reports the streams it holds a replica of, with their Raft group's leader
    (named by server name, which is the node's name).
    """
    known, out = set(names.values()), {}
    deadline = time.monotonic() + timeout
    for url in bootstrap.split(","):
        if time.monotonic() > deadline:
            break
        host = urlsplit(url).hostname
        with contextlib.suppress(OSError, ValueError):
            jsz = monitor_json(f"http://{host}:{MONITOR_PORT}/jsz?accounts=true&streams=true")
            for acc in jsz.get("account_details") or []:
                for st in acc.get("stream_detail") or []:
                    leader = (st.get("cluster") or {}).get("leader")
                    if leader in known:
                        out[f"{st['name']}/0"] = leader
    return out


def _check_config(cfg: TestConfig) -> None:
    settings(cfg)


def _version(cfg: TestConfig) -> tuple[str, str]:
    """(binary, its version) of the nats-server this test runs (uploaded to every node):
    what it can give depends on it."""
    binary = find_binary(settings(cfg).binary)
    return binary, server_version(binary)


def _unavailable(cfg: TestConfig, feature: str) -> str | None:
    """Why this test's server cannot give `feature` (module docstring), asked only of what
    the test uses: transactions are atomic batch publishes; the node reads need message
    tracing (client.py)."""
    if feature == NODE_READS:
        return node_reads_refusal(_version(cfg)[1])
    if feature != "transactions":
        return None
    return transactions_refusal(*_version(cfg))


def transactions_refusal(binary: str, version: str) -> str | None:
    """Why nats-server `version` cannot run JetStream transactions (None: it can). A
    transactional producer is idempotent (guarantees.py): every batch carries Msg-Ids."""
    return batch.server_refusal(version, msg_ids=True, server=f"nats-server {version} ({binary})")


def _dedup_window(cfg: TestConfig) -> float:
    """Seconds a stream of this test remembers a Nats-Msg-Id (`jetstream.duplicate_window`)."""
    window = settings(cfg).duplicate_window
    return DEFAULT_DUPLICATE_WINDOW_S if window is None else duration_seconds(window)


def _describe(cfg: TestConfig) -> dict[str, Any]:
    return {**settings(cfg).describe(), "stream_replicas": replicas(cfg)}


JETSTREAM = System(
    name="jetstream",
    description="NATS JetStream: nats-server with routes and file storage on every node (Raft per stream)",
    features=frozenset({"dedup", "consumer-groups", "transactions"}),
    txn_writes_one_key=True,
    dedup_window=_dedup_window,
    clients=("nats-py",),
    workloads=("queue", "pipeline", "kv"),
    make_lifecycle=_make_lifecycle,
    bootstrap=_bootstrap,
    not_ready=_not_ready,
    leaders=_leaders,
    client_port=CLIENT_PORT,
    peer_port=CLUSTER_PORT,
    max_partitions=1,
    unmet_needs={"faketime": NO_FAKETIME},
    settings_key="jetstream",
    check_config=_check_config,
    unavailable=_unavailable,
    describe=_describe,
    data_files=DATA_FILES,
    shared_subscribe=True,
    node_reads=node_bootstraps,
)
