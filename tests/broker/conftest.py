"""Fixtures for broker tests: a shared 3-node LocalCluster of real `logquake broker` processes."""

from __future__ import annotations

import pytest

from logquake.broker import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 3-node cluster on loopback, shared by the tests of one module."""
    c = LocalCluster(n=3, base_dir=tmp_path_factory.mktemp("cluster"))
    with c:
        c.wait_ready(timeout=60)
        yield c
