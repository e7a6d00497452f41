"""What test.json stores about a run's guarantee: the client configs it gives and what is allowed.

The guarantees themselves are logquake.guarantees'.
"""

from __future__ import annotations

from typing import Any

from logquake.config import TestConfig
from logquake.guarantees import Guarantee, allowed_types, get_guarantee
from logquake.workloads.queue import producer_settings


def describe(cfg: TestConfig) -> dict[str, Any]:
    """What test.json stores and the run prints: the profile and the resulting client configs."""
    prof = get_guarantee(cfg.guarantee)
    if cfg.workload == "offsets":
        return _describe_offsets(cfg, prof)
    producer, consumer = _client_configs(cfg, prof)
    return {
        "guarantee": prof.name,
        "offset_commit": prof.commit,
        "allowed_anomalies": sorted(_checker_allowed(cfg)),
        "producer_config": _stable(producer),
        "consumer_config": _stable(consumer),
    }


def _describe_offsets(cfg: TestConfig, prof: Guarantee) -> dict[str, Any]:
    """The offsets workload has no producer and checks registers, not the queue's anomalies:
    only its consumers' config (one per group, committing and fetching offsets) applies."""
    from logquake.workloads import offsets

    group = offsets.offset_keys(cfg).group(0)
    if cfg.client == "kafka-python":
        consumer = offsets.kafka_python_consumer_config("<bootstrap>", group, offsets.OP_TIMEOUT)
    else:
        consumer = offsets.consumer_config("<bootstrap>", group)
    consumer["group.id" if "group.id" in consumer else "group_id"] = "lq-offsets-<n>"
    return {"guarantee": prof.name, "offset_commit": "the ops themselves (OffsetCommit, OffsetFetch)",
            "allowed_anomalies": [], "producer_config": {}, "consumer_config": _stable(consumer)}


def _client_configs(cfg: TestConfig, prof: Guarantee) -> tuple[dict[str, Any], dict[str, Any]]:
    """The producer and consumer configs the run's clients will be given."""
    if cfg.workload == "pipeline":
        from logquake.workloads import pipeline

        return (pipeline.worker_producer_config("<bootstrap>", prof, 0),
                pipeline.worker_consumer_config("<bootstrap>", prof))
    if cfg.client == "kafka-python":
        from logquake.workloads import kafkapython as lib
    else:
        from logquake.workloads import confluent as lib  # type: ignore[no-redef]
    neutral = producer_settings(cfg)
    return (lib.producer_config("<bootstrap>", txn=cfg.txn, producer=neutral),
            lib.consumer_config("<bootstrap>", txn=cfg.txn, sub_via=cfg.sub_via))


def _checker_allowed(cfg: TestConfig) -> frozenset[str]:
    """What the workload's checker will really tolerate: the guarantee's types plus the
    test's own (subscribe, write-write deps, ignore)."""
    if cfg.workload == "pipeline":
        from logquake.checker.pipeline import PIPELINE_TYPES

        return allowed_types(reported=PIPELINE_TYPES, guarantee=cfg.guarantee)
    from logquake.checker.options import QUEUE_TYPES

    return allowed_types(reported=QUEUE_TYPES, guarantee=cfg.guarantee, sub_via=cfg.sub_via,
                         ww_deps=cfg.ww_deps, ignore=cfg.ignore)


def _stable(conf: dict[str, Any]) -> dict[str, Any]:
    """Per-process ids (transactional.id, group.id) shown by their prefix only."""
    out = dict(conf)
    for key in ("transactional.id", "transactional_id", "group.id"):
        if isinstance(out.get(key), str) and out[key].count("-") >= 3:
            out[key] = out[key].rsplit("-", 2)[0] + "-<pid>-<n>"
    out.pop("bootstrap_servers", None)
    out.pop("bootstrap.servers", None)
    return out
