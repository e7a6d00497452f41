from __future__ import annotations

import json

import pytest

from logquake.config import TestConfig, resolve_config, save_config
from logquake.errors import ConfigError


def test_defaults() -> None:
    cfg = resolve_config()
    assert cfg == TestConfig()
    assert cfg.backend == "lab" and cfg.nodes == 5 and cfg.client == "confluent"


def test_yaml_then_flags(tmp_path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("nodes: 3\ntime-limit: 20\nnemesis: [partition, kill]\ntxn: yes\n")
    cfg = resolve_config(path, {"time_limit": 30, "rate": None})
    assert cfg.nodes == 3
    assert cfg.time_limit == 30.0
    assert cfg.rate == 100.0
    assert cfg.nemesis == ("partition", "kill")
    assert cfg.txn is True


def test_nemesis_family_variant_specs() -> None:
    cfg = resolve_config(None, {"nemesis": "partition:leader,disk:power-loss,stale-leader"})
    assert cfg.nemesis == ("partition:leader", "disk:power-loss", "stale-leader")
    for bad in ("earthquake:big", "partition:"):
        with pytest.raises(ConfigError, match="unknown fault"):
            resolve_config(None, {"nemesis": bad})


def test_comma_separated_nemesis_flag() -> None:
    assert resolve_config(None, {"nemesis": "partition,pause"}).nemesis == ("partition", "pause")
    assert resolve_config(None, {"nemesis": "none"}).nemesis == ()


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        ({"nodes": 0}, "nodes", "between 1 and 15, got 0"),
        ({"nodes": "many"}, "nodes", "expected an integer"),
        ({"sub_via": "poll"}, "sub_via", "must be one of assign, subscribe"),
        ({"nemesis": "partition,earthquake"}, "nemesis", "unknown fault 'earthquake'"),
        ({"client": "java"}, "client", "confluent, kafka-python"),
        ({"time_limit": -1}, "time_limit", "at least 0"),
        ({"txn": "maybe"}, "txn", "expected true or false"),
        ({"nodes": 3, "replication_factor": 5}, "replication_factor", "at most nodes (3)"),
    ],
)
def test_errors_name_the_key(overrides, key, fragment) -> None:
    with pytest.raises(ConfigError) as e:
        resolve_config(None, overrides)
    assert e.value.key == key
    assert fragment in str(e.value)


@pytest.mark.parametrize(
    ("broker", "key", "fragment"),
    [
        ({"idle_heartbeat_ticks": 40}, "broker.idle_heartbeat_ticks", "< election_ticks (30)"),
        ({"fsync": "sometimes"}, "broker.fsync", "must be one of"),
        ({"unsafe": {"dedup": "maybe"}}, "broker.unsafe.dedup", "must be off"),
        ({"colour": "blue"}, "broker.colour", "unknown key"),
    ],
)
def test_broker_settings_are_checked_before_any_broker_starts(broker, key, fragment) -> None:
    with pytest.raises(ConfigError) as e:
        resolve_config(None, {"broker": broker})
    assert e.value.key == key
    assert fragment in str(e.value)


def test_good_broker_settings_pass_through_unchanged() -> None:
    broker = {"fsync": "never", "election_ticks": 12, "idle_heartbeat_ticks": 4, "unsafe": {"ack": "early"}}
    assert resolve_config(None, {"broker": broker}).broker == broker


def test_unknown_key_suggests_the_close_one(tmp_path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("node: 3\n")
    with pytest.raises(ConfigError) as e:
        resolve_config(path)
    assert e.value.key == "node"
    assert e.value.hint == "did you mean 'nodes'?"


def test_bad_yaml_names_the_line(tmp_path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("nodes: 3\nrate: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        resolve_config(path)


def test_seed_is_resolved_and_saved(tmp_path) -> None:
    cfg = resolve_config().with_seed()
    assert isinstance(cfg.seed, int)
    save_config(cfg, tmp_path / "test.json", start="now")
    data = json.loads((tmp_path / "test.json").read_text())
    assert data["seed"] == cfg.seed and data["start"] == "now"
    assert resolve_config(None, {"seed": 7}).with_seed().seed == 7


def test_producer_settings_round_trip_through_test_json(tmp_path) -> None:
    """A run's saved producer settings (the profile adds idempotence) load back as its config."""
    from logquake.config import load_run_config

    cfg = resolve_config(None, {"producer": {"acks": "all", "idempotence": "yes"}, "workload": "offsets"})
    assert cfg.producer == {"acks": "all", "idempotence": True}
    save_config(cfg, tmp_path / "test.json", start="now")
    assert load_run_config(tmp_path) == cfg
    with pytest.raises(ConfigError, match="producer.idempotence"):
        resolve_config(None, {"producer": {"idempotence": "sometimes"}})


def test_logquake_run_injects_partitions_and_kills_unless_told_none() -> None:
    from logquake.config import RUN_DEFAULTS

    assert resolve_config(None, {}, RUN_DEFAULTS).nemesis == ("partition", "kill")
    assert resolve_config(None, {"nemesis": "none"}, RUN_DEFAULTS).nemesis == ()
    assert resolve_config(None, {"nemesis": "pause"}, RUN_DEFAULTS).nemesis == ("pause",)
    assert resolve_config(None, {}).nemesis == ()  # a TestConfig's own default: other commands choose


def test_an_external_cluster_without_hosts_runs_calm_by_default(tmp_path) -> None:
    from logquake.config import RUN_DEFAULTS

    external = {"backend": "external", "bootstrap_servers": "127.0.0.1:9092"}
    assert resolve_config(None, external, RUN_DEFAULTS).nemesis == ()  # nothing to act through
    assert resolve_config(None, {**external, "nemesis": "partition"}, RUN_DEFAULTS).nemesis == ("partition",)
    yaml_file = tmp_path / "t.yaml"
    yaml_file.write_text("backend: external\nbootstrap_servers: [127.0.0.1:9092]\n"
                         "hosts: [{name: b1, type: docker, container: k1, address: 127.0.0.1}]\n")
    assert resolve_config(yaml_file, {}, RUN_DEFAULTS).nemesis == ("partition", "kill")


def test_a_small_cluster_replicates_what_it_can(tmp_path) -> None:
    assert resolve_config(None, {"nodes": 1}).replication_factor == 1
    assert resolve_config(None, {"nodes": 2}).replication_factor == 2
    assert resolve_config(None, {"nodes": 5}).replication_factor == 3
    assert resolve_config(None, {"nodes": 2, "replication_factor": 1}).replication_factor == 1
    path = tmp_path / "t.yaml"
    path.write_text("nodes: 2\n")
    assert resolve_config(path).replication_factor == 2
    with pytest.raises(ConfigError, match="replication_factor"):
        resolve_config(None, {"nodes": 2, "replication_factor": 3})


def test_a_transactional_run_stores_the_idempotence_its_clients_have() -> None:
    from logquake.guarantees import apply_guarantee

    cfg = apply_guarantee(resolve_config(None, {"txn": True, "guarantee": "at-least-once"}))
    assert cfg.txn is True and cfg.producer["idempotence"] is True
    assert apply_guarantee(resolve_config(None, {"guarantee": "at-least-once"})).producer["idempotence"] is False


def test_a_subscribe_consumer_that_auto_commits_is_not_said_to_commit_after() -> None:
    from logquake.guarantees import apply_guarantee
    from logquake.workloads.registry import describe

    for client in ("confluent", "kafka-python"):
        sub = describe(apply_guarantee(resolve_config(None, {"sub_via": "subscribe", "client": client})))
        assert sub["offset_commit"].startswith("by the client's auto-commit timer"), client
        assert describe(apply_guarantee(resolve_config(None, {"client": client})))["offset_commit"] == "after"


@pytest.mark.parametrize("flags", [
    ("--workload", "pipeline"),
    ("--workload", "offsets"),
    ("--system", "jetstream", "--workload", "kv"),
    ("--system", "jetstream", "--workload", "pipeline", "--guarantee", "exactly-once"),  # Msg-Ids, no txn
])
def test_txn_is_refused_in_one_line_for_a_workload_without_transactions(tmp_path, flags) -> None:
    from tests.unit.test_system_config import _refused

    line = _refused(tmp_path, *flags, "--txn")
    workload = flags[flags.index("--workload") + 1]
    assert line == f"ConfigError: txn: workload {workload} has no transactions to turn on; txn is for queue", line


def test_txn_stays_where_the_guarantee_already_runs_the_workload_in_transactions(tmp_path) -> None:
    from logquake.config import load_run_config
    from logquake.guarantees import apply_guarantee

    # Kafka's exactly-once pipeline commits its offsets in transactions: its test.json says
    # txn, and `check` of that run directory loads it again.
    cfg = apply_guarantee(resolve_config(None, {"workload": "pipeline", "guarantee": "exactly-once"}))
    save_config(cfg, tmp_path / "test.json")
    assert load_run_config(tmp_path).txn is True
    assert resolve_config(None, {"workload": "pipeline", "guarantee": "exactly-once", "txn": True}).txn
    with pytest.raises(ConfigError, match="^txn: workload pipeline"):
        resolve_config(None, {"workload": "pipeline", "guarantee": "idempotent", "txn": True})


def test_key_rotation_keys_reach_the_queue_generator() -> None:
    from logquake.workloads.queue import make_generator

    cfg = resolve_config(None, {"key_count": 3, "max_writes_per_key": 10**9, "seed": 1})
    gen = make_generator(cfg)
    assert (len(gen.active), gen.max_writes_per_key) == (3, 10**9)
    assert (resolve_config(None, {}).key_count, resolve_config(None, {}).max_writes_per_key) == (10, 1024)


@pytest.mark.parametrize(("overrides", "key", "fragment"), [
    ({"key_count": 0}, "key_count", "between 1 and 1000, got 0"),
    ({"max_writes_per_key": "many"}, "max_writes_per_key", "expected an integer"),
    ({"workload": "offsets", "key_count": 4}, "key_count", "workload offsets does not rotate keys"),
    ({"workload": "pipeline", "max_writes_per_key": 5}, "max_writes_per_key", "is for queue"),
])
def test_key_rotation_keys_are_checked_and_refused_where_no_keys_rotate(overrides, key, fragment) -> None:
    with pytest.raises(ConfigError) as e:
        resolve_config(None, overrides)
    assert e.value.key == key and fragment in str(e.value), str(e.value)
