"""The backend registry and the system seam, without starting anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from logquake.cluster import BACKENDS, open_cluster
from logquake.config import TestConfig
from logquake.errors import ConfigError
from logquake.systems import SYSTEMS, NodeNeeds, get_system


def test_every_registered_system_loads_under_its_own_name():
    for name in SYSTEMS:
        assert get_system(name).name == name
    with pytest.raises(ConfigError, match="system: unknown system 'kafak'; allowed: kafka, kafka-external"):
        get_system("kafak")


def test_a_system_refuses_a_feature_nobody_checks():
    from dataclasses import replace

    with pytest.raises(ValueError, match="unknown features \\['sharding'\\]"):
        replace(get_system("kafka"), features=frozenset({"sharding"}))


def test_each_backend_runs_a_system_that_starts_nodes_except_external():
    assert {name: get_system(b.default_system).starts_nodes for name, b in BACKENDS.items()} == {
        "lab": True, "docker": True, "ssh": True, "external": False}


def test_a_backend_refuses_a_system_it_cannot_run(tmp_path):
    cfg = TestConfig(backend="external", bootstrap_servers=("127.0.0.1:1",))
    with pytest.raises(ConfigError, match="the external backend cannot run system kafka: it only reaches nodes"):
        open_cluster(cfg, tmp_path, system=get_system("kafka"))
    with pytest.raises(ConfigError, match="unknown backend 'moon'"):
        open_cluster(TestConfig(backend="moon"), tmp_path)


def test_an_external_cluster_without_hosts_has_no_nodes_and_nothing_to_stop(tmp_path):
    cfg = TestConfig(backend="external", bootstrap_servers=("127.0.0.1:1", "127.0.0.1:2"))
    with open_cluster(cfg, tmp_path, needs=NodeNeeds(faketime=True)) as c:
        assert (c.nodes, c.bootstrap_servers, c.needs) == ([], "127.0.0.1:1,127.0.0.1:2", NodeNeeds())
        assert c.leaders(timeout=0.5) == {}


@pytest.mark.parametrize("module", ["logquake.systems.kafka", "logquake.cluster", "logquake.cluster.backends",
                                    "logquake.nemesis", "logquake.runner"])
def test_each_package_imports_first_in_a_fresh_interpreter(module):
    # A cycle between cluster/ and systems/ shows only when one of them is imported first.
    p = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
