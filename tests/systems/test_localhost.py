"""LocalHost keeps the Host contract every backend keeps."""

from logquake.cluster.conformance import check_host
from logquake.cluster.lab import LocalHost


def test_localhost_meets_the_host_contract(tmp_path):
    check_host(LocalHost("n1"), str(tmp_path))
