"""Delivery guarantee profiles (DESIGN.md §6), as data.

A profile fixes both sides of a promise: the client settings that are meant to give it
(producer acks/retries/idempotence/transactions, consumer isolation, when offsets are
committed relative to processing) and which anomaly types the checker calls bad, so that a
run answers "does my cluster, with these settings, give this guarantee?". Settings are
library-neutral; each adapter's config function maps them to its own keys. A user's own
`producer:` settings override the profile's, so their real client settings can be checked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from logquake.config import TestConfig
from logquake.errors import ConfigError
from logquake.workloads.queue import producer_settings

# Allowed in every profile: Kafka does not isolate writes (Jepsen's allowed set).
BASE_ALLOWED = frozenset({"int-send-skip", "G0", "G0-process", "G0-realtime"})


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One delivery guarantee: client settings plus the anomaly types it tolerates.

    Attributes:
        acks: producer acks ("0", "1" or "all").
        retries: producer retries (None: the library's default, effectively unbounded).
        idempotence: enable.idempotence.
        transactions: transactional producer and transaction ops.
        isolation: consumer isolation.level.
        commit: when consumer offsets are committed: "before" processing, "after" it,
            or "in-transaction" (sendOffsetsToTransaction).
        allowed: anomaly types reported but not bad.
    """

    name: str
    acks: str
    retries: int | None
    idempotence: bool
    transactions: bool
    isolation: str
    commit: str
    allowed: frozenset[str]

    def producer(self) -> dict[str, Any]:
        """The library-neutral producer settings (`producer:` keys plus idempotence)."""
        out: dict[str, Any] = {"acks": self.acks, "idempotence": self.idempotence}
        if self.retries is not None:
            out["retries"] = self.retries
        return out

    def consumer(self) -> dict[str, Any]:
        return {"isolation": self.isolation, "commit": self.commit, "auto_commit": False}


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        # acks=1 without retries (acks=0 gives no offsets, which the history needs):
        # a send is tried once, so it may be lost but never written twice.
        Profile(name="at-most-once", acks="1", retries=0, idempotence=False, transactions=False,
                isolation="read_uncommitted", commit="before",
                allowed=BASE_ALLOWED | {"lost-write", "unseen", "lost-processing"}),
        # Kafka's default: retries may write a value twice, nothing acknowledged may vanish.
        Profile(name="at-least-once", acks="all", retries=None, idempotence=False, transactions=False,
                isolation="read_uncommitted", commit="after",
                allowed=BASE_ALLOWED | {"duplicate", "double-processing"}),
        # enable.idempotence without transactions: no duplicate writes and no loss per
        # partition, but a consumer may still process a value twice (offsets after processing).
        Profile(name="idempotent", acks="all", retries=None, idempotence=True, transactions=False,
                isolation="read_uncommitted", commit="after", allowed=BASE_ALLOWED | {"double-processing"}),
        Profile(name="exactly-once", acks="all", retries=None, idempotence=True, transactions=True,
                isolation="read_committed", commit="in-transaction", allowed=BASE_ALLOWED),
    )
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError("guarantee", f"expected one of {', '.join(PROFILES)}, got {name!r}") from None


def apply_profile(cfg: TestConfig) -> TestConfig:
    """The config a run really uses: the profile's settings under the user's own `producer:`.

    exactly-once turns transactions on (read_committed consumers come with them);
    at-most-once cannot use them, as a transactional producer is always idempotent.
    """
    prof = get_profile(cfg.guarantee)
    if cfg.txn and prof.name == "at-most-once":
        raise ConfigError("txn", "transactions make the producer idempotent; at-most-once cannot use them")
    producer = {**prof.producer(), **(cfg.producer or {})}
    return replace(cfg, producer=producer, txn=cfg.txn or prof.transactions)


def describe(cfg: TestConfig) -> dict[str, Any]:
    """What test.json stores and the run prints: the profile and the resulting client configs."""
    prof = get_profile(cfg.guarantee)
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


def _describe_offsets(cfg: TestConfig, prof: Profile) -> dict[str, Any]:
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


def _client_configs(cfg: TestConfig, prof: Profile) -> tuple[dict[str, Any], dict[str, Any]]:
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
    """What the checker will really tolerate: the profile's types plus the test's own
    (subscribe, write-write deps, ignore)."""
    from logquake.checker.options import CheckOptions, allowed_types

    opts = CheckOptions(sub_via=cfg.sub_via, txn=cfg.txn, ww_deps=cfg.ww_deps, ignore=cfg.ignore,
                        guarantee=cfg.guarantee)
    return allowed_types(opts) | get_profile(cfg.guarantee).allowed


def _stable(conf: dict[str, Any]) -> dict[str, Any]:
    """Per-process ids (transactional.id, group.id) shown by their prefix only."""
    out = dict(conf)
    for key in ("transactional.id", "transactional_id", "group.id"):
        if isinstance(out.get(key), str) and out[key].count("-") >= 3:
            out[key] = out[key].rsplit("-", 2)[0] + "-<pid>-<n>"
    out.pop("bootstrap_servers", None)
    out.pop("bootstrap.servers", None)
    return out
