"""The lab backend on real namespaces: addresses, reachability, the Host contract, coexistence."""

from __future__ import annotations

import subprocess

import pytest

from logquake.cluster import load_states
from logquake.cluster.conformance import check_host
from logquake.systems.base import port_open

from .labkit import connect_matrix, lab, start_listeners, wait_until

pytestmark = pytest.mark.lab


def test_nodes_reach_each_other_and_the_harness_reaches_them(tmp_path):
    with lab(3, tmp_path) as (state, hosts):
        assert sorted(state.addresses) == ["n1", "n2", "n3"]
        assert len(set(state.addresses.values())) == 3
        assert all(a.startswith(f"10.77.{state.subnet}.") for a in state.addresses.values())
        start_listeners(state, hosts, tmp_path / "l")
        assert connect_matrix(state, hosts) == set()
        for addr in state.addresses.values():
            assert wait_until(lambda a=addr: port_open(a, 7000), what=f"harness -> {addr}")
        # each node has exactly its own address: its own namespace, not the harness's
        for n, h in hosts.items():
            out = h.exec(["ip", "-4", "-o", "addr"]).out
            assert state.addresses[n] in out
            assert state.harness_addr not in out


def test_lab_host_meets_the_host_contract(tmp_path):
    with lab(1, tmp_path) as (_state, hosts):
        check_host(hosts["n1"], str(tmp_path / "work"))


@pytest.mark.slow
def test_two_clusters_coexist_and_state_files_track_them(tmp_path):
    with lab(2, tmp_path / "a") as (sa, ha), lab(2, tmp_path / "b") as (sb, hb):
        assert sa.subnet != sb.subnet and sa.harness_veth != sb.harness_veth
        ids = {s.cluster_id for s in load_states()}
        assert {sa.cluster_id, sb.cluster_id} <= ids
        start_listeners(sa, ha, tmp_path / "la")
        start_listeners(sb, hb, tmp_path / "lb")
        for addr in [*sa.addresses.values(), *sb.addresses.values()]:
            assert wait_until(lambda a=addr: port_open(a, 7000), what=addr)
    ids = {s.cluster_id for s in load_states()}
    assert sa.cluster_id not in ids and sb.cluster_id not in ids
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert sa.harness_veth not in links and sb.harness_veth not in links
