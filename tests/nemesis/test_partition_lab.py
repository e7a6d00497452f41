"""Every grudge shape on a real 5-node lab: exactly the intended links are cut, heal restores them."""

from __future__ import annotations

import random

import pytest
from cluster.labkit import connect_matrix, lab, start_listeners

from logquake.nemesis import CHAIN, GRUDGES, LOSS_CHAIN, Net, cut_links, make_grudge

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab5(tmp_path_factory):
    base = tmp_path_factory.mktemp("lab5")
    with lab(5, base) as (state, hosts):
        start_listeners(state, hosts, base / "listeners")
        yield state, hosts, Net(hosts, state.addresses, iptables=state.iptables)


@pytest.mark.parametrize("shape", sorted(GRUDGES))
def test_grudge_cuts_exactly_its_links_and_heal_restores(lab5, shape):
    state, hosts, net = lab5
    grudge = make_grudge(shape, sorted(hosts), random.Random(shape), current_leaders={"n2"})
    expected = cut_links(grudge)
    assert expected, f"{shape} on 5 nodes must cut something"
    net.drop(grudge)
    try:
        assert connect_matrix(state, hosts) == expected
    finally:
        net.heal()
    assert connect_matrix(state, hosts) == set()


def test_heal_removes_only_our_chain(lab5):
    state, hosts, net = lab5
    h = hosts["n1"]
    ipt = state.iptables
    assert h.exec([ipt, "-w", "-N", "OTHER"]).rc == 0
    assert h.exec([ipt, "-w", "-A", "OTHER", "-s", "192.0.2.1/32", "-j", "DROP"]).rc == 0
    assert h.exec([ipt, "-w", "-A", "INPUT", "-j", "OTHER"]).rc == 0
    try:
        net.drop(make_grudge("one", sorted(hosts), random.Random(1)))
        net.drop(make_grudge("majority", sorted(hosts), random.Random(2)))  # replacing, not stacking
        rules = net.rules("n1")
        assert rules.count(f"-A INPUT -j {CHAIN}") == 1
        net.heal()
        rules = net.rules("n1")
        assert CHAIN not in rules
        assert "-A OTHER -s 192.0.2.1/32 -j DROP" in rules and "-A INPUT -j OTHER" in rules
    finally:
        h.exec(["sh", "-c", f"{ipt} -w -D INPUT -j OTHER; {ipt} -w -F OTHER; {ipt} -w -X OTHER"])


def test_packet_loss_rule_and_total_loss_cuts_links(lab5):
    state, hosts, net = lab5
    net.lose(["n3"], 0.25)
    try:
        assert "--probability 0.25" in net.rules("n3") and LOSS_CHAIN not in net.rules("n1")
        net.lose(["n3"], 1.0)  # certain loss: every link to n3 is cut, nothing else
        assert connect_matrix(state, hosts) == {frozenset(("n3", o)) for o in hosts if o != "n3"}
    finally:
        net.heal_loss()
    assert LOSS_CHAIN not in net.rules("n3")
    assert connect_matrix(state, hosts) == set()


@pytest.mark.slow
def test_thorough_heal_removes_leftovers_of_a_crashed_harness(lab5):
    state, hosts, _net = lab5
    crashed = Net(hosts, state.addresses, iptables=state.iptables)
    crashed.drop(make_grudge("one", sorted(hosts), random.Random(5)))
    crashed.drop(make_grudge("bridge", sorted(hosts), random.Random(6)))
    ipt = state.iptables
    hosts["n1"].exec([ipt, "-w", "-I", "INPUT", "-j", CHAIN])  # a duplicate jump, as a crash mid-change leaves
    fresh = Net(hosts, state.addresses, iptables=state.iptables)  # knows nothing about the nodes
    fresh.heal(thorough=True)
    for n in hosts:
        assert CHAIN not in fresh.rules(n)
    assert connect_matrix(state, hosts) == set()


@pytest.mark.slow
def test_clients_partition_cuts_only_the_harness_from_some_brokers(lab5):
    from logquake.nemesis import CLIENTS
    from logquake.systems.base import port_open

    state, hosts, _net = lab5
    net = Net(hosts, {**state.addresses, CLIENTS: state.harness_addr}, iptables=state.iptables)
    grudge = make_grudge(CLIENTS, sorted(hosts), random.Random(4))
    cut = sorted(n for n, d in grudge.items() if d)
    assert 1 <= len(cut) <= 2
    net.drop(grudge)
    try:
        for n in hosts:
            reached = any(port_open(state.addresses[n], 7000, timeout=1.0) for _ in range(2))
            assert reached == (n not in cut), n
        assert connect_matrix(state, hosts) == set()  # brokers still talk among themselves
    finally:
        net.heal()
    assert all(port_open(state.addresses[n], 7000, timeout=2.0) for n in hosts)
