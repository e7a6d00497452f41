"""The system under test: a Kafka-wire-compatible replicated log (docs/architecture.md).

Layout: apis.py (the table of APIs served: versions, schemas, handlers), kerrors.py (error
codes), codec.py (wire), records.py (record batch headers), server.py (Kafka listener),
handlers.py / handlers_groups.py / handlers_txn.py (the Kafka APIs), partition.py /
metadata.py (state machines applied from the log), replica.py (one Raft group on a node),
node.py (the process's loop), writer.py (its log writes and fsyncs), logstats.py (its
counters line in broker.log), transport.py (peer connections), nodeconfig.py (node.yaml),
process.py (`logquake broker`), localcluster.py (N processes on loopback for tests and
benchmarks).

`LocalCluster` is imported lazily: the broker process itself must not pay for it.
"""

from typing import Any

from logquake.broker.nodeconfig import NodeAddress, NodeConfig, load_node_config, parse_node_config

__all__ = ["LocalCluster", "NodeAddress", "NodeConfig", "load_node_config", "parse_node_config"]


def __getattr__(name: str) -> Any:
    if name == "LocalCluster":
        from logquake.broker.localcluster import LocalCluster

        return LocalCluster
    raise AttributeError(f"module 'logquake.broker' has no attribute {name!r}")
