"""The workload registry: each name maps to one record the config, runner and test.json agree on."""

from __future__ import annotations

import pytest

from logquake.config import TestConfig, resolve_config
from logquake.errors import ConfigError
from logquake.guarantees import GUARANTEES, apply_guarantee
from logquake.systems import SYSTEMS, get_system
from logquake.workloads import WORKLOADS, Workload, get_workload
from logquake.workloads.registry import describe


def test_config_accepts_exactly_the_registered_workloads():
    for name in WORKLOADS:
        system = next(s for s in SYSTEMS if name in get_system(s).workloads)  # kv is JetStream's alone
        assert resolve_config(None, {"workload": name, "system": system}).workload == name
    with pytest.raises(ConfigError, match="must be one of queue, pipeline, offsets, kv; got 'stream'"):
        resolve_config(None, {"workload": "stream"})
    with pytest.raises(ConfigError, match="workload"):
        get_workload("stream")


def test_a_workload_is_driven_by_the_runner_or_drives_itself_never_both():
    for w in WORKLOADS.values():
        assert (w.drive is None) == (w.make_generator is not None and w.make_client is not None), w.name
        assert (w.banner is None) == w.guarantee_applies, w.name
    assert [w.name for w in WORKLOADS.values() if not w.guarantee_applies] == ["offsets", "kv"]
    with pytest.raises(ValueError, match="make_generator and make_client, or drive"):
        Workload(name="x", summary="", clients=(), check=lambda ops, cfg: {}, allowed=lambda cfg: frozenset(),
                 client_configs=lambda cfg: ({}, {}), make_generator=lambda cfg: None)


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("guarantee", list(GUARANTEES))
def test_every_workload_describes_itself_under_every_guarantee(workload, guarantee):
    txn = guarantee != "at-most-once"
    cfg = apply_guarantee(TestConfig(workload=workload, guarantee=guarantee, txn=txn).with_seed())
    d = describe(cfg)
    assert d["guarantee"] == guarantee
    assert d["allowed_anomalies"] == sorted(get_workload(workload).allowed(cfg))
    assert set(d) == {"guarantee", "offset_commit", "allowed_anomalies", "producer_config", "consumer_config"}


def test_an_empty_history_is_checked_by_each_workloads_own_checker():
    for name, w in WORKLOADS.items():
        res = w.check([], TestConfig(workload=name).with_seed())
        assert res["valid"] == "unknown" or res["valid"] is True, (name, res)


@pytest.mark.parametrize(("system", "sub_via", "shared"), [
    ("jetstream", "subscribe", True), ("jetstream", "assign", False), ("kafka", "subscribe", False)])
def test_queue_polls_may_have_gaps_only_from_a_consumer_the_subscribers_share(system, sub_via, shared):
    cfg = resolve_config(None, {"system": system, "sub_via": sub_via})
    allowed = set(describe(cfg)["allowed_anomalies"])
    assert ("int-poll-skip" in allowed) == shared
    # A step back is never allowed wholesale: the check exempts a redelivery one by one.
    assert "int-nonmonotonic-poll" not in allowed
    # The check the run makes agrees with what test.json says it allows.
    assert get_workload("queue").check([], cfg)["options"]["shared_consumer"] == shared
