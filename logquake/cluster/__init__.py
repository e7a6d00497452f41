"""Hosts (lab, docker, ssh, external) and clusters of a system's nodes on them (docs/architecture.md).

Layout: host.py is the `Host` protocol (how a node is reached); cluster.py the `Cluster`
protocol and `NodeCluster`; backends.py the backend registry and `open_cluster`; lab.py,
docker.py, ssh.py the hosts of each backend; shims.py what a node gets when a fault needs it.
What runs on the nodes is a system's business (logquake/systems/).
"""

from logquake.cluster.backends import BACKENDS, Backend, open_cluster
from logquake.cluster.cluster import Cluster, NodeCluster, node_names
from logquake.cluster.docker import DockerHost
from logquake.cluster.host import ExecResult, Host, run_checked, shell_join
from logquake.cluster.hostcfg import HostEntry, parse_hosts
from logquake.cluster.lab import LabCluster, LabHost, attach_lab, create_lab, lab_hosts, prepare_lab, stop_lab
from logquake.cluster.state import LabState, destroy, load_states, state_dir
from logquake.cluster.userns import enter_private_userns, in_private_userns, is_real_root, join_userns

__all__ = [
    "BACKENDS",
    "Backend",
    "Cluster",
    "DockerHost",
    "ExecResult",
    "Host",
    "HostEntry",
    "LabCluster",
    "LabHost",
    "LabState",
    "NodeCluster",
    "attach_lab",
    "create_lab",
    "destroy",
    "enter_private_userns",
    "in_private_userns",
    "is_real_root",
    "join_userns",
    "lab_hosts",
    "load_states",
    "node_names",
    "open_cluster",
    "parse_hosts",
    "prepare_lab",
    "run_checked",
    "shell_join",
    "state_dir",
    "stop_lab",
]
