"""The workloads a test can run, by name: one record each, and the only place a name is branched on.

A `Workload` is a record of functions, as Porcupine's Model is: the runner, the checker
dispatch, test.json and the command line ask it, and never `cfg.workload` itself. Adding a
workload means adding one entry to `WORKLOADS`. A system under test (logquake.systems) names
the workloads and client libraries it supports by the same strings as `name` and `clients`.

Two ways to drive a workload: most give the runner a generator and clients
(`make_generator`, `make_client`), and the runner's workers interleave them with the nemesis,
phase by phase; one that must own its threads (the pipeline's consumer group and its
producers) gives `drive` instead and calls back into the runner's phases. The heavy modules
(client libraries, the checkers) are imported only when a record's function runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from logquake.errors import ConfigError
from logquake.guarantees import GUARANTEES, allowed_types, get_guarantee

if TYPE_CHECKING:
    from logquake.checker.options import CheckOptions
    from logquake.config import TestConfig
    from logquake.history import Op
    from logquake.workloads.client import Client
    from logquake.workloads.generator import Context


class Generator(Protocol):
    """What the runner's workers ask what to do next (workloads/generator.py's shape).

    Pure: no I/O and no clock; the runner serialises calls under one lock.
    """

    def op(self, ctx: Context) -> Op | None:
        """The next invocation for ctx's worker, or None when it has nothing left in ctx.phase."""

    def update(self, ctx: Context, event: Op) -> None:
        """Learn a completion (or the runner's timeout of it)."""

    def fresh_client(self, worker: int) -> None:
        """The worker's client was replaced: whatever it had assigned or subscribed is gone."""


@runtime_checkable
class FinalReads(Protocol):
    """A generator whose drain makes the final read (workloads/generator.py's queue), which a
    `Workload` declares with `final_read`: the runner asks it what the drain reached and
    points readers at single nodes through it."""

    def short_keys(self, worker: int) -> list[int]:
        """The keys whose end of the log the worker's final read has not reached."""

    def drained(self, worker: int) -> bool:
        """Has the worker made its final assign and read every key to its end?"""

    def read_from(self, worker: int, node: str) -> None:
        """Mark every final op of the worker as reading from `node` alone."""


#: (cfg, bootstrap, record, during): run the whole workload, recording every op through
#: `record`; `during` is the runner's main phase, heal and recovery, called once while the
#: workload's load runs; when it returns the workload drains and stops.
Drive = Callable[["TestConfig", str, Callable[["Op"], "Op"], Callable[[], None]], None]


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One workload: how its ops are made, run and judged, and how a run of it is described.

    Attributes:
        name: the `workload` config value.
        summary: one line on what it tests.
        clients: client libraries it has adapters for (the `client` config values).
        check: (ops, cfg) -> results.json's object. May raise: the runner makes that unknown.
        allowed: cfg -> the anomaly types its checker tolerates in that test (test.json's
            `allowed_anomalies`), from logquake.guarantees.
        client_configs: cfg -> the (producer, consumer) configs its clients are given.
        make_generator: cfg -> the generator the runner's workers follow.
        make_client: cfg -> a fresh, unopened client for one worker.
        drive: the workload runs itself (see `Drive`); then no generator or client.
        offset_commit: when consumer offsets are committed, where not the guarantee's.
        guarantee_applies: False where no delivery guarantee changes what the workload does
            or how it is judged (a matrix then has no guarantees to vary for it).
        banner: cfg -> what a run prints before it starts in place of the guarantee's
            settings; exactly when no guarantee applies.
        final_read: its generator's drain makes the final read (a `FinalReads`): the
            runner reports which workers and keys it completed, and makes it once more
            from each node where the system can point a read at one (`System.node_reads`).
        needs: cfg -> the system features (logquake.systems.base.FEATURES) that test uses,
            each with the config key asking for it. Config load refuses the test, naming
            that key, on a system without the feature or whose servers cannot give it
            (`System.unavailable`): only what the workload really does is asked of them.
        txn: its ops become transactions when the test asks (the `txn` key). Elsewhere
            config load refuses `txn`, unless the test's guarantee already runs it in
            transactions (`needs`: a Kafka exactly-once pipeline's test.json says txn).
        keys: its generator rotates keys as Elle's does (`key_count`, `max_writes_per_key`);
            elsewhere config load refuses those keys.
    """

    name: str
    summary: str
    clients: tuple[str, ...]
    check: Callable[[list[Op], TestConfig], dict[str, Any]]
    allowed: Callable[[TestConfig], frozenset[str]]
    client_configs: Callable[[TestConfig], tuple[dict[str, Any], dict[str, Any]]]
    make_generator: Callable[[TestConfig], Generator] | None = None
    make_client: Callable[[TestConfig], Client] | None = None
    drive: Drive | None = None
    offset_commit: str | None = None
    guarantee_applies: bool = True
    banner: Callable[[TestConfig], str] | None = None
    final_read: bool = False
    needs: Callable[[TestConfig], Mapping[str, str]] = lambda cfg: {}
    txn: bool = False
    keys: bool = False

    def __post_init__(self) -> None:
        if (self.drive is None) == (self.make_generator is None or self.make_client is None):
            raise ValueError(f"workload {self.name}: give make_generator and make_client, or drive")
        if (self.banner is None) != self.guarantee_applies:
            raise ValueError(f"workload {self.name}: a banner exactly when no guarantee applies")


# -- queue: Jepsen's Kafka workload ---------------------------------------------------------


def _queue_options(cfg: TestConfig) -> CheckOptions:
    """The queue analysis a test asks for: test.json's allowed set and the check agree by
    both coming from here."""
    from logquake.checker import CheckOptions
    from logquake.systems.base import get_system

    system = get_system(cfg.system)
    return CheckOptions(sub_via=cfg.sub_via, txn=cfg.txn, ww_deps=cfg.ww_deps, ignore=cfg.ignore,
                        guarantee=cfg.guarantee,
                        duplicate_window=system.dedup_window(cfg) if system.dedup_window else None,
                        shared_consumer=system.shared_subscribe)


def _queue_check(ops: list[Op], cfg: TestConfig) -> dict[str, Any]:
    from logquake.checker import check_history

    return check_history(ops, _queue_options(cfg))


def _queue_allowed(cfg: TestConfig) -> frozenset[str]:
    from logquake.checker.options import allowed_types as queue_allowed_types

    return queue_allowed_types(_queue_options(cfg))


def _queue_configs(cfg: TestConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    from logquake.workloads.queue import producer_settings

    if cfg.client == "nats-py":
        from logquake.systems.jetstream.client import client_configs

        return client_configs(cfg)
    if cfg.client == "kafka-python":
        from logquake.workloads import kafkapython as lib
    else:
        from logquake.workloads import confluent as lib  # type: ignore[no-redef]
    return (lib.producer_config("<bootstrap>", txn=cfg.txn, producer=producer_settings(cfg)),
            lib.consumer_config("<bootstrap>", txn=cfg.txn, sub_via=cfg.sub_via))


def _queue_needs(cfg: TestConfig) -> dict[str, str]:
    """Transactions when the test asks for them (`txn`) or its guarantee brings them."""
    g = GUARANTEES.get(cfg.guarantee)
    key = "txn" if cfg.txn else "guarantee" if g is not None and g.transactions else None
    return {"transactions": key} if key else {}


def _queue_generator(cfg: TestConfig) -> Generator:
    from logquake.workloads.queue import make_generator

    return make_generator(cfg)


def _queue_client(cfg: TestConfig) -> Client:
    from logquake.workloads.queue import make_client

    return make_client(cfg)


# -- pipeline: consume-transform-produce ------------------------------------------------------


def _pipeline_check(ops: list[Op], cfg: TestConfig) -> dict[str, Any]:
    from logquake.checker.pipeline import check_pipeline

    return check_pipeline(ops, guarantee=cfg.guarantee, shared_consumer=_pipeline_shared(cfg))


def _pipeline_allowed(cfg: TestConfig) -> frozenset[str]:
    from logquake.checker.pipeline import PIPELINE_TYPES

    return allowed_types(reported=PIPELINE_TYPES, guarantee=cfg.guarantee, shared_consumer=_pipeline_shared(cfg))


def _pipeline_shared(cfg: TestConfig) -> bool:
    """Does the test's client share one consumer among the workers? (False for a client with
    no pipeline adapter: a stored run of an older harness, checked again.)"""
    from logquake.workloads import pipeline

    return cfg.client in pipeline.ADAPTERS and pipeline.get_adapter(cfg.client).shared_consumer


def _pipeline_needs(cfg: TestConfig) -> dict[str, str]:
    """Transactions only where the client's pipeline makes its guarantee of them (Kafka's
    exactly-once: offsets committed in the producing transaction); JetStream's exactly-once
    is a derived Msg-Id and a double ack (docs/jetstream-pipeline.md), and `txn` is the
    queue's. A client with no pipeline is refused before this is asked."""
    from logquake.workloads import pipeline

    g = GUARANTEES.get(cfg.guarantee)
    txn = g is not None and g.transactions and pipeline.get_adapter(cfg.client).transactional
    return {"transactions": "guarantee"} if txn else {}


def _pipeline_configs(cfg: TestConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    from logquake.workloads import pipeline

    return pipeline.get_adapter(cfg.client).configs(cfg)


def _pipeline_drive(cfg: TestConfig, bootstrap: str, record: Callable[[Op], Op], during: Callable[[], None]) -> None:
    from logquake.workloads import pipeline

    pipeline.drive(cfg, bootstrap, record, during)


# -- offsets: committed offsets as registers --------------------------------------------------


def _offsets_check(ops: list[Op], cfg: TestConfig) -> dict[str, Any]:
    from logquake.workloads import offsets

    return offsets.analyse(ops, offsets.offset_keys(cfg))


def _offsets_configs(cfg: TestConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """No producer; one consumer per group, committing and fetching offsets."""
    from logquake.workloads import offsets

    group = offsets.offset_keys(cfg).group(0)
    if cfg.client == "kafka-python":
        consumer = offsets.kafka_python_consumer_config("<bootstrap>", group, offsets.OP_TIMEOUT)
    else:
        consumer = offsets.consumer_config("<bootstrap>", group)
    consumer["group.id" if "group.id" in consumer else "group_id"] = "lq-offsets-<n>"
    return {}, consumer


def _offsets_generator(cfg: TestConfig) -> Generator:
    from logquake.workloads import offsets

    return offsets.make_generator(cfg)


def _offsets_client(cfg: TestConfig) -> Client:
    from logquake.workloads import offsets

    return offsets.make_client(cfg)


def _offsets_banner(cfg: TestConfig) -> str:
    from logquake.workloads.offsets import offset_keys

    keys = offset_keys(cfg)
    return (f"{keys.groups} groups x {keys.partitions} partitions of {keys.topic}, "
            "standalone commits, checked as registers for linearizability")


# -- kv: a key-value store's keys as cas registers -------------------------------------------


def _kv_check(ops: list[Op], cfg: TestConfig) -> dict[str, Any]:
    from logquake.workloads import kv

    return kv.analyse(ops)


def _kv_configs(cfg: TestConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    from logquake.workloads import kv

    return kv.client_configs(cfg)


def _kv_generator(cfg: TestConfig) -> Generator:
    from logquake.workloads import kv

    return kv.make_generator(cfg)


def _kv_client(cfg: TestConfig) -> Client:
    from logquake.workloads import kv

    return kv.make_client(cfg)


def _kv_banner(cfg: TestConfig) -> str:
    from logquake.workloads import kv

    return kv.banner(cfg)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(name="queue", summary="sends, polls and transactions on keyed partitions (Jepsen's Kafka test)",
                 clients=("confluent", "kafka-python", "nats-py"), check=_queue_check, allowed=_queue_allowed,
                 client_configs=_queue_configs, make_generator=_queue_generator, make_client=_queue_client,
                 final_read=True, needs=_queue_needs, txn=True, keys=True),
        Workload(name="pipeline", summary="consume-transform-produce: how often each input reaches the output",
                 clients=("confluent", "nats-py"), check=_pipeline_check, allowed=_pipeline_allowed,
                 client_configs=_pipeline_configs, drive=_pipeline_drive, needs=_pipeline_needs),
        # Its ops are the commits and fetches themselves: no anomaly a guarantee could excuse.
        Workload(name="offsets", summary="committed consumer-group offsets, checked as linearizable registers",
                 clients=("confluent", "kafka-python"), check=_offsets_check, allowed=lambda cfg: frozenset(),
                 client_configs=_offsets_configs, make_generator=_offsets_generator, make_client=_offsets_client,
                 offset_commit="the ops themselves (OffsetCommit, OffsetFetch)", guarantee_applies=False,
                 banner=_offsets_banner),
        # Like offsets: the ops are the store's own, with nothing a delivery guarantee changes.
        Workload(name="kv", summary="a key-value store's keys (get, put, compare-and-set), checked as linearizable",
                 clients=("nats-py",), check=_kv_check, allowed=lambda cfg: frozenset(),
                 client_configs=_kv_configs, make_generator=_kv_generator, make_client=_kv_client,
                 offset_commit="none: the ops are KV gets, puts and revision-checked updates",
                 guarantee_applies=False, banner=_kv_banner),
    )
}


def get_workload(name: str) -> Workload:
    """The record of `name`, or ConfigError naming the known ones."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ConfigError("workload", f"must be one of {', '.join(WORKLOADS)}; got {name!r}") from None


def describe(cfg: TestConfig) -> dict[str, Any]:
    """What test.json stores and the run prints: the guarantee, what the run's checker
    allows, and the client configs its workload gives."""
    w = get_workload(cfg.workload)
    g = get_guarantee(cfg.guarantee)
    producer, consumer = w.client_configs(cfg)
    return {
        "guarantee": g.name,
        "offset_commit": w.offset_commit or _commit(g.commit, consumer),
        "allowed_anomalies": sorted(w.allowed(cfg)),
        "producer_config": _stable(producer),
        "consumer_config": _stable(consumer),
    }


def _commit(declared: str, consumer: dict[str, Any]) -> str:
    """When offsets are really committed: a consumer that auto-commits (a subscribe group)
    commits on its own timer, whatever the guarantee declares; a consumer whose config says
    when it acknowledges its input (`ack`: JetStream's pipeline) is taken at its word."""
    if isinstance(consumer.get("ack"), str):
        return consumer["ack"]
    if consumer.get("enable.auto.commit") is True or consumer.get("enable_auto_commit") is True:
        return f"by the client's auto-commit timer (subscribe), not {declared} processing"
    return declared


def _stable(conf: dict[str, Any]) -> dict[str, Any]:
    """Per-process ids (transactional.id, group.id) shown by their prefix only."""
    out = dict(conf)
    for key in ("transactional.id", "transactional_id", "group.id"):
        if isinstance(out.get(key), str) and out[key].count("-") >= 3:
            out[key] = out[key].rsplit("-", 2)[0] + "-<pid>-<n>"
    out.pop("bootstrap_servers", None)
    out.pop("bootstrap.servers", None)
    return out
