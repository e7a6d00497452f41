"""Hosts (lab, docker, ssh, external) and the broker's lifecycle on them (DESIGN.md §4)."""

from logquake.cluster.cluster import Cluster, attach_cluster, node_names, open_cluster, partition_leaders
from logquake.cluster.docker import DockerHost
from logquake.cluster.host import ExecResult, Host, run_checked, shell_join
from logquake.cluster.hostcfg import HostEntry, parse_hosts
from logquake.cluster.lab import LabHost, create_lab, lab_hosts, prepare_lab, stop_lab
from logquake.cluster.lifecycle import BrokerLifecycle, NodeSpec
from logquake.cluster.remote import RemoteCluster
from logquake.cluster.state import LabState, destroy, load_states, state_dir
from logquake.cluster.userns import enter_private_userns, in_private_userns, is_real_root, join_userns

__all__ = [
    "BrokerLifecycle",
    "Cluster",
    "DockerHost",
    "ExecResult",
    "Host",
    "HostEntry",
    "LabHost",
    "LabState",
    "NodeSpec",
    "RemoteCluster",
    "attach_cluster",
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
    "partition_leaders",
    "prepare_lab",
    "run_checked",
    "shell_join",
    "state_dir",
    "stop_lab",
]
