"""The queue workload assembled from a TestConfig: its generator and its clients."""

from __future__ import annotations

from typing import Any

from logquake.config import TestConfig
from logquake.systems.base import get_system
from logquake.workloads.client import Client, KeyMap
from logquake.workloads.generator import QueueGenerator


def producer_settings(cfg: TestConfig) -> dict[str, Any]:
    """The library-neutral producer settings of a test (`producer:` in the config)."""
    return dict(getattr(cfg, "producer", None) or {})


def make_generator(cfg: TestConfig, *, first_key: int = 0) -> QueueGenerator:
    assert cfg.seed is not None, "resolve the seed first (TestConfig.with_seed)"
    system = get_system(cfg.system)
    # A restarted producer resends what it was unsure of only where the system's dedup
    # outlives a producer session, and only an idempotent one: at-least-once never resends,
    # save with --txn, which makes every producer idempotent (it resends a batch whole).
    resend = system.dedup_window is not None and bool(producer_settings(cfg).get("idempotence"))
    return QueueGenerator(seed=cfg.seed, txn=cfg.txn, sub_via=cfg.sub_via, first_key=first_key,
                          active_keys=cfg.key_count, max_writes_per_key=cfg.max_writes_per_key,
                          one_key_txns=system.txn_writes_one_key, resend=resend)


def make_client(cfg: TestConfig, **kw: Any) -> Client:
    """A fresh, unopened client of the configured library."""
    opts: dict[str, Any] = {
        "keymap": KeyMap(partitions=cfg.partitions),
        "txn": cfg.txn,
        "sub_via": cfg.sub_via,
        "producer": producer_settings(cfg),
        **kw,
    }
    if cfg.client == "nats-py":
        from logquake.systems.jetstream import JetStreamClient
        from logquake.systems.jetstream.system import replicas, settings

        return JetStreamClient(replicas=replicas(cfg), duplicate_window=settings(cfg).duplicate_window, **opts)
    if cfg.client == "kafka-python":
        from logquake.workloads.kafkapython import KafkaPythonClient

        return KafkaPythonClient(**opts)
    from logquake.workloads.confluent import ConfluentClient

    return ConfluentClient(**opts)
