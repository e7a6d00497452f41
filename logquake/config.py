"""A test's configuration: one frozen value, resolved once from defaults, YAML and flags.

Keys (YAML uses the same names; CLI flags use dashes: `--time-limit`):

    name              test name; the results land in results/<name>/<start time>/   (the workload)
    system            kafka | jetstream: the system under test (logquake.systems)     (kafka)
    workload          queue | pipeline | offsets | kv                                (queue)
    backend           lab | docker | ssh | external                                  (lab)
    nodes             number of broker nodes, 1-15                                   (5)
    time_limit        seconds of the main phase (with faults); a plain run takes ~1 min (45)
    rate              target ops/s over all workers                                  (100)
    concurrency       number of client workers                                       (10)
    nemesis           faults to inject: partition, kill, pause, clock, disk,
                      packet-loss, stale-leader, pause-kill, partition-kill,
                      each optionally family:variant
                      (partition:leader); a list, or comma-separated; none = no faults
                      ([]; `logquake run`: RUN_DEFAULTS, partition and kill)
    nemesis_interval  mean seconds between fault start/stop flips                    (10)
    txn               queue ops are transactions of 1-4 micro-ops                     (false)
    key_count         queue keys written at a time (Jepsen's --key-count)              (10)
    max_writes_per_key a queue key is retired after a random 1..this many writes and a
                      fresh one takes its place, as in Elle; each key is a topic, so a
                      run makes new topics until the end. Large: the same key_count
                      topics all run long (a soak whose brokers host a fixed set) (1024)
    sub_via           assign | subscribe                                             (assign)
    client            confluent | kafka-python | nats-py                 (the system's first)
    guarantee         at-most-once | at-least-once | idempotent | exactly-once       (at-least-once)
    seed              RNG seed for ops and faults; random if unset, stored in test.json
    partitions        partitions per topic                                           (1)
    replication_factor replicas per partition, at most `nodes`                (min(3, nodes))
    recovery_time     seconds to wait after the final heal before draining (then,   (5)
                      at most 60 s, until every node serves again)
    drain_time        upper bound in seconds on the drain phase                      (30)
    ignore            anomaly types not to count as bad, e.g. [unseen]               ([])
    ww_deps           infer write-write order for the cycle search                   (true)
    results_dir       where run directories go                                       (results)
    broker            node config passed to every broker (fsync, unsafe: {...})      ({})
    jetstream         system jetstream: {binary, sync_interval, replicas,
                      duplicate_window, kv_reads} (logquake/systems/jetstream/server.py) ({})
    producer          client producer settings, library-neutral: {acks: 1, retries: 0,
                      idempotence: true}
                      (default acks=all, idempotent; acks=1 is for testing the harness)  ({})
    bootstrap_servers external backend: host:port list                               ([])
    hosts             ssh and external backends: one mapping per node, e.g. {name: n1,
                      address: 10.0.0.11, user: root, key: ~/.ssh/id, known_hosts,
                      accept_new_host_keys, sudo, python, dir} or {type: docker,
                      container: kafka-1, address, pidfile, start} (cluster/hostcfg.py)  ([])

What the system cannot do is refused at load, from its record (logquake.systems.base.System):
a client, workload, partitions or a fault's need it does not offer, a feature the workload
uses (transactions, `Workload.needs`) that it or its servers lack; and a client the workload
has no adapter for (logquake.workloads.registry); `txn` for a workload that has no
transactions to turn on (`Workload.txn`).

Every error names the key, the bad value and what is allowed. Each list of allowed values
has its home beside what it names: workloads in logquake.workloads.registry, guarantees and
sub_via in logquake.guarantees, fault families in logquake.nemesis.
"""

from __future__ import annotations

import difflib
import json
import random
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from logquake.errors import ConfigError
from logquake.guarantees import GUARANTEES, SUB_VIAS
from logquake.yamlfile import load_mapping

BACKENDS = ("lab", "docker", "ssh", "external")
CLIENTS = ("confluent", "kafka-python", "nats-py")


@dataclass(frozen=True, kw_only=True)
class TestConfig:
    """One test, fully resolved. See the module docstring for every key."""

    __test__ = False  # not a pytest test class, despite the name

    name: str = "queue"
    system: str = "kafka"
    workload: str = "queue"
    backend: str = "lab"
    nodes: int = 5
    time_limit: float = 45.0
    rate: float = 100.0
    concurrency: int = 10
    nemesis: tuple[str, ...] = ()
    nemesis_interval: float = 10.0
    txn: bool = False
    key_count: int = 10
    max_writes_per_key: int = 1024
    sub_via: str = "assign"
    client: str = "confluent"
    guarantee: str = "at-least-once"
    seed: int | None = None
    partitions: int = 1
    replication_factor: int = 3
    recovery_time: float = 5.0
    drain_time: float = 30.0
    ignore: tuple[str, ...] = ()
    ww_deps: bool = True
    results_dir: str = "results"
    broker: dict[str, Any] = field(default_factory=dict)
    jetstream: dict[str, Any] = field(default_factory=dict)
    producer: dict[str, Any] = field(default_factory=dict)
    bootstrap_servers: tuple[str, ...] = ()
    hosts: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d

    def with_seed(self) -> TestConfig:
        """This config with a concrete seed (a random one if unset)."""
        if self.seed is not None:
            return self
        return replace(self, seed=random.SystemRandom().randrange(2**31))


KEYS = {f.name for f in fields(TestConfig)}


def _as_list(key: str, value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip() and v.strip() != "none")
    if isinstance(value, list | tuple):
        return tuple(value)
    raise ConfigError(key, f"expected a list or a comma-separated string, got {value!r}")


def _number(key: str, value: Any, kind: type, lo: float, hi: float | None = None) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(key, f"expected a number, got {value!r}")
    try:
        n = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"expected {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    if kind is int and isinstance(value, float) and value != n:
        raise ConfigError(key, f"expected an integer, got {value!r}")
    if n < lo or (hi is not None and n > hi):
        bound = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        raise ConfigError(key, f"must be {bound}, got {value!r}")
    return n


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(key, f"must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.lower() in ("true", "yes", "on", "1")
    raise ConfigError(key, f"expected true or false, got {value!r}")


def _validate_value(key: str, value: Any) -> Any:
    """The value of one key, normalised, or ConfigError."""
    match key:
        case "name" | "results_dir":
            if not isinstance(value, str) or not value or "/" in value and key == "name":
                raise ConfigError(key, f"expected a non-empty string without '/', got {value!r}")
            return value
        case "workload":
            from logquake.workloads.registry import WORKLOADS  # here: the workloads build on TestConfig

            return _choice(key, value, tuple(WORKLOADS))
        case "system":
            from logquake.systems.base import SYSTEMS

            return _choice(key, value, tuple(SYSTEMS))
        case "backend":
            return _choice(key, value, BACKENDS)
        case "sub_via":
            return _choice(key, value, SUB_VIAS)
        case "client":
            return _choice(key, value, CLIENTS)
        case "guarantee":
            return _choice(key, value, tuple(GUARANTEES))
        case "nodes":
            return _number(key, value, int, 1, 15)
        case "concurrency":
            return _number(key, value, int, 1, 1000)
        case "partitions" | "key_count":
            return _number(key, value, int, 1, 1000)
        case "max_writes_per_key":
            return _number(key, value, int, 1, 10**9)
        case "replication_factor":
            return _number(key, value, int, 1, 15)
        case "seed":
            return None if value is None else _number(key, value, int, 0)
        case "time_limit" | "rate" | "nemesis_interval":
            n = _number(key, value, float, 0)
            if n <= 0:
                raise ConfigError(key, f"must be greater than 0, got {value!r}")
            return n
        case "recovery_time" | "drain_time":
            return _number(key, value, float, 0)
        case "txn" | "ww_deps":
            return _bool(key, value)
        case "nemesis":
            from logquake.nemesis import FAMILIES  # here: the nemesis modules build on TestConfig

            faults = _as_list(key, value)
            for fault in faults:
                family, colon, variant = str(fault).partition(":")
                if family not in FAMILIES or (colon and not variant):
                    raise ConfigError(key, f"unknown fault {fault!r}; allowed: {', '.join(FAMILIES)}, "
                                           "each optionally as family:variant (partition:leader)")
            return tuple(dict.fromkeys(faults))
        case "ignore" | "bootstrap_servers":
            items = _as_list(key, value)
            if not all(isinstance(i, str) for i in items):
                raise ConfigError(key, f"expected a list of strings, got {value!r}")
            return items
        case "hosts":
            items = _as_list(key, value)
            if not all(isinstance(i, dict) for i in items):
                raise ConfigError(key, f"expected a list of mappings, got {value!r}")
            return items
        case "producer":
            if not isinstance(value, dict) or not set(value) <= {"acks", "retries", "idempotence"}:
                raise ConfigError(key, f"expected a mapping with acks, retries and/or idempotence, got {value!r}")
            if "acks" in value and str(value["acks"]) not in ("all", "-1", "0", "1"):
                raise ConfigError(key, f"acks must be all, -1, 0 or 1, got {value['acks']!r}")
            if "idempotence" in value:
                value = {**value, "idempotence": _bool(f"{key}.idempotence", value["idempotence"])}
            return dict(value)
        case "jetstream":  # its keys are the system's to check, once nodes are known (_check_system)
            if not isinstance(value, dict):
                raise ConfigError(key, f"expected a mapping of settings, got {value!r}")
            return dict(value)
        case "broker":
            if not isinstance(value, dict):
                raise ConfigError(key, f"expected a mapping, got {value!r}")
            _check_broker(key, value)
            return dict(value)
    raise ConfigError(key, "unknown key")  # pragma: no cover - guarded by _check_key


# The node config keys the harness fills in for each broker (systems/kafka.py): stand-ins
# for them, so the user's `broker:` settings are checked before any broker starts.
_NODE_STANDINS = {"node_id": 1, "data_dir": "/logquake/data", "log_file": "/logquake/broker.log",
                  "nodes": [{"node_id": 1, "host": "127.0.0.1", "kafka_port": 1, "raft_port": 2}]}


def _check_broker(key: str, value: dict[str, Any]) -> None:
    """Raise the ConfigError (as `broker.<its key>`) the brokers would exit with at start-up."""
    from logquake.broker.nodeconfig import parse_node_config  # (the broker package only when used)

    try:
        parse_node_config({**_NODE_STANDINS, **value})
    except ConfigError as e:
        raise e.under(key) from None


# The config keys that hold one system's own settings (System.settings_key).
_SETTINGS_KEYS = ("broker", "jetstream")


def _check_system(cfg: TestConfig) -> None:
    """Refuse what cfg.system cannot do, naming the key that asks for it."""
    from logquake.cluster.backends import system_for  # here: the cluster modules build on TestConfig
    from logquake.nemesis import FAULTS, fault_families

    system = system_for(cfg)
    for key in _SETTINGS_KEYS:
        if getattr(cfg, key) and key != system.settings_key:
            raise ConfigError(key, f"settings for another system; this test's system is {cfg.system}")
    if cfg.client not in system.clients:
        raise ConfigError("client", f"system {cfg.system} is driven by {', '.join(system.clients)}; got {cfg.client!r}")
    if cfg.workload not in system.workloads:
        raise ConfigError("workload", f"system {cfg.system} runs {', '.join(system.workloads)}; got {cfg.workload!r}")
    from logquake.workloads.registry import get_workload

    workload = get_workload(cfg.workload)
    if cfg.client not in workload.clients:
        raise ConfigError("client", f"workload {cfg.workload} is driven by {', '.join(workload.clients)}; "
                                    f"got {cfg.client!r}")
    if system.max_partitions is not None and cfg.partitions > system.max_partitions:
        raise ConfigError("partitions", f"system {cfg.system} has at most {system.max_partitions} per key, "
                                        f"got {cfg.partitions}")
    for family in fault_families(cfg.nemesis):
        needs = FAULTS[family].needs if family in FAULTS else None
        for need, why in system.unmet_needs.items():
            if needs is not None and getattr(needs, need):
                raise ConfigError("nemesis", f"{family} faults cannot run on {cfg.system}: {why}")
    if "disk:corrupt-tail" in cfg.nemesis and not system.data_files:
        raise ConfigError("nemesis", f"disk:corrupt-tail cannot run on {system.name}: it declares no data files to tear")
    needs = workload.needs(cfg)
    if cfg.txn and not workload.txn and "transactions" not in needs:
        from logquake.workloads.registry import WORKLOADS

        takers = ", ".join(w.name for w in WORKLOADS.values() if w.txn)
        raise ConfigError("txn", f"workload {cfg.workload} has no transactions to turn on; txn is for {takers}")
    if not workload.keys:
        for key in ("key_count", "max_writes_per_key"):
            if getattr(cfg, key) != getattr(TestConfig, key):
                raise ConfigError(key, f"workload {cfg.workload} does not rotate keys; {key} is for queue")
    system.check_config(cfg)
    for feature, key in needs.items():  # what the workload really uses, asked last (it may run a binary)
        why = (f"system {cfg.system} has no {feature} logquake drives" if feature not in system.features
               else system.unavailable(cfg, feature))
        if why is not None:
            raise ConfigError(key, why)


def _check_key(key: str, where: str) -> str:
    norm = key.replace("-", "_")
    if norm not in KEYS:
        close = difflib.get_close_matches(norm, sorted(KEYS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(KEYS))}"
        raise ConfigError(key, f"unknown key in {where}", hint=hint)
    return norm


#: What `logquake run` does unless told otherwise: it is a chaos tool, so the first run a user
#: makes breaks something (partitions and kills, a flip every 10 s on average); `--nemesis
#: none` is the calm run. Below the YAML file and the flags.
RUN_DEFAULTS: dict[str, Any] = {"nemesis": "partition,kill"}


def _defaults_that_apply(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The run defaults minus chaos where nothing can inject it: an external cluster without
    hosts has no node a fault could act through, so its default run is the calm one (asking
    for faults there is still an error)."""
    if given.get("backend") == "external" and not given.get("hosts"):
        return {k: v for k, v in defaults.items() if k != "nemesis"}
    return defaults


def resolve_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None,
    defaults: dict[str, Any] | None = None,
) -> TestConfig:
    """Defaults (TestConfig's, then `defaults`), then the YAML file, then flags (None values in
    `overrides` are unset flags)."""
    values: dict[str, Any] = {}
    if path is not None:
        for key, value in load_mapping(path).items():
            values[_check_key(str(key), str(path))] = value
    for key, value in (overrides or {}).items():
        if value is not None:
            values[_check_key(key, "flags")] = value
    values = {**_defaults_that_apply(defaults or {}, values), **values}
    checked = {key: _validate_value(key, value) for key, value in values.items()}
    if "name" not in checked and "workload" in checked:
        checked["name"] = checked["workload"]  # results/offsets/..., not results/queue/...
    if "replication_factor" not in checked:  # a 1- or 2-node cluster replicates what it can
        checked["replication_factor"] = min(TestConfig.replication_factor, checked.get("nodes", TestConfig.nodes))
    if "client" not in checked:  # each system has its own client libraries
        from logquake.systems.base import get_system

        checked["client"] = get_system(checked.get("system", TestConfig.system)).clients[0]
    cfg = TestConfig(**checked)
    _check_system(cfg)
    if cfg.replication_factor > cfg.nodes and cfg.backend != "external":
        raise ConfigError(
            "replication_factor",
            f"must be at most nodes ({cfg.nodes}), got {cfg.replication_factor}",
            hint="lower replication_factor or raise nodes",
        )
    return cfg


def load_run_config(run_dir: str | Path, overrides: dict[str, Any] | None = None) -> TestConfig:
    """The config a run used, from its test.json (run facts beside the keys are skipped), then `overrides`."""
    path = Path(run_dir) / "test.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError("test.json", f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError("test.json", f"{path} must hold an object, got {type(data).__name__}")
    values = {k: v for k, v in data.items() if k in KEYS}
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return resolve_config(None, values)


def save_config(cfg: TestConfig, path: str | Path, **extra: Any) -> None:
    """Write test.json: the resolved config plus run facts (start time, client configs...)."""
    data = cfg.to_json()
    data.update(extra)
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
