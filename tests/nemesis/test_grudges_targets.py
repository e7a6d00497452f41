"""Grudges and targets are pure functions of (nodes, rng): their shapes, checked without a network."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logquake.nemesis import TARGETS, complete_grudge, cut_links, make_grudge, pick_targets
from logquake.nemesis.grudges import bridge, leaders, majorities_ring, majority, one

NODES = [f"n{i}" for i in range(1, 6)]
node_lists = st.integers(min_value=3, max_value=11).map(lambda n: [f"n{i}" for i in range(1, n + 1)])
seeds = st.integers(min_value=0, max_value=2**32)


def components(grudge):
    """Connected groups of nodes under the grudge (nodes that can all talk to each other)."""
    cut = cut_links(grudge)
    return {frozenset(b for b in grudge if a == b or frozenset((a, b)) not in cut) for a in grudge}


def test_complete_grudge_literal():
    g = complete_grudge([["n1", "n2"], ["n3"]])
    assert g == {"n1": {"n3"}, "n2": {"n3"}, "n3": {"n1", "n2"}}
    assert cut_links(g) == {frozenset(("n1", "n3")), frozenset(("n2", "n3"))}


@given(node_lists, seeds)
def test_one_isolates_exactly_one_node(nodes, seed):
    g = one(nodes, random.Random(seed))
    comps = sorted(map(len, components(g)))
    assert comps == [1, len(nodes) - 1]


@given(node_lists, seeds)
def test_majority_bisects(nodes, seed):
    g = majority(nodes, random.Random(seed))
    sizes = sorted(map(len, components(g)))
    assert sizes == [len(nodes) // 2, len(nodes) - len(nodes) // 2]


@given(node_lists, seeds)
def test_majorities_ring_each_node_sees_a_distinct_majority(nodes, seed):
    g = majorities_ring(nodes, random.Random(seed))
    n = len(nodes)
    seen = {a: frozenset(nodes) - g[a] for a in nodes}
    assert all(len(s) > n // 2 and a in s for a, s in seen.items())
    if n > 3:
        assert len(set(seen.values())) == n, "no two nodes may see the same majority"
        assert all(len(s) < n for s in seen.values())
    # symmetric wherever a symmetric answer exists
    assert all((b in g[a]) == (a in g[b]) for a in nodes for b in nodes)


@given(node_lists, seeds)
def test_bridge_has_one_hub_talking_to_both_halves(nodes, seed):
    g = bridge(nodes, random.Random(seed))
    hubs = [a for a in nodes if not g[a]]
    assert len(hubs) == 1
    others = [a for a in nodes if a not in hubs]
    halves = {frozenset(b for b in others if b not in g[a]) for a in others}
    assert len(halves) == 2 and sum(map(len, halves)) == len(others)
    assert abs(len(min(halves, key=len)) - len(max(halves, key=len))) <= 1


def test_leaders_isolates_each_leader_and_falls_back_to_one():
    g = leaders(NODES, random.Random(0), current={"n2", "n4"})
    assert components(g) == {frozenset({"n2"}), frozenset({"n4"}), frozenset({"n1", "n3", "n5"})}
    g = leaders(NODES, random.Random(0), current=())
    assert sorted(map(len, components(g))) == [1, 4]


def test_same_seed_same_grudge_different_seed_may_differ():
    a = [make_grudge("majority", NODES, random.Random(7)) for _ in range(2)]
    assert a[0] == a[1]
    assert len({tuple(sorted(make_grudge("one", NODES, random.Random(s)).items())) for s in range(20)}) > 1


@given(node_lists, seeds)
def test_targets_sizes(nodes, seed):
    rng = random.Random(seed)
    n = len(nodes)
    assert len(pick_targets("one", nodes, rng)) == 1
    m = pick_targets("minority", nodes, rng)
    assert 1 <= len(m) and (len(m) < n / 2 or n < 3)
    assert len(pick_targets("majority", nodes, rng)) == n // 2 + 1
    assert pick_targets("all", nodes, rng) == nodes
    for kind in TARGETS:
        t = pick_targets(kind, nodes, rng, current_leaders={nodes[-1]})
        assert set(t) <= set(nodes) and len(set(t)) == len(t) and t == [x for x in nodes if x in t]


def test_leader_targets_and_unknown_kind():
    assert pick_targets("leaders", NODES, random.Random(1), current_leaders={"n3", "n9"}) == ["n3"]
    assert len(pick_targets("leaders", NODES, random.Random(1))) == 1
    with pytest.raises(ValueError, match="unknown target kind"):
        pick_targets("some", NODES, random.Random(1))


@given(node_lists, seeds)
def test_clients_grudge_cuts_a_minority_from_the_clients_only(nodes, seed):
    from logquake.nemesis import CLIENTS

    g = make_grudge(CLIENTS, nodes, random.Random(seed))
    cut = [n for n, d in g.items() if d]
    assert all(g[n] == {CLIENTS} for n in cut) and 1 <= len(cut) < len(nodes) / 2 + 0.5
    assert set(g) == set(nodes)


def test_unknown_partition_kind():
    with pytest.raises(ValueError, match="unknown partition"):
        make_grudge("everything", NODES, random.Random(0))


def test_leader_isolates_the_busiest_leader_against_a_majority():
    from logquake.nemesis.grudges import busiest_leader, leader

    # n4 leads two partitions, n2 one: n4 alone, the other four keep a majority
    g = leader(NODES, random.Random(0), current=["n2", "n4", "n4"])
    assert components(g) == {frozenset({"n4"}), frozenset({"n1", "n2", "n3", "n5"})}
    assert make_grudge("leader", NODES, random.Random(0), current_leaders=["n4", "n2", "n4"]) == g
    # a tie is broken by the rng, among the tied leaders only; no leader known: any one node
    picks = {busiest_leader(NODES, random.Random(s), ["n1", "n3", "n9"]) for s in range(30)}
    assert picks == {"n1", "n3"}
    assert sorted(map(len, components(leader(NODES, random.Random(3))))) == [1, 4]


def test_leader_is_never_drawn_at_random():
    from logquake.nemesis import GRUDGES

    assert "leader" not in GRUDGES and "clients" not in GRUDGES


def test_fault_families_of_specs():
    from logquake.nemesis import FAMILIES, fault_families

    assert fault_families(["partition:leader", "kill", "partition", "disk:power-loss"]) == ["partition", "kill", "disk"]
    assert "stale-leader" in FAMILIES


def test_make_faults_checks_named_variants_before_anything_runs():
    from types import SimpleNamespace

    from logquake.errors import ConfigError
    from logquake.nemesis import make_faults
    from logquake.systems import NodeNeeds

    def target(lazy):
        killable = SimpleNamespace(kill=lambda node: True, is_up=lambda node: True)
        return SimpleNamespace(nodes=NODES, needs=NodeNeeds(lazyfs=lazy), lifecycle=killable)

    specs = ["partition:leader", "partition", "kill:majority", "disk:power-loss-majority", "stale-leader"]
    faults = make_faults(specs, target(True), random.Random(0), net=None)
    assert [f.name for f in faults] == ["partition", "kill", "disk", "stale-leader"]
    with pytest.raises(ConfigError, match="partition has no variant 'leeder'.*leader"):
        make_faults(["partition:leeder"], target(True), random.Random(0), net=None)
    with pytest.raises(ConfigError, match="no variant 'power-loss'") as e:  # no LazyFS
        make_faults(["disk:power-loss"], target(False), random.Random(0), net=None, data_files=("**/*.seg",))
    assert "LazyFS" in (e.value.hint or "")
    # corrupt-tail tears the system's data files: none declared, none offered
    (disk,) = make_faults(["disk"], target(True), random.Random(0), net=None)
    assert disk.variants == ("lose-unfsynced",) and "corrupt-tail" not in disk.accepts
    with pytest.raises(ConfigError, match="disk faults need LazyFS .* or the system's data files"):
        make_faults(["disk"], target(False), random.Random(0), net=None)
    (disk,) = make_faults(["disk"], target(False), random.Random(0), net=None, data_files=("**/*.seg",))
    assert disk.variants == disk.accepts == ("corrupt-tail",)
    for combo in ("pause-kill", "partition-kill"):
        with pytest.raises(ConfigError, match=f"{combo} needs LazyFS"):
            make_faults([combo], target(False), random.Random(0), net=None)
    with pytest.raises(ConfigError, match="unknown fault 'flood'"):
        make_faults(["flood"], target(True), random.Random(0), net=None)
    unkillable = SimpleNamespace(nodes=NODES, needs=NodeNeeds(), lifecycle=SimpleNamespace(is_up=lambda node: True))
    with pytest.raises(ConfigError, match="kill needs nodes that can kill"):
        make_faults(["kill"], unkillable, random.Random(0), net=None)


def test_each_family_declares_what_it_needs_from_the_nodes():
    from logquake.nemesis import FAULTS, node_needs
    from logquake.systems import NodeNeeds

    assert {name: f.needs for name, f in FAULTS.items() if f.needs != NodeNeeds()} == {
        "clock": NodeNeeds(faketime=True), "disk": NodeNeeds(lazyfs=True),
        "pause-kill": NodeNeeds(lazyfs=True), "partition-kill": NodeNeeds(lazyfs=True)}
    assert node_needs([]) == node_needs(["partition:leader", "kill", "stale-leader"]) == NodeNeeds()
    assert node_needs(["clock:strobe", "disk:corrupt-tail"]) == NodeNeeds(faketime=True, lazyfs=True)
    assert node_needs(["partition", "pause-kill"]) == node_needs(["partition-kill"]) == NodeNeeds(lazyfs=True)


def test_config_takes_the_crash_combinations_on_both_systems_and_corrupt_tail_where_data_files_are_known():
    from logquake.config import resolve_config
    from logquake.errors import ConfigError

    specs = ("pause-kill", "partition-kill", "disk:corrupt-tail")
    for system in ("kafka", "jetstream"):
        assert resolve_config(None, {"system": system, "nemesis": ",".join(specs)}).nemesis == specs
    with pytest.raises(ConfigError, match="disk:corrupt-tail cannot run on kafka-external: it declares no data files"):
        resolve_config(None, {"backend": "external", "bootstrap_servers": ["x:1"], "nemesis": "disk:corrupt-tail"})
    with pytest.raises(ConfigError, match="clock faults cannot run on jetstream: nats-server is a static Go binary"):
        resolve_config(None, {"system": "jetstream", "nemesis": "pause-kill,clock"})
